#include "engine/handler_table.h"

#include <algorithm>

namespace tern::rpc {

void HandlerTable::set(const HandlerEntry& e) {
  auto& slot = by_key_[Key{e.prog, e.vers, e.proc}];
  // Entries keep their address: calls in progress point at them.
  if (slot) *slot = e;
  else slot = std::make_unique<HandlerEntry>(e);
  prog_vers_[uint64_t{e.prog} << 32 | e.vers] = true;
  auto [it, fresh] = versions_.try_emplace(e.prog, Versions{e.vers, e.vers});
  if (!fresh) it->second = Versions{std::min(it->second.low, e.vers), std::max(it->second.high, e.vers)};
}

const HandlerEntry* HandlerTable::find_slow(uint32_t prog, uint32_t vers, uint32_t proc, AcceptStat* stat,
                                            uint32_t* low, uint32_t* high) const {
  if (auto it = by_key_.find(Key{prog, vers, proc}); it != by_key_.end()) return last_ = it->second.get();
  auto v = versions_.find(prog);
  if (v == versions_.end()) {
    *stat = AcceptStat::kProgUnavail;
    return nullptr;
  }
  *low = v->second.low, *high = v->second.high;
  *stat = prog_vers_.contains(uint64_t{prog} << 32 | vers) ? AcceptStat::kProcUnavail : AcceptStat::kProgMismatch;
  return nullptr;
}

}  // namespace tern::rpc
