// ObjectPool: a connection's fixed set of request (client) or call (server)
// objects and the free ones among them. Everything is allocated at set-up,
// so get() and put() are a pop and a push, never an allocation. Objects keep
// their index for life, which is how a completion's wr_id or an xid finds
// one without a lookup table. put() of an object already in the pool is
// caught (the I5 invariant: a pooled object is owned by nobody).
#pragma once

#include <cstdint>
#include <vector>

#include "base/check.h"

namespace tern::rpc {

template <typename T>
class ObjectPool {
 public:
  // Creates n objects, all free. Only once, before any get().
  void create(uint32_t n) {
    TERN_REQUIRE(objs_.empty(), "ObjectPool created twice");
    objs_.resize(n);
    in_pool_.assign(n, 1);
    free_.reserve(n);
    // LIFO, lowest index on top: recently used objects (and their buffers)
    // are reused first, while they are still in cache.
    for (uint32_t i = n; i > 0; --i) free_.push_back(&objs_[i - 1]);
  }

  // A free object, or nullptr when all are out.
  T* get() {
    if (free_.empty()) return nullptr;
    T* p = free_.back();
    free_.pop_back();
    in_pool_[index(p)] = 0;
    return p;
  }
  void put(T* p) {
    uint32_t i = index(p);
    TERN_ASSERT(!in_pool_[i], "object %u put back into its pool twice", i);
    in_pool_[i] = 1;
    free_.push_back(p);
  }

  uint32_t size() const { return static_cast<uint32_t>(objs_.size()); }
  uint32_t free_count() const { return static_cast<uint32_t>(free_.size()); }
  bool all_free() const { return free_.size() == objs_.size(); }
  bool empty() const { return free_.empty(); }
  bool in_pool(const T* p) const { return in_pool_[index(p)] != 0; }
  // Every object, free or not (set-up, teardown and lookups by index).
  T& operator[](uint32_t i) { return objs_[i]; }
  T* find(uint32_t i) { return i < objs_.size() ? &objs_[i] : nullptr; }
  typename std::vector<T>::iterator begin() { return objs_.begin(); }
  typename std::vector<T>::iterator end() { return objs_.end(); }
  uint32_t index(const T* p) const {
    TERN_ASSERT(p >= objs_.data() && p < objs_.data() + objs_.size(), "object not from this pool");
    return static_cast<uint32_t>(p - objs_.data());
  }

 private:
  std::vector<T> objs_;
  std::vector<uint8_t> in_pool_;
  std::vector<T*> free_;
};

}  // namespace tern::rpc
