// tern-nfsd's server (lib/nfsd) on an engine of its own thread, over pmd/shm
// (TERN_RPC_DEVICE names another device spec without a port, as for the
// RPC tests), exporting a fresh temporary directory, and a Tern client
// engine driven from the test thread that speaks NFSv3 to it with the
// lib/nfs codecs: the kernel client's part, played by Tern.
#pragma once

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <deque>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "nfs/nfs3_args.h"
#include "nfs/nfs3_res.h"
#include "nfs/nfs_program.h"
#include "nfsd/export.h"
#include "nfsd/nfs3_server.h"
#include "nfsd/published_exports.h"
#include "nfsd/reply_cache.h"
#include "nfsd/state_dir.h"
#include "test_arena.h"

namespace tern::nfsd::test {

using Bytes = std::vector<uint8_t>;
using nfs::Fh3;
using nfs::Nfs3Proc;
using nfs::Nfs3Stat;

inline std::string next_spec() {
  static int n = 0;
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  if (dev == nullptr || *dev == 0 || std::string_view(dev) == "shm")
    return "shm:path=/tmp/tern-nfsd-" + std::to_string(getpid()) + "-" + std::to_string(n++) + ".sock";
  return std::string(dev) + ",port=" + std::to_string(20400 + n++);
}

// The client specification (exports(5)) that names this test's client: a
// pmd/shm peer is 127.0.0.1 to the lists ("localhost"); over another
// device the client connects from the device's own address (addr=).
inline std::string own_client_spec() {
  const char* dev = std::getenv("TERN_RPC_DEVICE");
  if (dev == nullptr || *dev == 0 || std::string_view(dev) == "shm") return "localhost";
  const std::string d(dev);
  const size_t p = d.find("addr=");
  if (p == std::string::npos) return "localhost";
  const size_t end = d.find(',', p);
  return d.substr(p + 5, end == std::string::npos ? std::string::npos : end - (p + 5));
}

// A server engine and its Nfs3Server, polled by a thread of their own.
struct ServerThread {
  std::unique_ptr<rpc::Engine> eng;
  std::unique_ptr<Nfs3Server> nfs;
  std::thread thread;
  std::atomic<bool> stop{false};
  std::atomic<bool> crashed{false};

  ServerThread(const Export& exp, ReplyCache* drc, ServerConfig cfg, const std::string& spec) {
    run(std::make_unique<Nfs3Server>(exp, drc, cfg), spec);
  }
  // Serving the tables `pub` publishes (reloads).
  ServerThread(const PublishedExports& pub, ReplyCache* drc, ServerConfig cfg, const std::string& spec) {
    run(std::make_unique<Nfs3Server>(pub, drc, cfg), spec);
  }
  void run(std::unique_ptr<Nfs3Server> srv, const std::string& spec) {
    rpc::EngineOptions o;
    o.arena_bytes = rpc::kTestArenaBytes;
    o.max_bulk = 1u << 20;
    o.max_reply = (256u << 10) + 4096;
    eng = rpc::Engine::create(o).value();
    nfs = std::move(srv);
    nfs->attach(*eng);
    Status s = eng->listen(spec);
    EXPECT_TRUE(s.is_ok()) << s.to_string();
    thread = std::thread([this] {
      while (!stop.load(std::memory_order_relaxed)) eng->poll();
    });
  }
  // Stops polling (what the server holds can be read from the test's thread then).
  void halt() {
    stop.store(true);
    if (thread.joinable()) thread.join();
  }
  ~ServerThread() {
    halt();
    nfs.reset();
    eng.reset();
  }
};

struct Reply {
  rpc::CallStatus status = rpc::CallStatus::kDisconnected;
  Bytes results;
  uint32_t bulk_len = 0;
  uint32_t retransmits = 0;
  bool done = false;
};

struct CallOpts {
  const rpc::AuthSys* auth = nullptr;  // nullptr: the fixture's root credential
  std::span<uint8_t> bulk_recv;         // a write chunk (READ's data)
  std::span<const uint8_t> bulk_send;   // a read chunk (WRITE's data), at the end of the arguments
  uint32_t max_results = 0;             // > inline: a reply chunk is offered
  uint32_t vers = nfs::kNfsV3;
};

class Nfsd : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "tern-nfsd needs root (open_by_handle_at, acting as the caller)";
    char t[] = "/tmp/tern-nfsd-test.XXXXXX";
    tmp_ = mkdtemp(t);
    dir_ = tmp_ + "/export";
    state_ = tmp_ + "/state";
    ASSERT_EQ(mkdir(dir_.c_str(), 0777), 0);
    chmod(dir_.c_str(), 0777);
    root_auth_.machine = "test";
    root_auth_.uid = 0, root_auth_.gid = 0;
    spec_ = next_spec();
  }
  void TearDown() override {
    server_.reset();
    if (conn_ != nullptr) conn_->close();
    cli_.reset();
    drc_.reset();
    exp_.reset();
    state_dir_.reset();
    if (spec_.starts_with("shm:path=")) unlink(spec_.c_str() + 9);
    if (!tmp_.empty()) (void)!system(("rm -rf " + tmp_).c_str());
  }

  // Opens the export (of dir_ unless o.dir says otherwise; squash off
  // unless the test says otherwise) and starts the server.
  void start(ExportOptions o = {}, bool no_root_squash = true, ServerConfig cfg = {}, bool with_drc = true) {
    if (o.dir.empty()) o.dir = dir_;
    if (no_root_squash) o.squash.root_squash = false;
    if (state_dir_ == nullptr) {
      auto sd = StateDir::open(state_);
      ASSERT_TRUE(sd.is_ok()) << sd.status().to_string();
      state_dir_ = std::move(*sd);
    }
    auto e = Export::open(o, state_dir_);
    ASSERT_TRUE(e.is_ok()) << e.status().to_string();
    exp_ = std::move(*e);
    if (with_drc) drc_ = ReplyCache::open(state_dir_->reply_cache_path(), 256).value();
    if (cfg.write_verf == nfs::Verf3{}) cfg.write_verf = new_write_verifier();
    server_ = std::make_unique<ServerThread>(*exp_, drc_.get(), cfg, spec_);
    root_ = exp_->root_fh();
    if (cli_ == nullptr) conn_ = connect(spec_);
  }
  // A connection of the test's client to the server at `spec` (nullptr,
  // the test failed, when none comes up). Calls go over conn_.
  rpc::Connection* connect(const std::string& spec) {
    if (cli_ == nullptr) {
      rpc::EngineOptions co;
      co.arena_bytes = rpc::kTestArenaBytes;
      co.max_reply = 512u << 10;
      cli_ = rpc::Engine::create(co).value();
    }
    auto c = cli_->connect(spec);
    EXPECT_TRUE(c.is_ok()) << c.status().to_string();
    if (!c.is_ok()) return nullptr;
    rpc::Connection* conn = *c;
    EXPECT_TRUE(wait([&] { return conn->ready() || conn->failed(); }));
    EXPECT_TRUE(conn->ready()) << conn->error().to_string();
    return conn->ready() ? conn : nullptr;
  }
  // The server goes away (its engine destroyed and its state directory
  // unlocked, as if its process died) and a new one starts on the same
  // address and state directory.
  void restart(ExportOptions o = {}, bool with_drc = true) {
    stop_instance();
    start(o, true, {}, with_drc);
  }
  void stop_instance() {
    server_.reset();
    drc_.reset();
    exp_.reset();
    state_dir_.reset();
  }

  bool wait(const std::function<bool()>& pred, int ms = 10000) {
    auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      cli_->poll();
      if (pred()) return true;
    }
    return false;
  }

  // Starts a call; it completes into *r from wait().
  void start_call(Nfs3Proc proc, const Bytes& args, const CallOpts& o, Reply* r) {
    rpc::Call c;
    c.prog = nfs::kNfsProgram, c.vers = o.vers, c.proc = static_cast<uint32_t>(proc);
    c.args = args;
    c.auth = o.auth != nullptr ? o.auth : &root_auth_;
    c.bulk_recv = o.bulk_recv;
    c.bulk_send = o.bulk_send;
    c.max_results = o.max_results;
    c.ctx = r;
    c.done = [](void* ctx, const rpc::CallReply& rep) {
      auto* p = static_cast<Reply*>(ctx);
      p->status = rep.status;
      p->results.assign(rep.results.begin(), rep.results.end());
      p->bulk_len = rep.bulk_recv_len;
      p->retransmits = rep.retransmits;
      p->done = true;
    };
    ASSERT_EQ(conn_->call(c), 0);
  }
  Reply call(Nfs3Proc proc, const Bytes& args, const CallOpts& o = {}) {
    Reply r;
    start_call(proc, args, o, &r);
    EXPECT_TRUE(wait([&] { return r.done; })) << nfs::nfs3_proc_name(proc) << " never completed";
    return r;
  }
  template <typename A>
  static Bytes enc(const A& a) {
    Bytes b(16384);
    xdr::XdrWriter w(b);
    nfs::nfs3::encode(w, a);
    EXPECT_TRUE(w.ok());
    b.resize(w.bytes_written());
    return b;
  }
  // The storage backend a run asks for, set by hand:
  // TERN_TEST_NFSD_STORAGE=threads runs on the worker pool (the fallback
  // when io_uring is unavailable), =sync on the engine's thread (the path
  // before the storage queue); unset keeps the default. Tests whose point
  // needs a queue (holds, batches) pass with_sync=false and ignore =sync.
  static void storage_mode_from_env(ServerConfig& cfg, bool with_sync) {
    const char* m = std::getenv("TERN_TEST_NFSD_STORAGE");
    if (m == nullptr) return;
    if (std::string_view(m) == "threads") cfg.storage.mode = StorageOptions::Mode::kThreads;
    if (with_sync && std::string_view(m) == "sync") cfg.storage.mode = StorageOptions::Mode::kSync;
  }
  // A WRITE of `data` at `off`, as the decoded structure.
  static nfs::nfs3::WriteArgs write_of(const nfs::Fh3& f, uint64_t off, std::span<const uint8_t> data,
                                       nfs::StableHow how) {
    nfs::nfs3::WriteArgs a;
    a.file = f;
    a.offset = off;
    a.count = static_cast<uint32_t>(data.size());
    a.stable = how;
    a.data = data;
    return a;
  }
  // A WRITE's arguments, its data inline (a buffer sized for the data,
  // which may be more than enc()'s holds).
  static Bytes write_args(const nfs::Fh3& f, uint64_t off, std::span<const uint8_t> data,
                          nfs::StableHow how) {
    nfs::nfs3::WriteArgs a = write_of(f, off, data, how);
    Bytes b(data.size() + 512);
    xdr::XdrWriter w(b);
    nfs::nfs3::encode(w, a);
    EXPECT_TRUE(w.ok());
    b.resize(w.bytes_written());
    return b;
  }
  // A reply's NFS status (its results' first word; SERVERFAULT if shorter).
  static nfs::Nfs3Stat status(const Reply& r) {
    if (r.results.size() < 4) return nfs::Nfs3Stat::kServerfault;
    return static_cast<nfs::Nfs3Stat>(uint32_t{r.results[0]} << 24 | uint32_t{r.results[1]} << 16 |
                                            uint32_t{r.results[2]} << 8 | r.results[3]);
  }
  // The engine's storage queue's counters (the server must be started).
  const StorageStats& io() const { return server_->nfs->storage().stats(); }
  // A procedure whose results decode into R; fails the test otherwise. The
  // results' bytes are kept until the test ends: names and paths in R are
  // views into them.
  template <typename R, typename A>
  R op(Nfs3Proc proc, const A& args, const CallOpts& o = {}) {
    Reply r = call(proc, enc(args), o);
    R res;
    EXPECT_EQ(r.status, rpc::CallStatus::kOk) << nfs::nfs3_proc_name(proc) << ": " << rpc::call_status_name(r.status);
    kept_.push_back(std::move(r.results));
    EXPECT_TRUE(nfs::nfs3::decode(kept_.back(), &res)) << nfs::nfs3_proc_name(proc) << " results do not decode";
    return res;
  }

  // ---- the procedures tests use most
  nfs::nfs3::LookupRes lookup(const Fh3& dir, std::string_view name, const CallOpts& o = {}) {
    return op<nfs::nfs3::LookupRes>(Nfs3Proc::kLookup, nfs::nfs3::LookupArgs{{dir, name}}, o);
  }
  nfs::nfs3::GetattrRes getattr(const Fh3& f, const CallOpts& o = {}) {
    return op<nfs::nfs3::GetattrRes>(Nfs3Proc::kGetattr, nfs::nfs3::GetattrArgs{f}, o);
  }
  nfs::nfs3::CreateRes create(const Fh3& dir, std::string_view name, uint32_t mode = 0644,
                              nfs::CreateMode how = nfs::CreateMode::kGuarded, const CallOpts& o = {}) {
    nfs::nfs3::CreateArgs a;
    a.where = {dir, name};
    a.how = how;
    a.attr.set_mode = true;
    a.attr.mode = mode;
    return op<nfs::nfs3::CreateRes>(Nfs3Proc::kCreate, a, o);
  }
  nfs::nfs3::CreateRes mkdir_(const Fh3& dir, std::string_view name, uint32_t mode = 0755, const CallOpts& o = {}) {
    nfs::nfs3::MkdirArgs a;
    a.where = {dir, name};
    a.attr.set_mode = true;
    a.attr.mode = mode;
    return op<nfs::nfs3::CreateRes>(Nfs3Proc::kMkdir, a, o);
  }
  // WRITE of `data` (registered memory from the client engine when chunked).
  nfs::nfs3::WriteRes write(const Fh3& f, uint64_t off, std::span<const uint8_t> data, nfs::StableHow how,
                            bool chunked, const CallOpts& base = {}) {
    nfs::nfs3::WriteArgs a = write_of(f, off, data, how);
    CallOpts o = base;
    Bytes args(256);
    xdr::XdrWriter w(args);
    if (chunked) {
      nfs::nfs3::encode_write_chunked(w, a);
      o.bulk_send = data;
    } else {
      args.resize(8192);
      w = xdr::XdrWriter(args);
      nfs::nfs3::encode(w, a);
    }
    args.resize(w.bytes_written());
    Reply r = call(Nfs3Proc::kWrite, args, o);
    nfs::nfs3::WriteRes res;
    EXPECT_EQ(r.status, rpc::CallStatus::kOk) << rpc::call_status_name(r.status);
    EXPECT_TRUE(nfs::nfs3::decode(r.results, &res));
    return res;
  }
  // READ into `buf` (registered, through a write chunk) or inline.
  nfs::nfs3::ReadRes read(const Fh3& f, uint64_t off, uint32_t count, std::span<uint8_t> buf, Bytes* inline_copy,
                          const CallOpts& base = {}) {
    CallOpts o = base;
    o.bulk_recv = buf.first(std::min<size_t>(buf.size(), count));
    Reply r = call(Nfs3Proc::kRead, enc(nfs::nfs3::ReadArgs{f, off, count}), o);
    nfs::nfs3::ReadRes res;
    EXPECT_EQ(r.status, rpc::CallStatus::kOk) << rpc::call_status_name(r.status);
    EXPECT_TRUE(nfs::nfs3::decode(r.results, buf.empty() ? -1 : int64_t{r.bulk_len}, &res));
    if (inline_copy != nullptr) inline_copy->assign(res.data.begin(), res.data.end());
    res.data = {};  // a view into r's results, which go now
    return res;
  }

  std::string path(const std::string& rel) const { return dir_ + "/" + rel; }
  Bytes file_bytes(const std::string& rel) const {
    Bytes b;
    int fd = ::open(path(rel).c_str(), O_RDONLY);
    if (fd < 0) return b;
    uint8_t buf[65536];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) b.insert(b.end(), buf, buf + n);
    close(fd);
    return b;
  }

  std::string tmp_, dir_, state_, spec_;
  rpc::AuthSys root_auth_;
  std::shared_ptr<const StateDir> state_dir_;  // the instance's (locked) state directory
  std::unique_ptr<Export> exp_;
  std::unique_ptr<ReplyCache> drc_;
  std::unique_ptr<ServerThread> server_;
  std::unique_ptr<rpc::Engine> cli_;
  rpc::Connection* conn_ = nullptr;
  Fh3 root_;
  std::deque<Bytes> kept_;
};

}  // namespace tern::nfsd::test
