// A fake NFSv4.0 server over pmd/shm for tern-nfs-read's app tests: NULL,
// and the COMPOUNDs tern-nfs-read sends (PUTROOTFH, LOOKUP..., GETFH,
// GETATTR; PUTFH + READ through a write chunk). Every path names the same
// file of --size bytes whose byte at offset o is (o * 7 + (o >> 9) + 3).
// --stall-reads holds every READ unanswered (a stopped server that keeps
// its connection); --delay-reads N answers the first N READs NFS4ERR_DELAY.
//   fake-nfsd --path SOCK [--size N] [--stall-reads] [--delay-reads N]
// Runs until killed.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "option_parser.h"

using namespace tern;
using rpc::ServerCall;

namespace {

uint64_t g_size = 1u << 20;
bool g_stall = false;
int g_delays = 0;
std::vector<ServerCall*> g_held;

struct Reader {
  std::span<const uint8_t> a;
  size_t p = 0;
  bool ok = true;
  uint32_t u32() {
    if (p + 4 > a.size()) {
      ok = false;
      return 0;
    }
    uint32_t v = uint32_t{a[p]} << 24 | uint32_t{a[p + 1]} << 16 | uint32_t{a[p + 2]} << 8 | a[p + 3];
    p += 4;
    return v;
  }
  uint64_t u64() {
    uint64_t hi = u32();
    return hi << 32 | u32();
  }
  void skip_opaque() { p += (u32() + 3) & ~3u; }
};

void put32(std::vector<uint8_t>* v, uint32_t x) {
  for (int i = 3; i >= 0; --i) v->push_back(static_cast<uint8_t>(x >> (8 * i)));
}
void put64(std::vector<uint8_t>* v, uint64_t x) {
  put32(v, static_cast<uint32_t>(x >> 32));
  put32(v, static_cast<uint32_t>(x));
}

void on_null(void*, ServerCall* c) { (void)c->reply({}); }

void on_compound(void*, ServerCall* c) {
  Reader r{c->args()};
  r.skip_opaque();  // tag
  r.u32();          // minorversion
  uint32_t n = r.u32();
  std::vector<uint8_t> res;
  std::vector<uint8_t> body;
  uint32_t done = 0;
  std::span<uint8_t> bulk;
  for (uint32_t i = 0; i < n && r.ok; ++i) {
    uint32_t op = r.u32();
    put32(&body, op);
    switch (op) {
      case 24:  // PUTROOTFH
      case 10:  // GETFH
        put32(&body, 0);
        if (op == 10) put32(&body, 8), put64(&body, 0x1122334455667788ull);
        break;
      case 15:  // LOOKUP
        r.skip_opaque();
        put32(&body, 0);
        break;
      case 22:  // PUTFH
        r.skip_opaque();
        put32(&body, 0);
        break;
      case 9: {  // GETATTR: word 0 only -- type (1), size (4), fileid (20), maxread (30)
        uint32_t words = r.u32();
        uint32_t w0 = words > 0 ? r.u32() : 0;
        for (uint32_t k = 1; k < words; ++k) r.u32();
        w0 &= (1u << 1) | (1u << 4) | (1u << 20) | (1u << 30);
        std::vector<uint8_t> vals;
        if (w0 & (1u << 1)) put32(&vals, 1);  // NF4REG
        if (w0 & (1u << 4)) put64(&vals, g_size);
        if (w0 & (1u << 20)) put64(&vals, 42);
        if (w0 & (1u << 30)) put64(&vals, 1u << 20);
        put32(&body, 0);
        put32(&body, 1), put32(&body, w0);
        put32(&body, static_cast<uint32_t>(vals.size()));
        body.insert(body.end(), vals.begin(), vals.end());
        break;
      }
      case 25: {  // READ
        if (g_stall) {
          g_held.push_back(c);
          return;
        }
        r.u32(), r.u32(), r.u32(), r.u32();  // stateid
        uint64_t off = r.u64();
        uint32_t count = r.u32();
        if (g_delays > 0) {
          --g_delays;
          put32(&body, 10008);  // NFS4ERR_DELAY
          put32(&res, 10008), put32(&res, 0), put32(&res, done + 1);
          res.insert(res.end(), body.begin(), body.end());
          (void)c->reply(res);
          return;
        }
        uint32_t len = off >= g_size ? 0 : static_cast<uint32_t>(std::min<uint64_t>(count, g_size - off));
        len = std::min(len, c->bulk_capacity());
        bulk = c->bulk_buffer(len);
        for (uint32_t k = 0; k < len; ++k) {
          uint64_t o = off + k;
          bulk[k] = static_cast<uint8_t>(o * 7 + (o >> 9) + 3);
        }
        put32(&body, 0);
        put32(&body, off + len >= g_size ? 1 : 0);
        put32(&body, len);  // reduced data item: the bytes went through the write chunk
        break;
      }
      default:
        (void)c->reply_error(rpc::AcceptStat::kGarbageArgs);
        return;
    }
    ++done;
  }
  if (!r.ok) {
    (void)c->reply_error(rpc::AcceptStat::kGarbageArgs);
    return;
  }
  put32(&res, 0), put32(&res, 0), put32(&res, done);
  res.insert(res.end(), body.begin(), body.end());
  (void)c->reply(res, bulk);
}

}  // namespace

int main(int argc, char** argv) {
  std::string path;
  tern::apps::OptionParser cli("fake-nfsd", "--path SOCK [options]");
  cli.text("path", "SOCK", "the pmd/shm socket to serve on", &path);
  cli.count("size", "N", "the file's size (default 1M)", 0, 1ull << 40, &g_size);
  cli.flag("stall-reads", "never answer a READ", &g_stall);
  cli.integer("delay-reads", "N", "answer the first N READs with NFS4ERR_DELAY (default 0)", 0, 1 << 20, &g_delays);
  if (int rc = cli.run(argc, argv); rc >= 0) return rc;
  if (path.empty()) return cli.usage_error("--path is required");
  auto eng = rpc::Engine::create({});
  if (!eng.is_ok()) return 1;
  (*eng)->handle(100003, 4, 0, &on_null, nullptr);
  (*eng)->handle(100003, 4, 1, &on_compound, nullptr);
  Status st = (*eng)->listen("shm:path=" + path);
  if (!st.is_ok()) {
    std::fprintf(stderr, "fake-nfsd: %s\n", st.to_string().c_str());
    return 1;
  }
  std::printf("listening\n");
  std::fflush(stdout);
  for (;;)
    if ((*eng)->poll() == 0) (void)(*eng)->wait(100);
}
