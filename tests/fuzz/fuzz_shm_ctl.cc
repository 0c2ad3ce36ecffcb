// pmd/shm's control path against hostile same-host clients: a real shm device
// listens, and the input plays up to four clients by hand over the AF_UNIX
// SOCK_SEQPACKET socket, sending fuzzer-chosen ShmMsg bytes with and without
// memfds (of chosen sizes and seals, several at once, or fds that are not
// memfds), closing sockets, while the server polls poll_cm and accepts or
// rejects what arrives. This reaches recv_msg/msg_valid (shm_ctl.cc), the
// hello checks (ShmDevice::read_hellos), accept's check of the area header
// (ShmQp::attach_area), and on established connections segment and bye
// handling (ShmQp::drain_ctl). Nothing may crash, and after each input, with
// every client gone and every QP destroyed, no fd may be left open.
//
// The input is a sequence of records, each one opcode byte (% kNumOps) and
// its operands.
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <vector>

#include "shm_peer.h"

namespace {

using namespace tern;
using namespace tern::rdma;
using namespace tern::shm;
using fuzz::Input;

constexpr int kMaxClients = 4;
constexpr uint32_t kSlots = 16;

enum Op : uint8_t {
  kConnect,  // a new client socket
  kMsg,      // one message: ShmMsg bytes (fixed up or raw), fds
  kPoll,     // the server polls poll_cm, accepting or rejecting requests
  kClose,    // a client closes its socket, or shuts down one direction
  kNumOps,
};

fuzz::Server& server() {
  static fuzz::Server* s = new fuzz::Server("ctl");
  return *s;
}

struct State {
  int clients[kMaxClients] = {-1, -1, -1, -1};
  std::vector<std::unique_ptr<Qp>> qps;
};

int client(State& st, uint8_t sel) {
  for (int i = 0; i < kMaxClients; ++i) {
    int fd = st.clients[(sel + i) % kMaxClients];
    if (fd >= 0) return fd;
  }
  return -1;
}

// The fds a message carries. Operand: mode (low 3 bits), and for memfds a
// size choice and whether the area header inside is a valid one.
int make_fds(Input& in, int* fds) {
  uint8_t f = in.u8();
  size_t good = area_size(kSlots);
  auto sized = [&](uint8_t s) -> size_t {
    switch (s & 3) {
      case 0: return good;
      case 1: return good - 1;
      case 2: return good + 4096;
      default: return in.u16();
    }
  };
  auto area = [&](unsigned seals) {
    size_t size = sized(f >> 3);
    int fd = fuzz::make_memfd(size, 0, 0);
    if (size >= good && !(f & 0x20)) {
      void* p = mmap(nullptr, good, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      FUZZ_CHECK(p != MAP_FAILED, "mmap");
      fuzz::init_area(static_cast<uint8_t*>(p), kSlots);
      // A header that is almost right: one field of the input's choice off.
      if (f & 0x40) static_cast<uint8_t*>(p)[in.u8() % (shm::kSlotsOffset)] ^= 1 + (in.u8() % 255);
      munmap(p, good);
    }
    if (seals != 0) fcntl(fd, F_ADD_SEALS, seals);
    return fd;
  };
  switch (f & 7) {
    case 0:
    case 1: return 0;
    case 2: fds[0] = area(fuzz::kGoodSeals); return 1;
    case 3: fds[0] = area(0); return 1;  // unsealed: a receiver may refuse it
    case 4:
      fds[0] = area(fuzz::kGoodSeals);
      fds[1] = area(fuzz::kGoodSeals);
      return 2;
    case 5: {
      int p[2];
      FUZZ_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe");
      fds[0] = p[0];
      fds[1] = p[1];
      return 2;  // not memfds at all
    }
    case 6: fds[0] = area(in.u8() & fuzz::kGoodSeals); return 1;
    default: fds[0] = fuzz::make_memfd(in.u16(), fuzz::kGoodSeals, in.u8()); return 1;
  }
}

void message(State& st, Input& in) {
  uint8_t f = in.u8();
  int sock = client(st, f >> 5);
  ShmMsg m;
  if (f & 0x01) {
    in.bytes(&m, sizeof m);  // anything at all
  } else {
    // A well-formed message of a chosen type; fields the input may override.
    m = fuzz::hello_msg(kSlots);
    m.type = static_cast<uint16_t>(1 + in.u8() % 5);
    if (f & 0x02) m.ring_slots = in.u32();
    if (f & 0x04) m.area_size = in.u64();
    m.seg_index = in.u8() % 8;
    m.seg_length = 4096;
    if (f & 0x08) m.seg_length = in.u64();
    m.pdata_len = in.u8() % 64;  // up to 63: over kMaxPrivateData sometimes
    for (uint32_t i = 0; i < m.pdata_len && i < kMaxPrivateData; ++i) m.pdata[i] = in.u8();
  }
  size_t len = (f & 0x10) ? in.u8() : sizeof m;
  uint8_t buf[256] = {};
  std::memcpy(buf, &m, sizeof m);
  int fds[2] = {-1, -1};
  int nfds = make_fds(in, fds);
  if (sock >= 0) fuzz::send_raw(sock, buf, len, fds, nfds);
  for (int i = 0; i < nfds; ++i) close(fds[i]);
}

void poll(State& st, Input& in) {
  fuzz::Server& s = server();
  uint8_t f = in.u8();
  for (int round = 0; round <= (f & 3); ++round) {
    CmEvent ev;
    while (s.dev->poll_cm(&ev)) {
      if (ev.type != CmEventType::kConnectRequest) continue;
      // Every request is answered: an unanswered one is the application's
      // fd to hold, not a leak.
      if (in.u8() & 1) {
        (void)s.dev->reject(ev.request, {});
        continue;
      }
      QpInit qi;
      qi.pd = s.pd.get(), qi.send_cq = s.scq.get(), qi.recv_cq = s.rcq.get();
      qi.sq_depth = 4, qi.rq_depth = 4, qi.max_send_sge = 1, qi.max_recv_sge = 1;
      auto qp = s.dev->create_qp(qi);
      FUZZ_CHECK(qp.is_ok(), "create_qp");
      if (!s.dev->accept(ev.request, qp->get(), {}).is_ok()) {
        // A refused area: the request is gone; so is this QP.
        continue;
      }
      st.qps.push_back(std::move(qp).value());
    }
    s.drain_cqs(0);
  }
  for (int fd : st.clients)
    if (fd >= 0) fuzz::drain_socket(fd);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::Server& s = server();
  Input in(data, size);
  State st;
  st.clients[0] = fuzz::connect_client(s.path);
  while (!in.empty()) {
    uint8_t op = in.u8();
    switch (op % kNumOps) {
      case kConnect:
        for (int& fd : st.clients)
          if (fd < 0) {
            fd = fuzz::connect_client(s.path);
            break;
          }
        break;
      case kMsg: message(st, in); break;
      case kPoll: poll(st, in); break;
      case kClose: {
        int& fd = st.clients[(op >> 2) % kMaxClients];
        if (fd < 0) break;
        if (op & 0x40) {
          shutdown(fd, (op & 0x80) ? SHUT_WR : SHUT_RD);
        } else {
          close(fd);
          fd = -1;
        }
        break;
      }
      default: break;
    }
  }
  // Teardown: the server sees every client go, then drops its QPs.
  for (int& fd : st.clients)
    if (fd >= 0) close(fd), fd = -1;
  Input none(nullptr, 0);
  poll(st, none);
  st.qps.clear();
  CmEvent ev;
  while (s.dev->poll_cm(&ev)) {
    if (ev.type == CmEventType::kConnectRequest) (void)s.dev->reject(ev.request, {});
  }
  s.drain_cqs(0);
  s.check_fds();
  return 0;
}
