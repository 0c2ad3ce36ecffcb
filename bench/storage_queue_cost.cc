// tern-storage-queue-cost: the storage queue's own bookkeeping per
// operation (lib/nfsd/storage_queue.h), counted by callgrind: operations
// that never reach the device (StorageKind::kReserve, a COMMIT's turn
// under its client's bound), submitted and delivered from this one thread,
// so that a run counts the same instructions every time.
//
//   tern-storage-queue-cost OPS [PEERS [DEPTH]]
//
// PEERS clients (ids as pmd/shm's "pid N uid U", longer than a
// std::string's inline buffer, as real ones are) take turns; each has
// DEPTH operations in flight at once (default 1 and 1: a client with one
// operation at a time, the case where a per-client entry was made and
// dropped for every operation). Run it twice with different OPS and take
// the difference (valgrind --tool=callgrind; docs/nfs-gateway.md):
//   valgrind --tool=callgrind tern-storage-queue-cost 20000
//   valgrind --tool=callgrind tern-storage-queue-cost 120000
// (count(120000) - count(20000)) / 100000 = instructions per operation.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "nfsd/storage_queue.h"

using namespace tern;

namespace {

struct Done {
  uint64_t n = 0;
};

void on_done(void* ctx, const nfsd::StorageReq&, int64_t res) {
  if (res != 0) {
    std::fprintf(stderr, "tern-storage-queue-cost: a reservation completed with %lld\n", static_cast<long long>(res));
    std::exit(1);
  }
  ++static_cast<Done*>(ctx)->n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: tern-storage-queue-cost OPS [PEERS [DEPTH]]\n");
    return 2;
  }
  const uint64_t ops = std::strtoull(argv[1], nullptr, 10);
  const uint32_t npeers = argc > 2 ? static_cast<uint32_t>(std::atoi(argv[2])) : 1;
  const uint32_t depth = argc > 3 ? static_cast<uint32_t>(std::atoi(argv[3])) : 1;
  if (ops == 0 || npeers == 0 || depth == 0) return 2;
  nfsd::StorageOptions o;
  o.mode = nfsd::StorageOptions::Mode::kThreads;  // a reservation never reaches a worker
  auto q = nfsd::StorageQueue::create(o);
  if (!q->asynchronous()) {
    std::fprintf(stderr, "tern-storage-queue-cost: no asynchronous backend (no eventfd)\n");
    return 1;
  }
  std::vector<std::string> peers;
  for (uint32_t i = 0; i < npeers; ++i) peers.push_back("pid " + std::to_string(40000 + i) + " uid 1000");
  Done done;
  nfsd::StorageReq r;
  r.kind = nfsd::StorageKind::kReserve;
  r.done = &on_done;
  r.ctx = &done;
  uint64_t submitted = 0;
  while (done.n < ops) {
    // Each client tops up to DEPTH in flight, then one pass delivers.
    for (const std::string& p : peers)
      for (uint32_t d = 0; d < depth && submitted < ops; ++d, ++submitted) q->submit(p, r);
    while (!q->idle()) q->poll();
  }
  std::printf("%llu operations, %llu queued for a bound\n", static_cast<unsigned long long>(done.n),
              static_cast<unsigned long long>(q->stats().queued.get()));
  return 0;
}
