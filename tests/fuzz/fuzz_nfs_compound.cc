// NFSv4 COMPOUND results (RFC 7530 §16.2) and fattr4 (§5) as a server sends
// them, read the way lib/nfs's client reads them: result by result, for the
// operations it sent.
//
// Input layout (tests/fuzz/README.md; make_seeds.cc and the capture tool write it):
//   byte 0: bit 7 set: the rest is one fattr4 (decode_fattr4 alone);
//           else bits 0..3: n, the number of operations the client sent
//   bytes 1..n: one per operation: low nibble % 9 picks it (kOps below);
//           for a READ into a write chunk, the high nibble x 1024 is the
//           number of bytes the chunk received
//   the rest: COMPOUND4res
#include <cstdint>
#include <span>

#include "fuzz_check.h"
#include "nfs/compound_res.h"
#include "nfs/fattr4.h"

namespace {

using namespace tern::nfs;
using tern::Result;

enum OpPick : uint8_t { kPutrootfh, kPutfh, kLookup, kGetfh, kGetattr, kReadInline, kReadChunk, kWrite, kCommit };
constexpr uint8_t kNumPicks = 9;

void check_fattr(const Fattr4& f, const uint8_t* data, size_t size) {
  FUZZ_CHECK((f.present.bits() & ~AttrSet::known().bits()) == 0, "unknown attributes %#llx decoded",
             static_cast<unsigned long long>(f.present.bits()));
  FUZZ_CHECK(f.owner.size() <= kMaxOwnerSize && f.owner_group.size() <= kMaxOwnerSize, "owner of %zu/%zu bytes",
             f.owner.size(), f.owner_group.size());
  FUZZ_CHECK_WITHIN(f.owner, data, size);
  FUZZ_CHECK_WITHIN(f.owner_group, data, size);
  FUZZ_CHECK(f.filehandle.len <= kFhSize, "file handle of %u bytes", f.filehandle.len);
}

void fattr_only(const uint8_t* data, size_t size) {
  tern::xdr::XdrReader r(std::span<const uint8_t>(data, size));
  Fattr4 f;
  if (decode_fattr4(r, &f).is_ok()) check_fattr(f, data, size);
}

// One result; false when the client would stop reading here.
bool one(CompoundRes& c, uint8_t pick, const uint8_t* data, size_t size) {
  Result<Nfs4Stat> st = Nfs4Stat::kOk;
  switch ((pick & 15) % kNumPicks) {
    case kPutrootfh: st = c.putrootfh(); break;
    case kPutfh: st = c.putfh(); break;
    case kLookup: st = c.lookup(); break;
    case kGetfh: {
      FileHandle fh;
      st = c.getfh(&fh);
      if (st.is_ok() && *st == Nfs4Stat::kOk) FUZZ_CHECK(fh.len <= kFhSize, "GETFH: %u bytes", fh.len);
      break;
    }
    case kGetattr: {
      Fattr4 f;
      st = c.getattr(&f);
      if (st.is_ok() && *st == Nfs4Stat::kOk) check_fattr(f, data, size);
      break;
    }
    case kReadInline:
    case kReadChunk: {
      bool chunk = (pick & 15) % kNumPicks == kReadChunk;
      uint32_t chunk_len = static_cast<uint32_t>(pick >> 4) * 1024;
      Read4Res res;
      st = c.read(chunk ? ReadData::chunk(chunk_len) : ReadData::inline_data(), &res);
      if (st.is_ok() && *st == Nfs4Stat::kOk) {
        if (chunk) {
          FUZZ_CHECK(res.count == chunk_len && res.data.empty(), "READ into a %u-byte chunk says %u", chunk_len,
                     res.count);
        } else {
          FUZZ_CHECK(res.data.size() == res.count, "READ: %zu bytes of %u", res.data.size(), res.count);
          FUZZ_CHECK_WITHIN(res.data, data, size);
        }
      }
      break;
    }
    case kWrite: {
      Write4Res res;
      st = c.write(&res);
      if (st.is_ok() && *st == Nfs4Stat::kOk)
        FUZZ_CHECK(res.committed <= StableHow::kFileSync, "committed %u", static_cast<uint32_t>(res.committed));
      break;
    }
    case kCommit: {
      Verifier v;
      st = c.commit(&v);
      break;
    }
  }
  return st.is_ok() && *st == Nfs4Stat::kOk;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  if (data[0] & 0x80) {
    fattr_only(data + 1, size - 1);
    return 0;
  }
  size_t nops = data[0] & 15;
  if (size < 1 + nops) return 0;
  const uint8_t* ops = data + 1;
  const uint8_t* res = data + 1 + nops;
  size_t res_size = size - 1 - nops;
  Result<CompoundRes> c = CompoundRes::decode(std::span<const uint8_t>(res, res_size));
  if (!c.is_ok()) return 0;
  FUZZ_CHECK(c->count() <= kMaxResults, "%u results", c->count());
  FUZZ_CHECK_WITHIN(c->tag(), res, res_size);
  size_t i = 0;
  while (i < nops && one(*c, ops[i], res, res_size)) ++i;
  (void)c->finish();
  return 0;
}
