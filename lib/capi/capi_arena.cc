// tern_arena: shareable memory (mem::Arena) for tern_engine_register_memory.
// The handle is the mem::Arena itself.
#include <new>

#include "capi/capi_impl.h"
#include "mem/arena.h"

using namespace tern;

namespace {
mem::Arena* cxx(tern_arena* a) { return reinterpret_cast<mem::Arena*>(a); }
const mem::Arena* cxx(const tern_arena* a) { return reinterpret_cast<const mem::Arena*>(a); }
}  // namespace

extern "C" {

int tern_arena_create(size_t size, const char* name, tern_arena** out) noexcept {
  if (out == nullptr || size == 0) return capi::fail_static(-EINVAL, "tern_arena_create: zero size or no place for it");
  *out = nullptr;
  mem::ArenaOptions o;
  o.size = size;
  if (name != nullptr) o.name = name;
  auto r = mem::Arena::create(o);
  if (!r) return capi::fail(r.status());
  *out = reinterpret_cast<tern_arena*>(std::move(r).value().release());
  return 0;
}

void tern_arena_destroy(tern_arena* a) noexcept { delete cxx(a); }
void* tern_arena_base(const tern_arena* a) noexcept { return cxx(a)->base(); }
size_t tern_arena_size(const tern_arena* a) noexcept { return cxx(a)->size(); }

void* tern_arena_alloc(tern_arena* a, size_t size, size_t align) noexcept {
  if (align == 0) align = 64;
  if (a == nullptr || size == 0 || (align & (align - 1)) != 0) {
    capi::fail_static(-EINVAL, "tern_arena_alloc: no arena, zero size, or an alignment that is not a power of two");
    return nullptr;
  }
  void* p = cxx(a)->carve(size, align);
  if (p == nullptr) capi::fail_static(-EAGAIN, "tern_arena_alloc: the arena is full");
  return p;
}

}  // extern "C"
