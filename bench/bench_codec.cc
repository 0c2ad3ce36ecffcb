// Wire codec microbenchmarks (Google Benchmark): what one RPC costs in header
// encoding and decoding, single-threaded, no I/O.
//
//   BM_RdmaMsgInline{Encode,Decode}   RDMA_MSG with no chunks (28 bytes)
//   BM_RdmaMsgChunks{Encode,Decode}   RDMA_MSG with a read list of 2 segments
//                                     and a write list of 1 chunk of 4 segments
//   BM_OncRpcCallAuthSys{Encode,Decode}  ONC RPC call header, AUTH_SYS with a
//                                     machine name and 4 gids (the credential
//                                     body pre-encoded, as a client caches it)
//   BM_AuthSysEncode                  encoding that credential body
//   BM_CallHeaderPair{Encode,Decode}  both headers of an inline call, as the
//                                     engine builds and parses them
//
// Every decode checks its result, so a broken codec cannot produce numbers.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "oncrpc/oncrpc.h"
#include "rpcrdma/rpcrdma_wire.h"

namespace tern::bench {
namespace {

using rpcrdma::DecodeStatus;
using rpcrdma::Header;
using rpcrdma::Proc;

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "bench_codec: %s\n", what);
  std::abort();
}

Header inline_call() {
  Header h;
  h.xid = 0x12345678;
  h.credit = 128;
  h.proc = Proc::kMsg;
  return h;
}

Header chunked_call() {
  Header h = inline_call();
  auto& c = h.chunks;
  c.reads[c.nreads++] = {256, {0x1001, 32768, 0x7f0000010000}};
  c.reads[c.nreads++] = {256, {0x1002, 32768, 0x7f0000018000}};
  rpcrdma::WriteChunk& w = c.writes[c.nwrites++];
  for (uint32_t i = 0; i < 4; ++i) w.segments[w.nsegments++] = {0x2000 + i, 65536, 0x7f0000100000 + i * 65536ull};
  return h;
}

void encode_bench(benchmark::State& state, const Header& h) {
  uint8_t buf[rpcrdma::kMaxHeaderSize];
  size_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(h);
    n = rpcrdma::encode_header(h, buf);
    benchmark::DoNotOptimize(buf);
  }
  if (n != rpcrdma::encoded_size(h)) die("encode_header wrote the wrong size");
  state.counters["bytes"] = static_cast<double>(n);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void decode_bench(benchmark::State& state, const Header& h) {
  std::vector<uint8_t> buf(rpcrdma::encoded_size(h));
  rpcrdma::encode_header(h, buf);
  Header out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(buf.data());
    rpcrdma::DecodeResult r = rpcrdma::decode_header(buf, &out);
    if (r.status != DecodeStatus::kOk) die("decode_header failed");
    benchmark::DoNotOptimize(out);
  }
  if (out.chunks.nreads != h.chunks.nreads || out.chunks.nwrites != h.chunks.nwrites) die("decoded the wrong lists");
  state.counters["bytes"] = static_cast<double>(buf.size());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_RdmaMsgInlineEncode(benchmark::State& state) { encode_bench(state, inline_call()); }
void BM_RdmaMsgInlineDecode(benchmark::State& state) { decode_bench(state, inline_call()); }
void BM_RdmaMsgChunksEncode(benchmark::State& state) { encode_bench(state, chunked_call()); }
void BM_RdmaMsgChunksDecode(benchmark::State& state) { decode_bench(state, chunked_call()); }

// ------------------------------------------------------------------ ONC RPC

struct AuthSysCall {
  uint8_t cred_body[oncrpc::kMaxAuthSysBodySize];
  oncrpc::AuthSysParams params;
  oncrpc::CallHeader call;

  AuthSysCall() {
    params.stamp = 0x5eed;
    params.machinename = "client-07.storage.example";
    params.uid = 1000;
    params.gid = 1000;
    for (uint32_t g : {4u, 24u, 27u, 100u}) params.gids[params.ngids++] = g;
    size_t n = oncrpc::encode_auth_sys(params, cred_body);
    if (n == 0) die("encode_auth_sys failed");
    call.xid = 0x12345678;
    call.prog = 100003;
    call.vers = 3;
    call.proc = 6;  // NFSv3 READ
    call.cred = {oncrpc::AuthFlavor::kSys, std::span<const uint8_t>(cred_body, n)};
    call.verf = {oncrpc::AuthFlavor::kNone, {}};
  }
};

void BM_OncRpcCallAuthSysEncode(benchmark::State& state) {
  AuthSysCall c;
  uint8_t buf[512];
  size_t n = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(c.call);
    n = oncrpc::encode_call(c.call, buf);
    benchmark::DoNotOptimize(buf);
  }
  if (n != oncrpc::call_size(c.call)) die("encode_call wrote the wrong size");
  state.counters["bytes"] = static_cast<double>(n);
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_OncRpcCallAuthSysDecode(benchmark::State& state) {
  AuthSysCall c;
  std::vector<uint8_t> buf(oncrpc::call_size(c.call));
  oncrpc::encode_call(c.call, buf);
  oncrpc::CallHeader out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(buf.data());
    oncrpc::CallDecodeResult r = oncrpc::decode_call(buf, &out);
    if (r.status != oncrpc::CallDecodeStatus::kOk) die("decode_call failed");
    benchmark::DoNotOptimize(out);
  }
  if (out.sys.ngids != 4 || out.sys.machinename != c.params.machinename) die("decoded the wrong credential");
  state.counters["bytes"] = static_cast<double>(buf.size());
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_AuthSysEncode(benchmark::State& state) {
  AuthSysCall c;
  uint8_t buf[oncrpc::kMaxAuthSysBodySize];
  for (auto _ : state) {
    benchmark::DoNotOptimize(c.params);
    size_t n = oncrpc::encode_auth_sys(c.params, buf);
    benchmark::DoNotOptimize(n);
    benchmark::DoNotOptimize(buf);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

// Both headers of an inline call back to back, as a client writes them into
// one send buffer and a server parses them.
void BM_CallHeaderPairEncode(benchmark::State& state) {
  AuthSysCall c;
  Header h = inline_call();
  uint8_t buf[1024];
  for (auto _ : state) {
    benchmark::DoNotOptimize(h);
    size_t n = rpcrdma::encode_header(h, buf);
    n += oncrpc::encode_call(c.call, std::span<uint8_t>(buf + n, sizeof buf - n));
    benchmark::DoNotOptimize(n);
    benchmark::DoNotOptimize(buf);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

void BM_CallHeaderPairDecode(benchmark::State& state) {
  AuthSysCall c;
  Header h = inline_call();
  std::vector<uint8_t> buf(1024);
  size_t n = rpcrdma::encode_header(h, buf);
  n += oncrpc::encode_call(c.call, std::span<uint8_t>(buf.data() + n, buf.size() - n));
  buf.resize(n);
  Header th;
  oncrpc::CallHeader ch;
  for (auto _ : state) {
    benchmark::DoNotOptimize(buf.data());
    rpcrdma::DecodeResult r = rpcrdma::decode_header(buf, &th);
    std::span<const uint8_t> rpc(buf.data() + r.header_len, buf.size() - r.header_len);
    if (r.status != DecodeStatus::kOk || !rpcrdma::rpc_xid_matches(th, rpc)) die("transport header");
    if (oncrpc::decode_call(rpc, &ch).status != oncrpc::CallDecodeStatus::kOk) die("call header");
    benchmark::DoNotOptimize(ch);
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
}

BENCHMARK(BM_RdmaMsgInlineEncode);
BENCHMARK(BM_RdmaMsgInlineDecode);
BENCHMARK(BM_RdmaMsgChunksEncode);
BENCHMARK(BM_RdmaMsgChunksDecode);
BENCHMARK(BM_OncRpcCallAuthSysEncode);
BENCHMARK(BM_OncRpcCallAuthSysDecode);
BENCHMARK(BM_AuthSysEncode);
BENCHMARK(BM_CallHeaderPairEncode);
BENCHMARK(BM_CallHeaderPairDecode);

}  // namespace
}  // namespace tern::bench

BENCHMARK_MAIN();
