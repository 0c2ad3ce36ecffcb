// SlabTable: objects that keep their address and index for life, grown in
// slabs on demand up to a cap, with a free list: the engine's requests and
// server calls, shared by every connection (an idle connection holds none).
// A send context or a READ's wr_id names an object by index; the table
// finds it in O(1).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/check.h"

namespace tern::rpc {

template <typename T>
class SlabTable {
 public:
  static constexpr uint32_t kSlab = 64;
  explicit SlabTable(uint32_t cap) : cap_(cap) {}
  // A free object, or nullptr when cap objects are out.
  T* get() {
    if (free_.empty() && !grow()) return nullptr;
    T* p = free_.back();
    free_.pop_back();
    in_table_[p->index] = 0;
    ++out_;
    return p;
  }
  // Gives p back; giving one back twice is the engine's bug, caught always
  // (a double release is what the accounting exists to rule out).
  void put(T* p) {
    TERN_CHECK(p->index < made_ && &slabs_[p->index / kSlab][p->index % kSlab] == p, "object not from this table");
    TERN_CHECK(!in_table_[p->index], "object %u given back twice", p->index);
    in_table_[p->index] = 1;
    free_.push_back(p);
    --out_;
  }
  bool is_free(const T* p) const { return in_table_[p->index] != 0; }
  T* at(uint32_t i) { return i < made_ ? &slabs_[i / kSlab][i % kSlab] : nullptr; }
  uint32_t made() const { return made_; }
  uint32_t out() const { return out_; }

 private:
  bool grow() {
    if (made_ >= cap_) return false;
    slabs_.push_back(std::make_unique<T[]>(kSlab));
    in_table_.resize(made_ + kSlab, 1);
    for (uint32_t i = kSlab; i > 0; --i) {
      T& t = slabs_.back()[i - 1];
      t.index = made_ + i - 1;
      free_.push_back(&t);
    }
    made_ += kSlab;
    return true;
  }
  uint32_t cap_, made_ = 0, out_ = 0;
  std::vector<std::unique_ptr<T[]>> slabs_;
  // The free objects, as a stack: the one given back last is taken first,
  // while its cache lines are likely still warm. A free object is on no
  // list of the engine's, so the stack needs no link in it, and its
  // storage grows only with the slabs: get() and put() never allocate and
  // never search.
  std::vector<T*> free_;
  std::vector<uint8_t> in_table_;
};

}  // namespace tern::rpc
