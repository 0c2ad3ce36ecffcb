// tern_engine: options, creation, poll, memory, connect/listen, handlers and
// statistics, over rpc::Engine.
#include <cstddef>
#include <algorithm>
#include <cstring>
#include <new>
#include <string_view>

#include "capi/capi_impl.h"

using namespace tern;
using tern::capi::fail;
using tern::capi::fail_static;

static_assert(TERN_REGISTRATION_AUTO == static_cast<int>(rpc::EngineOptions::Registration::kAuto));
static_assert(TERN_REGISTRATION_CACHE == static_cast<int>(rpc::EngineOptions::Registration::kRegCache));

namespace {

// The first version's options end here; a caller's struct must hold them all.
constexpr size_t kOptsV1Size = offsetof(tern_engine_opts, trusted_peers) + sizeof(bool);
// Version 2 added the recovery options; a caller's struct that ends before
// them leaves them at the engine's defaults.
constexpr size_t kOptsV2Size = offsetof(tern_engine_opts, keepalive_timeout_ms) + sizeof(uint32_t);

// Records are allocated in blocks of this many and never freed before the
// engine: the pool grows to the most calls ever in flight at once.
constexpr size_t kRecordBlock = 64;

void handler_trampoline(void* ctx, rpc::ServerCall* call) {
  auto* h = static_cast<capi::HandlerRecord*>(ctx);
  h->fn(h->ctx, reinterpret_cast<tern_server_call*>(call));
}

}  // namespace

capi::CallRecord* tern_engine::take_record() {
  if (free_records.empty()) {
    std::unique_ptr<capi::CallRecord[]> block(new (std::nothrow) capi::CallRecord[kRecordBlock]);
    if (!block) return nullptr;
    for (size_t i = 0; i < kRecordBlock; ++i) {
      block[i].owner = this;
      give_back(&block[i]);
    }
    record_blocks.push_back(std::move(block));
  }
  return free_records.pop_front();
}

extern "C" {

void tern_engine_opts_init(tern_engine_opts* opts, size_t size) noexcept {
  if (opts == nullptr || size < sizeof(size_t)) return;
  const rpc::EngineOptions d;
  tern_engine_opts o;
  std::memset(&o, 0, sizeof o);
  o.arena_bytes = d.arena_bytes;
  o.inline_send = d.inline_send;
  o.inline_recv = d.inline_recv;
  o.credits = d.credits;
  o.backlog = d.backlog;
  o.max_bulk = d.max_bulk;
  o.max_reply = d.max_reply;
  o.frwr_depth = d.frwr_depth;
  o.max_mrs = d.max_mrs;
  o.send_batch = d.send_batch;
  o.registration = static_cast<tern_registration>(d.registration);
  o.remote_invalidation = d.remote_invalidation;
  o.trusted_peers = d.trusted_peers;
  o.reconnect = d.reconnect;
  o.reconnect_min_ms = d.reconnect_min_ms;
  o.reconnect_max_ms = d.reconnect_max_ms;
  o.reconnect_give_up_ms = d.reconnect_give_up_ms;
  o.connect_timeout_ms = d.connect_timeout_ms;
  o.keepalive_ms = d.keepalive_ms;
  o.keepalive_idle_ms = d.keepalive_idle_ms;
  o.keepalive_timeout_ms = d.keepalive_timeout_ms;
  // A caller built against a later header has fields this library does not
  // know: zero them (their "unset"). One built against an earlier header gets
  // only what it has room for.
  std::memset(static_cast<void*>(opts), 0, size);
  std::memcpy(static_cast<void*>(opts), &o, size < sizeof o ? size : sizeof o);
  opts->size = size;
}

int tern_engine_create(const tern_engine_opts* opts, tern_engine** out) noexcept {
  if (out == nullptr) return fail_static(-EINVAL, "tern_engine_create: no place for the engine (NULL)");
  *out = nullptr;
  rpc::EngineOptions o;
  if (opts != nullptr) {
    if (opts->size < kOptsV1Size)
      return fail_static(-EINVAL, "tern_engine_create: opts->size is too small: fill opts with tern_engine_opts_init");
    if (opts->registration != TERN_REGISTRATION_AUTO && opts->registration != TERN_REGISTRATION_CACHE)
      return fail_static(-EINVAL, "tern_engine_create: unknown opts->registration");
    o.arena_bytes = opts->arena_bytes;
    o.inline_send = opts->inline_send;
    o.inline_recv = opts->inline_recv;
    o.credits = opts->credits;
    o.backlog = opts->backlog;
    o.max_bulk = opts->max_bulk;
    o.max_reply = opts->max_reply;
    o.frwr_depth = opts->frwr_depth;
    o.max_mrs = opts->max_mrs;
    o.send_batch = opts->send_batch;
    o.registration = static_cast<rpc::EngineOptions::Registration>(opts->registration);
    o.remote_invalidation = opts->remote_invalidation;
    o.trusted_peers = opts->trusted_peers;
    if (opts->size >= kOptsV2Size) {
      o.reconnect = opts->reconnect;
      o.reconnect_min_ms = opts->reconnect_min_ms;
      o.reconnect_max_ms = opts->reconnect_max_ms;
      o.reconnect_give_up_ms = opts->reconnect_give_up_ms;
      o.connect_timeout_ms = opts->connect_timeout_ms;
      o.keepalive_ms = opts->keepalive_ms;
      o.keepalive_idle_ms = opts->keepalive_idle_ms;
      o.keepalive_timeout_ms = opts->keepalive_timeout_ms;
    }
  }
  std::unique_ptr<tern_engine> e(new (std::nothrow) tern_engine);
  if (!e) return fail_static(-EAGAIN, "tern_engine_create: out of memory");
  auto r = rpc::Engine::create(o);
  if (!r) return fail(r.status());
  e->engine = std::move(r).value();
  *out = e.release();
  return 0;
}

void tern_engine_destroy(tern_engine* e) noexcept {
  if (e == nullptr) return;
  // The engine first: its connections go with it, and only then the handles
  // that pointed at them.
  e->engine.reset();
  while (tern_conn* c = e->conns.pop_front()) delete c;
  delete e;
}

int tern_engine_poll(tern_engine* e) noexcept { return e->engine->poll(); }

void* tern_engine_alloc(tern_engine* e, size_t len, size_t align) noexcept {
  if (e == nullptr || len == 0) {
    fail_static(-EINVAL, "tern_engine_alloc: no engine or zero length");
    return nullptr;
  }
  if (align == 0) align = 4096;
  if ((align & (align - 1)) != 0) {
    fail_static(-EINVAL, "tern_engine_alloc: the alignment is not a power of two");
    return nullptr;
  }
  void* p = e->engine->alloc(len, align);
  if (p == nullptr)
    fail_static(-EAGAIN, "tern_engine_alloc: the engine's arena is full (tern_engine_opts.arena_bytes)");
  return p;
}

int tern_engine_register_memory(tern_engine* e, void* addr, size_t len) noexcept {
  if (e == nullptr) return fail_static(-EINVAL, "tern_engine_register_memory: no engine");
  Status st = e->engine->register_memory(addr, len);
  return st ? 0 : fail(st);
}

int tern_engine_connect(tern_engine* e, const char* spec, tern_conn** out) noexcept {
  if (out != nullptr) *out = nullptr;
  if (e == nullptr || spec == nullptr || out == nullptr)
    return fail_static(-EINVAL, "tern_engine_connect: no engine, device spec or place for the connection");
  std::unique_ptr<tern_conn> c(new (std::nothrow) tern_conn{});
  if (!c) return fail_static(-EAGAIN, "tern_engine_connect: out of memory");
  auto r = e->engine->connect(std::string_view(spec));
  if (!r) return fail(r.status());
  c->conn = r.value();
  c->owner = e;
  e->conns.push_front(c.get());
  *out = c.release();
  return 0;
}

int tern_engine_listen(tern_engine* e, const char* spec) noexcept {
  if (e == nullptr || spec == nullptr) return fail_static(-EINVAL, "tern_engine_listen: no engine or device spec");
  Status st = e->engine->listen(std::string_view(spec));
  return st ? 0 : fail(st);
}

int tern_engine_handle(tern_engine* e, uint32_t prog, uint32_t vers, uint32_t proc, tern_handler_fn fn,
                       void* ctx) noexcept {
  if (e == nullptr || fn == nullptr) return fail_static(-EINVAL, "tern_engine_handle: no engine or handler");
  for (auto& h : e->handlers) {
    if (h->prog == prog && h->vers == vers && h->proc == proc) {
      // The engine already calls this record's trampoline: replace in place.
      h->fn = fn;
      h->ctx = ctx;
      return 0;
    }
  }
  std::unique_ptr<capi::HandlerRecord> h(new (std::nothrow) capi::HandlerRecord{prog, vers, proc, fn, ctx});
  if (!h) return fail_static(-EAGAIN, "tern_engine_handle: out of memory");
  e->engine->handle(prog, vers, proc, &handler_trampoline, h.get());
  e->handlers.push_back(std::move(h));
  return 0;
}

int tern_engine_stats(const tern_engine* e, tern_stat_fn fn, void* ctx) noexcept {
  if (e == nullptr || fn == nullptr) return fail_static(-EINVAL, "tern_engine_stats: no engine or callback");
  int n = 0;
  for (const StatEntry& s : e->engine->stats_view()) {
    fn(ctx, s.name, s.counter->get());
    ++n;
  }
  return n;
}

int tern_engine_stat(const tern_engine* e, const char* name, uint64_t* value) noexcept {
  if (e == nullptr || name == nullptr || value == nullptr)
    return fail_static(-EINVAL, "tern_engine_stat: no engine, name or place for the value");
  for (const StatEntry& s : e->engine->stats_view()) {
    if (std::strcmp(s.name, name) == 0) {
      *value = s.counter->get();
      return 0;
    }
  }
  return fail_static(-ENOENT, "tern_engine_stat: no counter of that name");
}

namespace {
size_t copy_out(const std::string& doc, char* buf, size_t len) {
  if (buf != nullptr && len > 0) {
    size_t n = std::min(doc.size(), len - 1);
    std::memcpy(buf, doc.data(), n);
    buf[n] = 0;
  }
  return doc.size();
}

// The sizing idiom made whole: a fresh document that fits is returned (and
// forgets any held one); one that does not fit falls back to the document an
// earlier short call measured, if that one fits, so "ask with NULL, then call
// with n+1" always yields a complete document, at worst as old as the sizing
// call. A short call with nothing held that fits keeps the fresh one and
// returns its size.
size_t copy_stats_json(std::string fresh, std::string* held, char* buf, size_t len) {
  if (buf != nullptr && fresh.size() < len) {
    held->clear();
    return copy_out(fresh, buf, len);
  }
  if (buf != nullptr && !held->empty() && held->size() < len) {
    size_t n = copy_out(*held, buf, len);
    held->clear();
    return n;
  }
  *held = std::move(fresh);
  return copy_out(*held, buf, len);
}
}  // namespace

size_t tern_engine_stats_json(const tern_engine* e, char* buf, size_t len) noexcept {
  if (e == nullptr) return 0;
  return copy_stats_json(e->engine->stats_json(), &e->held_json, buf, len);
}

size_t tern_engine_stats_json_snapshot(tern_engine* e, int wait_ms, char* buf, size_t len) noexcept {
  if (e == nullptr) return 0;
  std::string fresh = e->engine->stats_json_snapshot(wait_ms);
  if (fresh.empty()) return 0;
  std::lock_guard<std::mutex> lock(e->held_snapshot_mu);
  return copy_stats_json(std::move(fresh), &e->held_snapshot, buf, len);
}

}  // extern "C"
