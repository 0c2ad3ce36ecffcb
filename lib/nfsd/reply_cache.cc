#include "nfsd/reply_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "base/log.h"
#include "base/siphash.h"

namespace tern::nfsd {

namespace {

constexpr char kMagic[8] = {'T', 'E', 'R', 'N', 'D', 'R', 'C', '1'};
constexpr uint32_t kHeaderSize = 4096;
// A fixed key: the check word tells a whole slot from a torn one, it is not
// a secret (the file is the server's own, mode 0600).
constexpr SipKey kCheckKey{0x7465726e64726331ull, 0x736c6f74636865ddull};

struct FileHeader {
  char magic[8];
  uint32_t slot_size;
  uint32_t slots;
};

struct Slot {
  uint64_t check;  // 0: empty or being written
  uint64_t seq;
  uint64_t digest;
  uint32_t xid, prog, vers, proc;
  uint16_t peer_len, res_len;
  uint32_t pad;
  char peer[ReplyCache::kMaxPeer];
  uint8_t res[ReplyCache::kMaxResults];
};
static_assert(sizeof(Slot) == 512, "a reply cache slot is 512 bytes");

uint64_t check_of(const Slot& s) {
  const auto* b = reinterpret_cast<const uint8_t*>(&s);
  return siphash24(kCheckKey, {b + 8, sizeof(Slot) - 8}) | 1;
}

// Whether a slot, as the file has it now, is whole and records this very
// call: the full key, not only what the in-memory index believes.
bool slot_holds(const Slot& s, const ReplyKey& k) {
  return s.check != 0 && s.check == check_of(s) && s.peer_len == k.peer.size() && s.peer_len <= ReplyCache::kMaxPeer &&
         s.res_len <= ReplyCache::kMaxResults && std::memcmp(s.peer, k.peer.data(), s.peer_len) == 0 &&
         s.xid == k.xid && s.prog == k.prog && s.vers == k.vers && s.proc == k.proc && s.digest == k.digest;
}

Slot* slot_at(uint8_t* map, uint32_t i) { return reinterpret_cast<Slot*>(map + kHeaderSize + size_t{i} * sizeof(Slot)); }

}  // namespace

size_t ReplyCache::KeyHash::operator()(const ReplyKey& k) const {
  uint64_t h = std::hash<std::string>()(k.peer) ^ (uint64_t{k.xid} * 0x9E3779B97F4A7C15ull) ^ k.digest;
  return static_cast<size_t>(h ^ (uint64_t{k.prog} << 17) ^ (uint64_t{k.proc} << 7) ^ k.vers);
}

uint64_t args_digest(std::span<const uint8_t> args) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint8_t b : args) h = (h ^ b) * 0x100000001b3ull;
  return h ^ args.size();
}

Result<std::unique_ptr<ReplyCache>> ReplyCache::open(const std::string& path, uint32_t slots) {
  if (slots == 0) return make_error(Errc::kInvalidArgument, "tern-nfsd: a reply cache of 0 slots");
  std::unique_ptr<ReplyCache> rc(new ReplyCache());
  rc->fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (rc->fd_ < 0) return make_sys_error(Errc::kInvalidArgument, errno, "tern-nfsd: cannot open %s", path.c_str());
  rc->map_len_ = kHeaderSize + size_t{slots} * sizeof(Slot);
  struct stat st;
  if (fstat(rc->fd_, &st) != 0 || !S_ISREG(st.st_mode))
    return make_error(Errc::kInvalidArgument, "tern-nfsd: %s is not a regular file", path.c_str());
  bool fresh = static_cast<size_t>(st.st_size) != rc->map_len_;
  if (fresh && ftruncate(rc->fd_, 0) != 0)
    return make_sys_error(Errc::kInvalidArgument, errno, "tern-nfsd: cannot truncate %s", path.c_str());
  if (ftruncate(rc->fd_, static_cast<off_t>(rc->map_len_)) != 0)
    return make_sys_error(Errc::kNoResources, errno, "tern-nfsd: cannot size %s", path.c_str());
  void* m = mmap(nullptr, rc->map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, rc->fd_, 0);
  if (m == MAP_FAILED) return make_sys_error(Errc::kNoResources, errno, "tern-nfsd: cannot map %s", path.c_str());
  rc->map_ = static_cast<uint8_t*>(m);
  rc->slots_ = slots;
  rc->slot_keys_.resize(slots);
  rc->slot_used_.assign(slots, false);
  auto* h = reinterpret_cast<FileHeader*>(rc->map_);
  if (!fresh && (std::memcmp(h->magic, kMagic, sizeof kMagic) != 0 || h->slot_size != sizeof(Slot) ||
                 h->slots != slots))
    fresh = true;
  if (fresh) {
    std::memset(rc->map_, 0, rc->map_len_);
    std::memcpy(h->magic, kMagic, sizeof kMagic);
    h->slot_size = sizeof(Slot);
    h->slots = slots;
    return rc;
  }
  // Every whole slot goes into the index; the ring continues after the newest.
  uint64_t newest = 0;
  for (uint32_t i = 0; i < slots; ++i) {
    const Slot& s = *slot_at(rc->map_, i);
    if (s.check == 0 || s.check != check_of(s) || s.peer_len > kMaxPeer || s.res_len > kMaxResults) continue;
    ReplyKey k{std::string(s.peer, s.peer_len), s.xid, s.prog, s.vers, s.proc, s.digest};
    rc->index_[k] = Entry{static_cast<int64_t>(i), true};
    rc->slot_keys_[i] = std::move(k);
    rc->slot_used_[i] = true;
    ++rc->loaded_;
    if (s.seq >= newest) {
      newest = s.seq;
      rc->next_ = (i + 1) % slots;
    }
  }
  rc->seq_ = newest;
  return rc;
}

ReplyCache::~ReplyCache() {
  if (map_ != nullptr) munmap(map_, map_len_);
  if (fd_ >= 0) close(fd_);
}

ReplyCache::Found ReplyCache::begin(const ReplyKey& k, std::vector<uint8_t>* results) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = index_.find(k);
  if (it == index_.end()) {
    ++misses_;
    index_.emplace(k, Entry{});
    return Found::kNew;
  }
  if (it->second.slot < 0) {
    ++in_progress_;
    return Found::kInProgress;
  }
  const Slot& s = *slot_at(map_, static_cast<uint32_t>(it->second.slot));
  if (!slot_holds(s, k)) {
    // The index says this slot holds the call, the file says otherwise:
    // someone else wrote it (another process mapping the same file, which
    // the state directory's lock is there to prevent) or it is torn. The
    // file is what a reply would come from, so it decides: a miss.
    index_.erase(it);
    ++misses_;
    index_.emplace(k, Entry{});
    return Found::kNew;
  }
  results->assign(s.res, s.res + s.res_len);
  ++hits_;
  if (it->second.from_file) ++file_hits_;
  return Found::kDone;
}

void ReplyCache::write_slot(uint32_t i, const ReplyKey& k, std::span<const uint8_t> results) {
  Slot* s = slot_at(map_, i);
  // Zeroed check first, set last: a death in between leaves a slot the next
  // open ignores. The fences keep the compiler from moving the stores across
  // (another process reads it only after this one is gone).
  s->check = 0;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  Slot n{};
  n.seq = ++seq_;
  n.digest = k.digest;
  n.xid = k.xid, n.prog = k.prog, n.vers = k.vers, n.proc = k.proc;
  n.peer_len = static_cast<uint16_t>(k.peer.size());
  n.res_len = static_cast<uint16_t>(results.size());
  std::memcpy(n.peer, k.peer.data(), k.peer.size());
  if (!results.empty()) std::memcpy(n.res, results.data(), results.size());
  const uint64_t check = check_of(n);
  std::memcpy(reinterpret_cast<uint8_t*>(s) + 8, reinterpret_cast<const uint8_t*>(&n) + 8, sizeof(Slot) - 8);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  s->check = check;
}

void ReplyCache::done(const ReplyKey& k, std::span<const uint8_t> results) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = index_.find(k);
  if (it == index_.end()) return;
  if (results.size() > kMaxResults || k.peer.size() > kMaxPeer) {
    index_.erase(it);  // too large to keep: a retransmission runs again
    return;
  }
  const uint32_t i = next_;
  next_ = (next_ + 1) % slots_;
  if (slot_used_[i]) {
    auto old = index_.find(slot_keys_[i]);
    if (old != index_.end() && old->second.slot == static_cast<int64_t>(i)) index_.erase(old);
  }
  write_slot(i, k, results);
  slot_keys_[i] = k;
  slot_used_[i] = true;
  // The erase above may have been of this very key (a slot it held before).
  index_[k] = Entry{static_cast<int64_t>(i), false};
}

void ReplyCache::forget(const ReplyKey& k) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = index_.find(k);
  if (it != index_.end() && it->second.slot < 0) index_.erase(it);
}

uint64_t ReplyCache::hits() const {
  std::lock_guard<std::mutex> g(mu_);
  return hits_;
}
uint64_t ReplyCache::hits_from_file() const {
  std::lock_guard<std::mutex> g(mu_);
  return file_hits_;
}
uint64_t ReplyCache::in_progress_drops() const {
  std::lock_guard<std::mutex> g(mu_);
  return in_progress_;
}
uint64_t ReplyCache::misses() const {
  std::lock_guard<std::mutex> g(mu_);
  return misses_;
}

}  // namespace tern::nfsd
