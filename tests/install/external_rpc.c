/* A C program outside Tern's tree, built by tests/install/check-install.sh
 * against an installed Tern with nothing but `pkg-config --cflags --libs tern`
 * (and --static), compiled as C11: the C API (tern/tern.h) with a server and
 * a client engine over pmd/shm in one process, one inline RPC and one with a
 * write chunk, replies checked byte for byte. Exit status 0 only if all of
 * that worked. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tern/base/version.h>
#include <tern/tern.h>
#include <time.h>
#include <unistd.h>

#define PROG 0x20000078u
#define VERS 1u
#define REVERSE 1u
#define BULK 8192u

/* Replies with the arguments reversed, and fills a write chunk, when one is
 * offered, with bytes derived from the first argument. */
static void reverse(void* ctx, tern_server_call* c) {
  (void)ctx;
  size_t n = 0;
  const uint8_t* in = tern_server_call_args(c, &n);
  uint8_t out[64];
  if (n > sizeof out) n = sizeof out;
  for (size_t i = 0; i < n; ++i) out[i] = in[n - 1 - i];
  uint32_t cap = tern_server_call_bulk_capacity(c);
  uint8_t* bulk = cap != 0 ? tern_server_call_bulk_buffer(c, cap) : NULL;
  for (uint32_t i = 0; bulk != NULL && i < cap; ++i) bulk[i] = (uint8_t)(i * 7 + in[0]);
  (void)tern_server_call_reply(c, out, n, bulk, bulk != NULL ? cap : 0);
}

typedef struct outcome {
  int done;
  tern_call_status status;
  uint8_t results[64];
  size_t results_len;
  uint32_t bulk_len;
} outcome;

static void on_done(void* ctx, const tern_call_reply* r) {
  outcome* o = ctx;
  o->done = 1;
  o->status = r->status;
  o->results_len = r->results_len < sizeof o->results ? r->results_len : sizeof o->results;
  memcpy(o->results, r->results, o->results_len);
  o->bulk_len = r->bulk_recv_len;
}

static long now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long)ts.tv_sec;
}

static int fail(const char* what) {
  fprintf(stderr, "external_rpc.c: FAILED: %s (%s)\n", what, tern_last_error());
  return 1;
}

int main(void) {
  if (strcmp(tern_version(), TERN_VERSION_STRING) != 0) return fail("library and header versions differ");
  char spec[128];
  char path[96];
  snprintf(path, sizeof path, "/tmp/tern-external-rpc-c-%d.sock", (int)getpid());
  snprintf(spec, sizeof spec, "shm:path=%s", path);
  tern_engine_opts o;
  tern_engine_opts_init(&o, sizeof o);
  tern_engine *srv = NULL, *cli = NULL;
  if (tern_engine_create(&o, &srv) != 0 || tern_engine_create(&o, &cli) != 0) return fail("engine create");
  if (tern_engine_handle(srv, PROG, VERS, REVERSE, reverse, NULL) != 0) return fail("handle");
  if (tern_engine_listen(srv, spec) != 0) return fail("listen");
  tern_conn* c = NULL;
  if (tern_engine_connect(cli, spec, &c) != 0) return fail("connect");
  /* Bounded, so that a broken build fails instead of hanging CI. */
  long deadline = now_s() + 30;
  while (!tern_conn_ready(c)) {
    if (tern_conn_failed(c)) return fail("connection failed");
    tern_engine_poll(srv);
    tern_engine_poll(cli);
    if (now_s() > deadline) return fail("not connected after 30 s");
  }
  uint8_t* bulk = tern_engine_alloc(cli, BULK, 4096);
  if (bulk == NULL) return fail("alloc");
  const uint8_t args[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  for (int with_bulk = 0; with_bulk < 2; ++with_bulk) {
    outcome out = {0};
    tern_call call = {.size = sizeof call, .prog = PROG, .vers = VERS, .proc = REVERSE};
    call.args = args;
    call.args_len = sizeof args;
    if (with_bulk) {
      call.bulk_recv = bulk;
      call.bulk_recv_len = BULK;
    }
    call.done = on_done;
    call.ctx = &out;
    if (tern_conn_call(c, &call) != 0) return fail("call refused");
    while (!out.done) {
      tern_engine_poll(srv);
      tern_engine_poll(cli);
      if (now_s() > deadline) return fail("no reply after 30 s");
    }
    if (out.status != TERN_CALL_OK) return fail(tern_call_status_name(out.status));
    if (out.results_len != sizeof args) return fail("reply length");
    for (size_t i = 0; i < sizeof args; ++i)
      if (out.results[i] != args[sizeof args - 1 - i]) return fail("reply bytes");
    if (with_bulk) {
      if (out.bulk_len != BULK) return fail("write chunk length");
      for (uint32_t i = 0; i < BULK; ++i)
        if (bulk[i] != (uint8_t)(i * 7 + args[0])) return fail("write chunk bytes");
    }
  }
  tern_conn_close(c);
  tern_engine_destroy(cli);
  tern_engine_destroy(srv);
  unlink(path);
  printf("external_rpc.c: tern %s from C: 2 RPCs OK\n", tern_version());
  return 0;
}
