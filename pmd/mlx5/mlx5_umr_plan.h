// What one UMR work request needs to carry out a tern kRegMr on an indirect
// mkey: the SGE list the mkey will point at, its access flags, and the key
// the mkey takes. Pure (no device, no mlx5dv.h), so every rule is unit-tested
// without hardware (tests/unit/mlx5_umr_test.cc); mlx5_umr_builder.cc hands
// the plan to mlx5dv_wr_mr_list or mlx5dv_wr_set_mkey_layout_list.
//
// The rules, and why:
//  - The range must lie inside the long-lived MR named by reg.lkey: an mkey
//    entry borrows that MR's translation, and the device would only fail the
//    UMR later (or let the peer reach memory the caller never offered).
//  - No alignment is required: mkey entries are byte ranges, and FRWR lets
//    the first page start at an offset (the engine splits chunks so that
//    every piece but the first starts on a page).
//  - It may span at most max_depth pages, counted as FRWR counts them (every
//    page the range touches), so the engine's depth means the same on every
//    driver.
//  - One entry maps at most 2 GiB, and a UMR WQE of the default size holds 4
//    entries (mlx5dv_wr_mr_list(3)): longer ranges are refused.
//  - The key byte is the request's (FastMr::bump_rkey), the index the mkey's:
//    an rkey for another mkey is refused.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>

namespace tern::mlx5 {

// Entries one UMR may carry with a default WQE; the QP is created for this many.
inline constexpr uint32_t kUmrMaxEntries = 4;
// Bytes one mkey entry may map.
inline constexpr uint64_t kUmrMaxEntryBytes = uint64_t{1} << 31;

// The indirect mkey being registered.
struct UmrTarget {
  uint32_t key = 0;          // its current lkey (== rkey): mkey index << 8 | key byte
  uint32_t max_entries = 0;  // entries it was created with (capped at kUmrMaxEntries)
  uint32_t max_depth = 0;    // pages one registration may span (FastMr::max_depth)
  uint32_t page_size = 4096;
};

// The long-lived MR under the range (ibv_mr's addr, length, lkey).
struct UmrSource {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t lkey = 0;
};

// The kRegMr's reg part, as the engine fills it.
struct UmrRequest {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;  // tern Access bits
  uint32_t rkey = 0;    // from FastMr::bump_rkey()
};

enum class UmrRefusal : uint8_t {
  kNone,            // planned
  kEmpty,           // length 0
  kWrongMkey,       // the rkey's index is not the mkey's
  kNoSource,        // reg.lkey names no MR of this PD
  kOutsideSource,   // the range is not inside that MR
  kTooDeep,         // spans more than max_depth pages
  kTooManyEntries,  // needs more entries than the mkey (or one WQE) holds
};
const char* umr_refusal_name(UmrRefusal r);

struct UmrPlan {
  uint32_t access_flags = 0;  // IBV_ACCESS_*, for the mkey
  uint32_t new_key = 0;       // the mkey's lkey and rkey once the UMR ran
  uint16_t num_sge = 0;
  ibv_sge sge[kUmrMaxEntries] = {};
};

// tern Access bits -> IBV_ACCESS_* for an mkey. Remote write implies local
// write, as the IB spec requires of any registration that allows it.
uint32_t umr_access_flags(uint32_t tern_access);
// Pages of `page_size` that [addr, addr+len) touches (len > 0).
uint64_t pages_spanned(uint64_t addr, uint64_t len, uint32_t page_size);
// Entries a range of `bytes` needs.
uint64_t umr_entries_for(uint64_t bytes);

// Plans the UMR for `r` on `t` over `src` (nullptr: reg.lkey named no MR).
// On kNone, *out is complete; otherwise *out is unspecified.
UmrRefusal plan_umr(const UmrTarget& t, const UmrSource* src, const UmrRequest& r, UmrPlan* out);

}  // namespace tern::mlx5
