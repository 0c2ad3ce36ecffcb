// The engine's wire adapter (lib/engine/wire.cc): its fast paths for the
// plain shapes (RDMA_MSG with no chunk lists, AUTH_NONE calls, accepted
// SUCCESS replies) must write the same bytes as the general codecs, and must
// take a peer's message only when the general decoder would accept it with
// the same result. Compared here on every shape and on every one-word
// mutation and truncation of them.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/wire.h"
#include "xdr/xdr.h"

namespace tern::rpc::wire {
namespace {

struct FastOff {
  FastOff() { testing::use_fast_paths(false); }
  ~FastOff() { testing::use_fast_paths(true); }
};

std::vector<uint8_t> encode_both(bool fast, const std::function<size_t(uint8_t*, size_t)>& enc, size_t cap) {
  std::vector<uint8_t> b(cap + 8, 0xA5);
  size_t n;
  if (fast) {
    n = enc(b.data(), cap);
  } else {
    FastOff off;
    n = enc(b.data(), cap);
  }
  if (n == 0) return {};
  b.resize(n);
  return b;
}

std::vector<Call> calls() {
  static AuthSys sys = [] {
    AuthSys a;
    a.machine = "gateway-7";
    a.uid = 1000, a.gid = 100, a.ngids = 2, a.gids[0] = 4, a.gids[1] = 27;
    return a;
  }();
  static AuthSys empty_machine;  // machine empty: AUTH_NONE, as the engine sends it
  std::vector<Call> v;
  for (uint32_t proc : {0u, 1u, 0xFFFFFFFFu}) {
    Call c{0x20000042, 3, proc};
    v.push_back(c);
    c.auth = &sys;
    v.push_back(c);
    c.auth = &empty_machine;
    v.push_back(c);
  }
  return v;
}

TEST(WireFastPath, CallEncodersWriteWhatTheGeneralCodecsWrite) {
  std::vector<uint8_t> args(100);
  for (size_t i = 0; i < args.size(); ++i) args[i] = static_cast<uint8_t>(i * 7);
  ChunkLists none;
  none.clear();
  for (const Call& c : calls())
    for (size_t alen : {size_t{0}, size_t{4}, size_t{32}, size_t{100}}) {
      auto a = std::span<const uint8_t>(args.data(), alen);
      size_t hl_fast = call_rpc_header_len(c), hl_gen;
      {
        FastOff off;
        hl_gen = call_rpc_header_len(c);
      }
      EXPECT_EQ(hl_fast, hl_gen);
      auto call = [&](uint8_t* b, size_t cap) { return encode_call(b, cap, 0x1234567, 31, none, c, a); };
      auto rpc = [&](uint8_t* b, size_t cap) { return encode_rpc_call(b, cap, 0x1234567, c, a); };
      for (const std::function<size_t(uint8_t*, size_t)>& enc :
           {std::function<size_t(uint8_t*, size_t)>(call), std::function<size_t(uint8_t*, size_t)>(rpc)}) {
        auto full = encode_both(false, enc, 1024);
        ASSERT_FALSE(full.empty());
        EXPECT_EQ(encode_both(true, enc, 1024), full) << "proc " << c.proc << " args " << alen;
        // One byte short: both refuse.
        EXPECT_TRUE(encode_both(true, enc, full.size() - 1).empty());
        EXPECT_TRUE(encode_both(false, enc, full.size() - 1).empty());
        EXPECT_EQ(encode_both(true, enc, full.size()), full);
      }
    }
}

TEST(WireFastPath, ReplyEncodersWriteWhatTheGeneralCodecsWrite) {
  std::vector<uint8_t> res(64, 0x3C);
  ChunkLists none;
  none.clear();
  for (size_t rlen : {size_t{0}, size_t{8}, size_t{64}})
    for (int accept : {0, 1, 2, 3, 4, 5, kReplyRpcMismatch, kReplyAuthError}) {
      auto r = std::span<const uint8_t>(res.data(), rlen);
      auto rpc = [&](uint8_t* b, size_t cap) { return encode_rpc_reply(b, cap, 0xABCDEF, accept, 2, 4, r); };
      auto full = encode_both(false, rpc, 512);
      ASSERT_FALSE(full.empty());
      EXPECT_EQ(encode_both(true, rpc, 512), full) << "accept " << accept;
      EXPECT_TRUE(encode_both(true, rpc, full.size() - 1).empty());
    }
  auto hdr = [&](uint8_t* b, size_t cap) { return encode_reply_header(b, cap, 0xABCDEF, 17, none, false); };
  auto full = encode_both(false, hdr, 256);
  ASSERT_EQ(full.size(), 28u);
  EXPECT_EQ(encode_both(true, hdr, 256), full);
  EXPECT_TRUE(encode_both(true, hdr, 27).empty());
  // The header with no chunk lists that the server's inline replies use.
  auto plain = [&](uint8_t* b, size_t cap) { return encode_msg_header_no_chunks(b, cap, 0xABCDEF, 17); };
  EXPECT_EQ(full.size(), kNoChunksHeader);
  EXPECT_EQ(encode_both(true, plain, 256), full);
  EXPECT_EQ(encode_both(false, plain, 256), full);
  EXPECT_TRUE(encode_both(true, plain, 27).empty());
  EXPECT_TRUE(encode_both(false, plain, 27).empty());
}

// The server's common reply in one pass: what the header with no chunk
// lists and the plain SUCCESS reply write, for any grant, xid and results
// (the general codecs' bytes: encode_both(false, ...)).
TEST(WireFastPath, PlainReplyWritesWhatTheTwoEncodersWrite) {
  std::vector<uint8_t> res(300);
  for (size_t i = 0; i < res.size(); ++i) res[i] = static_cast<uint8_t>(i * 13 + 1);
  ChunkLists none;
  none.clear();
  for (uint32_t xid : {0u, 1u, 0xABCDEFu, 0x80000001u, 0xFFFFFFFFu})
    for (uint32_t credits : {0u, 1u, 17u, 128u, 0xFFFFFFFFu})
      for (size_t rlen : {size_t{0}, size_t{1}, size_t{4}, size_t{32}, size_t{300}}) {
        auto r = std::span<const uint8_t>(res.data(), rlen);
        auto two = [&](uint8_t* b, size_t cap) {
          const size_t h = encode_reply_header(b, cap, xid, credits, none, false);
          const size_t m = h == 0 ? 0 : encode_rpc_reply(b + h, cap - h, xid, 0, 0, 0, r);
          return m == 0 ? 0 : h + m;
        };
        const auto want = encode_both(false, two, 1024);
        ASSERT_EQ(want.size(), kPlainReplyLen + rlen);
        std::vector<uint8_t> got(1024 + 8, 0xA5);
        const size_t n = encode_plain_reply(got.data(), xid, credits, r);
        ASSERT_EQ(n, want.size());
        got.resize(n);
        EXPECT_EQ(got, want) << "xid " << xid << " credits " << credits << " results " << rlen;
      }
}

// Every one-word mutation (with values that matter to the decoders) and
// every truncation of `msg`.
std::vector<std::vector<uint8_t>> variants(const std::vector<uint8_t>& msg) {
  std::vector<std::vector<uint8_t>> out{msg};
  const uint32_t values[] = {0, 1, 2, 3, 4, 5, 6, 7, 100, 0x1234567, 0xABCDEF, 0xFFFFFFFF};
  for (size_t w = 0; w + 4 <= msg.size() && w < 16 * 4; w += 4)
    for (uint32_t v : values) {
      auto m = msg;
      xdr::detail::store_be32(m.data() + w, v);
      out.push_back(m);
    }
  for (size_t n = 0; n < msg.size(); ++n) out.emplace_back(msg.begin(), msg.begin() + static_cast<long>(n));
  return out;
}

std::string describe(const Reply& r, std::span<const uint8_t> msg) {
  char b[200];
  std::snprintf(b, sizeof b, "xid %x cr %u kind %d nw %d reply %d/%llu body @%td+%zu", r.xid, r.credits,
                static_cast<int>(r.kind), r.nwrites, r.has_reply_chunk,
                static_cast<unsigned long long>(r.reply_chunk_len), r.body.data() - msg.data(), r.body.size());
  return b;
}

TEST(WireFastPath, ReplyDecodersAgreeWithTheGeneralCodecs) {
  std::vector<uint8_t> res(12, 0x77);
  std::vector<uint8_t> msg(28 + 24 + res.size());
  ChunkLists none;
  none.clear();
  ASSERT_EQ(encode_reply_header(msg.data(), msg.size(), 0x1234567, 9, none, false), 28u);
  ASSERT_EQ(encode_rpc_reply(msg.data() + 28, msg.size() - 28, 0x1234567, 0, 0, 0, res), 24 + res.size());
  int taken = 0;
  for (const auto& m : variants(msg)) {
    Reply f, g;
    bool okf = decode_reply_header(m, &f), okg;
    {
      FastOff off;
      okg = decode_reply_header(m, &g);
    }
    ASSERT_EQ(okf, okg) << describe(g, m);
    if (!okf) continue;
    ++taken;
    EXPECT_EQ(describe(f, m), describe(g, m));
    std::span<const uint8_t> rf, rg;
    CallStatus sf = decode_rpc_reply(f.body, 0x1234567, &rf), sg;
    {
      FastOff off;
      sg = decode_rpc_reply(g.body, 0x1234567, &rg);
    }
    EXPECT_EQ(sf, sg);
    if (sf == CallStatus::kOk) {
      EXPECT_EQ(rf.data(), rg.data());
      EXPECT_EQ(rf.size(), rg.size());
    }
  }
  EXPECT_GT(taken, 10);
}

// decode_plain_reply() takes a message only when the general decoders,
// header then RPC reply (with the header's xid, as the client's request
// has it), accept it as an RDMA_MSG without chunks and a SUCCESS, with the
// same xid, grant and results.
TEST(WireFastPath, PlainReplyDecoderAgreesWithTheGeneralCodecs) {
  std::vector<uint8_t> res(12, 0x77);
  std::vector<uint8_t> msg(28 + 24 + res.size());
  ChunkLists none;
  none.clear();
  ASSERT_EQ(encode_reply_header(msg.data(), msg.size(), 0x1234567, 9, none, false), 28u);
  ASSERT_EQ(encode_rpc_reply(msg.data() + 28, msg.size() - 28, 0x1234567, 0, 0, 0, res), 24 + res.size());
  int taken = 0;
  for (const auto& m : variants(msg)) {
    uint32_t xid = 0, credits = 0;
    std::span<const uint8_t> results;
    if (!decode_plain_reply(m, &xid, &credits, &results)) continue;
    ++taken;
    FastOff off;
    EXPECT_FALSE(decode_plain_reply(m, &xid, &credits, &results));
    Reply g;
    ASSERT_TRUE(decode_reply_header(m, &g));
    EXPECT_EQ(g.kind, Reply::Kind::kMsg);
    EXPECT_EQ(g.nwrites, 0);
    EXPECT_FALSE(g.has_reply_chunk);
    EXPECT_EQ(g.xid, xid);
    EXPECT_EQ(g.credits, credits);
    std::span<const uint8_t> rg;
    ASSERT_EQ(decode_rpc_reply(g.body, g.xid, &rg), CallStatus::kOk);
    EXPECT_EQ(rg.data(), results.data());
    EXPECT_EQ(rg.size(), results.size());
  }
  // The message itself and its mutations of the grant and the results.
  EXPECT_GT(taken, 10);
}

// The same procedure and the same arguments (the same bytes of the same
// message, not a copy), as two decoders of one call must find them.
void expect_same_call(const RpcCall& fast, const RpcCall& general) {
  EXPECT_EQ(fast.prog, general.prog);
  EXPECT_EQ(fast.vers, general.vers);
  EXPECT_EQ(fast.proc, general.proc);
  EXPECT_EQ(fast.header_len, general.header_len);
  EXPECT_EQ(fast.args.data(), general.args.data());
  EXPECT_EQ(fast.args.size(), general.args.size());
}

TEST(WireFastPath, CallDecodersAgreeWithTheGeneralCodecs) {
  std::vector<uint8_t> args(20, 0x11);
  ChunkLists none;
  none.clear();
  for (const Call& c : calls()) {
    std::vector<uint8_t> msg(512);
    size_t n = encode_call(msg.data(), msg.size(), 0x1234567, 30, none, c, args);
    ASSERT_GT(n, 0u);
    msg.resize(n);
    int ok = 0;
    for (const auto& m : variants(msg)) {
      Incoming f, g;
      ChunkLists cf, cg;
      decode_call_header(m, &f, &cf);
      {
        FastOff off;
        decode_call_header(m, &g, &cg);
      }
      ASSERT_EQ(f.verdict, g.verdict);
      if (f.verdict != Incoming::Verdict::kOk) continue;
      EXPECT_EQ(f.xid, g.xid);
      EXPECT_EQ(f.credits, g.credits);
      EXPECT_EQ(f.nomsg, g.nomsg);
      EXPECT_EQ(f.body.data(), g.body.data());
      EXPECT_EQ(f.body.size(), g.body.size());
      EXPECT_EQ(cf.nreads, cg.nreads);
      EXPECT_EQ(cf.nwrites, cg.nwrites);
      EXPECT_EQ(cf.has_reply, cg.has_reply);
      if (f.nomsg) continue;
      RpcCall rf, rg;
      bool okf = decode_rpc_call(f.body, f.xid, &rf), okg;
      {
        FastOff off;
        okg = decode_rpc_call(g.body, g.xid, &rg);
      }
      ASSERT_EQ(okf, okg);
      EXPECT_EQ(rf.rpc_mismatch, rg.rpc_mismatch);
      EXPECT_EQ(rf.bad_auth, rg.bad_auth);
      if (!okf) continue;
      ++ok;
      expect_same_call(rf, rg);
    }
    EXPECT_GT(ok, 10);
  }
}

// decode_plain_call() takes a message only when the general decoders, call
// header then RPC call (with the header's xid, as the server has it),
// accept it as an RDMA_MSG without chunks, with the same xid, grant, body,
// procedure and arguments.
TEST(WireFastPath, PlainCallDecoderAgreesWithTheGeneralCodecs) {
  std::vector<uint8_t> args(20, 0x11);
  ChunkLists none;
  none.clear();
  std::vector<uint8_t> msg(28 + 40 + args.size());
  const Call c{0x20000042, 3, 7};
  ASSERT_EQ(encode_call(msg.data(), msg.size(), 0x1234567, 5, none, c, args), msg.size());
  int taken = 0;
  for (const auto& m : variants(msg)) {
    Incoming in;
    RpcCall rc;
    if (!decode_plain_call(m, &in, &rc)) continue;
    ++taken;
    FastOff off;
    EXPECT_FALSE(decode_plain_call(m, &in, &rc));
    Incoming g;
    ChunkLists ch;
    decode_call_header(m, &g, &ch);
    ASSERT_EQ(g.verdict, Incoming::Verdict::kOk);
    EXPECT_FALSE(g.nomsg);
    EXPECT_EQ(ch.nreads + ch.nwrites, 0);
    EXPECT_FALSE(ch.has_reply);
    EXPECT_EQ(g.xid, in.xid);
    EXPECT_EQ(g.credits, in.credits);
    EXPECT_EQ(g.body.data(), in.body.data());
    EXPECT_EQ(g.body.size(), in.body.size());
    RpcCall gc;
    ASSERT_TRUE(decode_rpc_call(g.body, g.xid, &gc));
    expect_same_call(rc, gc);
  }
  // The message itself and its mutations of the grant, the procedure and
  // the arguments.
  EXPECT_GT(taken, 10);
}

}  // namespace
}  // namespace tern::rpc::wire
