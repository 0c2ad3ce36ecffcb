// IntrusiveList: a doubly-linked list threaded through its elements, as the
// kernel's list_head and DPDK's TAILQ are: putting an element on a list or
// taking it off (from anywhere in it) is O(1) and allocates nothing, which
// is what queues on the datapath need. An element carries one ListLink per
// list it can be on, and knows whether it is on it.
#pragma once

#include <cstddef>

#include "base/check.h"

namespace tern {

template <typename T>
struct ListLink {
  T* prev = nullptr;
  T* next = nullptr;
  bool linked = false;
};

template <typename T, ListLink<T> T::*Link>
class IntrusiveList {
 public:
  IntrusiveList() = default;
  IntrusiveList(const IntrusiveList&) = delete;
  IntrusiveList& operator=(const IntrusiveList&) = delete;

  bool empty() const { return head_ == nullptr; }
  size_t size() const { return size_; }
  T* front() const { return head_; }
  T* back() const { return tail_; }
  static T* next(const T* x) { return (x->*Link).next; }
  static T* prev(const T* x) { return (x->*Link).prev; }
  static bool linked(const T* x) { return (x->*Link).linked; }

  void push_back(T* x) {
    ListLink<T>& l = x->*Link;
    TERN_ASSERT(!l.linked);
    l.prev = tail_;
    l.next = nullptr;
    l.linked = true;
    if (tail_ != nullptr) (tail_->*Link).next = x;
    else head_ = x;
    tail_ = x;
    ++size_;
  }

  void push_front(T* x) { insert_after(nullptr, x); }

  // x goes right after pos (at the front when pos is nullptr): what keeps a
  // list sorted when the caller has found the place.
  void insert_after(T* pos, T* x) {
    ListLink<T>& l = x->*Link;
    TERN_ASSERT(!l.linked && (pos == nullptr || (pos->*Link).linked));
    l.prev = pos;
    l.next = pos != nullptr ? (pos->*Link).next : head_;
    l.linked = true;
    if (l.next != nullptr) (l.next->*Link).prev = x;
    else tail_ = x;
    if (pos != nullptr) (pos->*Link).next = x;
    else head_ = x;
    ++size_;
  }

  void remove(T* x) {
    ListLink<T>& l = x->*Link;
    TERN_ASSERT(l.linked);
    if (l.prev != nullptr) (l.prev->*Link).next = l.next;
    else head_ = l.next;
    if (l.next != nullptr) (l.next->*Link).prev = l.prev;
    else tail_ = l.prev;
    l.prev = l.next = nullptr;
    l.linked = false;
    --size_;
  }

  T* pop_front() {
    T* x = head_;
    if (x != nullptr) remove(x);
    return x;
  }

  // The front goes to the back (a round robin's turn).
  void rotate() {
    if (head_ == tail_) return;
    push_back(pop_front());
  }

  // The two lists trade their elements, in O(1): a link names elements,
  // never the list, so nothing in them changes. A walk that must not see
  // what is added during it takes the list this way first.
  void swap(IntrusiveList& other) {
    T* h = head_;
    T* t = tail_;
    const size_t n = size_;
    head_ = other.head_, tail_ = other.tail_, size_ = other.size_;
    other.head_ = h, other.tail_ = t, other.size_ = n;
  }

 private:
  T* head_ = nullptr;
  T* tail_ = nullptr;
  size_t size_ = 0;
};

}  // namespace tern
