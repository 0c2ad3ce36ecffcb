// The export table in force, replaced whole on a reload (SIGHUP), and how
// the engine threads pick the new one up without a lock on their path.
//
// The main thread builds a new table (export_table.h) off to the side and
// publish()es it: the table under a mutex, then the generation number,
// released. An engine thread compares generation() -- one acquire load --
// with the one it serves, at each call and each tick; only when it differs
// does it take the mutex to copy the new shared_ptr (current()). Each
// engine holds the table it serves by its own reference, so the old table
// (and the descriptors of its exports) is freed when the last engine has
// moved on. A call is served under one table from start to end: handlers
// are synchronous, and the switch happens between calls.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>

#include "nfsd/export_table.h"

namespace tern::nfsd {

class PublishedExports {
 public:
  explicit PublishedExports(std::shared_ptr<const ExportTable> first) : cur_(std::move(first)) {}
  PublishedExports(const PublishedExports&) = delete;
  PublishedExports& operator=(const PublishedExports&) = delete;

  // Makes `t` the table in force; returns its generation.
  uint64_t publish(std::shared_ptr<const ExportTable> t) {
    std::lock_guard<std::mutex> g(mu_);
    cur_ = std::move(t);
    return gen_.fetch_add(1, std::memory_order_release) + 1;
  }
  // Bumped by each publish(): compare before taking current().
  uint64_t generation() const { return gen_.load(std::memory_order_acquire); }
  // The table in force and its generation, read together.
  std::shared_ptr<const ExportTable> current(uint64_t* generation = nullptr) const {
    std::lock_guard<std::mutex> g(mu_);
    if (generation != nullptr) *generation = gen_.load(std::memory_order_relaxed);
    return cur_;
  }

 private:
  mutable std::mutex mu_;
  std::shared_ptr<const ExportTable> cur_;
  std::atomic<uint64_t> gen_{1};
};

}  // namespace tern::nfsd
