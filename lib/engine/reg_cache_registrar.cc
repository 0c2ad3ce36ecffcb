#include "engine/reg_cache_registrar.h"

namespace tern::rpc {

int RegCacheRegistrar::map(uint64_t addr, uint64_t len, uint32_t, uint32_t access, WrChain&, RdmaSegment* segs,
                           int max_segs, EngineMr** list) {
  if (len == 0) return 0;
  if (max_segs < 1) return kNoResources;
  bool refused = false;
  EngineMr* h = cache_.acquire(addr, len, access, &refused);
  if (h == nullptr) {
    if (refused) return kRefused;
    st_->out_of_mrs.add();
    return kNoResources;
  }
  segs[0] = RdmaSegment{h->rkey, h->length, h->iova};
  h->next = *list;
  *list = h;
  return 1;
}

void RegCacheRegistrar::release(EngineMr** list) {
  while (EngineMr* m = *list) {
    *list = m->next;
    cache_.release(m);
  }
}

}  // namespace tern::rpc
