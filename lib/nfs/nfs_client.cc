#include "nfs/nfs_client.h"

#include <time.h>

#include <algorithm>
#include <cstring>

#include "base/clock.h"
#include "base/log.h"
#include "nfs/compound_args.h"
#include "nfs/nfs_program.h"

namespace tern::nfs {

using rpc::Call;
using rpc::CallReply;
using rpc::CallStatus;

// One operation: a synchronous caller's (results copied out, since the
// engine's view dies with the callback) or an asynchronous READ's. It keeps
// what it needs to be sent again: its arguments (the engine copies them at
// call(), so a retry needs its own copy) and its chunks' memory.
struct NfsClient::Slot {
  NfsClient* cli = nullptr;
  // What to send.
  uint32_t vers = 0, proc = 0;
  uint8_t args[4096];
  size_t args_len = 0;
  std::span<const uint8_t> bulk_send;
  std::span<uint8_t> bulk_recv;
  const char* what = "";
  // When.
  uint64_t start_ns = 0, deadline_ns = 0, retry_at_ns = 0;
  uint32_t backoff_ms = 0;
  bool in_flight = false;
  // How it went.
  uint32_t retransmits = 0, delay_retries = 0, reissues = 0;
  bool done = false;
  Status error = Status::ok();
  uint32_t bulk_recv_len = 0;
  std::vector<uint8_t> results;
  ReadCallback cb = nullptr;  // asynchronous READ
  void* cb_ctx = nullptr;
  uint64_t offset = 0;
};

namespace {

// Argument buffers: every COMPOUND here fits the 4 KiB inline threshold the
// kernel offers.
constexpr size_t kArgsBuf = 4096;

// A connection failed for good is replaced at most this often.
constexpr uint64_t kConnectRetryNs = 200'000'000;

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

// A COMPOUND's status (its first word), without decoding the rest.
bool compound_delayed(std::span<const uint8_t> results) {
  if (results.size() < 4) return false;
  uint32_t st = uint32_t{results[0]} << 24 | uint32_t{results[1]} << 16 | uint32_t{results[2]} << 8 | results[3];
  return st == static_cast<uint32_t>(Nfs4Stat::kDelay);
}

// A connection that carries calls: up, or re-establishing itself (calls
// wait in it).
bool usable(const rpc::Connection* c) {
  rpc::ConnState st = c->state();
  return st == rpc::ConnState::kReady || st == rpc::ConnState::kReconnecting;
}

uint64_t ms_left(uint64_t deadline, uint64_t now) { return deadline > now ? (deadline - now) / 1'000'000 : 0; }

}  // namespace

Result<std::unique_ptr<NfsClient>> NfsClient::connect(const NfsClientOptions& opt) {
  std::unique_ptr<NfsClient> c(new NfsClient(opt));
  if (opt.timeout_ms == 0) return make_error(Errc::kInvalidArgument, "NfsClientOptions::timeout_ms must not be 0");
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
  // The engine first: its teardown completes outstanding calls (after
  // fencing their memory), whose completions still find their slots;
  // closing_ keeps them from being retried or reaching callbacks.
  closing_ = true;
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
  s->cli = this;
  s->vers = s->proc = 0;
  s->args_len = 0;
  s->bulk_send = {};
  s->bulk_recv = {};
  s->what = "";
  s->start_ns = monotonic_ns();
  s->deadline_ns = s->start_ns + uint64_t{opt_.timeout_ms} * 1000000u;
  s->retry_at_ns = 0;
  s->backoff_ms = opt_.delay_min_ms;
  s->in_flight = false;
  s->retransmits = s->delay_retries = s->reissues = 0;
  s->done = false;
  s->error = Status::ok();
  s->bulk_recv_len = 0;
  s->results.clear();
  s->cb = nullptr;
  s->cb_ctx = nullptr;
  s->offset = 0;
  ++live_;
  ++stats_.operations;
  return s;
}

void NfsClient::put_slot(Slot* s) {
  --live_;
  free_.push_back(s);
}

void NfsClient::issue(Slot* s) {
  uint64_t now = monotonic_ns();
  if (now >= s->deadline_ns) {
    ++stats_.timeouts;
    finish(s, make_error(Errc::kTimedOut, "%s: not answered within %u ms (%s; %u NFS4ERR_DELAY retries)", s->what,
                         opt_.timeout_ms, usable(conn_) ? "not sent again in time" : "no connection to send it on",
                         s->delay_retries));
    return;
  }
  if (!usable(conn_)) {  // failed for good (poll() replaces it), or a new one still connecting
    defer(s, now);
    return;
  }
  int err = send(s, now);
  if (err == 0) return;
  if (err == EAGAIN || err == ENOTCONN) {  // backlog full, or the connection just failed: poll() tries again
    defer(s, now);
    return;
  }
  finish(s, make_sys_error(Errc::kInvalidArgument, err, "%s: Connection::call refused the call", s->what));
}

int NfsClient::send(Slot* s, uint64_t now) {
  Call c;
  c.prog = kNfsProgram;
  c.vers = s->vers;
  c.proc = s->proc;
  c.args = {s->args, s->args_len};
  c.bulk_send = s->bulk_send;
  c.bulk_recv = s->bulk_recv;
  c.auth = &auth_;
  c.done = &on_done;
  c.ctx = s;
  // The engine's deadline: it completes the call with kTimedOut when no
  // reply came, once the server cannot reach the call's chunks any more.
  c.timeout_ns = s->deadline_ns - now;
  int err = conn_->call(c);
  if (err == 0) s->in_flight = true;
  return err;
}

void NfsClient::defer(Slot* s, uint64_t at) {
  s->retry_at_ns = at;
  deferred_.push_back(s);
}

void NfsClient::finish(Slot* s, Status st) {
  if (s->cb == nullptr) {  // a synchronous caller polls for this
    s->error = std::move(st);
    s->done = true;
    return;
  }
  ReadDone d;
  d.offset = s->offset;
  d.latency_ns = monotonic_ns() - s->start_ns;
  d.retransmits = s->retransmits;
  d.delay_retries = s->delay_retries;
  d.reissues = s->reissues;
  if (!st.is_ok()) {
    d.status = make_error(st.code(), "READ at %llu: %s", static_cast<unsigned long long>(s->offset),
                          st.message().c_str());
  } else {
    Read4Res rr;
    d.status = decode_read(s->results, s->bulk_recv_len, &rr);
    d.count = rr.count;
    d.eof = rr.eof;
  }
  ReadCallback cb = s->cb;
  void* cb_ctx = s->cb_ctx;
  put_slot(s);
  cb(cb_ctx, d);
}

void NfsClient::on_done(void* ctx, const CallReply& r) {
  auto* s = static_cast<Slot*>(ctx);
  NfsClient* cli = s->cli;
  s->in_flight = false;
  s->retransmits += r.retransmits;
  cli->stats_.retransmits += r.retransmits;
  if (cli->closing_) {  // the client is going away: no retry, no callback
    if (s->cb != nullptr) cli->put_slot(s);
    else cli->finish(s, make_error(Errc::kDisconnected, "%s: the client was closed", s->what));
    return;
  }
  uint64_t now = monotonic_ns();
  switch (r.status) {
    case CallStatus::kOk:
      if (s->proc == kProcCompound && compound_delayed(r.results)) {
        // NFS4ERR_DELAY: the server is busy with this (a recall, a file
        // being migrated); RFC 7530 §13.1.1.3 asks the client to try again
        // later. Not past the deadline.
        if (now + uint64_t{s->backoff_ms} * 1000000u >= s->deadline_ns) {
          ++cli->stats_.timeouts;
          cli->finish(s, make_error(Errc::kTimedOut,
                                    "%s: the server still answered NFS4ERR_DELAY after %u retries, and %u ms were "
                                    "left of %u",
                                    s->what, s->delay_retries, static_cast<unsigned>(ms_left(s->deadline_ns, now)),
                                    cli->opt_.timeout_ms));
          return;
        }
        ++s->delay_retries;
        ++cli->stats_.delay_retries;
        if (s->delay_retries == 1)
          TERN_LOG(kDebug, "nfs", "%s: NFS4ERR_DELAY; trying again in %u ms", s->what, s->backoff_ms);
        cli->defer(s, now + uint64_t{s->backoff_ms} * 1000000u);
        s->backoff_ms = std::min(s->backoff_ms * 2, std::max(cli->opt_.delay_max_ms, cli->opt_.delay_min_ms));
        return;
      }
      s->bulk_recv_len = r.bulk_recv_len;
      s->results.assign(r.results.begin(), r.results.end());
      cli->finish(s, Status::ok());
      return;
    case CallStatus::kDisconnected:
      // The engine gave up on the connection (or reconnect is off): send it
      // again on a new one while the deadline allows.
      if (now + uint64_t{s->backoff_ms} * 1000000u < s->deadline_ns) {
        ++s->reissues;
        ++cli->stats_.reissues;
        cli->defer(s, now + uint64_t{s->backoff_ms} * 1000000u);
        s->backoff_ms = std::min(s->backoff_ms * 2, std::max(cli->opt_.delay_max_ms, cli->opt_.delay_min_ms));
        return;
      }
      cli->finish(s, make_error(Errc::kDisconnected, "%s: connection lost (%s), no time left to send it again",
                                s->what, cli->conn_->error().to_string().c_str()));
      return;
    case CallStatus::kTimedOut:
      ++cli->stats_.timeouts;
      cli->finish(s, make_error(Errc::kTimedOut,
                                "%s: no reply within %u ms (the call's memory was fenced before it ended; %u "
                                "retransmissions, %u NFS4ERR_DELAY retries)",
                                s->what, cli->opt_.timeout_ms, s->retransmits, s->delay_retries));
      return;
    default:
      cli->finish(s, make_error(Errc::kRemoteError, "%s: %s", s->what, rpc::call_status_name(r.status)));
      return;
  }
}

Status NfsClient::reconnect() {
  if (conn_ != nullptr && usable(conn_)) return Status::ok();
  if (conn_ != nullptr && conn_->failed()) {
    auto conn = eng_->connect(opt_.spec);
    TERN_TRY(conn);
    conn_->close();  // the engine reclaims it; its calls completed already
    conn_ = conn.value();
    ++stats_.new_connections;
  }
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

void NfsClient::service() {
  if (deferred_.empty()) return;
  uint64_t now = monotonic_ns();
  // A connection that failed for good is replaced while operations wait for
  // one (every call of the old one has completed: the engine completes them
  // all when a connection fails).
  if (conn_->failed() && now >= next_connect_ns_) {
    next_connect_ns_ = now + kConnectRetryNs;
    auto conn = eng_->connect(opt_.spec);
    if (conn.is_ok()) {
      TERN_LOG(kInfo, "nfs", "connection to %s failed (%s): connecting again", opt_.spec.c_str(),
               conn_->error().to_string().c_str());
      conn_->close();
      conn_ = conn.value();
      ++stats_.new_connections;
    } else {
      TERN_LOG(kDebug, "nfs", "connecting to %s: %s", opt_.spec.c_str(), conn.status().to_string().c_str());
    }
  }
  bool up = usable(conn_);
  std::vector<Slot*> due;
  for (size_t i = 0; i < deferred_.size();) {
    Slot* s = deferred_[i];
    if (now >= s->deadline_ns || (up && now >= s->retry_at_ns)) {
      due.push_back(s);
      deferred_[i] = deferred_.back();
      deferred_.pop_back();
    } else {
      ++i;
    }
  }
  for (Slot* s : due) issue(s);  // sends it, or finishes it at its deadline, or defers it again
}

int NfsClient::poll() {
  int n = eng_->poll();
  service();
  if (n == 0 && opt_.wait) {
    int ms = 50;
    uint64_t now = monotonic_ns();
    for (Slot* s : deferred_)
      ms = static_cast<int>(std::min<uint64_t>(ms, ms_left(std::min(s->retry_at_ns, s->deadline_ns), now)));
    auto r = eng_->wait(ms);
    if (!r) {
      TERN_LOG(kInfo, "nfs", "no wait mode (%s): busy-polling", r.status().to_string().c_str());
      opt_.wait = false;
    }
  }
  return n;
}

Result<NfsClient::SyncReply> NfsClient::call_sync(uint32_t vers, uint32_t proc, std::span<const uint8_t> args,
                                                  std::span<const uint8_t> bulk_send, std::span<uint8_t> bulk_recv,
                                                  const char* what) {
  if (args.size() > kArgsBuf)
    return make_error(Errc::kInvalidArgument, "%s: %zu bytes of arguments (at most %zu)", what, args.size(), kArgsBuf);
  Slot* s = take_slot();
  s->vers = vers;
  s->proc = proc;
  if (!args.empty()) std::memcpy(s->args, args.data(), args.size());  // NULL has no arguments (and a null data())
  s->args_len = args.size();
  s->bulk_send = bulk_send;
  s->bulk_recv = bulk_recv;
  s->what = what;
  issue(s);
  // The engine completes the call by its deadline, but a call with chunks
  // only once they are fenced (its connection drained); that is waited for.
  uint64_t warn_at = s->deadline_ns + 1'000'000'000;
  while (!s->done) {
    poll();
    if (!s->done && monotonic_ns() > warn_at) {
      TERN_LOG(kWarn, "nfs", "%s: past its deadline, the call's memory is not fenced yet: waiting for %s", what,
               opt_.spec.c_str());
      warn_at = monotonic_ns() + 5'000'000'000ull;
    }
  }
  Status err = std::move(s->error);
  SyncReply r{s->bulk_recv_len, std::move(s->results)};
  put_slot(s);
  if (!err.is_ok()) return err;
  return r;
}

Result<NfsClient::SyncReply> NfsClient::compound(std::span<const uint8_t> args, std::span<const uint8_t> bulk_send,
                                                 std::span<uint8_t> bulk_recv, const char* what) {
  return call_sync(kNfsV4, kProcCompound, args, bulk_send, bulk_recv, what);
}

Status NfsClient::null(uint32_t vers) {
  auto r = call_sync(vers, kProcNull, {}, {}, {}, vers == kNfsV3 ? "NFSv3 NULL" : "NFSv4 NULL");
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
  if (cb == nullptr) return EINVAL;
  Slot* s = take_slot();
  auto args = read_args({s->args, sizeof s->args}, fh, offset, static_cast<uint32_t>(buf.size()));
  if (!args.is_ok()) {
    put_slot(s);
    return EINVAL;
  }
  s->vers = kNfsV4;
  s->proc = kProcCompound;
  s->args_len = args->size();
  s->bulk_recv = buf;
  s->what = "COMPOUND (read)";
  s->cb = cb;
  s->cb_ctx = ctx;
  s->offset = offset;
  // Sent now if it can be, else from poll(); it never completes in here: a
  // call the engine refuses outright is this function's error.
  uint64_t now = monotonic_ns();
  int err = usable(conn_) ? send(s, now) : ENOTCONN;
  if (err == EAGAIN || err == ENOTCONN) {
    defer(s, now);
    return 0;
  }
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
