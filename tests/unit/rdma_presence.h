// For the "no RDMA device" unit tests of the rdma-core drivers: whether this
// machine has any RDMA device (then the tests that need none skip).
#pragma once

#include <infiniband/verbs.h>

namespace tern::rdma::test {

inline bool machine_has_rdma() {
  int n = 0;
  ibv_device** l = ibv_get_device_list(&n);
  if (l != nullptr) ibv_free_device_list(l);
  return l != nullptr && n > 0;
}

}  // namespace tern::rdma::test
