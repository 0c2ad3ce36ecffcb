// pmd/mlx5: FastMr = indirect mkey (mlx5dv_create_mkey(3)), made on the
// provider's DEVX context, pointing at nothing until a UMR configures it.
#include <cerrno>

#include "base/log.h"
#include "mlx5/mlx5_internal.h"

namespace tern::mlx5 {

Mlx5FastMr::Mlx5FastMr(ibv_pd* pd, mlx5dv_mkey* mkey, uint32_t max_depth, uint32_t max_entries, MkeyDestroyFn destroy)
    : pd_(pd), mkey_(mkey), max_entries_(max_entries), destroy_(destroy) {
  max_depth_ = max_depth;
  rkey_ = mkey->rkey;
}

Mlx5FastMr::~Mlx5FastMr() {
  if (int rc = destroy_(mkey_); rc != 0) TERN_LOG(kWarn, "mlx5", "mlx5dv_destroy_mkey: errno %d", rc);
}

Result<std::unique_ptr<rdma::FastMr>> alloc_mkey_fast_mr(ibv_pd* pd, uint32_t create_flags, uint32_t max_depth,
                                                         uint32_t page_size) {
  // Entries for the longest range a registration may map; the default UMR
  // WQE holds kUmrMaxEntries, which max_depth (<= 2^20 pages) never exceeds.
  uint64_t want = umr_entries_for(uint64_t{max_depth} * page_size);
  if (want < 1) want = 1;
  if (want > kUmrMaxEntries)
    return make_error(Errc::kInvalidArgument, "mlx5: depth %u x %u bytes needs %llu mkey entries, at most %u",
                      max_depth, page_size, static_cast<unsigned long long>(want), kUmrMaxEntries);
  mlx5dv_mkey_init_attr a = {};
  a.pd = pd;
  a.create_flags = create_flags;
  a.max_entries = static_cast<uint16_t>(want);
  mlx5dv_mkey* mkey = mlx5dv_create_mkey(&a);
  if (mkey == nullptr)
    return make_sys_error(errno == ENOMEM ? Errc::kNoResources : Errc::kUnsupported, errno,
                          "mlx5: mlx5dv_create_mkey(flags 0x%x, %llu entries)", create_flags,
                          static_cast<unsigned long long>(want));
  // The device may give more entries than asked (mlx5dv_create_mkey(3)); one
  // UMR still carries at most kUmrMaxEntries.
  uint32_t entries = a.max_entries < kUmrMaxEntries ? a.max_entries : kUmrMaxEntries;
  return std::unique_ptr<rdma::FastMr>(new Mlx5FastMr(pd, mkey, max_depth, entries));
}

}  // namespace tern::mlx5
