#include "nfs/compound_args.h"

namespace tern::nfs {

namespace {

void put_stateid(xdr::XdrWriter& w, const Stateid& s) {
  w.put_u32(s.seqid);
  w.put_opaque_fixed(s.other);
}

}  // namespace

CompoundArgs::CompoundArgs(std::span<uint8_t> buf, std::string_view tag, uint32_t minorversion)
    : buf_(buf), w_(buf) {
  if (tag.size() > kMaxTagSize) {
    fail(make_error(Errc::kInvalidArgument, "COMPOUND tag of %zu bytes (at most %u)", tag.size(), kMaxTagSize));
    return;
  }
  w_.put_string(tag);
  w_.put_u32(minorversion);
  numops_at_ = w_.bytes_written();
  w_.put_u32(0);  // argarray's count, filled in by finish()
}

void CompoundArgs::fail(Status s) {
  if (err_.is_ok()) err_ = std::move(s);
}

void CompoundArgs::op(Op o) {
  if (sealed_)
    fail(make_error(Errc::kInvalidArgument, "%s after a WRITE whose data goes in a read chunk: that WRITE must be last",
                    op_name(o)));
  w_.put_u32(static_cast<uint32_t>(o));
  ++nops_;
}

void CompoundArgs::putrootfh() { op(Op::kPutrootfh); }

void CompoundArgs::putfh(const FileHandle& fh) {
  op(Op::kPutfh);
  w_.put_opaque_var(fh.bytes());
}

void CompoundArgs::lookup(std::string_view name) {
  op(Op::kLookup);
  if (name.empty() || name.size() > kMaxNameSize) {
    fail(make_error(Errc::kInvalidArgument, "LOOKUP name of %zu bytes (1 to %u)", name.size(), kMaxNameSize));
    return;
  }
  w_.put_string(name);
}

void CompoundArgs::getfh() { op(Op::kGetfh); }

void CompoundArgs::getattr(AttrSet attrs) {
  op(Op::kGetattr);
  put_bitmap4(w_, attrs);
}

void CompoundArgs::read(const Stateid& stateid, uint64_t offset, uint32_t count) {
  op(Op::kRead);
  put_stateid(w_, stateid);
  w_.put_u64(offset);
  w_.put_u32(count);
}

void CompoundArgs::write(const Stateid& stateid, uint64_t offset, StableHow stable, std::span<const uint8_t> data) {
  op(Op::kWrite);
  put_stateid(w_, stateid);
  w_.put_u64(offset);
  w_.put_u32(static_cast<uint32_t>(stable));
  w_.put_opaque_var(data);
}

void CompoundArgs::write_chunked(const Stateid& stateid, uint64_t offset, StableHow stable, uint32_t len) {
  op(Op::kWrite);
  put_stateid(w_, stateid);
  w_.put_u64(offset);
  w_.put_u32(static_cast<uint32_t>(stable));
  // The data's length stays inline; its bytes (and XDR pad, RFC 8166 §3.5.3)
  // are the read chunk.
  w_.put_u32(len);
  sealed_ = true;
}

void CompoundArgs::commit(uint64_t offset, uint32_t count) {
  op(Op::kCommit);
  w_.put_u64(offset);
  w_.put_u32(count);
}

Result<std::span<const uint8_t>> CompoundArgs::finish() {
  if (!err_.is_ok()) return err_;
  if (!w_.ok())
    return make_error(Errc::kNoResources, "COMPOUND of %u operations does not fit %zu bytes", nops_, buf_.size());
  xdr::detail::store_be32(buf_.data() + numops_at_, nops_);
  return w_.written();
}

}  // namespace tern::nfs
