// RingFifo: a double-ended queue of small values (pointers) in one ring
// buffer that is allocated on the first push and doubles when full.
//
// std::deque allocates a 512-byte node and its map when it is constructed,
// empty or not: three per server connection were ~1.8 KiB of every idle
// connection (a server holds 10,000 connections at at most 16 KiB each). Most
// connections never queue anything (these queues hold work waiting for
// send-queue room or a free server call), so an empty RingFifo holds no
// memory; one that queued keeps its ring for the next time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "base/check.h"

namespace tern {

template <typename T>
class RingFifo {
 public:
  RingFifo() = default;
  RingFifo(const RingFifo&) = delete;
  RingFifo& operator=(const RingFifo&) = delete;

  bool empty() const { return head_ == tail_; }
  size_t size() const { return tail_ - head_; }
  T& front() { TERN_ASSERT(!empty()); return buf_[head_ & mask_]; }
  T& back() { TERN_ASSERT(!empty()); return buf_[(tail_ - 1) & mask_]; }
  // The i-th from the front.
  T& operator[](size_t i) { TERN_ASSERT(i < size()); return buf_[(head_ + i) & mask_]; }

  void push_back(T v) {
    if (size() == cap_) grow();
    buf_[tail_++ & mask_] = v;
  }
  void push_front(T v) {
    if (size() == cap_) grow();
    buf_[--head_ & mask_] = v;
  }
  void pop_front() { TERN_ASSERT(!empty()); ++head_; }
  void pop_back() { TERN_ASSERT(!empty()); --tail_; }
  void clear() { head_ = tail_ = 0; }

 private:
  void grow() {
    const size_t cap = cap_ == 0 ? 8 : cap_ * 2;
    std::unique_ptr<T[]> n(new T[cap]);
    for (size_t i = 0; i < size(); ++i) n[i] = buf_[(head_ + i) & mask_];
    tail_ = size();
    head_ = 0;
    buf_ = std::move(n);
    cap_ = cap;
    mask_ = cap - 1;
  }

  std::unique_ptr<T[]> buf_;
  size_t cap_ = 0, mask_ = 0;
  size_t head_ = 0, tail_ = 0;  // free-running; entries are [head_, tail_)
};

}  // namespace tern
