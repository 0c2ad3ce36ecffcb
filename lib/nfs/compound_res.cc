#include "nfs/compound_res.h"

#include <cstring>

namespace tern::nfs {

Result<CompoundRes> CompoundRes::decode(std::span<const uint8_t> results) {
  CompoundRes c(results);
  c.status_ = static_cast<Nfs4Stat>(c.r_.get_u32());
  c.tag_ = c.r_.get_string(kMaxResults);  // the server echoes our tag (<= 64 bytes); any bound will do
  c.count_ = c.r_.get_u32();
  if (!c.r_.ok()) return make_error(Errc::kRemoteError, "COMPOUND reply truncated before its results");
  if (c.count_ > kMaxResults)
    return make_error(Errc::kRemoteError, "COMPOUND reply says %u results (at most %u)", c.count_, kMaxResults);
  return c;
}

Status CompoundRes::malformed(Op op) const {
  return make_error(Errc::kRemoteError, "COMPOUND result %u (%s) truncated or malformed", next_, op_name(op));
}

Result<Nfs4Stat> CompoundRes::begin(Op op, bool* run) {
  *run = false;
  if (stopped_)
    return make_error(Errc::kRemoteError, "COMPOUND result for %s after a failed operation", op_name(op));
  if (next_ == count_) {
    // The server stopped before this operation: its status says why.
    if (status_ != Nfs4Stat::kOk) return status_;
    return make_error(Errc::kRemoteError, "COMPOUND reply has %u results and status NFS4_OK; %s has none", count_,
                      op_name(op));
  }
  uint32_t opnum = r_.get_u32();
  auto st = static_cast<Nfs4Stat>(r_.get_u32());
  if (!r_.ok()) return malformed(op);
  if (opnum != static_cast<uint32_t>(op))
    return make_error(Errc::kRemoteError, "COMPOUND result %u is for operation %u, expected %s (%u)", next_, opnum,
                      op_name(op), static_cast<uint32_t>(op));
  ++next_;
  if (st != Nfs4Stat::kOk) {
    // RFC 7530 §15.2: the failed operation is the last, and its status is
    // the COMPOUND's.
    stopped_ = true;
    if (next_ != count_ || st != status_)
      return make_error(Errc::kRemoteError, "%s failed with %s but the COMPOUND says %s after %u of %u results",
                        op_name(op), nfs4_stat_name(st), nfs4_stat_name(status_), next_, count_);
    return st;
  }
  *run = true;
  return st;
}

Result<Nfs4Stat> CompoundRes::putrootfh() {
  bool run;
  return begin(Op::kPutrootfh, &run);
}

Result<Nfs4Stat> CompoundRes::putfh() {
  bool run;
  return begin(Op::kPutfh, &run);
}

Result<Nfs4Stat> CompoundRes::lookup() {
  bool run;
  return begin(Op::kLookup, &run);
}

Result<Nfs4Stat> CompoundRes::getfh(FileHandle* out) {
  bool run;
  Result<Nfs4Stat> st = begin(Op::kGetfh, &run);
  if (!run) return st;
  auto fh = r_.get_opaque_var(kFhSize);
  if (!r_.ok()) return malformed(Op::kGetfh);
  out->assign(fh);
  return st;
}

Result<Nfs4Stat> CompoundRes::getattr(Fattr4* out) {
  bool run;
  Result<Nfs4Stat> st = begin(Op::kGetattr, &run);
  if (!run) return st;
  Status s = decode_fattr4(r_, out);
  if (!s.is_ok()) return make_error(Errc::kRemoteError, "GETATTR: %s", s.message().c_str());
  return st;
}

Result<Nfs4Stat> CompoundRes::read(ReadData where, Read4Res* out) {
  bool run;
  Result<Nfs4Stat> st = begin(Op::kRead, &run);
  if (!run) return st;
  Read4Res res;
  res.eof = r_.get_bool();
  res.count = r_.get_u32();
  if (!r_.ok()) return malformed(Op::kRead);
  if (where.in_chunk) {
    // The reduced data item: the bytes are in the write chunk, which must
    // hold exactly them.
    if (res.count != where.chunk_len)
      return make_error(Errc::kRemoteError, "READ says %u bytes of data, the write chunk received %u", res.count,
                        where.chunk_len);
  } else {
    res.data = r_.get_opaque_fixed(res.count);
    if (!r_.ok()) return malformed(Op::kRead);
  }
  *out = res;
  return st;
}

Result<Nfs4Stat> CompoundRes::write(Write4Res* out) {
  bool run;
  Result<Nfs4Stat> st = begin(Op::kWrite, &run);
  if (!run) return st;
  Write4Res res;
  res.count = r_.get_u32();
  uint32_t committed = r_.get_u32();
  auto verf = r_.get_opaque_fixed(kVerifierSize);
  if (!r_.ok() || committed > static_cast<uint32_t>(StableHow::kFileSync)) return malformed(Op::kWrite);
  res.committed = static_cast<StableHow>(committed);
  std::memcpy(res.verf.data, verf.data(), kVerifierSize);
  *out = res;
  return st;
}

Result<Nfs4Stat> CompoundRes::commit(Verifier* out) {
  bool run;
  Result<Nfs4Stat> st = begin(Op::kCommit, &run);
  if (!run) return st;
  auto verf = r_.get_opaque_fixed(kVerifierSize);
  if (!r_.ok()) return malformed(Op::kCommit);
  std::memcpy(out->data, verf.data(), kVerifierSize);
  return st;
}

Status CompoundRes::finish() const {
  if (next_ < count_ && !stopped_)
    return make_error(Errc::kRemoteError, "COMPOUND reply has %u results, %u were expected", count_, next_);
  if (r_.remaining() != 0)
    return make_error(Errc::kRemoteError, "COMPOUND reply has %zu bytes after its last result", r_.remaining());
  return Status::ok();
}

}  // namespace tern::nfs
