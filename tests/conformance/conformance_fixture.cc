#include "conformance_fixture.h"

#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace tern::conformance {

// ---------------------------------------------------------------- device list

void PrintTo(const DeviceParam& p, std::ostream* os) { *os << "\"" << p.spec << "\""; }

namespace {

std::string driver_of(const std::string& spec) { return spec.substr(0, spec.find(':')); }

// "shm,verbs:dev=rxe0,port=1;mlx5" -> {"shm", "verbs:dev=rxe0,port=1", "mlx5"}:
// ';' and whitespace always separate; a comma separates unless what follows is
// a bare key=value (no ':' before its '='), which continues the previous spec.
std::vector<std::string> split_specs(const std::string& list) {
  std::vector<std::string> out;
  std::string tok;
  auto flush = [&](bool hard) {
    if (tok.empty()) return;
    size_t eq = tok.find('='), colon = tok.find(':');
    bool continuation = !out.empty() && eq != std::string::npos && (colon == std::string::npos || colon > eq);
    if (continuation && !hard)
      out.back() += "," + tok;
    else
      out.push_back(tok);
    tok.clear();
  };
  for (char c : list) {
    if (c == ';' || std::isspace(static_cast<unsigned char>(c))) {
      flush(true);
    } else if (c == ',') {
      flush(false);
    } else {
      tok += c;
    }
  }
  flush(false);
  return out;
}

}  // namespace

std::vector<DeviceParam> conformance_devices() {
  std::vector<DeviceParam> out;
  if (const char* env = std::getenv("TERN_CONFORMANCE_DEVICES"); env != nullptr && *env != '\0') {
    for (auto& s : split_specs(env)) out.push_back({s, driver_of(s)});
    return out;
  }
  // Hardware drivers run only on request: a machine may link them without
  // having a device.
  for (const auto& n : driver_names()) {
    if (n == "shm") out.push_back({n, n});
  }
  return out;
}

std::string device_param_name(const testing::TestParamInfo<DeviceParam>& info) {
  std::string name;
  for (char c : info.param.spec) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return name + "_" + std::to_string(info.index);
}

std::string unique_spec(const DeviceParam& p, std::string* socket_path) {
  socket_path->clear();
  static std::atomic<int> counter{0};
  // verbs (and mlx5, which is verbs underneath): a fresh rdma_cm port per
  // test, so that no test meets another's listener or TIME_WAIT; a spec that
  // names its port is used as given.
  if ((p.driver == "verbs" || p.driver == "mlx5") && p.spec.find("port=") == std::string::npos)
    return p.spec + (p.spec.find(':') == std::string::npos ? ":" : ",") + "port=" + std::to_string(20100 + counter++);
  // sim: a fresh address per test in the spec's world, for the same reason.
  if (p.driver == "sim" && p.spec.find("addr=") == std::string::npos)
    return p.spec + (p.spec.find(':') == std::string::npos ? ":" : ",") + "addr=conf-" + std::to_string(counter++);
  if (p.driver != "shm") return p.spec;
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = (tmp != nullptr && *tmp != '\0') ? tmp : "/tmp";
  *socket_path = dir + "/tern-conf-" + std::to_string(getpid()) + "-" + std::to_string(counter++) + ".sock";
  ::unlink(socket_path->c_str());
  return p.spec + (p.spec.find(':') == std::string::npos ? ":" : ",") + "path=" + *socket_path;
}

// ---------------------------------------------------------------- formatting

std::string to_string(const Wc& wc) {
  char b[200];
  std::snprintf(b, sizeof b, "{wr_id=%llu status=%s opcode=%s byte_len=%u qp_num=%u flags=0x%x inv_rkey=0x%x}",
                static_cast<unsigned long long>(wc.wr_id), wc_status_name(wc.status), wc_opcode_name(wc.opcode),
                wc.byte_len, wc.qp_num, wc.flags, wc.invalidated_rkey);
  return b;
}

std::string to_string(const std::vector<Wc>& wcs) {
  std::string s = "[";
  for (size_t i = 0; i < wcs.size(); ++i) s += (i ? ", " : "") + to_string(wcs[i]);
  return s + "]";
}

std::string to_string(const Status& s) { return s.is_ok() ? std::string("ok") : s.to_string(); }

AssertionResult wc_is(const Wc& wc, uint64_t wr_id, WcStatus status) {
  if (wc.wr_id != wr_id || wc.status != status)
    return AssertionFailure() << "expected wr_id=" << wr_id << " status=" << wc_status_name(status) << ", got "
                              << to_string(wc);
  return AssertionSuccess();
}

AssertionResult wc_is(const Wc& wc, uint64_t wr_id, WcStatus status, WcOpcode opcode) {
  if (wc.wr_id != wr_id || wc.status != status || wc.opcode != opcode)
    return AssertionFailure() << "expected wr_id=" << wr_id << " status=" << wc_status_name(status)
                              << " opcode=" << wc_opcode_name(opcode) << ", got " << to_string(wc);
  return AssertionSuccess();
}

AssertionResult all_flushed(const std::vector<Wc>& wcs, const std::vector<uint64_t>& wr_ids) {
  bool ok = wcs.size() == wr_ids.size();
  for (size_t i = 0; ok && i < wcs.size(); ++i)
    ok = wcs[i].wr_id == wr_ids[i] && wcs[i].status == WcStatus::kWrFlushErr;
  if (ok) return AssertionSuccess();
  std::string want;
  for (size_t i = 0; i < wr_ids.size(); ++i) {
    if (i > 0) want += ',';
    want += std::to_string(wr_ids[i]);
  }
  return AssertionFailure() << "expected wr_ids [" << want << "] all flushed, in order; got " << to_string(wcs);
}

AssertionResult is_real_error(const Wc& wc, uint64_t wr_id) {
  if (wc.wr_id != wr_id || wc.status == WcStatus::kSuccess || wc.status == WcStatus::kWrFlushErr)
    return AssertionFailure() << "expected wr_id=" << wr_id << " to fail with an error other than a flush, got "
                              << to_string(wc);
  return AssertionSuccess();
}

AssertionResult failed_with(const DeviceCaps& caps, const Wc& wc, uint64_t wr_id, WcStatus status) {
  if (caps.precise_error_status) return wc_is(wc, wr_id, status);
  AssertionResult r = is_real_error(wc, wr_id);
  if (r) r << " (device reports generic statuses; " << wc_status_name(status) << " expected elsewhere)";
  return r;
}

namespace {
inline uint8_t pattern_byte(size_t i, uint32_t seed) {
  uint32_t x = static_cast<uint32_t>(i) * 2654435761u + seed * 40503u + 0x9e37u;
  x ^= x >> 13;
  return static_cast<uint8_t>(x ^ (x >> 7) ^ (i >> 8));
}
}  // namespace

void fill_pattern(void* p, size_t len, uint32_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  for (size_t i = 0; i < len; ++i) b[i] = pattern_byte(i, seed);
}

AssertionResult check_pattern(const void* p, size_t len, uint32_t seed, const char* what) {
  auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < len; ++i) {
    if (b[i] != pattern_byte(i, seed)) {
      size_t bad = 0;
      for (size_t j = i; j < len; ++j) bad += b[j] != pattern_byte(j, seed);
      return AssertionFailure() << what << ": byte " << i << " of " << len << " is 0x" << std::hex
                                << int(b[i]) << ", want 0x" << int(pattern_byte(i, seed)) << std::dec << " ("
                                << bad << " bytes differ)";
    }
  }
  return AssertionSuccess();
}

AssertionResult check_filled(const void* p, size_t len, uint8_t byte, const char* what) {
  auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < len; ++i) {
    if (b[i] != byte)
      return AssertionFailure() << what << ": byte " << i << " of " << len << " is 0x" << std::hex << int(b[i])
                                << ", want it unchanged (0x" << int(byte) << ")";
  }
  return AssertionSuccess();
}

// ---------------------------------------------------------------- Side

Side::~Side() {
  // Explicit order: QPs, CQs, MRs, PD, device, then the memory under them.
  extra_qps.clear();
  qp.reset();
  srq.reset();
  send_cq.reset();
  recv_cq.reset();
  fast_mrs.clear();
  mrs.clear();
  pd.reset();
  cm_events.clear();
  dev.reset();
  arena.reset();
}

AssertionResult Side::open(const std::string& spec, size_t arena_bytes) {
  mem::ArenaOptions ao;
  ao.size = arena_bytes;
  ao.huge = mem::HugePages::kNever;  // deterministic; the driver must not care
  ao.name = "tern-conf-" + name;
  auto a = mem::Arena::create(ao);
  if (!a) return AssertionFailure() << name << ": Arena::create: " << to_string(a.status());
  arena = std::move(a).value();

  auto d = open_device(spec);
  if (!d) return AssertionFailure() << name << ": open_device(\"" << spec << "\"): " << to_string(d.status());
  dev = std::move(d).value();
  auto p = dev->alloc_pd();
  if (!p) return AssertionFailure() << name << ": alloc_pd: " << to_string(p.status());
  pd = std::move(p).value();

  uint32_t cqe = std::min<uint32_t>(1024, caps().max_cqe);
  for (auto* cq : {&send_cq, &recv_cq}) {
    auto c = dev->create_cq(cqe);
    if (!c) return AssertionFailure() << name << ": create_cq(" << cqe << "): " << to_string(c.status());
    *cq = std::move(c).value();
  }
  return create_qp(default_qp_init(), &qp);
}

QpInit Side::default_qp_init() const {
  QpInit in;
  in.pd = pd.get();
  in.send_cq = send_cq.get();
  in.recv_cq = recv_cq.get();
  in.sq_depth = std::min<uint32_t>(128, caps().max_qp_wr);
  in.rq_depth = std::min<uint32_t>(128, caps().max_qp_wr);
  in.max_send_sge = std::min<uint32_t>(4, caps().max_send_sge);
  in.max_recv_sge = std::min<uint32_t>(4, caps().max_recv_sge);
  return in;
}

AssertionResult Side::create_qp(const QpInit& init, std::unique_ptr<Qp>* out) {
  auto q = dev->create_qp(init);
  if (!q)
    return AssertionFailure() << name << ": create_qp(sq " << init.sq_depth << ", rq " << init.rq_depth
                              << ", sge " << init.max_send_sge << "/" << init.max_recv_sge
                              << "): " << to_string(q.status());
  *out = std::move(q).value();
  return AssertionSuccess();
}

uint8_t* Side::carve(size_t len, size_t align) { return static_cast<uint8_t*>(arena->carve(len, align)); }

AssertionResult Side::reg(void* p, size_t len, uint32_t access, Mr** out) {
  auto m = pd->reg_mr(p, len, access);
  if (!m) return AssertionFailure() << name << ": reg_mr(" << len << " bytes, access 0x" << std::hex << access
                                    << std::dec << "): " << to_string(m.status());
  mrs.push_back(std::move(m).value());
  *out = mrs.back().get();
  if ((*out)->addr() != reinterpret_cast<uint64_t>(p) || (*out)->length() != len)
    return AssertionFailure() << name << ": reg_mr returned an Mr with addr/length " << (*out)->addr() << "/"
                              << (*out)->length() << ", registered " << p << "/" << len;
  return AssertionSuccess();
}

AssertionResult Side::alloc(size_t len, uint32_t access, Buf* out, size_t align) {
  uint8_t* p = carve(len, align);
  if (p == nullptr)
    return AssertionFailure() << name << ": arena full (" << arena->used() << " of " << arena->size()
                              << " bytes used, asked " << len << ")";
  std::memset(p, 0, len);
  Mr* mr = nullptr;
  if (auto r = reg(p, len, access, &mr); !r) return r;
  *out = Buf{p, len, mr};
  return AssertionSuccess();
}

AssertionResult Side::alloc_fast_mr(uint32_t depth, FastMr** out) {
  auto m = pd->alloc_fast_mr(depth);
  if (!m) return AssertionFailure() << name << ": alloc_fast_mr(" << depth << "): " << to_string(m.status());
  fast_mrs.push_back(std::move(m).value());
  *out = fast_mrs.back().get();
  return AssertionSuccess();
}

AssertionResult Side::post_send(const std::vector<SendWr>& wrs) {
  int err = 0;
  int n = qp->post_send(wrs.data(), static_cast<int>(wrs.size()), &err);
  if (n != static_cast<int>(wrs.size()))
    return AssertionFailure() << name << ": post_send accepted " << n << " of " << wrs.size() << " WRs, err "
                              << err << " (" << std::strerror(err) << "), QP " << qp_state_name(qp->state());
  return AssertionSuccess();
}

AssertionResult Side::post_recv(const std::vector<RecvWr>& wrs) {
  int err = 0;
  int n = qp->post_recv(wrs.data(), static_cast<int>(wrs.size()), &err);
  if (n != static_cast<int>(wrs.size()))
    return AssertionFailure() << name << ": post_recv accepted " << n << " of " << wrs.size() << " WRs, err "
                              << err << " (" << std::strerror(err) << "), QP " << qp_state_name(qp->state());
  return AssertionSuccess();
}

int Side::poll_once() {
  int found = 0;
  Wc wc[32];
  if (send_cq) {
    int n = send_cq->poll(wc, 32);
    for (int i = 0; i < n; ++i) send_wcs.push_back(wc[i]);
    found += n;
  }
  if (recv_cq) {
    int n = recv_cq->poll(wc, 32);
    for (int i = 0; i < n; ++i) recv_wcs.push_back(wc[i]);
    found += n;
  }
  if (dev) {
    CmEvent ev;
    while (dev->poll_cm(&ev)) {
      cm_events.push_back(std::move(ev));
      ev = CmEvent{};
      ++found;
    }
  }
  return found;
}

std::string Side::describe() const {
  std::ostringstream os;
  os << name << ": qp " << (qp ? qp_state_name(qp->state()) : "none");
  os << ", send wcs " << to_string(std::vector<Wc>(send_wcs.begin(), send_wcs.end()));
  os << ", recv wcs " << to_string(std::vector<Wc>(recv_wcs.begin(), recv_wcs.end()));
  os << ", cm [";
  for (size_t i = 0; i < cm_events.size(); ++i)
    os << (i ? ", " : "") << cm_event_name(cm_events[i].type) << " (" << to_string(cm_events[i].status) << ")";
  os << "]";
  return os.str();
}

// ---------------------------------------------------------------- Poller

void Poller::progress() {
  int found = 0;
  for (Side* s : sides_) found += s->poll_once();
  // On a two-core machine a forked peer needs the CPU too.
  if (found == 0) sched_yield();
}

void Poller::settle(Duration d) {
  auto end = SteadyClock::now() + d;
  while (SteadyClock::now() < end) progress();
}

std::string Poller::describe() const {
  std::string s;
  for (Side* side : sides_) s += "\n  " + side->describe();
  return s;
}

AssertionResult Poller::wait_until(const std::function<bool()>& pred, const std::string& what, Duration limit) {
  auto end = SteadyClock::now() + limit;
  for (;;) {
    progress();
    if (pred()) return AssertionSuccess();
    if (SteadyClock::now() > end)
      return AssertionFailure() << "timed out after "
                                << std::chrono::duration_cast<std::chrono::milliseconds>(limit).count()
                                << " ms waiting for " << what << "; state:" << describe();
  }
}

AssertionResult Poller::wait_wcs(Side& s, bool send, size_t n, std::vector<Wc>* out, Duration limit) {
  std::deque<Wc>& q = send ? s.send_wcs : s.recv_wcs;
  std::string what = std::to_string(n) + " completion(s) on " + s.name + "'s " + (send ? "send" : "recv") + " CQ";
  if (auto r = wait_until([&] { return q.size() >= n; }, what, limit); !r) return r;
  out->assign(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(n));
  q.erase(q.begin(), q.begin() + static_cast<std::ptrdiff_t>(n));
  return AssertionSuccess();
}

AssertionResult Poller::wait_send(Side& s, size_t n, std::vector<Wc>* out, Duration limit) {
  return wait_wcs(s, true, n, out, limit);
}
AssertionResult Poller::wait_recv(Side& s, size_t n, std::vector<Wc>* out, Duration limit) {
  return wait_wcs(s, false, n, out, limit);
}

AssertionResult Poller::wait_send1(Side& s, Wc* out, Duration limit) {
  std::vector<Wc> v;
  if (auto r = wait_wcs(s, true, 1, &v, limit); !r) return r;
  *out = v[0];
  return AssertionSuccess();
}
AssertionResult Poller::wait_recv1(Side& s, Wc* out, Duration limit) {
  std::vector<Wc> v;
  if (auto r = wait_wcs(s, false, 1, &v, limit); !r) return r;
  *out = v[0];
  return AssertionSuccess();
}

AssertionResult Poller::wait_cm(Side& s, CmEventType type, CmEvent* out, Duration limit) {
  std::string what = std::string("a CM event (") + cm_event_name(type) + ") on " + s.name;
  if (auto r = wait_until([&] { return !s.cm_events.empty(); }, what, limit); !r) return r;
  CmEvent ev = std::move(s.cm_events.front());
  s.cm_events.pop_front();
  if (ev.type != type)
    return AssertionFailure() << s.name << ": expected CM event " << cm_event_name(type) << ", got "
                              << cm_event_name(ev.type) << " (" << to_string(ev.status) << ")";
  if (out != nullptr) *out = std::move(ev);
  return AssertionSuccess();
}

AssertionResult Poller::wait_state(Side& s, QpState state, Duration limit) {
  return wait_until([&] { return s.qp->state() == state; }, s.name + "'s QP in state " + qp_state_name(state),
                    limit);
}

AssertionResult Poller::wait_disconnected(Side& s, Qp* qp, CmEvent* out) {
  if (qp == nullptr) qp = s.qp.get();
  CmEvent ev;
  if (auto r = wait_cm(s, CmEventType::kDisconnected, &ev); !r) return r;
  if (ev.qp != qp) return AssertionFailure() << s.name << ": kDisconnected names QP " << ev.qp << ", not " << qp;
  if (qp->state() != QpState::kError)
    return AssertionFailure() << s.name << ": QP in state " << qp_state_name(qp->state())
                              << " after kDisconnected (want error)";
  settle();
  for (const CmEvent& e : s.cm_events)
    if (e.type == CmEventType::kDisconnected && e.qp == qp)
      return AssertionFailure() << s.name << ": kDisconnected reported twice for one QP";
  if (out != nullptr) *out = std::move(ev);
  return AssertionSuccess();
}

// ---------------------------------------------------------------- connecting

AssertionResult establish(Poller& poller, Side& server, Side& client, const ConnectOptions& opt) {
  Qp* cqp = opt.client_qp ? opt.client_qp : client.qp.get();
  Qp* sqp = opt.server_qp ? opt.server_qp : server.qp.get();
  if (opt.listen) {
    Status s = server.dev->listen();
    if (!s.is_ok()) return AssertionFailure() << "server listen(): " << to_string(s);
  }
  Status s = client.dev->connect(cqp, opt.client_private);
  if (!s.is_ok()) return AssertionFailure() << "client connect(): " << to_string(s);

  CmEvent req;
  if (auto r = poller.wait_cm(server, CmEventType::kConnectRequest, &req); !r) return r;
  if (req.request == nullptr) return AssertionFailure() << "kConnectRequest without a request";
  if (req.request->private_data() != opt.client_private)
    return AssertionFailure() << "server got " << req.request->private_data().size()
                              << " bytes of private data in the request, not the client's "
                              << opt.client_private.size();
  s = server.dev->accept(req.request, sqp, opt.server_private);
  if (!s.is_ok()) return AssertionFailure() << "server accept(): " << to_string(s);

  CmEvent cev, sev;
  if (auto r = poller.wait_cm(client, CmEventType::kEstablished, &cev); !r) return r;
  if (auto r = poller.wait_cm(server, CmEventType::kEstablished, &sev); !r) return r;
  if (cev.qp != cqp) return AssertionFailure() << "client kEstablished names QP " << cev.qp << ", not " << cqp;
  if (sev.qp != sqp) return AssertionFailure() << "server kEstablished names QP " << sev.qp << ", not " << sqp;
  if (cev.private_data != opt.server_private)
    return AssertionFailure() << "client kEstablished carries " << cev.private_data.size()
                              << " bytes of private data, not the server's " << opt.server_private.size();
  if (sev.private_data != opt.client_private)
    return AssertionFailure() << "server kEstablished carries " << sev.private_data.size()
                              << " bytes of private data, not the client's " << opt.client_private.size();
  if (cqp->state() != QpState::kRts || sqp->state() != QpState::kRts)
    return AssertionFailure() << "after kEstablished: client QP " << qp_state_name(cqp->state()) << ", server QP "
                              << qp_state_name(sqp->state()) << " (want rts)";
  return AssertionSuccess();
}

// ---------------------------------------------------------------- work requests

SendWr wr_send(uint64_t id, const Sge* sg, uint32_t n, bool signaled) {
  SendWr w;
  w.wr_id = id;
  w.sg_list = sg;
  w.num_sge = n;
  w.opcode = WrOpcode::kSend;
  w.flags = signaled ? kWrSignaled : 0;
  return w;
}

SendWr wr_write(uint64_t id, const Sge* sg, uint32_t n, uint64_t raddr, uint32_t rkey, bool signaled) {
  SendWr w = wr_send(id, sg, n, signaled);
  w.opcode = WrOpcode::kRdmaWrite;
  w.remote_addr = raddr;
  w.rkey = rkey;
  return w;
}

SendWr wr_read(uint64_t id, const Sge* sg, uint32_t n, uint64_t raddr, uint32_t rkey, bool signaled) {
  SendWr w = wr_write(id, sg, n, raddr, rkey, signaled);
  w.opcode = WrOpcode::kRdmaRead;
  return w;
}

SendWr wr_reg(uint64_t id, FastMr* mr, const Buf& backing, size_t off, size_t len, uint32_t access, uint32_t rkey,
              bool signaled) {
  SendWr w;
  w.wr_id = id;
  w.opcode = WrOpcode::kRegMr;
  w.flags = signaled ? kWrSignaled : 0;
  w.reg.mr = mr;
  w.reg.addr = backing.addr(off);
  w.reg.length = len;
  w.reg.lkey = backing.lkey();
  w.reg.access = access;
  w.reg.rkey = rkey;
  return w;
}

SendWr wr_local_inv(uint64_t id, uint32_t rkey, bool signaled) {
  SendWr w;
  w.wr_id = id;
  w.opcode = WrOpcode::kLocalInv;
  w.flags = signaled ? kWrSignaled : 0;
  w.invalidate_rkey = rkey;
  return w;
}

RecvWr wr_recv(uint64_t id, const Sge* sg, uint32_t n) { return RecvWr{id, sg, n}; }

// ---------------------------------------------------------------- forking

namespace {

std::vector<std::pair<std::string, ChildBody>>& child_bodies() {
  static std::vector<std::pair<std::string, ChildBody>> v;
  return v;
}
constexpr const char* kChildFlag = "--tern-conformance-child";

}  // namespace

bool register_child_body(const char* name, ChildBody body) {
  child_bodies().emplace_back(name, body);
  return true;
}

std::optional<int> run_child_body_if_asked(int argc, char** argv) {
  if (argc != 4 || std::strcmp(argv[1], kChildFlag) != 0) return std::nullopt;
  for (const auto& [name, body] : child_bodies())
    if (name == argv[2]) {
      int code = body(argv[3]);
      std::fflush(stderr);
      return code;
    }
  std::fprintf(stderr, "child: no body named '%s'\n", argv[2]);
  return 127;
}

Child::Child(const char* body_name, const std::string& spec) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_ = fork();
  if (pid_ == 0) {
    // Nothing of the parent's (device files, sockets) may reach the child.
    close_range(3, ~0u, CLOSE_RANGE_CLOEXEC);
    const char* argv[] = {"tern-conformance", kChildFlag, body_name, spec.c_str(), nullptr};
    execv("/proc/self/exe", const_cast<char* const*>(argv));
    std::fprintf(stderr, "child: exec of /proc/self/exe failed: %s\n", std::strerror(errno));
    _exit(126);
  }
}

Child::~Child() { kill_now(); }

void Child::kill_now() {
  if (pid_ <= 0 || reaped_) return;
  ::kill(pid_, SIGKILL);
  int st = 0;
  waitpid(pid_, &st, 0);
  reaped_ = true;
}

AssertionResult Child::wait_exit(Poller& poller, int* code, Duration limit) {
  if (pid_ <= 0) return AssertionFailure() << "fork failed: " << std::strerror(errno);
  if (reaped_) return AssertionFailure() << "child already reaped";
  int st = 0;
  auto r = poller.wait_until(
      [&] {
        pid_t p = waitpid(pid_, &st, WNOHANG);
        return p == pid_;
      },
      "child " + std::to_string(pid_) + " to exit", limit);
  if (!r) return r;
  reaped_ = true;
  *code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  return AssertionSuccess();
}

// ---------------------------------------------------------------- fixtures

void ConformanceTest::SetUp() {
  spec = unique_spec(GetParam(), &socket_path);
  ASSERT_TRUE(server.open(spec));
  ASSERT_TRUE(client.open(spec));
}

void ConformanceTest::TearDown() {
  if (!socket_path.empty()) ::unlink(socket_path.c_str());
}

void ConnectedTest::SetUp() {
  ConformanceTest::SetUp();
  if (HasFatalFailure() || IsSkipped()) return;
  ASSERT_TRUE(connect_pair());
}

}  // namespace tern::conformance
