// Server handlers and a client completion record shared by the functional
// tests and tools that play hostile peers against a Tern server
// (hostile_client_test.cc, bulk_isolation_test.cc, bulk_isolation_measure.cc):
// one copy, so what "echo", "fill" and "sum" answer means the same in each.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "engine/engine.h"

namespace tern::test {

// results = args, bulk results = the read chunk's data.
inline void echo_handler(void*, rpc::ServerCall* c) { (void)c->reply(c->args(), c->bulk()); }

// args: u32 n -> n bytes of 0xA5 into the write chunk (at most its capacity).
inline void fill_handler(void*, rpc::ServerCall* c) {
  uint32_t n = 0;
  if (c->args().size() >= 4) std::memcpy(&n, c->args().data(), 4);
  n = std::min(n, c->bulk_capacity());
  auto b = c->bulk_buffer(n);
  std::memset(b.data(), 0xA5, b.size());
  (void)c->reply({}, b);
}

// results: u32 sum of the read chunk's bytes.
inline void sum_handler(void*, rpc::ServerCall* c) {
  uint32_t s = 0;
  for (uint8_t b : c->bulk()) s += b;
  (void)c->reply(std::span(reinterpret_cast<const uint8_t*>(&s), 4));
}

// A client call's completion, kept for the test to look at.
struct Done {
  bool done = false;
  rpc::CallReply r{};
  std::vector<uint8_t> results;
};
inline void on_done(void* ctx, const rpc::CallReply& r) {
  auto* d = static_cast<Done*>(ctx);
  d->done = true;
  d->r = r;
  d->results.assign(r.results.begin(), r.results.end());
}

}  // namespace tern::test
