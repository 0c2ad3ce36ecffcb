#include "nfs/nfs_client.h"

#include <time.h>

#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "nfs/compound_args.h"
#include "nfs/nfs_program.h"

namespace tern::nfs {

using rpc::Call;
using rpc::CallReply;
using rpc::CallStatus;

// One call in flight: a synchronous caller's (results copied out, since the
// engine's view dies with the callback) or an asynchronous READ's.
struct NfsClient::Slot {
  NfsClient* cli = nullptr;
  bool done = false;
  CallStatus status = CallStatus::kOk;
  uint32_t bulk_recv_len = 0;
  std::vector<uint8_t> results;
  ReadCallback cb = nullptr;  // asynchronous READ
  void* cb_ctx = nullptr;
  uint64_t offset = 0;
  uint64_t start_ns = 0;
};

namespace {

// Argument buffers: the engine copies the arguments at call(), and every
// COMPOUND here fits the 4 KiB inline threshold the kernel offers.
constexpr size_t kArgsBuf = 4096;

void sleep_ms(uint32_t ms) {
  timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>(ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

// The status of one expected result, as a Status: a transport-level decode
// error as it is, a failed operation as its nfsstat4.
Status expect_ok(Result<Nfs4Stat> r, const char* what) {
  if (!r.is_ok()) return r.status();
  if (r.value() != Nfs4Stat::kOk) return nfs4_error(r.value(), what);
  return Status::ok();
}

Status decode_read(std::span<const uint8_t> results, uint32_t chunk_len, Read4Res* out) {
  auto res = CompoundRes::decode(results);
  TERN_TRY(res);
  TERN_TRY(expect_ok(res->putfh(), "PUTFH"));
  TERN_TRY(expect_ok(res->read(ReadData::chunk(chunk_len), out), "READ"));
  return res->finish();
}

}  // namespace

Result<std::unique_ptr<NfsClient>> NfsClient::connect(const NfsClientOptions& opt) {
  std::unique_ptr<NfsClient> c(new NfsClient(opt));
  auto eng = rpc::Engine::create(opt.engine);
  TERN_TRY(eng);
  c->eng_ = std::move(eng.value());
  auto conn = c->eng_->connect(opt.spec);
  TERN_TRY(conn);
  c->conn_ = conn.value();
  uint64_t deadline = monotonic_ns() + uint64_t{opt.timeout_ms} * 1000000u;
  while (!c->conn_->ready() && !c->conn_->failed()) {
    c->poll();
    if (monotonic_ns() > deadline)
      return make_error(Errc::kTimedOut, "connecting to %s: no answer within %u ms", opt.spec.c_str(), opt.timeout_ms);
  }
  if (c->conn_->failed())
    return make_error(c->conn_->error().code(), "connecting to %s: %s", opt.spec.c_str(),
                      c->conn_->error().message().c_str());
  c->auth_.machine = opt.machine;
  c->auth_.uid = opt.uid;
  c->auth_.gid = opt.gid;
  return c;
}

NfsClient::NfsClient(const NfsClientOptions& opt) : opt_(opt) {}

NfsClient::~NfsClient() {
  // The engine first: its teardown completes outstanding calls, whose
  // callbacks still find their slots.
  if (conn_ != nullptr) conn_->close();
  eng_.reset();
}

NfsClient::Slot* NfsClient::take_slot() {
  if (free_.empty()) {
    slots_.push_back(std::make_unique<Slot>());
    free_.push_back(slots_.back().get());
  }
  Slot* s = free_.back();
  free_.pop_back();
  *s = Slot{};
  s->cli = this;
  return s;
}

void NfsClient::put_slot(Slot* s) { free_.push_back(s); }

void NfsClient::on_done(void* ctx, const CallReply& r) {
  auto* s = static_cast<Slot*>(ctx);
  NfsClient* cli = s->cli;
  if (s->cb != nullptr) {
    ReadDone d;
    d.offset = s->offset;
    d.latency_ns = monotonic_ns() - s->start_ns;
    if (r.status != CallStatus::kOk) {
      d.status = make_error(r.status == CallStatus::kDisconnected ? Errc::kDisconnected : Errc::kRemoteError,
                            "READ at %llu: %s", static_cast<unsigned long long>(s->offset),
                            rpc::call_status_name(r.status));
    } else {
      Read4Res rr;
      d.status = decode_read(r.results, r.bulk_recv_len, &rr);
      d.count = rr.count;
      d.eof = rr.eof;
    }
    ReadCallback cb = s->cb;
    void* cb_ctx = s->cb_ctx;
    cli->put_slot(s);
    cb(cb_ctx, d);
    return;
  }
  s->done = true;
  s->status = r.status;
  s->bulk_recv_len = r.bulk_recv_len;
  s->results.assign(r.results.begin(), r.results.end());
}

Status NfsClient::reconnect() {
  if (conn_ != nullptr && conn_->ready()) return Status::ok();
  if (conn_ != nullptr) conn_->close();  // the engine reclaims it
  conn_ = nullptr;
  auto conn = eng_->connect(opt_.spec);
  TERN_TRY(conn);
  conn_ = conn.value();
  uint64_t deadline = monotonic_ns() + uint64_t{opt_.timeout_ms} * 1000000u;
  while (!conn_->ready() && !conn_->failed()) {
    poll();
    if (monotonic_ns() > deadline)
      return make_error(Errc::kTimedOut, "connecting to %s: no answer within %u ms", opt_.spec.c_str(), opt_.timeout_ms);
  }
  if (conn_->failed())
    return make_error(conn_->error().code(), "connecting to %s: %s", opt_.spec.c_str(),
                      conn_->error().message().c_str());
  return Status::ok();
}

void NfsClient::fence(Slot* s) {
  // The call still holds its registrations: its write chunk (the caller's
  // READ buffer) and read chunk stay reachable by the server until they are
  // invalidated, so returning now would hand back memory a late RDMA WRITE
  // can still overwrite. The engine has no per-call cancel yet; closing the
  // connection is the fence it offers: the QP goes to error, is drained,
  // the call's MRs are destroyed after their WRs flushed, and only then
  // does the call complete (kDisconnected).
  conn_->close();
  uint64_t warn_at = monotonic_ns() + 1'000'000'000;
  while (!s->done) {
    poll();
    if (monotonic_ns() > warn_at) {
      TERN_LOG(kWarn, "nfs", "a timed-out call's memory is not fenced yet: waiting for %s to flush the connection",
               opt_.spec.c_str());
      warn_at = monotonic_ns() + 5'000'000'000ull;
    }
  }
  conn_ = nullptr;  // closed; the next call reconnects
}

int NfsClient::poll() {
  int n = eng_->poll();
  if (n == 0 && opt_.wait) {
    auto r = eng_->wait(50);
    if (!r) {
      TERN_LOG(kInfo, "nfs", "no wait mode (%s): busy-polling", r.status().to_string().c_str());
      opt_.wait = false;
    }
  }
  return n;
}

Result<NfsClient::SyncReply> NfsClient::call_sync(Call c, const char* what) {
  if (conn_ == nullptr || !conn_->ready()) TERN_TRY(reconnect());
  Slot* s = take_slot();
  c.auth = &auth_;
  c.done = &on_done;
  c.ctx = s;
  int err = conn_->call(c);
  if (err != 0) {
    put_slot(s);
    return make_sys_error(err == ENOTCONN ? Errc::kDisconnected : Errc::kInvalidArgument, err,
                          "Connection::call refused the call");
  }
  uint64_t deadline = monotonic_ns() + uint64_t{opt_.timeout_ms} * 1000000u;
  while (!s->done) {
    poll();
    if (!s->done && monotonic_ns() > deadline) {
      fence(s);
      put_slot(s);
      return make_error(Errc::kTimedOut,
                        "%s: no reply within %u ms (the connection was closed so that the server cannot reach the "
                        "call's memory any more; the next call reconnects)",
                        what, opt_.timeout_ms);
    }
  }
  SyncReply r{s->status, s->bulk_recv_len, std::move(s->results)};
  put_slot(s);
  if (r.status != CallStatus::kOk)
    return make_error(r.status == CallStatus::kDisconnected ? Errc::kDisconnected : Errc::kRemoteError, "%s: %s", what,
                      rpc::call_status_name(r.status));
  return r;
}

Result<NfsClient::SyncReply> NfsClient::compound(std::span<const uint8_t> args, std::span<const uint8_t> bulk_send,
                                                 std::span<uint8_t> bulk_recv, const char* what) {
  Call c;
  c.prog = kNfsProgram;
  c.vers = kNfsV4;
  c.proc = kProcCompound;
  c.args = args;
  c.bulk_send = bulk_send;
  c.bulk_recv = bulk_recv;
  return call_sync(c, what);
}

Status NfsClient::null(uint32_t vers) {
  Call c;
  c.prog = kNfsProgram;
  c.vers = vers;
  c.proc = kProcNull;
  auto r = call_sync(c, vers == kNfsV3 ? "NFSv3 NULL" : "NFSv4 NULL");
  TERN_TRY(r);
  if (!r->results.empty())
    return make_error(Errc::kRemoteError, "NULL returned %zu bytes of results (none expected)", r->results.size());
  return Status::ok();
}

Result<NfsFile> NfsClient::lookup(std::string_view path, AttrSet attrs) {
  std::vector<std::string_view> comps;
  for (size_t i = 0; i < path.size();) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    std::string_view comp = path.substr(i, j - i);
    if (comp == "." || comp == "..")
      return make_error(Errc::kInvalidArgument, "path %.*s: \"%.*s\" is not supported (NFSv4 LOOKUP takes names)",
                        static_cast<int>(path.size()), path.data(), static_cast<int>(comp.size()), comp.data());
    if (!comp.empty()) comps.push_back(comp);
    i = j + 1;
  }
  uint8_t buf[kArgsBuf];
  CompoundArgs a(buf, "lookup");
  a.putrootfh();
  for (std::string_view comp : comps) a.lookup(comp);
  a.getfh();
  a.getattr(attrs);
  auto args = a.finish();
  TERN_TRY(args);
  auto reply = compound(args.value(), {}, {}, "COMPOUND (lookup)");
  TERN_TRY(reply);
  auto res = CompoundRes::decode(reply->results);
  TERN_TRY(res);
  TERN_TRY(expect_ok(res->putrootfh(), "PUTROOTFH"));
  std::string walked;
  for (std::string_view comp : comps) {
    walked += "/";
    walked += comp;
    auto st = res->lookup();
    TERN_TRY(st);
    if (st.value() != Nfs4Stat::kOk)
      return make_error(nfs4_errc(st.value()), "LOOKUP \"%.*s\" (%s) in %.*s: %s (%u)", static_cast<int>(comp.size()),
                        comp.data(), walked.c_str(), static_cast<int>(path.size()), path.data(),
                        nfs4_stat_name(st.value()), static_cast<uint32_t>(st.value()));
  }
  NfsFile f;
  TERN_TRY(expect_ok(res->getfh(&f.fh), "GETFH"));
  TERN_TRY(expect_ok(res->getattr(&f.attrs), "GETATTR"));
  TERN_TRY(res->finish());
  return f;
}

Result<Fattr4> NfsClient::getattr(const FileHandle& fh, AttrSet attrs) {
  uint8_t buf[kArgsBuf];
  CompoundArgs a(buf, "getattr");
  a.putfh(fh);
  a.getattr(attrs);
  auto args = a.finish();
  TERN_TRY(args);
  auto reply = compound(args.value(), {}, {}, "COMPOUND (getattr)");
  TERN_TRY(reply);
  auto res = CompoundRes::decode(reply->results);
  TERN_TRY(res);
  Fattr4 f;
  TERN_TRY(expect_ok(res->putfh(), "PUTFH"));
  TERN_TRY(expect_ok(res->getattr(&f), "GETATTR"));
  TERN_TRY(res->finish());
  return f;
}

namespace {

Result<std::span<const uint8_t>> read_args(std::span<uint8_t> buf, const FileHandle& fh, uint64_t offset,
                                           uint32_t count) {
  CompoundArgs a(buf, "read");
  a.putfh(fh);
  a.read(Stateid::read_bypass(), offset, count);
  return a.finish();
}

}  // namespace

Result<Read4Res> NfsClient::read(const FileHandle& fh, uint64_t offset, std::span<uint8_t> buf) {
  uint8_t abuf[kArgsBuf];
  auto args = read_args(abuf, fh, offset, static_cast<uint32_t>(buf.size()));
  TERN_TRY(args);
  auto reply = compound(args.value(), {}, buf, "COMPOUND (read)");
  TERN_TRY(reply);
  Read4Res r;
  TERN_TRY(decode_read(reply->results, reply->bulk_recv_len, &r));
  r.data = {};  // the data is in buf, and results die with the slot
  return r;
}

int NfsClient::read_async(const FileHandle& fh, uint64_t offset, std::span<uint8_t> buf, ReadCallback cb, void* ctx) {
  if (conn_ == nullptr) return ENOTCONN;  // closed by a timed-out call: reconnect() first
  uint8_t abuf[kArgsBuf];
  auto args = read_args(abuf, fh, offset, static_cast<uint32_t>(buf.size()));
  if (!args.is_ok()) return EINVAL;
  Slot* s = take_slot();
  s->cb = cb;
  s->cb_ctx = ctx;
  s->offset = offset;
  s->start_ns = monotonic_ns();
  Call c;
  c.prog = kNfsProgram;
  c.vers = kNfsV4;
  c.proc = kProcCompound;
  c.args = args.value();
  c.bulk_recv = buf;
  c.auth = &auth_;
  c.done = &on_done;
  c.ctx = s;
  int err = conn_->call(c);
  if (err != 0) put_slot(s);
  return err;
}

Result<Write4Res> NfsClient::write_once(const FileHandle& fh, uint64_t offset, std::span<const uint8_t> data,
                                        StableHow stable, Nfs4Stat* stat) {
  *stat = Nfs4Stat::kOk;
  uint8_t abuf[kArgsBuf];
  CompoundArgs a(abuf, "write");
  a.putfh(fh);
  a.write_chunked(Stateid::anonymous(), offset, stable, static_cast<uint32_t>(data.size()));
  auto args = a.finish();
  TERN_TRY(args);
  auto reply = compound(args.value(), data, {}, "COMPOUND (write)");
  TERN_TRY(reply);
  auto res = CompoundRes::decode(reply->results);
  TERN_TRY(res);
  TERN_TRY(expect_ok(res->putfh(), "PUTFH"));
  Write4Res w;
  auto st = res->write(&w);
  TERN_TRY(st);
  *stat = st.value();
  if (st.value() != Nfs4Stat::kOk) return nfs4_error(st.value(), "WRITE");
  TERN_TRY(res->finish());
  return w;
}

Result<Write4Res> NfsClient::write(const FileHandle& fh, uint64_t offset, std::span<const uint8_t> data,
                                   StableHow stable) {
  uint64_t deadline = monotonic_ns() + uint64_t{opt_.grace_wait_ms} * 1000000u;
  bool said = false;
  for (;;) {
    Nfs4Stat stat;
    auto w = write_once(fh, offset, data, stable, &stat);
    if (stat != Nfs4Stat::kGrace) return w;
    if (monotonic_ns() > deadline)
      return make_error(Errc::kTimedOut, "WRITE: the server was still in its grace period (NFS4ERR_GRACE) after %u ms",
                        opt_.grace_wait_ms);
    if (!said) {
      // Linux nfsd refuses the anonymous stateid during its grace period
      // (after a restart, nfsv4gracetime seconds); there is nothing to do but wait.
      TERN_LOG(kWarn, "nfs", "WRITE: server in its grace period (NFS4ERR_GRACE); retrying for up to %u ms",
               opt_.grace_wait_ms);
      said = true;
    }
    sleep_ms(250);
  }
}

Result<Verifier> NfsClient::commit(const FileHandle& fh, uint64_t offset, uint32_t count) {
  uint8_t abuf[kArgsBuf];
  CompoundArgs a(abuf, "commit");
  a.putfh(fh);
  a.commit(offset, count);
  auto args = a.finish();
  TERN_TRY(args);
  auto reply = compound(args.value(), {}, {}, "COMPOUND (commit)");
  TERN_TRY(reply);
  auto res = CompoundRes::decode(reply->results);
  TERN_TRY(res);
  TERN_TRY(expect_ok(res->putfh(), "PUTFH"));
  Verifier v;
  TERN_TRY(expect_ok(res->commit(&v), "COMMIT"));
  TERN_TRY(res->finish());
  return v;
}

}  // namespace tern::nfs
