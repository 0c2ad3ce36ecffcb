// The io_uring personalities an engine registered, one per caller identity
// (the squashed Cred a call acts as), so that its name-space calls run as
// that caller on the engine's storage ring (caller_op.h).
//
// A personality is a snapshot of the credentials of the thread that
// registered it; tern-nfsd registers one only from a CallerPool worker
// that switched to the identity (ThreadCreds::become succeeded), so what
// runs under it runs exactly as that worker would have: the same fsuid,
// fsgid and groups, the same file-system capabilities dropped. Root
// squash, all_squash and anonuid are already in the Cred (cred_from_call),
// which is the key: two calls share a personality only when they would act
// as the same ids. Fail-closed: an identity without a personality is
// simply not found, and its calls go to the pool as before -- never to the
// ring without one (which would run them as the server).
//
// Bounded: at most `max` identities; when full, the least recently used
// one is retired, and unregistered once no operation that was given it is
// still queued or in flight (io_uring resolves the id only when the SQE is
// submitted, which a per-peer bound may delay). Engine's thread only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "nfsd/creds.h"

namespace tern::nfsd {

class PersonalityCache {
 public:
  // unregister(ctx, id) gives an id back to the ring.
  using Unregister = void (*)(void* ctx, int id);
  PersonalityCache(size_t max, Unregister unregister, void* ctx);
  ~PersonalityCache();  // unregisters every id (nothing may be in flight then)
  PersonalityCache(const PersonalityCache&) = delete;
  PersonalityCache& operator=(const PersonalityCache&) = delete;

  // c's personality (> 0), counted as in use until release(id); 0 when c
  // has none.
  int acquire(const Cred& c);
  void release(int id);
  // id (> 0) was registered by a thread acting as c. A second one for the
  // same identity (two first calls raced) is given back at once.
  void add(const Cred& c, int id);
  size_t size() const { return live_.size(); }
  size_t retired() const { return retired_.size(); }

 private:
  struct Entry {
    Cred cred;
    int id = 0;
    uint32_t uses = 0;
    uint64_t last = 0;  // tick_ of the last acquire
  };
  size_t max_;
  Unregister unregister_;
  void* ctx_;
  uint64_t tick_ = 0;
  std::vector<Entry> live_;
  std::vector<Entry> retired_;  // evicted, still used by queued operations
};

}  // namespace tern::nfsd
