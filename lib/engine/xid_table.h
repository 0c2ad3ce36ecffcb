// XidTable: a client connection's calls in flight by xid, so a reply finds
// its request in O(1) without the xid having to encode where the request
// lives (a retransmission on a new connection keeps its xid). Open
// addressing with linear probing and backward-shift deletion (no
// tombstones), sized at twice the most calls a connection can have in
// flight, so probes stay short. xid 0 is never used.
#pragma once

#include <cstdint>
#include <vector>

#include "base/check.h"

namespace tern::rpc {

class XidTable {
 public:
  // Room for `max_entries` xids at once.
  explicit XidTable(uint32_t max_entries) {
    uint32_t cap = 4;
    shift_ = 30;
    while (cap < 2 * max_entries) cap <<= 1, --shift_;
    slots_.assign(cap, Slot{0, 0});
    mask_ = cap - 1;
    max_ = max_entries;
  }

  // False when the xid is already there or the table is full.
  bool insert(uint32_t xid, uint32_t obj) {
    TERN_ASSERT(xid != 0);
    if (size_ >= max_) return false;
    for (uint32_t i = home(xid);; i = (i + 1) & mask_) {
      if (slots_[i].xid == xid) return false;
      if (slots_[i].xid == 0) {
        slots_[i] = Slot{xid, obj};
        ++size_;
        return true;
      }
    }
  }
  bool find(uint32_t xid, uint32_t* obj) const {
    if (xid == 0) return false;
    for (uint32_t i = home(xid);; i = (i + 1) & mask_) {
      if (slots_[i].xid == xid) {
        *obj = slots_[i].obj;
        return true;
      }
      if (slots_[i].xid == 0) return false;
    }
  }
  bool erase(uint32_t xid) {
    if (xid == 0) return false;
    uint32_t i = home(xid);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].xid == 0) return false;
      if (slots_[i].xid == xid) break;
    }
    // Backward shift: move later entries of the cluster into the hole when
    // their home is not between the hole and them.
    for (uint32_t j = (i + 1) & mask_; slots_[j].xid != 0; j = (j + 1) & mask_) {
      uint32_t h = home(slots_[j].xid);
      bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
      if (movable) {
        slots_[i] = slots_[j];
        i = j;
      }
    }
    slots_[i] = Slot{0, 0};
    --size_;
    return true;
  }
  uint32_t size() const { return size_; }
  void clear() {
    for (auto& s : slots_) s = Slot{0, 0};
    size_ = 0;
  }

 private:
  struct Slot {
    uint32_t xid, obj;
  };
  // Fibonacci hashing: the product's top bits. Consecutive xids -- what a
  // connection sends -- land in distinct slots spread over the table, so at
  // the usual load (a window of consecutive xids, half the table) probes and
  // backward shifts are almost never needed. (Taking middle bits instead
  // left clusters of ~6 at the default 32 credits: ~60 instructions per
  // erase.)
  uint32_t home(uint32_t xid) const { return (xid * 0x9E3779B1u) >> shift_; }

  std::vector<Slot> slots_;
  uint32_t mask_ = 0, max_ = 0, size_ = 0, shift_ = 30;
};

}  // namespace tern::rpc
