#include "nfs/nsm.h"

#include <cstring>

namespace tern::nfs::nsm {

using xdr::XdrReader;
using xdr::XdrWriter;

void encode(XdrWriter& w, const MyId& id) {
  w.put_string(id.my_name);
  w.put_u32(id.my_prog);
  w.put_u32(id.my_vers);
  w.put_u32(id.my_proc);
}

void encode(XdrWriter& w, const Mon& m) {
  w.put_string(m.mon_name);
  encode(w, m.my_id);
  w.put_opaque_fixed(m.priv);
}

bool decode(std::span<const uint8_t> in, StatRes* r) {
  XdrReader x(in);
  r->res_stat = x.get_u32();
  r->state = x.get_i32();
  return x.ok();
}

bool decode(std::span<const uint8_t> in, Status* s) {
  XdrReader x(in);
  s->mon_name = x.get_string(kMaxName);
  s->state = x.get_i32();
  auto p = x.get_opaque_fixed(kPrivSize);
  if (!x.ok()) return false;
  std::memcpy(s->priv, p.data(), kPrivSize);
  return true;
}

void encode(XdrWriter& w, const Status& s) {
  w.put_string(s.mon_name);
  w.put_i32(s.state);
  w.put_opaque_fixed(s.priv);
}

void encode(XdrWriter& w, const StatChge& c) {
  w.put_string(c.mon_name);
  w.put_i32(c.state);
}

bool decode(std::span<const uint8_t> in, StatChge* c) {
  XdrReader x(in);
  c->mon_name = x.get_string(kMaxName);
  c->state = x.get_i32();
  return x.ok();
}

}  // namespace tern::nfs::nsm
