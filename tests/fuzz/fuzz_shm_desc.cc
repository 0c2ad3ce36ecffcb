// pmd/shm's datapath against a hostile peer: for each input the harness
// plays the client of a fresh connection by hand (its own connection-area
// memfd, laid out per pmd/shm/shm_layout.h, sent with its own hello), the
// server accepts with the real driver, and then the input writes what a peer
// can write in shared memory (descriptors and the seq words that publish
// them, the consumer index and READ grants of the server's ring, the peer's
// endpoint state words) and what it can send on the socket (segments with
// memfds, raw control messages), while the server posts work and is driven
// through its CQs. Nothing may crash, completions must be sane, and no fd
// may outlive the connection.
//
// The input is a sequence of records, each one opcode byte (% kNumOps) and
// its operands (see each case); make_seeds.cc writes seeds in this form.
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

constexpr uint32_t kSlots = 16;                       // smallest ring the driver accepts
constexpr uint32_t kSlotShift = 4;
static_assert(kSlots == 1u << kSlotShift);
constexpr size_t kRecvSize = 512;                     // per receive SGE
constexpr size_t kRecvOffset = 0;                     // receives live in arena[0, 64 KiB)
constexpr size_t kSendOffset = 64 << 10;              // the server's send sources
constexpr size_t kFastOffset = 128 << 10;             // what the fast MR maps
constexpr size_t kFastLen = 16 << 10;
constexpr uint32_t kMaxSegBytes = 64 << 10;           // memfds the harness passes

enum Op : uint8_t {
  kDesc,        // write one descriptor at the next slot of the client's ring
  kPublish,     // store seq words: publish the descriptors written, or any value in any slot
  kAck,         // consume the server's descriptors: cons and READ grants
  kState,       // the client's endpoint words
  kSegment,     // a segment message with a memfd
  kServerPost,  // the server posts a send-queue WR
  kServerRecv,  // the server posts a receive
  kPoll,        // drive the server: its CQs and poll_cm
  kCtl,         // a raw control message from the client
  kNumOps,
};

fuzz::Server& server() {
  static fuzz::Server* s = new fuzz::Server("desc");
  return *s;
}

struct Conn {
  int sock = -1;
  int area_fd = -1;
  uint8_t* area = nullptr;
  std::unique_ptr<Qp> qp;
  std::unique_ptr<FastMr> fmr;
  fuzz::PeerLink link;     // our bit: set after what the server must act on
  uint32_t prod = 0;       // the client's next descriptor index
  uint32_t published = 0;  // below: seq words stored (kPublish)
  uint32_t recv_id = 0;

  ShmEndpoint* ep(int i) { return reinterpret_cast<ShmEndpoint*>(area + kEndpointOffset) + i; }
  ShmRing* ring(int i) { return reinterpret_cast<ShmRing*>(area + kRingOffset) + i; }
  ShmDesc* slots(int i) { return reinterpret_cast<ShmDesc*>(area + kSlotsOffset) + static_cast<size_t>(i) * kSlots; }
};

// Rounds of poll_cm (control messages: segments, bye) and CQ polls
// (progress: executing descriptors). With cq_first the CQs go first, as in an
// application that polls them far more often than poll_cm: then queued
// control messages are read from inside descriptor execution.
void poll_server(Conn& c, int rounds, bool cq_first) {
  fuzz::Server& s = server();
  for (int i = 0; i < rounds; ++i) {
    if (cq_first) s.drain_cqs(c.qp->qp_num());
    CmEvent ev;
    while (s.dev->poll_cm(&ev)) {
      FUZZ_CHECK(ev.type == CmEventType::kDisconnected && ev.qp == c.qp.get(), "unexpected %s event",
                 cm_event_name(ev.type));
    }
    s.drain_cqs(c.qp->qp_num());
    fuzz::drain_socket(c.sock);
  }
}

void post_recv(Conn& c, Input& in) {
  fuzz::Server& s = server();
  uint8_t b = in.u8();
  uint32_t nsge = 1 + (b & 1);
  Sge sge[2];
  for (uint32_t k = 0; k < nsge; ++k) {
    uint64_t slot = (c.recv_id * 2 + k) % ((kSendOffset - kRecvOffset) / kRecvSize);
    sge[k] = Sge{reinterpret_cast<uint64_t>(s.base() + kRecvOffset + slot * kRecvSize),
                 static_cast<uint32_t>((b >> 1) & 7) * 64 + 64, s.mr->lkey()};
  }
  // A receive with a bad lkey completes in error when a message lands in it.
  if (b & 0x80) sge[0].lkey ^= 0x100;
  RecvWr r{c.recv_id++, sge, nsge};
  int err;
  (void)c.qp->post_recv(&r, 1, &err);
}

// Fresh connection: false when the driver refused it (which it must not, for
// this well-formed hello).
bool connect(Conn& c, Input& in) {
  fuzz::Server& s = server();
  c.sock = fuzz::connect_client(s.path);
  FUZZ_CHECK(c.sock >= 0, "cannot connect to %s", s.path.c_str());
  size_t len = area_size(kSlots);
  c.area_fd = fuzz::make_memfd(len, fuzz::kGoodSeals, 0);
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, c.area_fd, 0);
  FUZZ_CHECK(p != MAP_FAILED, "mmap area");
  c.area = static_cast<uint8_t*>(p);
  fuzz::init_area(c.area, kSlots);
  ShmMsg m = fuzz::hello_msg(kSlots);
  fuzz::send_raw(c.sock, &m, sizeof m, &c.area_fd, 1);

  ConnRequest* req = nullptr;
  for (int i = 0; i < 100 && req == nullptr; ++i) {
    CmEvent ev;
    while (req == nullptr && s.dev->poll_cm(&ev))
      if (ev.type == CmEventType::kConnectRequest) req = ev.request;
  }
  FUZZ_CHECK(req != nullptr, "no connect request for a valid hello");
  QpInit qi;
  qi.pd = s.pd.get(), qi.send_cq = s.scq.get(), qi.recv_cq = s.rcq.get();
  qi.sq_depth = 32, qi.rq_depth = 32, qi.max_send_sge = 4, qi.max_recv_sge = 2;
  c.qp = std::move(s.dev->create_qp(qi)).value();
  // Receives before accept, as the engine posts them; the first input byte
  // says how many.
  uint8_t nrecv = in.u8() & 15;
  for (uint8_t i = 0; i < nrecv; ++i) post_recv(c, in);
  FUZZ_CHECK(s.dev->accept(req, c.qp.get(), {}).is_ok(), "accept of a valid hello failed");
  CmEvent ev;
  FUZZ_CHECK(s.dev->poll_cm(&ev) && ev.type == CmEventType::kEstablished, "no established event");
  FUZZ_CHECK(c.link.take_accept(c.sock), "the ACCEPT carried no link");

  // A fast MR registered over part of the arena, as the engine's FRWR does.
  c.fmr = std::move(s.pd->alloc_fast_mr(8)).value();
  SendWr w;
  w.opcode = WrOpcode::kRegMr;
  w.reg.mr = c.fmr.get();
  w.reg.addr = reinterpret_cast<uint64_t>(s.base() + kFastOffset);
  w.reg.length = kFastLen;
  w.reg.lkey = s.mr->lkey();
  w.reg.access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
  w.reg.rkey = c.fmr->bump_rkey();
  int err;
  FUZZ_CHECK(c.qp->post_send(&w, 1, &err) == 1, "REG_MR post failed: %d", err);
  return true;
}

void teardown(Conn& c) {
  fuzz::Server& s = server();
  c.qp.reset();
  c.fmr.reset();
  s.drain_cqs(0);
  CmEvent ev;
  while (s.dev->poll_cm(&ev)) {
  }
  fuzz::drain_socket(c.sock);
  close(c.sock);
  munmap(c.area, area_size(kSlots));
  close(c.area_fd);
  c.link.unmap();
  s.check_fds();
}

uint32_t pick_key(Conn& c, uint8_t sel, Input& in) {
  switch (sel & 3) {
    case 0: return server().mr->rkey();
    case 1: return c.fmr->rkey();
    case 2: return c.fmr->rkey() ^ 1;  // a stale key byte
    default: return in.u32();
  }
}

uint64_t pick_addr(uint8_t sel, Input& in) {
  switch (sel & 3) {
    case 0: return reinterpret_cast<uint64_t>(server().base()) + in.u16();
    case 1: return reinterpret_cast<uint64_t>(server().base() + kFastOffset) + in.u16();
    case 2: return reinterpret_cast<uint64_t>(server().base()) + server().arena->size() - in.u16();
    default: return in.u64();
  }
}

// kDesc operands: flags, op, num_sge, key, addr, then per SGE seg (u8),
// length (u16), offset (u16); raw forms (flags) take u32/u32/u64 instead.
void write_desc(Conn& c, Input& in) {
  uint8_t f = in.u8();
  ShmDesc d;
  std::memset(&d, 0, sizeof d);
  d.op = in.u8();
  if (!(f & 0x01)) d.op = static_cast<uint8_t>(d.op % 5);  // 0 and 1..4: mostly known ops
  d.num_sge = in.u8();
  if (!(f & 0x02)) d.num_sge = static_cast<uint8_t>(d.num_sge % 5);
  d.key = pick_key(c, f >> 2, in);
  d.raddr = pick_addr(f >> 4, in);
  uint64_t sum = 0;
  bool raw_sge = f & 0x40;
  for (uint32_t k = 0; k < d.num_sge && k < kMaxSge; ++k) {
    ShmSge& s = d.sge[k];
    s.seg = raw_sge ? in.u32() : in.u8() % 8;
    s.length = raw_sge ? in.u32() : in.u16();
    s.offset = raw_sge ? in.u64() : in.u16();
    sum += s.length;
  }
  // Honest fields unless the input says otherwise: the length its SGEs add
  // up to (READ: the length asked for); an inline flag, with the message
  // (whatever the slot holds) as long as the input says.
  d.length = static_cast<uint32_t>(sum);
  if (d.op == kOpRead) d.length = in.u16();
  if (f & 0x80) {
    d.flags = in.u16();
    d.length = in.u32();
  }
  // The seq word stays as the slot had it: kPublish stores it.
  ShmDesc& slot = c.slots(0)[c.prod % kSlots];
  d.seq = slot.seq;
  std::memcpy(&slot, &d, sizeof d);
  ++c.prod;
}

void ack(Conn& c, Input& in) {
  uint8_t f = in.u8();
  ShmRing* r = c.ring(1);
  uint32_t cons = r->cons.load(std::memory_order_relaxed);
  // What the server published: the slots from cons on whose seq words say so.
  uint32_t sprod = cons;
  while (sprod - cons < kSlots &&
         std::atomic_ref<uint32_t>(c.slots(1)[sprod % kSlots].seq).load(std::memory_order_acquire) ==
             slot_seq(sprod, kSlotShift))
    ++sprod;
  uint32_t to;
  if (f & 0x80) {
    to = in.u32();  // anything at all
  } else {
    uint32_t k = f & 15;
    to = sprod - cons < k ? sprod : cons + k;
  }
  // READ grants: where in the client's segments the bytes the server reads lie.
  for (uint32_t i = cons; i != to && i - cons < kSlots; ++i) {
    ShmDesc& d = c.slots(1)[i % kSlots];
    if (d.op == kOpRead || (f & 0x40)) {
      d.read_seg = (f & 0x20) ? in.u32() : in.u8() % 8;
      d.read_offset = (f & 0x20) ? in.u64() : in.u16();
    }
  }
  r->cons.store(to, std::memory_order_release);
  c.link.notify();
}

void state(Conn& c, Input& in) {
  uint8_t f = in.u8();
  ShmEndpoint* e = c.ep(0);
  e->err_index = (f & 0x10) ? in.u32() : c.ring(1)->cons.load(std::memory_order_relaxed) + (f >> 5);
  e->err_status = in.u8();
  e->err_valid = f & 0x08 ? 1 : in.u8();
  e->state.store((f & 0x04) ? in.u32() : f & 3, std::memory_order_release);
  c.link.notify();
}

// kSegment operands: flags, index, size, then raw fields if asked. The
// memfd is sealed and as long as the message says unless flags say otherwise
// (and the receiver may then refuse it and drop the connection).
void segment(Conn& c, Input& in) {
  uint8_t f = in.u8();
  ShmMsg m;
  std::memset(&m, 0, sizeof m);
  m.magic = kAreaMagic;
  m.version = kLayoutVersion;
  m.type = kMsgSegment;
  m.seg_index = (f & 0x01) ? in.u32() : in.u8() % 8;
  uint32_t size = (static_cast<uint32_t>(in.u16()) + 1) % kMaxSegBytes + 1;
  m.seg_length = size;
  if (f & 0x02) m.seg_length = in.u64();  // a length the memfd may not have
  unsigned seals = (f & 0x04) ? (in.u8() & fuzz::kGoodSeals) : fuzz::kGoodSeals;
  uint8_t fill = in.u8();
  int fd = fuzz::make_memfd(size, seals, fill);
  int fds[2] = {fd, fd};
  fuzz::send_raw(c.sock, &m, sizeof m, (f & 0x08) ? nullptr : fds, (f & 0x08) ? 0 : (f & 0x10) ? 2 : 1);
  close(fd);
}

void ctl(Conn& c, Input& in) {
  uint8_t f = in.u8();
  ShmMsg m;
  in.bytes(&m, sizeof m);
  if (!(f & 1)) {
    m.magic = kAreaMagic;
    m.version = kLayoutVersion;
    m.type = static_cast<uint16_t>(m.type % 6);
  }
  size_t len = (f & 2) ? in.u8() : sizeof m;
  if (len > sizeof m) len = sizeof m;
  int fd = (f & 4) ? fuzz::make_memfd(4096, fuzz::kGoodSeals, 0) : -1;
  fuzz::send_raw(c.sock, &m, len, &fd, fd >= 0 ? 1 : 0);
  if (fd >= 0) close(fd);
}

void server_post(Conn& c, Input& in) {
  fuzz::Server& s = server();
  uint8_t f = in.u8();
  SendWr w;
  Sge sge{reinterpret_cast<uint64_t>(s.base() + kSendOffset + (in.u8() & 63) * 64),
          static_cast<uint32_t>(in.u16() % 8192), s.mr->lkey()};
  w.wr_id = f;
  w.flags = (f & 0x80) ? 0 : kWrSignaled;
  w.sg_list = &sge;
  w.num_sge = 1;
  switch (f % 6) {
    case 0: w.opcode = WrOpcode::kSend; break;
    case 1:
      w.opcode = WrOpcode::kSendWithInv;
      w.invalidate_rkey = in.u32();
      break;
    case 2:
      w.opcode = WrOpcode::kRdmaWrite;
      w.rkey = in.u32();
      w.remote_addr = in.u64();
      break;
    case 3:
      w.opcode = WrOpcode::kRdmaRead;
      w.rkey = in.u32();
      w.remote_addr = in.u64();
      break;
    case 4:
      w.opcode = WrOpcode::kLocalInv;
      w.num_sge = 0;
      w.invalidate_rkey = c.fmr->rkey();
      break;
    default:
      w.opcode = WrOpcode::kRegMr;
      w.num_sge = 0;
      w.reg.mr = c.fmr.get();
      w.reg.addr = reinterpret_cast<uint64_t>(s.base() + kFastOffset);
      w.reg.length = kFastLen;
      w.reg.lkey = s.mr->lkey();
      w.reg.access = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;
      w.reg.rkey = c.fmr->bump_rkey();
      break;
  }
  int err;
  (void)c.qp->post_send(&w, 1, &err);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Input in(data, size);
  Conn c;
  if (!connect(c, in)) return 0;
  while (!in.empty()) {
    switch (in.u8() % kNumOps) {
      case kDesc: write_desc(c, in); break;
      case kPublish:
        if (in.u8() & 1) {
          // Any value in any slot: stale, future, or the right one early.
          uint32_t i = in.u8();
          std::atomic_ref<uint32_t>(c.slots(0)[i % kSlots].seq).store(in.u32(), std::memory_order_release);
        } else {
          for (; c.published != c.prod; ++c.published)
            std::atomic_ref<uint32_t>(c.slots(0)[c.published % kSlots].seq)
                .store(slot_seq(c.published, kSlotShift), std::memory_order_release);
        }
        c.link.notify();
        break;
      case kAck: ack(c, in); break;
      case kState: state(c, in); break;
      case kSegment: segment(c, in); break;
      case kServerPost: server_post(c, in); break;
      case kServerRecv: post_recv(c, in); break;
      case kPoll: {
        uint8_t f = in.u8();
        if (f & 8) c.link.scribble(in);  // a hostile peer's bits: its own loss
        poll_server(c, 1 + (f & 3), (f & 4) != 0);
        break;
      }
      case kCtl: ctl(c, in); break;
      default: break;
    }
  }
  poll_server(c, 2, false);
  teardown(c);
  return 0;
}
