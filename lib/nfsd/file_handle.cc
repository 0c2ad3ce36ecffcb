#include "nfsd/file_handle.h"

#include <cstring>

namespace tern::nfsd {

namespace {

void put_be(uint8_t* p, uint64_t v, int n) {
  for (int i = n - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}
uint64_t get_be(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

bool FhCodec::encode(const KernelHandle& kh, nfs::Fh3* out) const {
  if (kh.len > kMaxKernelHandle || kh.type > 0xffff) return false;
  uint8_t* p = out->data;
  p[0] = kFhVersion;
  p[1] = static_cast<uint8_t>(kh.len);
  put_be(p + 2, kh.type, 2);
  put_be(p + 4, export_id_, 4);
  std::memcpy(p + kFhHeader, kh.bytes, kh.len);
  const uint32_t body = kFhHeader + kh.len;
  put_be(p + body, siphash24(key_, {p, body}), 8);
  out->len = body + kFhTag;
  return true;
}

nfs::Nfs3Stat FhCodec::decode(const nfs::Fh3& fh, KernelHandle* kh) const {
  const uint8_t* p = fh.data;
  if (fh.len < kFhHeader + kFhTag || p[0] != kFhVersion) return nfs::Nfs3Stat::kBadhandle;
  const uint32_t n = p[1];
  if (n > kMaxKernelHandle || fh.len != kFhHeader + n + kFhTag) return nfs::Nfs3Stat::kBadhandle;
  const uint32_t body = kFhHeader + n;
  // Another export's id first: its tag is under another key, so checking
  // the tag first would call every such handle a forgery. It names an
  // export this one is not (removed, another instance's): stale.
  if (get_be(p + 4, 4) != export_id_) return nfs::Nfs3Stat::kStale;
  // One 64-bit compare: no early exit that would time how much of a tag was right.
  if (get_be(p + body, 8) != siphash24(key_, {p, body})) return nfs::Nfs3Stat::kBadhandle;
  kh->type = static_cast<uint32_t>(get_be(p + 2, 2));
  kh->len = n;
  std::memcpy(kh->bytes, p + kFhHeader, n);
  return nfs::Nfs3Stat::kOk;
}

}  // namespace tern::nfsd
