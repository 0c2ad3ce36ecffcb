#include "nfsd/lock_table.h"

#include <algorithm>

namespace tern::nfsd {

std::optional<ByteRange> ByteRange::from_nlm(uint64_t offset, uint64_t len) {
  if (len == 0) return ByteRange{offset, UINT64_MAX};
  if (len - 1 > UINT64_MAX - offset) return std::nullopt;
  return ByteRange{offset, offset + (len - 1)};
}

std::optional<HeldLock> LockTable::conflict_in(const File& f, const LockOwner& owner, bool exclusive,
                                               const ByteRange& range) const {
  for (const HeldLock& l : f.locks)
    if (!(l.owner == owner) && (exclusive || l.exclusive) && l.range.overlaps(range)) return l;
  return std::nullopt;
}

std::optional<HeldLock> LockTable::conflict(const std::string& fh, const LockOwner& owner, bool exclusive,
                                            const ByteRange& range) const {
  auto it = files_.find(fh);
  if (it == files_.end()) return std::nullopt;
  return conflict_in(it->second, owner, exclusive, range);
}

void LockTable::remove(File& f, const LockOwner& owner, const ByteRange& range) {
  std::vector<HeldLock> out;
  out.reserve(f.locks.size() + 1);
  for (HeldLock& l : f.locks) {
    if (!(l.owner == owner) || !l.range.overlaps(range)) {
      out.push_back(std::move(l));
      continue;
    }
    // What is left of l on either side of range.
    if (l.range.first < range.first) out.push_back({l.owner, l.exclusive, {l.range.first, range.first - 1}});
    if (l.range.last > range.last) out.push_back({l.owner, l.exclusive, {range.last + 1, l.range.last}});
  }
  f.locks = std::move(out);
}

void LockTable::apply(File& f, const LockOwner& owner, bool exclusive, const ByteRange& range) {
  remove(f, owner, range);
  // Merge with the owner's locks of the same kind that touch it.
  ByteRange r = range;
  std::vector<HeldLock> out;
  out.reserve(f.locks.size() + 1);
  for (HeldLock& l : f.locks) {
    const bool touches = (r.first == 0 || l.range.last >= r.first - 1) && (r.last == UINT64_MAX || l.range.first <= r.last + 1);
    if (l.owner == owner && l.exclusive == exclusive && touches) {
      r.first = std::min(r.first, l.range.first);
      r.last = std::max(r.last, l.range.last);
    } else {
      out.push_back(std::move(l));
    }
  }
  out.push_back({owner, exclusive, r});
  f.locks = std::move(out);
}

void LockTable::wake(File& f, std::vector<Waiter>* granted) {
  for (size_t i = 0; i < f.waiters.size();) {
    Waiter& w = f.waiters[i];
    if (conflict_in(f, w.owner, w.exclusive, w.range)) {
      ++i;
      continue;
    }
    apply(f, w.owner, w.exclusive, w.range);
    granted->push_back(std::move(w));
    f.waiters.erase(f.waiters.begin() + static_cast<std::ptrdiff_t>(i));
  }
}

void LockTable::settle(std::map<std::string, File>::iterator it, size_t locks_before, size_t waiters_before) {
  nlocks_ = nlocks_ - locks_before + it->second.locks.size();
  nwaiters_ = nwaiters_ - waiters_before + it->second.waiters.size();
  if (it->second.locks.empty() && it->second.waiters.empty()) files_.erase(it);
}

LockOutcome LockTable::lock(const std::string& fh, const Waiter& w, bool block) {
  auto it = files_.try_emplace(fh).first;
  File& f = it->second;
  const size_t lb = f.locks.size(), wb = f.waiters.size();
  auto same = [&](const Waiter& q) { return q.owner == w.owner && q.exclusive == w.exclusive && q.range == w.range; };
  LockOutcome out;
  if (conflict_in(f, w.owner, w.exclusive, w.range)) {
    auto q = std::find_if(f.waiters.begin(), f.waiters.end(), same);
    if (!block) {
      out = LockOutcome::kDenied;
    } else if (q != f.waiters.end()) {
      *q = w;  // the same request again: its newest cookie and address
      out = LockOutcome::kBlocked;
    } else if (nwaiters_ >= kMaxWaiters) {
      out = LockOutcome::kNoLocks;
    } else {
      f.waiters.push_back(w);
      out = LockOutcome::kBlocked;
    }
  } else if (nlocks_ >= kMaxLocks) {
    // Counted before the merge: near the bound a request that would only
    // merge is refused too, which errs on the safe side.
    out = LockOutcome::kNoLocks;
  } else {
    apply(f, w.owner, w.exclusive, w.range);
    std::erase_if(f.waiters, same);
    out = LockOutcome::kGranted;
  }
  settle(it, lb, wb);
  return out;
}

std::vector<Waiter> LockTable::unlock(const std::string& fh, const LockOwner& owner, const ByteRange& range) {
  std::vector<Waiter> granted;
  auto it = files_.find(fh);
  if (it == files_.end()) return granted;
  const size_t lb = it->second.locks.size(), wb = it->second.waiters.size();
  remove(it->second, owner, range);
  wake(it->second, &granted);
  settle(it, lb, wb);
  return granted;
}

bool LockTable::cancel(const std::string& fh, const LockOwner& owner, bool exclusive, const ByteRange& range) {
  auto it = files_.find(fh);
  if (it == files_.end()) return false;
  const size_t lb = it->second.locks.size(), wb = it->second.waiters.size();
  const size_t n = std::erase_if(it->second.waiters, [&](const Waiter& q) {
    return q.owner == owner && q.exclusive == exclusive && q.range == range;
  });
  settle(it, lb, wb);
  return n > 0;
}

std::vector<Waiter> LockTable::free_host(const std::string& host) {
  std::vector<Waiter> granted;
  for (auto it = files_.begin(); it != files_.end();) {
    auto next = std::next(it);
    File& f = it->second;
    const size_t lb = f.locks.size(), wb = f.waiters.size();
    std::erase_if(f.locks, [&](const HeldLock& l) { return l.owner.host == host; });
    std::erase_if(f.waiters, [&](const Waiter& w) { return w.owner.host == host; });
    if (f.locks.size() != lb) wake(f, &granted);
    settle(it, lb, wb);
    it = next;
  }
  return granted;
}

bool LockTable::holds_any(const std::string& host) const {
  for (const auto& [fh, f] : files_) {
    for (const HeldLock& l : f.locks)
      if (l.owner.host == host) return true;
    for (const Waiter& w : f.waiters)
      if (w.owner.host == host) return true;
  }
  return false;
}

std::vector<HeldLock> LockTable::held(const std::string& fh) const {
  auto it = files_.find(fh);
  if (it == files_.end()) return {};
  std::vector<HeldLock> v = it->second.locks;
  std::sort(v.begin(), v.end(), [](const HeldLock& a, const HeldLock& b) { return a.range.first < b.range.first; });
  return v;
}

}  // namespace tern::nfsd
