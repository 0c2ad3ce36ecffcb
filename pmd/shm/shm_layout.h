// pmd/shm's shared-memory layout: the only structures two processes share.
// Everything here holds offsets and indices, never pointers, and every field a
// peer writes is validated by the reader before use (a peer may be buggy, dead
// or hostile; it must never crash or corrupt us).
//
// One connection = one "connection area" memfd, created by the connecting side
// and mapped by both:
//
//   +-------------------+ 0
//   | ShmAreaHeader     |  written once by the creator, validated by the acceptor
//   +-------------------+ kEndpointOffset
//   | ShmEndpoint[2]    |  [0] written only by the client side, [1] by the server
//   +-------------------+ kRingOffset
//   | ShmRing[2]        |  ring d carries descriptors from side d to side 1-d
//   +-------------------+ kSlotsOffset
//   | slots of ring 0   |  ring_slots x ShmDesc
//   | slots of ring 1   |
//   +-------------------+ area size
//
// A slot is published by its producer writing the descriptor and then, last,
// with a release store, the slot's sequence word (ShmDesc::seq): the consumer
// polls the word of the slot at its consumer index, and nothing else, for
// news. There is no producer index: one cache line moves per small message
// (the descriptor, with the message inline in it) instead of three (an index,
// then the descriptor it publishes, then the payload the descriptor names).
// The consumer index is written only by the consumer, and it is also the
// acknowledgement: the consumer advances it after it has *executed* the
// descriptor (data copied, rkeys checked), so RC's in-order completion is just
// "every descriptor below cons has completed". Messages up to kMaxInline bytes
// travel inside their descriptor; bulk data never goes through the ring:
// larger descriptors name (segment, offset, length) inside memfds each side
// passed to the other.
//
// Each process writes only its own memory; it maps the peer's segments
// read-only. SEND and RDMA_WRITE are executed by the receiver/owner copying out
// of the initiator's memory (or out of the descriptor, when inline); RDMA_READ
// by the owner granting a validated range that the initiator copies. So a QP in
// error can never have its memory written by a peer that has not noticed yet.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace tern::shm {

inline constexpr uint32_t kAreaMagic = 0x5445524e;  // "TERN"
// 2: the endpoint's wait word and the WAKE message (wait mode).
// 3: the endpoint's reads_fenced word.
// 4: sequence-numbered slots (no producer index), messages inline in the slot.
// 5: the link (ShmLink): activity words per peer, sent with the ACCEPT.
// 6: word 0 of a link half has no summary bit.
// 7: the endpoint's watching word (watched QPs).
// 8: a SEND carries its producer's consumer index of the other ring
//    (kDescAcked, ShmDesc::acked).
inline constexpr uint16_t kLayoutVersion = 8;
inline constexpr size_t kCacheLine = 64;

inline constexpr uint32_t kMaxSge = 13;        // SGEs per descriptor (fits a 256-byte slot)
inline constexpr uint32_t kMaxSegments = 4096; // segments one side may export per connection
inline constexpr uint32_t kMaxMessage = 1u << 30;  // bytes per SEND/READ/WRITE (1 GiB)

// Endpoint state, written by its owner side.
enum ShmEpState : uint32_t {
  kEpActive = 1,
  kEpClosed = 2,  // graceful disconnect
  kEpError = 3,   // the owner's QP went to error; see err_*
};

struct alignas(kCacheLine) ShmEndpoint {
  std::atomic<uint32_t> state;
  // When state == kEpError because the owner rejected the peer's descriptor:
  // its ring index and the WcStatus the peer's WR must complete with. Written
  // before `state` (release) and read after it (acquire).
  uint32_t err_valid;
  uint32_t err_index;
  uint32_t err_status;
  // Wait mode: odd while the owner is armed (about to sleep, or asleep) and
  // wants a WAKE message when the peer publishes a descriptor, advances the
  // owner's consumer index, or changes its state; even otherwise. Each arm
  // takes a new value (+2), and the peer sends at most one WAKE per value.
  // A hint only: a peer that ignores it merely leaves its own calls waiting,
  // and one that flips it costs us one WAKE message per change.
  std::atomic<uint32_t> wait_word;
  // Set (1) by the owner when its QP leaves RTS -- error, vanishing,
  // disconnect, destruction -- before it reads the peer's consumer index
  // to decide what it flushes, and never cleared: from then on the owner
  // may reuse the memory its unexecuted descriptors name (Send and WRITE
  // sources) and memory it granted to the peer's READs (a READ is granted
  // when the owner executes it, and copied when the peer retires it). The
  // peer checks it before executing a descriptor and after each copy: a
  // copy that could overlap the fence is not completed (a READ fails, a
  // Send or WRITE is left unexecuted) rather than carry newer bytes. On a
  // real device the data left with the old bytes; here copies are late.
  std::atomic<uint32_t> reads_fenced;
  // Non-zero while the owner watches the connection: its polls load the seq
  // word of the next slot of the peer's ring directly, so the peer need not
  // set the connection's bit in the link for a descriptor it publishes
  // (docs/shm-driver.md, "Watched QPs"). Written by the owner only when it
  // starts or stops watching, so the line stays shared in the peer's cache.
  // Dekker's pair keeps an unwatch from losing a message: the peer stores
  // the seq word, fences, then loads this word, and sets the bit unless it
  // is set; the owner stores 0, fences, then loads the seq word once more.
  // A hint the other way: a peer that reads or writes it wrongly only
  // leaves its own descriptors unnoticed (until the safety net).
  std::atomic<uint32_t> watching;
};
static_assert(sizeof(ShmEndpoint) == kCacheLine);

// A ring's consumer index, alone in its cache line: the producer reads it to
// retire its WRs, so no other word may make that line move.
struct ShmRing {
  alignas(kCacheLine) std::atomic<uint32_t> cons;  // free-running; consumer-written (= executed)
};
static_assert(sizeof(ShmRing) == kCacheLine);
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be address-free");

enum ShmOp : uint8_t {
  kOpSend = 1,
  kOpSendInv = 2,
  kOpWrite = 3,
  kOpRead = 4,
  kOpMax = kOpRead,
};

enum ShmDescFlags : uint16_t {
  // Wait mode: the producer waits for this descriptor's execution (a
  // signaled WR, or its ring is filling up): once the consumer's index
  // passes it, wake the producer if it is armed. Executing the others
  // wakes nobody: an unsignaled Send's completion is nobody's business.
  kDescAckWanted = 1u << 0,
  // kOpSend / kOpSendInv: the message is in the descriptor itself, `length`
  // bytes at kInlineOffset (num_sge is 0). The producer never rewrites a
  // slot before the consumer index has passed it, so what the consumer copies
  // is what was published, whatever the producer does with its own memory.
  kDescInline = 1u << 1,
  // kOpSend / kOpSendInv: `acked` holds the producer's consumer index of
  // the opposite ring when it published this descriptor: the same word as
  // that ring's `cons`, carried on a line the peer reads anyway. The peer
  // retires its own WRs below it without loading `cons`, whose line then
  // stays in the writer's cache (docs/shm-driver.md, "Acks on the
  // message"). Peer input like `cons`: ahead of what the reader published
  // is a protocol error; behind what it already knows is stale and ignored.
  kDescAcked = 1u << 2,
};

// A (segment, offset, length) inside memory the *producer* exported.
struct ShmSge {
  uint32_t seg;
  uint32_t length;
  uint64_t offset;
};
static_assert(sizeof(ShmSge) == 16);

struct ShmDesc {
  // The publication word, stored last (release) by the producer and polled
  // (acquire) by the consumer: slot_seq() of the ring index the descriptor
  // sits at. Never 0, so a slot in a fresh (or punched, shm_idle.cc) page is
  // never taken for a descriptor; a slot from an earlier lap has the seq of
  // that lap. A value that is not the one expected is, to the consumer,
  // simply "not published yet".
  uint32_t seq;
  uint8_t op;          // ShmOp
  uint8_t num_sge;
  uint16_t flags;      // ShmDescFlags; a hint, never trusted
  uint32_t key;        // kOpWrite/kOpRead: the consumer's rkey; kOpSendInv: rkey to invalidate
  uint32_t length;     // sum of sge lengths (or the inline message's length)
  union {
    uint64_t raddr;    // kOpWrite/kOpRead: address in the consumer's MR
    uint32_t acked;    // kOpSend/kOpSendInv with kDescAcked: see there
  };
  // From here on, an inline descriptor (kDescInline) holds its message
  // instead (kInlineOffset, up to kMaxInline bytes).
  // kOpRead response, written by the consumer before it advances `cons`: where in
  // the consumer's exported segment the granted bytes lie. The initiator copies
  // them itself, so that no process ever writes another's memory.
  uint32_t read_seg;
  uint32_t reserved1;
  uint64_t read_offset;
  ShmSge sge[kMaxSge];
  uint64_t reserved2;
};
static_assert(sizeof(ShmDesc) == 256, "one descriptor per four cache lines");
static_assert(offsetof(ShmDesc, seq) == 0 && offsetof(ShmDesc, read_seg) == 24 && offsetof(ShmDesc, acked) == 16);

// Where an inline message starts in its descriptor, and how long it may be:
// a message of up to 40 bytes shares the cache line of the seq word, one of
// up to 104 bytes (a 32-byte RPC call with its headers) takes two lines.
inline constexpr size_t kInlineOffset = offsetof(ShmDesc, read_seg);
inline constexpr uint32_t kMaxInline = static_cast<uint32_t>(sizeof(ShmDesc) - kInlineOffset);
static_assert(kMaxInline == 232);

// The seq word of the descriptor at ring index `index` of a ring of
// 2^slot_shift slots: its lap, plus one (never 0, for any index).
inline constexpr uint32_t slot_seq(uint32_t index, uint32_t slot_shift) { return (index >> slot_shift) + 1; }
static_assert(slot_seq(0xffffffffu, 1) != 0 && slot_seq(0, 16) == 1 && slot_seq(65536, 16) == 2);

struct ShmAreaHeader {
  uint32_t magic;
  uint16_t version;
  uint16_t header_size;
  uint32_t ring_slots;  // power of two
  uint32_t slot_size;
  uint64_t area_size;
};

inline constexpr size_t kEndpointOffset = 256;
inline constexpr size_t kRingOffset = kEndpointOffset + 2 * sizeof(ShmEndpoint);
inline constexpr size_t kSlotsOffset = kRingOffset + 2 * sizeof(ShmRing);
static_assert(sizeof(ShmAreaHeader) <= kEndpointOffset);
static_assert(kSlotsOffset % kCacheLine == 0);

inline constexpr size_t area_size(uint32_t ring_slots) {
  return kSlotsOffset + 2 * static_cast<size_t>(ring_slots) * sizeof(ShmDesc);
}

// ---------------------------------------------------------------- the link

// Activity words: how a poller finds the connections with news without
// looking at every connection area (docs/shm-driver.md, "Progress"). The
// server makes one link per (client process, client device) and sends it,
// a sealed memfd, with every ACCEPT, naming the connection's slot in it; a
// link holds up to kLinkSlots connections. Half [0] is written by the client
// side (news for the server), half [1] by the server side (news for the
// client). After storing something the other side must act on -- a
// descriptor published, its consumer index advanced, its endpoint state
// changed -- a side sets the connection's bit in words[slot / 64], then,
// for a slot past the first 64, bit slot / 64 of summary (both release).
// Word 0 has no summary bit: it shares the summary's cache line, and the
// poller reads both, so the first 64 connections of a link (most links
// hold fewer) cost a message one locked RMW and one line on each side, not
// two. The poller exchanges word 0 and the summary with 0 when they are
// not, then each word the summary names, and visits the flagged
// connections: cleared before the visit, so news published after the
// exchange sets the bit again. Peer-written: a bit naming a slot with no connection of that peer
// is ignored, so a peer can only make us visit its own connections, and one
// that never sets a bit only stalls its own.
inline constexpr uint32_t kLinkWords = 64;
inline constexpr uint32_t kLinkSlots = kLinkWords * 64;

struct ShmLinkHalf {
  alignas(kCacheLine) std::atomic<uint64_t> summary;  // bit j >= 1: words[j] may be non-zero
  std::atomic<uint64_t> words[kLinkWords];            // bit b of word j: slot 64j+b has news
};
static_assert(offsetof(ShmLinkHalf, words) + sizeof(uint64_t) <= kCacheLine, "word 0 shares the summary's line");

struct ShmLink {
  ShmLinkHalf half[2];  // [0] written by the client side, [1] by the server side
};
inline constexpr size_t kLinkSize = 4096;  // one page
static_assert(sizeof(ShmLink) <= kLinkSize);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be address-free");

// ---------------------------------------------------------------- control messages
// Sent over the AF_UNIX SOCK_SEQPACKET socket (atomic messages, fds by SCM_RIGHTS).

enum ShmMsgType : uint16_t {
  kMsgHello = 1,   // client -> server: area memfd attached, private data;
                   // seg_length: the client device's token (links are per device)
  kMsgAccept = 2,  // server -> client: private data; the link memfd attached,
                   // seg_index: the connection's slot in it
  kMsgReject = 3,  // server -> client: private data
  kMsgSegment = 4, // either way: a memfd the sender's descriptors may name as `seg_index`
  kMsgBye = 5,     // either way: graceful disconnect
  kMsgWake = 6,    // either way: "something for you" -- sent only while the
                   // receiver's wait word is armed (wait mode); carries nothing
  kMsgMax = kMsgWake,
};

inline constexpr uint32_t kMaxPrivateData = 56;  // what rdma_cm allows on RC connect

struct ShmMsg {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t qp_num;
  uint32_t ring_slots;
  uint64_t area_size;
  uint32_t seg_index;
  uint32_t pdata_len;
  uint64_t seg_length;
  uint8_t pdata[kMaxPrivateData];
};
static_assert(sizeof(ShmMsg) == 96);

}  // namespace tern::shm
