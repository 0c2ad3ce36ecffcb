/*
 * The C API from C: a server engine and a client engine in one process, both
 * driven from this thread, over pmd/shm. Inline calls and replies byte for
 * byte, read and write chunks checked byte for byte (from the engine's arena
 * and from a host arena registered with tern_engine_register_memory), error
 * replies, unknown procedures, statistics by name, errors with text, a log
 * sink, and a close with calls outstanding (each completes once,
 * disconnected). Recovery (version 2): deadlines, cancel, no_retry, the
 * recovery options, connection states and their callback, the recovery
 * counters, a server dropping a call, peer ids and argument digests, and an
 * engine destroyed with calls outstanding (each completes once).
 */
/* clock_gettime, unlink: POSIX, which -std=c11 alone hides. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tern/tern.h"

#include "capi_check.h"

enum {
  PROG = 0x20000077,
  VERS = 1,
  P_ECHO = 1,       /* results = args */
  P_CHECK_READ = 2, /* args: u32 seed; read chunk checked against pat(seed) -> u32 mismatches, u32 len */
  P_FILL = 3,       /* args: u32 len, u32 seed -> len bytes of pat(seed) into the write chunk */
  P_REFUSE = 4,     /* answers PROC_UNAVAIL through reply_error */
  P_LATER = 5,      /* held by the test, answered (or not) later */
  P_DROP = 6,       /* dropped unanswered; records peer id and digest */
  MAX_HELD = 64
};

static uint8_t pat(uint32_t seed, size_t i) { return (uint8_t)(seed * 31u + i * 7u + (i >> 8)); }

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

typedef struct fixture {
  tern_engine* srv;
  tern_engine* cli;
  tern_conn* conn;
  char path[128];
  char spec[160];
  tern_server_call* held[MAX_HELD];
  int nheld;
  int refuse_success_rc; /* what reply_error(TERN_ACCEPT_SUCCESS) returned */
  int dropped;
  char peer[128];
  uint64_t digests[4];
} fixture;

/* Polls both engines (srv may be NULL) until *flag reaches want or 5 s pass. */
static int poll_until(fixture* f, const int* flag, int want) {
  uint64_t end = now_ms() + 5000;
  while (now_ms() < end) {
    if (f->srv != NULL) tern_engine_poll(f->srv);
    tern_engine_poll(f->cli);
    if (*flag >= want) return 1;
  }
  return 0;
}

static void poll_for(fixture* f, int ms) {
  uint64_t end = now_ms() + (uint64_t)ms;
  while (now_ms() < end) {
    tern_engine_poll(f->srv);
    tern_engine_poll(f->cli);
  }
}

/* ---------------------------------------------------------------- server handlers */

static void h_echo(void* ctx, tern_server_call* call) {
  size_t n;
  const uint8_t* a = tern_server_call_args(call, &n);
  (void)ctx;
  CHECK(tern_server_call_prog(call) == PROG && tern_server_call_vers(call) == VERS &&
            tern_server_call_proc(call) == P_ECHO,
        "the call's program, version and procedure");
  CHECK(tern_server_call_reply(call, a, n, NULL, 0) == 0, "echo reply");
}

static void h_check_read(void* ctx, tern_server_call* call) {
  size_t n, blen;
  const uint8_t* a = tern_server_call_args(call, &n);
  const uint8_t* b = tern_server_call_bulk(call, &blen);
  uint32_t seed, out[2] = {0, (uint32_t)blen};
  (void)ctx;
  CHECK(n == 4, "check_read args are %zu bytes", n);
  memcpy(&seed, a, 4);
  for (size_t i = 0; i < blen; ++i) out[0] += b[i] != pat(seed, i);
  CHECK(tern_server_call_reply(call, out, sizeof out, NULL, 0) == 0, "check_read reply");
}

static void h_fill(void* ctx, tern_server_call* call) {
  size_t n;
  const uint8_t* a = tern_server_call_args(call, &n);
  uint32_t len, seed;
  uint8_t* buf;
  (void)ctx;
  CHECK(n == 8, "fill args are %zu bytes", n);
  memcpy(&len, a, 4);
  memcpy(&seed, a + 4, 4);
  CHECK(tern_server_call_bulk_capacity(call) >= len, "the client offered %u bytes for %u",
        tern_server_call_bulk_capacity(call), len);
  CHECK(tern_server_call_bulk_buffer(call, tern_server_call_bulk_capacity(call) + 1) == NULL,
        "a bulk buffer over the client's capacity");
  buf = tern_server_call_bulk_buffer(call, len);
  CHECK(buf != NULL, "bulk buffer of %u bytes", len);
  for (uint32_t i = 0; i < len; ++i) buf[i] = pat(seed, i);
  CHECK(tern_server_call_reply(call, NULL, 0, buf, len) == 0, "fill reply");
}

static void h_refuse(void* ctx, tern_server_call* call) {
  fixture* f = ctx;
  f->refuse_success_rc = tern_server_call_reply_error(call, TERN_ACCEPT_SUCCESS);
  CHECK(tern_server_call_reply_error(call, TERN_ACCEPT_PROC_UNAVAIL) == 0, "reply_error");
}

static void h_later(void* ctx, tern_server_call* call) {
  fixture* f = ctx;
  CHECK(f->nheld < MAX_HELD, "too many held calls");
  f->held[f->nheld++] = call;
}

static void h_drop(void* ctx, tern_server_call* call) {
  fixture* f = ctx;
  size_t n = tern_server_call_peer_id(call, f->peer, sizeof f->peer);
  CHECK(n > 0 && n == strlen(f->peer), "peer id '%s' (%zu)", f->peer, n);
  if (f->dropped < 4) f->digests[f->dropped] = tern_server_call_args_digest(call);
  f->dropped++;
  tern_server_call_drop(call);
}

/* ---------------------------------------------------------------- client side */

typedef struct pending {
  int done; /* completions seen: must end at exactly 1 */
  tern_call_status status;
  uint32_t bulk_recv_len;
  uint32_t retransmits;
  uint8_t results[256];
  size_t results_len;
} pending;

static void on_done(void* ctx, const tern_call_reply* r) {
  pending* p = ctx;
  p->done++;
  p->status = r->status;
  p->bulk_recv_len = r->bulk_recv_len;
  p->retransmits = r->retransmits;
  p->results_len = r->results_len;
  if (r->results_len <= sizeof p->results && r->results_len > 0) memcpy(p->results, r->results, r->results_len);
}

static int issue(fixture* f, tern_call* c, pending* p) {
  memset(p, 0, sizeof *p);
  c->done = on_done;
  c->ctx = p;
  return tern_conn_call(f->conn, c);
}

/* Issues the call and polls until it completes. */
static void call_and_wait(fixture* f, tern_call* c, pending* p) {
  int rc = issue(f, c, p);
  CHECK(rc == 0, "tern_conn_call: %s", tern_strerror(rc));
  CHECK(poll_until(f, &p->done, 1), "the call never completed");
}

static void setup_with(fixture* f, const tern_engine_opts* client_opts);
static void setup(fixture* f) { setup_with(f, NULL); }

static void setup_with(fixture* f, const tern_engine_opts* client_opts) {
  static int n;
  tern_engine_opts o;
  memset(f, 0, sizeof *f);
  snprintf(f->path, sizeof f->path, "/tmp/tern-capi-%d-%d.sock", (int)getpid(), n++);
  snprintf(f->spec, sizeof f->spec, "shm:path=%s", f->path);
  tern_engine_opts_init(&o, sizeof o);
  CHECK(tern_engine_create(&o, &f->srv) == 0, "server engine");
  if (client_opts != NULL) o = *client_opts;
  o.arena_bytes = 32u << 20;
  CHECK(tern_engine_create(&o, &f->cli) == 0, "client engine");
  CHECK(tern_engine_handle(f->srv, PROG, VERS, P_ECHO, h_echo, f) == 0, "handle");
  CHECK(tern_engine_handle(f->srv, PROG, VERS, P_CHECK_READ, h_check_read, f) == 0, "handle");
  CHECK(tern_engine_handle(f->srv, PROG, VERS, P_FILL, h_fill, f) == 0, "handle");
  CHECK(tern_engine_handle(f->srv, PROG, VERS, P_REFUSE, h_refuse, f) == 0, "handle");
  CHECK(tern_engine_handle(f->srv, PROG, VERS, P_LATER, h_later, f) == 0, "handle");
  CHECK(tern_engine_handle(f->srv, PROG, VERS, P_DROP, h_drop, f) == 0, "handle");
  CHECK(tern_engine_listen(f->srv, f->spec) == 0, "listen on %s", f->spec);
  CHECK(tern_engine_connect(f->cli, f->spec, &f->conn) == 0, "connect to %s", f->spec);
  uint64_t end = now_ms() + 5000;
  while (!tern_conn_ready(f->conn) && !tern_conn_failed(f->conn) && now_ms() < end) {
    tern_engine_poll(f->srv);
    tern_engine_poll(f->cli);
  }
  char why[256];
  CHECK(tern_conn_ready(f->conn), "not connected: %d %s", tern_conn_error(f->conn, why, sizeof why), why);
  CHECK(tern_conn_error(f->conn, why, sizeof why) == 0 && why[0] == 0, "a ready connection has no error");
}

static void teardown(fixture* f) {
  if (f->conn != NULL) {
    CHECK(tern_conn_outstanding(f->conn) == 0, "calls left outstanding");
    tern_conn_close(f->conn);
    poll_for(f, 20);
  }
  tern_engine_destroy(f->cli);
  tern_engine_destroy(f->srv);
  unlink(f->path);
}

/* ---------------------------------------------------------------- tests */

static void test_inline_echo(void) {
  fixture f;
  setup(&f);
  uint8_t args[200];
  for (size_t i = 0; i < sizeof args; ++i) args[i] = pat(1, i);
  tern_call c = {.size = sizeof c, .prog = PROG, .vers = VERS, .proc = P_ECHO, .args = args, .args_len = sizeof args};
  pending p;
  call_and_wait(&f, &c, &p);
  CHECK(p.done == 1 && p.status == TERN_CALL_OK, "status %s", tern_call_status_name(p.status));
  CHECK(p.results_len == sizeof args && memcmp(p.results, args, sizeof args) == 0, "echoed %zu bytes differ",
        p.results_len);

  /* With AUTH_SYS credentials; then credentials RFC 5531 does not allow. */
  tern_auth_sys auth = {.stamp = 7, .machine = "capi-test", .uid = 1000, .gid = 100, .ngids = 2, .gids = {4, 5}};
  c.auth = &auth;
  call_and_wait(&f, &c, &p);
  CHECK(p.status == TERN_CALL_OK && p.results_len == sizeof args, "a call with AUTH_SYS");
  auth.ngids = TERN_AUTH_SYS_MAX_GIDS + 1;
  CHECK(issue(&f, &c, &p) == -EINVAL, "17 gids");
  char longname[TERN_AUTH_SYS_MAX_MACHINE + 2];
  memset(longname, 'm', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  auth.ngids = 0;
  auth.machine = longname;
  CHECK(issue(&f, &c, &p) == -EINVAL, "a machine name over 255 bytes");
  c.auth = NULL;

  /* Malformed calls are refused up front, with nothing to complete. */
  tern_call small = c;
  small.size = sizeof(size_t) + 8;
  CHECK(issue(&f, &small, &p) == -EINVAL, "a tern_call whose size is too small");
  tern_call nodone = c;
  nodone.done = NULL;
  CHECK(tern_conn_call(f.conn, &nodone) == -EINVAL, "a call without a callback");
  uint8_t heap[4096];
  tern_call unreg = {.size = sizeof unreg, .prog = PROG, .vers = VERS, .proc = P_CHECK_READ,
                     .bulk_send = heap, .bulk_send_len = sizeof heap};
  CHECK(issue(&f, &unreg, &p) == -EINVAL, "bulk memory the engine did not register");
  poll_for(&f, 10);
  CHECK(p.done == 0, "a refused call completed");

  tern_conn_info info = {.size = sizeof info};
  CHECK(tern_conn_info_get(f.conn, &info) == 0, "info");
  CHECK(info.inline_send >= 1024 && info.inline_recv >= 1024 && info.credits >= 1, "info %u %u %u",
        info.inline_send, info.inline_recv, info.credits);
  CHECK(info.remote_invalidation, "both ends offer remote invalidation by default");
  teardown(&f);
}

static void check_read_chunk(fixture* f, uint8_t* bulk, uint32_t len, uint32_t seed) {
  for (uint32_t i = 0; i < len; ++i) bulk[i] = pat(seed, i);
  tern_call c = {.size = sizeof c, .prog = PROG, .vers = VERS, .proc = P_CHECK_READ, .args = &seed, .args_len = 4,
                 .bulk_send = bulk, .bulk_send_len = len};
  pending p;
  call_and_wait(f, &c, &p);
  CHECK(p.status == TERN_CALL_OK, "status %s", tern_call_status_name(p.status));
  uint32_t out[2];
  CHECK(p.results_len == sizeof out, "%zu bytes of results", p.results_len);
  memcpy(out, p.results, sizeof out);
  CHECK(out[0] == 0 && out[1] == len, "the server saw %u of %u bytes wrong, %u bytes", out[0], len, out[1]);
}

static void check_write_chunk(fixture* f, uint8_t* bulk, uint32_t len, uint32_t seed) {
  memset(bulk, 0xee, len);
  uint32_t args[2] = {len, seed};
  tern_call c = {.size = sizeof c, .prog = PROG, .vers = VERS, .proc = P_FILL, .args = args, .args_len = sizeof args,
                 .bulk_recv = bulk, .bulk_recv_len = len};
  pending p;
  call_and_wait(f, &c, &p);
  CHECK(p.status == TERN_CALL_OK, "status %s", tern_call_status_name(p.status));
  CHECK(p.bulk_recv_len == len, "%u bytes arrived of %u", p.bulk_recv_len, len);
  for (uint32_t i = 0; i < len; ++i) CHECK(bulk[i] == pat(seed, i), "byte %u of %u", i, len);
}

static void test_chunks(void) {
  fixture f;
  setup(&f);
  const uint32_t lens[] = {4096, 65536, 1u << 20};
  uint64_t reads0 = 0, writes0 = 0, reads1 = 0, writes1 = 0;
  CHECK(tern_engine_stat(f.srv, "rdma_reads", &reads0) == 0, "rdma_reads");
  CHECK(tern_engine_stat(f.srv, "rdma_writes", &writes0) == 0, "rdma_writes");
  for (int k = 0; k < 3; ++k) {
    uint8_t* b = tern_engine_alloc(f.cli, lens[k], 0);
    CHECK(b != NULL && (uintptr_t)b % 4096 == 0, "tern_engine_alloc(%u)", lens[k]);
    check_read_chunk(&f, b, lens[k], (uint32_t)k + 3);
    check_write_chunk(&f, b, lens[k], (uint32_t)k + 9);
  }
  CHECK(tern_engine_stat(f.srv, "rdma_reads", &reads1) == 0 && reads1 >= reads0 + 3, "the server pulled with READs");
  CHECK(tern_engine_stat(f.srv, "rdma_writes", &writes1) == 0 && writes1 >= writes0 + 3, "and pushed with WRITEs");

  /* Host memory: a shareable arena registered with the client engine. */
  tern_arena* a;
  CHECK(tern_arena_create(1u << 20, "capi-test", &a) == 0, "arena");
  CHECK(tern_arena_base(a) != NULL && tern_arena_size(a) >= (1u << 20), "arena range");
  uint8_t* hb = tern_arena_alloc(a, 65536, 4096);
  CHECK(hb != NULL && hb >= (uint8_t*)tern_arena_base(a), "arena alloc");
  CHECK(tern_arena_alloc(a, 2u << 20, 0) == NULL && strstr(tern_last_error(), "full") != NULL, "an arena overflow");
  CHECK(tern_engine_register_memory(f.cli, tern_arena_base(a), tern_arena_size(a)) == 0, "register_memory");
  check_read_chunk(&f, hb, 65536, 21);
  check_write_chunk(&f, hb, 65536, 22);

  /* pmd/shm cannot share plain heap memory: refused, with the reason. */
  void* heap = malloc(8192);
  CHECK(heap != NULL, "malloc");
  int rc = tern_engine_register_memory(f.cli, heap, 8192);
  CHECK(rc == -ENOTSUP && strstr(tern_last_error(), "Arena") != NULL, "register_memory of heap memory: %d", rc);
  free(heap);
  teardown(&f);
  tern_arena_destroy(a); /* after the engine that registered it */
}

static void test_error_replies(void) {
  fixture f;
  setup(&f);
  tern_call c = {.size = sizeof c, .prog = PROG, .vers = VERS, .proc = P_REFUSE};
  pending p;
  f.refuse_success_rc = 1;
  call_and_wait(&f, &c, &p);
  CHECK(f.refuse_success_rc == -EINVAL, "reply_error(SUCCESS) returned %d", f.refuse_success_rc);
  CHECK(p.done == 1 && p.status == TERN_CALL_PROC_UNAVAIL, "status %s", tern_call_status_name(p.status));

  c.proc = 77; /* nobody serves it */
  call_and_wait(&f, &c, &p);
  CHECK(p.status == TERN_CALL_PROC_UNAVAIL, "unknown procedure: %s", tern_call_status_name(p.status));
  c.proc = P_ECHO;
  c.vers = 9;
  call_and_wait(&f, &c, &p);
  CHECK(p.status == TERN_CALL_PROG_MISMATCH, "unknown version: %s", tern_call_status_name(p.status));
  c.prog = 12345;
  c.vers = 1;
  call_and_wait(&f, &c, &p);
  CHECK(p.status == TERN_CALL_PROG_UNAVAIL, "unknown program: %s", tern_call_status_name(p.status));
  teardown(&f);
}

typedef struct seen {
  int calls, replies, total;
} seen;

static void visit(void* ctx, const char* name, uint64_t value) {
  seen* s = ctx;
  s->total++;
  if (strcmp(name, "calls") == 0) s->calls = (int)value;
  if (strcmp(name, "replies") == 0) s->replies = (int)value;
}

static void test_stats(void) {
  fixture f;
  setup(&f);
  tern_call c = {.size = sizeof c, .prog = PROG, .vers = VERS, .proc = P_ECHO};
  pending p;
  for (int i = 0; i < 5; ++i) call_and_wait(&f, &c, &p);
  uint64_t v = 0;
  CHECK(tern_engine_stat(f.cli, "calls", &v) == 0 && v == 5, "client calls = %llu", (unsigned long long)v);
  CHECK(tern_engine_stat(f.srv, "replies", &v) == 0 && v == 5, "server replies = %llu", (unsigned long long)v);
  CHECK(tern_engine_stat(f.cli, "no_such_counter", &v) == -ENOENT, "an unknown counter");
  seen s = {-1, -1, 0};
  int n = tern_engine_stats(f.srv, visit, &s);
  CHECK(n == s.total && n >= 20, "visited %d counters, counted %d", n, s.total);
  /* Symmetric: a server counts the calls it received as a client those it made. */
  CHECK(s.replies == 5 && s.calls == 5, "server: replies %d, calls %d", s.replies, s.calls);
  /* The JSON document: its length first, then whole; a small buffer gets a
   * NUL-terminated prefix. */
  size_t need = tern_engine_stats_json(f.cli, NULL, 0);
  CHECK(need > 100, "stats_json length %zu", need);
  /* Its ages (idle_ns, age_ns) move on between two calls: leave room. */
  size_t cap = need + 256;
  char* doc = malloc(cap);
  size_t got = tern_engine_stats_json(f.cli, doc, cap);
  CHECK(got < cap && strlen(doc) == got, "whole document (%zu of %zu)", got, cap);
  CHECK(doc[0] == '{' && doc[got - 1] == '}', "a JSON object");
  CHECK(strstr(doc, "\"connections\":[{") != NULL && strstr(doc, "\"side\":\"client\"") != NULL,
        "one client connection: %.200s", doc);
  CHECK(strstr(doc, "\"ops\":5") != NULL, "the echo procedure's 5 calls");
  char small[8];
  CHECK(tern_engine_stats_json(f.cli, small, sizeof small) > sizeof small && strlen(small) == 7, "cut like snprintf");
  free(doc);
  teardown(&f);
}

static void test_errors(void) {
  tern_engine* e = NULL;
  tern_engine_opts o;
  tern_engine_opts_init(&o, sizeof o);
  CHECK(o.size == sizeof o && o.credits == 32 && o.arena_bytes > 0 && o.remote_invalidation && !o.trusted_peers,
        "default options");
  o.credits = 0;
  CHECK(tern_engine_create(&o, &e) == -EINVAL && e == NULL, "credits 0");
  CHECK(strstr(tern_last_error(), "credits") != NULL, "the reason names the option: %s", tern_last_error());
  tern_engine_opts_init(&o, sizeof o);
  o.size = 8;
  CHECK(tern_engine_create(&o, &e) == -EINVAL && strstr(tern_last_error(), "tern_engine_opts_init") != NULL,
        "an options struct too small");
  tern_engine_opts_init(&o, sizeof o);
  o.registration = TERN_REGISTRATION_CACHE; /* without trusted_peers */
  CHECK(tern_engine_create(&o, &e) == -EINVAL && strstr(tern_last_error(), "trusted_peers") != NULL,
        "the registration cache without trusted peers");

  /* An earlier caller's smaller struct is filled only as far as it goes. */
  unsigned char room[sizeof(tern_engine_opts) + 16];
  memset(room, 0xab, sizeof room);
  tern_engine_opts_init((tern_engine_opts*)(void*)room, sizeof(tern_engine_opts));
  CHECK(room[sizeof(tern_engine_opts)] == 0xab, "tern_engine_opts_init wrote past the size it was given");

  tern_engine_opts_init(&o, sizeof o);
  o.arena_bytes = 8u << 20;
  CHECK(tern_engine_create(&o, &e) == 0 && e != NULL, "engine");
  tern_conn* c = (tern_conn*)&o; /* must be overwritten */
  int rc = tern_engine_connect(e, "nosuchdriver:path=/nowhere", &c);
  CHECK(rc == -ENOENT && c == NULL, "connect with an unknown driver: %d", rc);
  CHECK(strstr(tern_last_error(), "nosuchdriver") != NULL, "the reason names the driver: %s", tern_last_error());
  CHECK(strcmp(tern_strerror(rc), "not found") == 0, "tern_strerror(%d) = %s", rc, tern_strerror(rc));
  rc = tern_engine_listen(e, "shm:nonsense");
  CHECK(rc < 0 && tern_last_error()[0] != 0, "listen with a malformed spec: %d", rc);
  rc = tern_engine_connect(e, NULL, &c);
  CHECK(rc == -EINVAL, "connect without a spec");
  CHECK(tern_engine_handle(e, 1, 1, 1, NULL, NULL) == -EINVAL, "a NULL handler");
  CHECK(tern_engine_alloc(e, 4096, 3) == NULL && strstr(tern_last_error(), "power of two") != NULL, "alignment 3");

  /* Nobody listens there: the connection fails, with a reason. */
  char path[128], spec[160], why[256];
  snprintf(path, sizeof path, "/tmp/tern-capi-%d-nobody.sock", (int)getpid());
  snprintf(spec, sizeof spec, "shm:path=%s", path);
  rc = tern_engine_connect(e, spec, &c);
  if (rc == 0) {
    uint64_t end = now_ms() + 5000;
    while (!tern_conn_failed(c) && !tern_conn_ready(c) && now_ms() < end) tern_engine_poll(e);
    CHECK(tern_conn_failed(c), "a connection to nobody did not fail");
    rc = tern_conn_error(c, why, sizeof why);
    CHECK(rc < 0 && why[0] != 0, "its error: %d '%s'", rc, why);
    tern_call call = {.size = sizeof call, .prog = PROG, .vers = VERS, .proc = P_ECHO};
    pending p;
    memset(&p, 0, sizeof p);
    call.done = on_done;
    call.ctx = &p;
    CHECK(tern_conn_call(c, &call) == -ENOTCONN, "a call on a failed connection");
    tern_conn_close(c);
  } else {
    CHECK(tern_last_error()[0] != 0, "connect to nobody failed (%d) without a reason", rc);
  }
  tern_engine_destroy(e);

  CHECK(strcmp(tern_call_status_name(TERN_CALL_DISCONNECTED), "disconnected") == 0, "status names");
  CHECK(strcmp(tern_call_status_name((tern_call_status)99), "unknown call status") == 0, "unknown status name");
  CHECK(strcmp(tern_strerror(0), "success") == 0, "tern_strerror(0)");
  CHECK(tern_c_api_version() == TERN_C_API_VERSION, "API version");
}

typedef struct log_seen {
  int lines, named; /* all lines; lines about our arena, at debug level from "mem" */
} log_seen;

static void log_sink(void* ctx, tern_log_level level, const char* component, const char* line) {
  log_seen* s = ctx;
  s->lines++;
  if (level == TERN_LOG_DEBUG && strcmp(component, "mem") == 0 && strstr(line, "capi-log-arena") != NULL) s->named++;
}

/* The C sink receives the library's lines, with level and component; after
 * it is removed it hears nothing. */
static void test_logging(void) {
  log_seen s = {0, 0};
  tern_arena* a;
  tern_log_set_level(TERN_LOG_DEBUG);
  tern_log_set_sink(log_sink, &s);
  CHECK(tern_arena_create(1u << 20, "capi-log-arena", &a) == 0, "arena");
  tern_arena_destroy(a);
  CHECK(s.named == 1, "the sink saw %d lines, %d about the arena", s.lines, s.named);
  tern_log_set_sink(NULL, NULL);
  int before = s.lines;
  CHECK(tern_arena_create(1u << 20, "capi-log-arena", &a) == 0, "arena");
  tern_arena_destroy(a);
  CHECK(s.lines == before, "a removed sink still heard %d lines", s.lines - before);
  tern_log_set_level(TERN_LOG_WARN);
}

/* A handler may answer from a later poll; a close with calls outstanding
 * completes every one of them exactly once, disconnected; the server's held
 * calls then answer -ENOTCONN. */
static void test_close_with_calls_outstanding(void) {
  enum { N = 8 };
  fixture f;
  setup(&f);
  pending ps[N];
  uint8_t* bulk = tern_engine_alloc(f.cli, N * 4096, 0);
  CHECK(bulk != NULL, "alloc");
  for (int i = 0; i < N; ++i) {
    tern_call c = {.size = sizeof c, .prog = PROG, .vers = VERS, .proc = P_LATER};
    if (i % 2 == 0) { /* some hold a registration */
      c.bulk_recv = bulk + i * 4096;
      c.bulk_recv_len = 4096;
    }
    CHECK(issue(&f, &c, &ps[i]) == 0, "issue %d", i);
  }
  /* Sent ones only: the rest wait for credits (the first grant is one). */
  CHECK(tern_conn_outstanding(f.conn) >= 1 && tern_conn_outstanding(f.conn) <= N, "outstanding %u",
        tern_conn_outstanding(f.conn));
  CHECK(poll_until(&f, &f.nheld, 1), "no call reached the server");
  poll_for(&f, 20);
  CHECK(ps[0].done == 0, "completed before the handler replied");

  /* Answer the first from here, outside any handler. */
  tern_server_call* first = f.held[0];
  uint32_t xid = tern_server_call_xid(first);
  CHECK(xid != 0, "xid");
  CHECK(tern_server_call_reply(first, "late", 4, NULL, 0) == 0, "a late reply");
  for (int i = 1; i < f.nheld; ++i) f.held[i - 1] = f.held[i];
  f.nheld--;
  int any = 0;
  uint64_t end = now_ms() + 5000;
  while (!any && now_ms() < end) {
    tern_engine_poll(f.srv);
    tern_engine_poll(f.cli);
    for (int i = 0; i < N; ++i) any |= ps[i].done;
  }
  int answered = -1;
  for (int i = 0; i < N; ++i)
    if (ps[i].done) answered = i;
  CHECK(answered >= 0 && ps[answered].status == TERN_CALL_OK && ps[answered].results_len == 4 &&
            memcmp(ps[answered].results, "late", 4) == 0,
        "the late reply");

  tern_conn_close(f.conn);
  f.conn = NULL;
  end = now_ms() + 5000;
  int all = 0;
  while (!all && now_ms() < end) {
    tern_engine_poll(f.srv);
    tern_engine_poll(f.cli);
    all = 1;
    for (int i = 0; i < N; ++i) all &= ps[i].done >= 1;
  }
  CHECK(all, "not every call completed after the close");
  poll_for(&f, 50); /* and none completes twice */
  for (int i = 0; i < N; ++i) {
    CHECK(ps[i].done == 1, "call %d completed %d times", i, ps[i].done);
    if (i != answered)
      CHECK(ps[i].status == TERN_CALL_DISCONNECTED, "call %d: %s", i, tern_call_status_name(ps[i].status));
  }

  /* The server notices; the calls it held are answered into nothing. */
  uint64_t disc = 0;
  end = now_ms() + 5000;
  while (disc == 0 && now_ms() < end) {
    tern_engine_poll(f.srv);
    tern_engine_poll(f.cli);
    CHECK(tern_engine_stat(f.srv, "disconnects", &disc) == 0, "disconnects");
  }
  CHECK(disc >= 1, "the server never saw the disconnect");
  for (int i = 0; i < f.nheld; ++i)
    CHECK(tern_server_call_reply(f.held[i], NULL, 0, NULL, 0) == -ENOTCONN, "held call %d", i);
  teardown(&f);
}

typedef struct states {
  int n;
  tern_conn_state from[16], to[16];
  int last_err;
  char last_why[256];
} states;

static void on_state(void* ctx, tern_conn* conn, tern_conn_state from, tern_conn_state to, int err, const char* why) {
  states* s = ctx;
  (void)conn;
  if (s->n < 16) {
    s->from[s->n] = from;
    s->to[s->n] = to;
  }
  s->n++;
  if (err != 0) {
    s->last_err = err;
    snprintf(s->last_why, sizeof s->last_why, "%s", why);
  }
}

static int saw_state(const states* s, tern_conn_state to) {
  for (int i = 0; i < s->n && i < 16; ++i)
    if (s->to[i] == to) return 1;
  return 0;
}

static uint64_t stat_of(tern_engine* e, const char* name) {
  uint64_t v = 0;
  CHECK(tern_engine_stat(e, name, &v) == 0, "no counter %s", name);
  return v;
}

static void wait_ready(fixture* f) {
  uint64_t end = now_ms() + 5000;
  while (tern_conn_get_state(f->conn) != TERN_CONN_READY && now_ms() < end) poll_for(f, 1);
}

/* The recovery options: defaults, and a caller of version 1 (a smaller
 * struct) still creates an engine. */
static void test_recovery_options(void) {
  tern_engine_opts o;
  tern_engine_opts_init(&o, sizeof o);
  CHECK(o.reconnect && o.reconnect_min_ms == 10 && o.reconnect_max_ms == 2000 && o.reconnect_give_up_ms == 60000 &&
            o.connect_timeout_ms == 5000 && o.keepalive_ms == 5000 && o.keepalive_idle_ms == 30000 &&
            o.keepalive_timeout_ms == 5000,
        "recovery defaults");
  tern_engine* e = NULL;
  tern_engine_opts v1;
  tern_engine_opts_init(&v1, offsetof(tern_engine_opts, reconnect));
  v1.arena_bytes = 8u << 20;
  CHECK(tern_engine_create(&v1, &e) == 0, "a version-1 options struct");
  tern_engine_destroy(e);
  CHECK(strcmp(tern_call_status_name(TERN_CALL_TIMED_OUT), "timed out") == 0, "name of TIMED_OUT");
  CHECK(strcmp(tern_call_status_name(TERN_CALL_CANCELLED), "cancelled") == 0, "name of CANCELLED");
  CHECK(strcmp(tern_conn_state_name(TERN_CONN_RECONNECTING), "reconnecting") == 0, "state name: %s",
        tern_conn_state_name(TERN_CONN_RECONNECTING));
  CHECK(strcmp(tern_conn_state_name((tern_conn_state)42), "unknown connection state") == 0, "unknown state");
}

/* Deadlines and cancel: an inline call and a chunked one past their
 * deadlines, a cancelled call; the server's late answers are dropped and
 * counted; a dropped call times out; the connection comes back. */
static void test_deadlines_and_cancel(void) {
  fixture f;
  tern_engine_opts co;
  tern_engine_opts_init(&co, sizeof co);
  co.reconnect_min_ms = 5;
  co.reconnect_max_ms = 50;
  setup_with(&f, &co);
  states st;
  memset(&st, 0, sizeof st);
  CHECK(tern_conn_on_state_change(f.conn, on_state, &st) == 0, "on_state_change");
  CHECK(tern_conn_get_state(f.conn) == TERN_CONN_READY, "state %s", tern_conn_state_name(tern_conn_get_state(f.conn)));
  tern_call echo = {.size = sizeof echo, .prog = PROG, .vers = VERS, .proc = P_ECHO};
  pending p;
  call_and_wait(&f, &echo, &p); /* a reply: the credits for what follows */

  /* Inline, past its deadline: completes at once; its late reply is dropped. */
  tern_call c = {.size = sizeof c, .prog = PROG, .vers = VERS, .proc = P_LATER, .timeout_ns = 20000000};
  pending late;
  call_and_wait(&f, &c, &late);
  CHECK(late.status == TERN_CALL_TIMED_OUT, "inline call past its deadline: %s", tern_call_status_name(late.status));
  CHECK(f.nheld == 1, "the server holds it (%d)", f.nheld);
  CHECK(tern_server_call_reply(f.held[0], "x", 1, NULL, 0) == 0, "late reply");
  f.nheld = 0;
  uint64_t end = now_ms() + 5000;
  while (stat_of(f.cli, "late_replies") < 1 && now_ms() < end) poll_for(&f, 1);
  CHECK(stat_of(f.cli, "late_replies") == 1, "late_replies");
  CHECK(late.done == 1, "completed %d times", late.done);

  /* Cancel: one held by the server. */
  uint32_t xid = 0;
  pending cancelled;
  tern_call h = {.size = sizeof h, .prog = PROG, .vers = VERS, .proc = P_LATER};
  memset(&cancelled, 0, sizeof cancelled);
  h.done = on_done;
  h.ctx = &cancelled;
  CHECK(tern_conn_call_xid(f.conn, &h, &xid) == 0 && xid != 0, "call_xid");
  CHECK(poll_until(&f, &f.nheld, 1), "not held");
  CHECK(tern_server_call_xid(f.held[0]) == xid, "the xid it was given is the one on the wire");
  CHECK(tern_conn_cancel(f.conn, xid + 12345) == -ENOENT, "cancel of an unknown xid");
  CHECK(tern_conn_cancel(f.conn, xid) == 0, "cancel");
  CHECK(cancelled.done == 0, "completed inside tern_conn_cancel");
  CHECK(poll_until(&f, &cancelled.done, 1) && cancelled.status == TERN_CALL_CANCELLED, "cancelled: %s",
        tern_call_status_name(cancelled.status));
  CHECK(tern_conn_cancel(f.conn, xid) == -ENOENT, "cancel twice");
  CHECK(stat_of(f.cli, "cancels") == 1, "cancels");
  (void)tern_server_call_reply(f.held[0], NULL, 0, NULL, 0);
  f.nheld = 0;

  /* A dropped call (no answer ever) with a write chunk past its deadline:
   * completes once fenced -- the connection is dropped and comes back. */
  uint8_t* bulk = tern_engine_alloc(f.cli, 4096, 0);
  CHECK(bulk != NULL, "alloc");
  uint32_t arg = 7;
  tern_call d = {.size = sizeof d, .prog = PROG, .vers = VERS, .proc = P_DROP, .args = &arg, .args_len = 4,
                 .bulk_recv = bulk, .bulk_recv_len = 4096, .timeout_ns = 30000000};
  pending dropped;
  call_and_wait(&f, &d, &dropped);
  CHECK(dropped.status == TERN_CALL_TIMED_OUT, "dropped: %s", tern_call_status_name(dropped.status));
  CHECK(f.dropped == 1 && f.peer[0] != 0, "the server dropped it (%d), peer '%s'", f.dropped, f.peer);
  CHECK(stat_of(f.srv, "calls_dropped") == 1, "calls_dropped");
  CHECK(stat_of(f.cli, "rkeys_live") == 0, "its registration fenced");
  wait_ready(&f);
  CHECK(saw_state(&st, TERN_CONN_RECONNECTING) && tern_conn_get_state(f.conn) == TERN_CONN_READY,
        "ready -> reconnecting -> ready (%d changes, now %s)", st.n, tern_conn_state_name(tern_conn_get_state(f.conn)));
  CHECK(st.last_err < 0 && st.last_why[0] != 0, "why it left ready: %d '%s'", st.last_err, st.last_why);
  CHECK(stat_of(f.cli, "reconnects") >= 1 && stat_of(f.cli, "declared_dead") >= 1, "recovery counters");
  /* The same arguments digest the same; others differ. Each of these times
   * out and drops the connection again: wait until it is back before the
   * next, so that it is not left to expire unsent. */
  pending d2;
  call_and_wait(&f, &d, &d2);
  wait_ready(&f);
  arg = 8;
  pending d3;
  call_and_wait(&f, &d, &d3);
  wait_ready(&f);
  CHECK(f.dropped == 3 && f.digests[0] == f.digests[1] && f.digests[1] != f.digests[2], "args digests");
  call_and_wait(&f, &echo, &p);
  CHECK(p.status == TERN_CALL_OK && p.retransmits == 0, "the connection works: %s", tern_call_status_name(p.status));
  teardown(&f);
}

/* The server goes away: a no_retry call fails at the loss, the others wait
 * for the reconnect until reconnect_give_up_ms, then the connection fails
 * for good and they complete disconnected. */
static void test_give_up_and_no_retry(void) {
  fixture f;
  tern_engine_opts co;
  tern_engine_opts_init(&co, sizeof co);
  co.reconnect_min_ms = 5;
  co.reconnect_max_ms = 20;
  co.reconnect_give_up_ms = 200;
  setup_with(&f, &co);
  states st;
  memset(&st, 0, sizeof st);
  CHECK(tern_conn_on_state_change(f.conn, on_state, &st) == 0, "on_state_change");
  tern_call echo = {.size = sizeof echo, .prog = PROG, .vers = VERS, .proc = P_ECHO};
  pending p;
  call_and_wait(&f, &echo, &p);
  pending retried, once;
  tern_call a = {.size = sizeof a, .prog = PROG, .vers = VERS, .proc = P_LATER};
  tern_call b = {.size = sizeof b, .prog = PROG, .vers = VERS, .proc = P_LATER, .no_retry = true};
  CHECK(issue(&f, &a, &retried) == 0 && issue(&f, &b, &once) == 0, "issue");
  CHECK(poll_until(&f, &f.nheld, 2), "not held");
  f.nheld = 0;
  tern_engine_destroy(f.srv); /* its calls go with it */
  f.srv = NULL;
  CHECK(poll_until(&f, &once.done, 1) && once.status == TERN_CALL_DISCONNECTED, "no_retry: %s",
        tern_call_status_name(once.status));
  CHECK(retried.done == 0, "the other call waits for the reconnect");
  CHECK(poll_until(&f, &retried.done, 1) && retried.status == TERN_CALL_DISCONNECTED, "after giving up: %s",
        tern_call_status_name(retried.status));
  CHECK(tern_conn_get_state(f.conn) == TERN_CONN_FAILED && tern_conn_failed(f.conn), "failed for good");
  CHECK(saw_state(&st, TERN_CONN_RECONNECTING) && st.to[(st.n < 16 ? st.n : 16) - 1] == TERN_CONN_FAILED,
        "reconnecting then failed (%d changes)", st.n);
  CHECK(stat_of(f.cli, "reconnect_attempts") >= 1, "reconnect_attempts");
  CHECK(once.done == 1 && retried.done == 1, "each once");
  tern_conn_close(f.conn);
  f.conn = NULL;
  tern_engine_destroy(f.cli);
  unlink(f.path);
}

/* Destroying a client engine completes its outstanding calls, once each,
 * inside tern_engine_destroy. */
static void test_destroy_completes_calls(void) {
  enum { N = 4 };
  fixture f;
  setup(&f);
  pending ps[N];
  uint8_t* bulk = tern_engine_alloc(f.cli, N * 4096, 0);
  for (int i = 0; i < N; ++i) {
    tern_call c = {.size = sizeof c, .prog = PROG, .vers = VERS, .proc = P_LATER,
                   .bulk_recv = bulk + i * 4096, .bulk_recv_len = 4096};
    CHECK(issue(&f, &c, &ps[i]) == 0, "issue %d", i);
  }
  CHECK(poll_until(&f, &f.nheld, 1), "not held");
  tern_engine_destroy(f.cli);
  for (int i = 0; i < N; ++i)
    CHECK(ps[i].done == 1 && ps[i].status == TERN_CALL_DISCONNECTED, "call %d: %d completions, %s", i, ps[i].done,
          tern_call_status_name(ps[i].status));
  for (int i = 0; i < f.nheld; ++i) (void)tern_server_call_reply(f.held[i], NULL, 0, NULL, 0);
  tern_engine_destroy(f.srv);
  unlink(f.path);
}

int main(void) {
  struct {
    const char* name;
    void (*fn)(void);
  } tests[] = {
      {"inline_echo", test_inline_echo},
      {"chunks", test_chunks},
      {"error_replies", test_error_replies},
      {"stats", test_stats},
      {"errors", test_errors},
      {"logging", test_logging},
      {"close_with_calls_outstanding", test_close_with_calls_outstanding},
      {"recovery_options", test_recovery_options},
      {"deadlines_and_cancel", test_deadlines_and_cancel},
      {"give_up_and_no_retry", test_give_up_and_no_retry},
      {"destroy_completes_calls", test_destroy_completes_calls},
  };
  for (size_t i = 0; i < sizeof tests / sizeof tests[0]; ++i) {
    tests[i].fn();
    printf("[ ok ] %s\n", tests[i].name);
  }
  return 0;
}
