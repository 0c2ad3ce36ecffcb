#include "nfs/nlm4.h"

namespace tern::nfs::nlm4 {

using xdr::XdrReader;
using xdr::XdrWriter;

const char* proc_name(uint32_t proc) {
  switch (static_cast<Proc>(proc)) {
    case Proc::kNull: return "NULL";
    case Proc::kTest: return "TEST";
    case Proc::kLock: return "LOCK";
    case Proc::kCancel: return "CANCEL";
    case Proc::kUnlock: return "UNLOCK";
    case Proc::kGranted: return "GRANTED";
    case Proc::kTestMsg: return "TEST_MSG";
    case Proc::kLockMsg: return "LOCK_MSG";
    case Proc::kCancelMsg: return "CANCEL_MSG";
    case Proc::kUnlockMsg: return "UNLOCK_MSG";
    case Proc::kGrantedMsg: return "GRANTED_MSG";
    case Proc::kTestRes: return "TEST_RES";
    case Proc::kLockRes: return "LOCK_RES";
    case Proc::kCancelRes: return "CANCEL_RES";
    case Proc::kUnlockRes: return "UNLOCK_RES";
    case Proc::kGrantedRes: return "GRANTED_RES";
    case Proc::kNsmNotify: return "NSM_NOTIFY";
    case Proc::kShare: return "SHARE";
    case Proc::kUnshare: return "UNSHARE";
    case Proc::kNmLock: return "NM_LOCK";
    case Proc::kFreeAll: return "FREE_ALL";
  }
  return "unknown";
}

const char* stat_name(Stat s) {
  switch (s) {
    case Stat::kGranted: return "NLM4_GRANTED";
    case Stat::kDenied: return "NLM4_DENIED";
    case Stat::kDeniedNolocks: return "NLM4_DENIED_NOLOCKS";
    case Stat::kBlocked: return "NLM4_BLOCKED";
    case Stat::kDeniedGracePeriod: return "NLM4_DENIED_GRACE_PERIOD";
    case Stat::kDeadlck: return "NLM4_DEADLCK";
    case Stat::kRofs: return "NLM4_ROFS";
    case Stat::kStaleFh: return "NLM4_STALE_FH";
    case Stat::kFbig: return "NLM4_FBIG";
    case Stat::kFailed: return "NLM4_FAILED";
  }
  return "unknown nlm4_stats";
}

namespace {

void get_lock(XdrReader& r, Lock* l) {
  l->caller_name = r.get_string(kMaxCallerName);
  l->fh = r.get_opaque_var(kMaxFh);
  l->oh = r.get_opaque_var(kMaxNetobj);
  l->svid = r.get_i32();
  l->offset = r.get_u64();
  l->len = r.get_u64();
}

void put_lock(XdrWriter& w, const Lock& l) {
  w.put_string(l.caller_name);
  w.put_opaque_var(l.fh);
  w.put_opaque_var(l.oh);
  w.put_i32(l.svid);
  w.put_u64(l.offset);
  w.put_u64(l.len);
}

// A status outside nlm4_stats fails the stream: nobody can act on it.
Stat get_stat(XdrReader& r) {
  uint32_t s = r.get_u32();
  if (s > static_cast<uint32_t>(Stat::kFailed)) r.fail();
  return static_cast<Stat>(s);
}

// Bytes after the arguments are ignored, as other lock managers ignore them
// (a stricter server would only break a client that pads).
bool done(const XdrReader& r) { return r.ok(); }

}  // namespace

bool decode(std::span<const uint8_t> in, TestArgs* a) {
  XdrReader r(in);
  a->cookie = r.get_opaque_var(kMaxNetobj);
  a->exclusive = r.get_bool();
  get_lock(r, &a->lock);
  return done(r);
}

bool decode(std::span<const uint8_t> in, LockArgs* a) {
  XdrReader r(in);
  a->cookie = r.get_opaque_var(kMaxNetobj);
  a->block = r.get_bool();
  a->exclusive = r.get_bool();
  get_lock(r, &a->lock);
  a->reclaim = r.get_bool();
  a->state = r.get_i32();
  return done(r);
}

bool decode(std::span<const uint8_t> in, CancArgs* a) {
  XdrReader r(in);
  a->cookie = r.get_opaque_var(kMaxNetobj);
  a->block = r.get_bool();
  a->exclusive = r.get_bool();
  get_lock(r, &a->lock);
  return done(r);
}

bool decode(std::span<const uint8_t> in, UnlockArgs* a) {
  XdrReader r(in);
  a->cookie = r.get_opaque_var(kMaxNetobj);
  get_lock(r, &a->lock);
  return done(r);
}

bool decode(std::span<const uint8_t> in, ShareArgs* a) {
  XdrReader r(in);
  a->cookie = r.get_opaque_var(kMaxNetobj);
  a->caller_name = r.get_string(kMaxCallerName);
  a->fh = r.get_opaque_var(kMaxFh);
  a->oh = r.get_opaque_var(kMaxNetobj);
  a->mode = r.get_u32();
  a->access = r.get_u32();
  a->reclaim = r.get_bool();
  return done(r);
}

bool decode(std::span<const uint8_t> in, Notify* a) {
  XdrReader r(in);
  a->name = r.get_string(kMaxNotifyName);
  a->state = r.get_i32();
  return done(r);
}

bool decode(std::span<const uint8_t> in, Res* res) {
  XdrReader r(in);
  res->cookie = r.get_opaque_var(kMaxNetobj);
  res->stat = get_stat(r);
  return done(r);
}

bool decode(std::span<const uint8_t> in, TestRes* res) {
  XdrReader r(in);
  res->cookie = r.get_opaque_var(kMaxNetobj);
  res->stat = get_stat(r);
  if (res->stat == Stat::kDenied) {
    res->holder.exclusive = r.get_bool();
    res->holder.svid = r.get_i32();
    res->holder.oh = r.get_opaque_var(kMaxNetobj);
    res->holder.offset = r.get_u64();
    res->holder.len = r.get_u64();
  }
  return done(r);
}

void encode(XdrWriter& w, const TestArgs& a) {
  w.put_opaque_var(a.cookie);
  w.put_bool(a.exclusive);
  put_lock(w, a.lock);
}

void encode(XdrWriter& w, const LockArgs& a) {
  w.put_opaque_var(a.cookie);
  w.put_bool(a.block);
  w.put_bool(a.exclusive);
  put_lock(w, a.lock);
  w.put_bool(a.reclaim);
  w.put_i32(a.state);
}

void encode(XdrWriter& w, const CancArgs& a) {
  w.put_opaque_var(a.cookie);
  w.put_bool(a.block);
  w.put_bool(a.exclusive);
  put_lock(w, a.lock);
}

void encode(XdrWriter& w, const UnlockArgs& a) {
  w.put_opaque_var(a.cookie);
  put_lock(w, a.lock);
}

void encode(XdrWriter& w, const Notify& a) {
  w.put_string(a.name);
  w.put_i32(a.state);
}

void encode(XdrWriter& w, const Res& r) {
  w.put_opaque_var(r.cookie);
  w.put_u32(static_cast<uint32_t>(r.stat));
}

void encode(XdrWriter& w, const TestRes& r) {
  w.put_opaque_var(r.cookie);
  w.put_u32(static_cast<uint32_t>(r.stat));
  if (r.stat != Stat::kDenied) return;
  w.put_bool(r.holder.exclusive);
  w.put_i32(r.holder.svid);
  w.put_opaque_var(r.holder.oh);
  w.put_u64(r.holder.offset);
  w.put_u64(r.holder.len);
}

void encode(XdrWriter& w, const ShareRes& r) {
  w.put_opaque_var(r.cookie);
  w.put_u32(static_cast<uint32_t>(r.stat));
  w.put_i32(r.sequence);
}

}  // namespace tern::nfs::nlm4
