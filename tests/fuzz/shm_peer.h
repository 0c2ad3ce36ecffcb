// What the two pmd/shm fuzz targets share: a server-side shm device that
// lives for the whole run, a hand-made client end (the AF_UNIX
// SOCK_SEQPACKET socket and memfds, built here rather than by the driver so
// that every byte and fd is the fuzzer's choice), a reader of fuzz input, and
// the descriptor count that must not grow across inputs.
//
// Memfds go to the driver sealed (F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL) and
// at the size they claim unless the input asks otherwise: a receiver may
// insist on that (an unsealed peer could shrink a mapping under it), and a
// harness that only spoke the strict protocol could not test the refusals.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "base/log.h"
#include "fuzz_check.h"
#include "mem/arena.h"
#include "rdmadev/rdmadev.h"
#include "shm/shm_layout.h"

namespace tern::fuzz {

// Bytes of fuzz input taken front to back; zeros once it is used up, so that
// every prefix of an input is itself a valid input.
class Input {
 public:
  Input(const uint8_t* d, size_t n) : d_(d), n_(n) {}
  bool empty() const { return n_ == 0; }
  size_t left() const { return n_; }
  uint8_t u8() {
    if (n_ == 0) return 0;
    --n_;
    return *d_++;
  }
  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }
  uint32_t u32() { return u16() | (static_cast<uint32_t>(u16()) << 16); }
  uint64_t u64() { return u32() | (static_cast<uint64_t>(u32()) << 32); }
  // Up to n bytes into out (the rest zero); how many came from the input.
  size_t bytes(void* out, size_t n) {
    size_t k = n < n_ ? n : n_;
    std::memcpy(out, d_, k);
    std::memset(static_cast<uint8_t*>(out) + k, 0, n - k);
    d_ += k, n_ -= k;
    return k;
  }

 private:
  const uint8_t* d_;
  size_t n_;
};

inline constexpr unsigned kGoodSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;

// A memfd of `size` bytes filled with `fill`, sealed with `seals` (0: none).
inline int make_memfd(size_t size, unsigned seals, uint8_t fill) {
  int fd = memfd_create("tern-fuzz-peer", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  FUZZ_CHECK(fd >= 0, "memfd_create: %s", std::strerror(errno));
  FUZZ_CHECK(ftruncate(fd, static_cast<off_t>(size)) == 0, "ftruncate: %s", std::strerror(errno));
  if (fill != 0 && size != 0) {
    void* p = mmap(nullptr, size, PROT_WRITE, MAP_SHARED, fd, 0);
    FUZZ_CHECK(p != MAP_FAILED, "mmap: %s", std::strerror(errno));
    std::memset(p, fill, size);
    munmap(p, size);
  }
  if (seals != 0) FUZZ_CHECK(fcntl(fd, F_ADD_SEALS, seals) == 0, "F_ADD_SEALS: %s", std::strerror(errno));
  return fd;
}

// Sends len bytes as one message with nfds descriptors (SCM_RIGHTS). The
// socket is non-blocking: a full peer is the peer's business, not a failure.
inline void send_raw(int sock, const void* buf, size_t len, const int* fds, int nfds) {
  iovec iov{const_cast<void*>(buf), len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 4)];
  if (nfds > 0) {
    std::memset(cbuf, 0, sizeof cbuf);
    mh.msg_control = cbuf;
    mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
    cmsghdr* c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
  }
  (void)sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

// Reads and discards what the server sent us, closing any fds it passed (its
// exported segments): they must not pile up in this process either.
inline void drain_socket(int sock) {
  for (;;) {
    uint8_t buf[256];
    iovec iov{buf, sizeof buf};
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 8)];
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof cbuf;
    ssize_t r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r <= 0) return;
    for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < n; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
        close(f);
      }
    }
  }
}

// One message into buf (up to len bytes) and the first fd it carried (or
// -1; any others are closed). Bytes received, or <= 0.
inline ssize_t recv_with_fd(int sock, void* buf, size_t len, int* fd) {
  *fd = -1;
  iovec iov{buf, len};
  msghdr mh{};
  mh.msg_iov = &iov;
  mh.msg_iovlen = 1;
  alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(int) * 8)];
  mh.msg_control = cbuf;
  mh.msg_controllen = sizeof cbuf;
  ssize_t r = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
  if (r <= 0) return r;
  for (cmsghdr* c = CMSG_FIRSTHDR(&mh); c != nullptr; c = CMSG_NXTHDR(&mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < n; ++i) {
      int f;
      std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      if (*fd < 0) *fd = f;
      else close(f);
    }
  }
  return r;
}

// The client's side of a link (pmd/shm/shm_layout.h, ShmLink): the page of
// activity words the server sent with its ACCEPT. The server's polls visit
// only the QPs whose bits are set there (and every QP once per safety-net
// period), so a peer that wrote descriptors without setting its bit would
// leave the fuzzer's input unread for most polls. notify() is what an
// honest client does after each store the server must act on; scribble()
// is a hostile one: any value in any word of the half it may write, which
// must cost nobody but its own connections.
struct PeerLink {
  shm::ShmLink* map = nullptr;
  uint32_t slot = 0;

  // From the ACCEPT on sock: false when it carried no link.
  bool take_accept(int sock) {
    shm::ShmMsg m;
    int fd = -1;
    ssize_t r = recv_with_fd(sock, &m, sizeof m, &fd);
    if (r != static_cast<ssize_t>(sizeof m) || fd < 0 || m.type != shm::kMsgAccept) {
      if (fd >= 0) close(fd);
      return false;
    }
    void* p = mmap(nullptr, shm::kLinkSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    FUZZ_CHECK(p != MAP_FAILED, "mmap of the server's link: %s", std::strerror(errno));
    map = static_cast<shm::ShmLink*>(p);
    slot = m.seg_index;
    FUZZ_CHECK(slot < shm::kLinkSlots, "the server named slot %u of a link of %u", slot, shm::kLinkSlots);
    return true;
  }
  void notify() {
    if (map == nullptr) return;
    shm::ShmLinkHalf& h = map->half[0];
    h.words[slot / 64].fetch_or(uint64_t{1} << (slot % 64), std::memory_order_release);
    if (slot >= 64) h.summary.fetch_or(uint64_t{1} << (slot / 64), std::memory_order_release);  // word 0 has none
  }
  void scribble(Input& in) {
    if (map == nullptr) return;
    shm::ShmLinkHalf& h = map->half[0];
    uint8_t f = in.u8();
    for (uint32_t k = 0; k <= (f & 7u); ++k) h.words[in.u8() % shm::kLinkWords].store(in.u64(), std::memory_order_release);
    h.summary.store((f & 8) ? ~uint64_t{0} : in.u64(), std::memory_order_release);
    // The server's half too: it is mapped writable here, and the server
    // must not trust what it reads back from it either.
    if (f & 16) map->half[1].summary.store(in.u64(), std::memory_order_release);
  }
  void unmap() {
    if (map != nullptr) munmap(map, shm::kLinkSize);
    map = nullptr;
  }
};

// A client socket connected to the server's listening path, or -1.
inline int connect_client(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  FUZZ_CHECK(fd >= 0, "socket: %s", std::strerror(errno));
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path, path.data(), path.size());
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The fds the driver could leak: sockets and memfds (libFuzzer itself opens
// pipes and /dev/null, for its symbolizer, at moments of its choosing). With
// print, what each one is, for the report of a leak.
inline int count_fds(bool print = false) {
  DIR* d = opendir("/proc/self/fd");
  FUZZ_CHECK(d != nullptr, "opendir /proc/self/fd");
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[256] = {};
    std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(link.c_str(), target, sizeof target - 1) < 0) continue;
    if (std::strncmp(target, "socket:", 7) != 0 && std::strncmp(target, "/memfd:", 7) != 0) continue;
    ++n;
    if (print) std::fprintf(stderr, "  fd %s -> %s\n", e->d_name, target);
  }
  closedir(d);
  return n;
}

// An area header and endpoint words as the driver's own client writes them
// (pmd/shm/shm_layout.h), into a mapping of area_size(slots) bytes.
inline void init_area(uint8_t* area, uint32_t slots) {
  std::memset(area, 0, shm::area_size(slots));
  auto* h = reinterpret_cast<shm::ShmAreaHeader*>(area);
  h->magic = shm::kAreaMagic;
  h->version = shm::kLayoutVersion;
  h->header_size = sizeof(shm::ShmAreaHeader);
  h->ring_slots = slots;
  h->slot_size = sizeof(shm::ShmDesc);
  h->area_size = shm::area_size(slots);
  auto* eps = reinterpret_cast<shm::ShmEndpoint*>(area + shm::kEndpointOffset);
  eps[0].state.store(shm::kEpActive, std::memory_order_release);
}

inline shm::ShmMsg hello_msg(uint32_t slots) {
  shm::ShmMsg m;
  std::memset(&m, 0, sizeof m);
  m.magic = shm::kAreaMagic;
  m.version = shm::kLayoutVersion;
  m.type = shm::kMsgHello;
  m.qp_num = 1;
  m.ring_slots = slots;
  m.area_size = shm::area_size(slots);
  return m;
}

// The server side: one listening shm device, a PD, a registered arena and the
// CQs every QP of the run uses.
struct Server {
  std::string path;
  std::unique_ptr<rdma::Device> dev;
  std::unique_ptr<mem::Arena> arena;
  std::unique_ptr<rdma::Pd> pd;
  std::unique_ptr<rdma::Mr> mr;
  std::unique_ptr<rdma::Cq> scq, rcq;
  int baseline_fds = -1;

  explicit Server(const char* name) {
    // The driver logs every refused hello and QP error at info/warn: at
    // thousands of inputs a second that is all the fuzzer would print.
    set_log_level(LogLevel::kError);
    path = std::string("/tmp/tern-fuzz-") + name + "-" + std::to_string(getpid()) + ".sock";
    dev = take(rdma::open_device("shm:path=" + path));
    FUZZ_CHECK(dev->listen().is_ok(), "listen on %s", path.c_str());
    arena = take(mem::Arena::create({.size = 1u << 20, .huge = mem::HugePages::kNever, .name = "tern-fuzz"}));
    pd = take(dev->alloc_pd());
    mr = take(pd->reg_mr(arena->base(), arena->size(),
                         rdma::kAccessLocalWrite | rdma::kAccessRemoteWrite | rdma::kAccessRemoteRead));
    scq = take(dev->create_cq(1024));
    rcq = take(dev->create_cq(1024));
    std::atexit([] { unlink_path(nullptr); });
    unlink_path(&path);
    baseline_fds = count_fds();
  }
  uint8_t* base() const { return static_cast<uint8_t*>(arena->base()); }

  // Every completion the CQs hold, checked for what any driver must uphold.
  void drain_cqs(uint32_t qpn) {
    rdma::Wc wc[64];
    for (rdma::Cq* cq : {scq.get(), rcq.get()}) {
      int n;
      while ((n = cq->poll(wc, 64)) > 0) {
        for (int i = 0; i < n; ++i) {
          if (verbose())
            std::fprintf(stderr, "wc qp %u wr_id %llu %s %s len %u\n", wc[i].qp_num,
                         static_cast<unsigned long long>(wc[i].wr_id), rdma::wc_opcode_name(wc[i].opcode),
                         rdma::wc_status_name(wc[i].status), wc[i].byte_len);
          FUZZ_CHECK(wc[i].status <= rdma::WcStatus::kGeneralErr, "completion status %u",
                     static_cast<unsigned>(wc[i].status));
          FUZZ_CHECK(qpn == 0 || wc[i].qp_num == qpn, "completion for QP %u, only %u exists", wc[i].qp_num, qpn);
        }
      }
    }
  }

  // TERN_FUZZ_VERBOSE=1: print every completion (to follow one input).
  static bool verbose() {
    static const bool v = std::getenv("TERN_FUZZ_VERBOSE") != nullptr;
    return v;
  }

  // After an input's teardown, as many fds are open as before the first.
  void check_fds() {
    int n = count_fds();
    if (n > baseline_fds) count_fds(true);
    FUZZ_CHECK(n <= baseline_fds, "%d fds open, %d before the first input: the driver leaks descriptors", n,
               baseline_fds);
  }

 private:
  template <typename T>
  static T take(Result<T> r) {
    FUZZ_CHECK(r.is_ok(), "setup: %s", r.status().message().c_str());
    return std::move(r).value();
  }
  // The socket file outlives a crash otherwise; remembered for atexit.
  static void unlink_path(const std::string* p) {
    static std::string remembered;
    if (p != nullptr) remembered = *p;
    else if (!remembered.empty()) unlink(remembered.c_str());
  }
};

}  // namespace tern::fuzz
