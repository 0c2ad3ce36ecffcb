// pmd/shm segments across a connection: descriptors name memory as (segment,
// offset), never as pointers, so each side sends the other the memfd of a
// segment (a "segment" control message) before the first descriptor that
// names it, and maps each segment the peer sends once, read-only, for the
// life of the connection. The peer's memfd and length are peer input:
// checked (sealed, long enough) before mapping. The PD's own segments and
// MR table are shm_mem.cc's.
#include <sys/mman.h>

#include <cerrno>

#include "mem/memfd.h"
#include "shm/shm_internal.h"

namespace tern::shm {

bool ShmQp::export_segment(uint32_t seg) {
  if (seg < exported_.size() && exported_[seg]) return true;
  const mem::Segment& s = pd_->segment(seg);
  ShmMsg m = make_msg(kMsgSegment);
  m.qp_num = qpn_;
  m.seg_index = seg;
  m.seg_length = s.length;
  // Sent before the descriptor that names it is published: the peer finds the
  // message queued on the socket when it meets the unknown segment.
  if (send_msg(sock_, m, s.fd) != 0) return false;
  if (exported_.size() <= seg) exported_.resize(seg + 1, 0);
  exported_[seg] = 1;
  return true;
}

const ShmQp::PeerSeg* ShmQp::peer_segment(uint32_t seg, uint64_t off, uint64_t len) {
  if (seg >= kMaxSegments) return nullptr;
  if (seg >= peer_segs_.size() || peer_segs_[seg].base == nullptr) {
    drain_ctl();  // the segment's memfd is queued on the socket ahead of its first use
    if (seg >= peer_segs_.size() || peer_segs_[seg].base == nullptr) return nullptr;
  }
  const PeerSeg& ps = peer_segs_[seg];
  if (len > ps.length || off > ps.length - len) return nullptr;
  return &ps;
}

Status ShmQp::map_peer_segment(const ShmMsg& m, int fd) {
  if (fd < 0) return make_error(Errc::kRemoteError, "segment %u came without a memfd", m.seg_index);
  if (m.seg_index >= kMaxSegments)
    return make_error(Errc::kRemoteError, "segment index %u is over the limit of %u", m.seg_index, kMaxSegments);
  // Mapped once for the life of the connection: descriptors we validated
  // point into the mapping, so replacing it could leave them dangling.
  if (m.seg_index < peer_segs_.size() && peer_segs_[m.seg_index].base != nullptr)
    return make_error(Errc::kRemoteError, "segment %u sent again (each index is mapped once per connection)",
                      m.seg_index);
  if (m.seg_length == 0 || m.seg_length > (uint64_t{1} << 46))
    return make_error(Errc::kRemoteError, "segment %u has length %llu", m.seg_index,
                      static_cast<unsigned long long>(m.seg_length));
  // Sealed against shrinking and at least as long as announced: nothing the
  // peer does to the file later can make our mapping fault.
  if (Status st = mem::check_peer_memfd(fd, m.seg_length); !st.is_ok())
    return make_error(Errc::kRemoteError, "segment %u: %s", m.seg_index, st.message().c_str());
  void* p = mmap(nullptr, m.seg_length, PROT_READ, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return make_sys_error(Errc::kNoResources, errno, "mapping the peer's segment %u", m.seg_index);
  if (peer_segs_.size() <= m.seg_index) peer_segs_.resize(m.seg_index + 1);
  peer_segs_[m.seg_index] = PeerSeg{static_cast<const uint8_t*>(p), m.seg_length};
  return Status::ok();
}

}  // namespace tern::shm
