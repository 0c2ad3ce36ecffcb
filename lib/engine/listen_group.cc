#include "engine/listen_group.h"

#include <sys/eventfd.h>
#include <unistd.h>

namespace tern::rpc {

std::shared_ptr<ListenGroup> ListenGroup::create() { return std::make_shared<ListenGroupImpl>(); }

ListenMember::~ListenMember() {
  if (efd >= 0) close(efd);
}

bool ListenMember::ack_wake() {
  uint64_t v = 0;
  return read(efd, &v, sizeof v) == static_cast<ssize_t>(sizeof v) && v > 0;
}

std::vector<uint64_t> ListenGroupImpl::dealt() const {
  std::lock_guard<std::mutex> g(mu_);
  std::vector<uint64_t> out;
  for (const auto& m : members_) out.push_back(m->dealt);
  return out;
}

Result<std::shared_ptr<ListenMember>> ListenGroupImpl::join(std::string_view spec, bool* first) {
  auto m = std::make_shared<ListenMember>();
  m->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (m->efd < 0) return make_sys_error(Errc::kNoResources, errno, "engine: eventfd for a listen group");
  std::lock_guard<std::mutex> g(mu_);
  if (members_.empty()) {
    spec_ = std::string(spec);
  } else if (spec != spec_) {
    return make_error(Errc::kInvalidArgument, "engine: this listen group serves %s, not %.*s", spec_.c_str(),
                      static_cast<int>(spec.size()), spec.data());
  }
  *first = members_.empty();
  members_.push_back(m);
  return m;
}

void ListenGroupImpl::leave(const std::shared_ptr<ListenMember>& m) {
  std::deque<std::unique_ptr<rdma::ConnRequest>> refused;
  {
    std::lock_guard<std::mutex> g(mu_);
    m->left = true;
    refused.swap(m->inbox);
    m->pending.store(false, std::memory_order_relaxed);
  }
  // Destroyed outside the lock: a driver's refusal may make system calls.
  refused.clear();
}

std::shared_ptr<ListenMember> ListenGroupImpl::next() {
  std::lock_guard<std::mutex> g(mu_);
  for (size_t i = 0; i < members_.size(); ++i) {
    const auto& m = members_[turn_++ % members_.size()];
    if (!m->left) {
      ++m->dealt;
      return m;
    }
  }
  return nullptr;
}

bool ListenGroupImpl::hand(const std::shared_ptr<ListenMember>& m, std::unique_ptr<rdma::ConnRequest> req) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!m->left) {
      m->inbox.push_back(std::move(req));
      m->pending.store(true, std::memory_order_release);
      const uint64_t one = 1;
      (void)!write(m->efd, &one, sizeof one);
      return true;
    }
  }
  return false;  // req is destroyed here, outside the lock: refused
}

std::deque<std::unique_ptr<rdma::ConnRequest>> ListenGroupImpl::take(ListenMember* m) {
  std::lock_guard<std::mutex> g(mu_);
  std::deque<std::unique_ptr<rdma::ConnRequest>> out;
  out.swap(m->inbox);
  m->pending.store(false, std::memory_order_relaxed);
  return out;
}

}  // namespace tern::rpc
