// The kRegMr -> UMR translation; the rules are in mlx5_umr_plan.h.
#include "mlx5/mlx5_umr_plan.h"

#include <algorithm>

#include "rdmadev/rdmadev.h"

namespace tern::mlx5 {

using rdma::rkey_index;
using rdma::rkey_key;

const char* umr_refusal_name(UmrRefusal r) {
  switch (r) {
    case UmrRefusal::kNone: return "none";
    case UmrRefusal::kEmpty: return "empty range";
    case UmrRefusal::kWrongMkey: return "rkey of another mkey";
    case UmrRefusal::kNoSource: return "lkey names no MR of this PD";
    case UmrRefusal::kOutsideSource: return "range outside its MR";
    case UmrRefusal::kTooDeep: return "more pages than the FastMr's depth";
    case UmrRefusal::kTooManyEntries: return "more mkey entries than it holds";
  }
  return "?";
}

uint32_t umr_access_flags(uint32_t a) {
  uint32_t f = 0;
  if (a & rdma::kAccessLocalWrite) f |= IBV_ACCESS_LOCAL_WRITE;
  if (a & rdma::kAccessRemoteWrite) f |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
  if (a & rdma::kAccessRemoteRead) f |= IBV_ACCESS_REMOTE_READ;
  return f;
}

uint64_t pages_spanned(uint64_t addr, uint64_t len, uint32_t page_size) {
  return (addr + len - 1) / page_size - addr / page_size + 1;
}

uint64_t umr_entries_for(uint64_t bytes) { return (bytes + kUmrMaxEntryBytes - 1) / kUmrMaxEntryBytes; }

UmrRefusal plan_umr(const UmrTarget& t, const UmrSource* src, const UmrRequest& r, UmrPlan* out) {
  if (r.length == 0) return UmrRefusal::kEmpty;
  if (rkey_index(r.rkey) != rkey_index(t.key)) return UmrRefusal::kWrongMkey;
  if (src == nullptr) return UmrRefusal::kNoSource;
  // Inside [src.addr, src.addr + src.length), written so nothing overflows.
  if (r.addr < src->addr || r.length > src->length || r.addr - src->addr > src->length - r.length)
    return UmrRefusal::kOutsideSource;
  if (pages_spanned(r.addr, r.length, t.page_size) > t.max_depth) return UmrRefusal::kTooDeep;
  const uint64_t entries = umr_entries_for(r.length);
  if (entries > std::min(t.max_entries, kUmrMaxEntries)) return UmrRefusal::kTooManyEntries;

  out->access_flags = umr_access_flags(r.access);
  out->new_key = rdma::make_rkey(rkey_index(t.key), rkey_key(r.rkey));
  out->num_sge = static_cast<uint16_t>(entries);
  uint64_t pos = r.addr, left = r.length;
  for (uint64_t i = 0; i < entries; ++i) {
    const uint64_t n = std::min(left, kUmrMaxEntryBytes);
    out->sge[i] = ibv_sge{pos, static_cast<uint32_t>(n), src->lkey};
    pos += n;
    left -= n;
  }
  return UmrRefusal::kNone;
}

}  // namespace tern::mlx5
