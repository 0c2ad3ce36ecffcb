// What the two capture tests (pcap_test.cc: tshark decodes every field;
// pcap_match_test.cc: tshark matches every reply to its call) share: the
// server handlers of their workload, one per message shape, and a shell
// runner for tshark. One copy, so both capture the same shapes.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "raw_peer.h"

namespace tern::test::pcap {

// The captures' RDMA_ERROR: a hand-made peer, on a connection of its own to
// the server at `sock`, sends an RDMA_MSGP header (deprecated) with xid
// `xid`; the server answers ERR_CHUNK. *reply: what came back (a fatal
// failure if nothing did). The peer's connection ends with the call.
inline void provoke_rdma_error(const RawPeer::Pump& pump, const std::string& sock, uint32_t xid,
                               std::vector<uint8_t>* reply) {
  RawPeer raw(pump);
  ASSERT_TRUE(raw.open("shm:path=" + sock).is_ok());
  Status st = raw.connect(rpcrdma::CmPrivateData{true, 4096, 4096});
  ASSERT_TRUE(st.is_ok()) << st.to_string();
  std::vector<uint8_t> m;
  put32(m, xid), put32(m, 1), put32(m, 8), put32(m, 2);
  for (int i = 0; i < 5; ++i) put32(m, 0);
  ASSERT_TRUE(raw.send(m));
  auto got = raw.recv(5000);
  ASSERT_TRUE(got.has_value()) << "no RDMA_ERROR";
  *reply = got->bytes;
}

// results = args (inline both ways).
inline void echo(void*, rpc::ServerCall* c) { (void)c->reply(c->args()); }

// args: u32 n -> n bytes 0, 1, 2, ... of bulk results (a write chunk).
inline void fill(void*, rpc::ServerCall* c) {
  uint32_t n;
  std::memcpy(&n, c->args().data(), 4);
  auto b = c->bulk_buffer(n);
  for (uint32_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(i);
  (void)c->reply({}, b);
}

// args: u32 n -> n bytes of inline results (a reply chunk when large).
inline void big(void*, rpc::ServerCall* c) {
  uint32_t n;
  std::memcpy(&n, c->args().data(), 4);
  std::vector<uint8_t> r(n, 0x5a);
  (void)c->reply(r);
}

// read chunk -> u32 sum of its bytes, u32 its length.
inline void sum(void*, rpc::ServerCall* c) {
  uint32_t out[2] = {0, static_cast<uint32_t>(c->bulk().size())};
  for (uint8_t b : c->bulk()) out[0] += b;
  (void)c->reply(std::span(reinterpret_cast<const uint8_t*>(out), 8));
}

// cmd's standard output (popen); empty when it cannot start.
inline std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

}  // namespace tern::test::pcap
