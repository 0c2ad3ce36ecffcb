/*
 * tern_engine_stats_json's sizing idiom, as tern.h documents it: ask with no
 * buffer for the length n, allocate n+1, call again -- and get the whole
 * document, valid JSON, even though the engine kept working in between
 * (calls completed, ages moved on) and a fresh document would be longer.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tern/tern.h"

#include "capi_check.h"

enum { PROG = 0x20000078, VERS = 1, P_ECHO = 1 };

static uint64_t now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static void h_echo(void* ctx, tern_server_call* call) {
  size_t n;
  const uint8_t* a = tern_server_call_args(call, &n);
  (void)ctx;
  CHECK(tern_server_call_reply(call, a, n, NULL, 0) == 0, "echo reply");
}

static void on_done(void* ctx, const tern_call_reply* r) {
  (void)r;
  ++*(int*)ctx;
}

static tern_engine *srv, *cli;

static void one_call(tern_conn* conn) {
  int done = 0;
  uint8_t arg[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  tern_call c = {.size = sizeof c, .prog = PROG, .vers = VERS, .proc = P_ECHO, .args = arg, .args_len = sizeof arg};
  c.done = on_done;
  c.ctx = &done;
  CHECK(tern_conn_call(conn, &c) == 0, "call");
  uint64_t end = now_ms() + 5000;
  while (done == 0 && now_ms() < end) {
    tern_engine_poll(srv);
    tern_engine_poll(cli);
  }
  CHECK(done == 1, "the call never completed");
}

/* A complete document: as long as returned, one balanced JSON object. */
static void check_whole(const char* doc, size_t got, size_t cap, const char* what) {
  CHECK(got < cap, "%s: returned %zu for a buffer of %zu: cut", what, got, cap);
  CHECK(strlen(doc) == got, "%s: %zu bytes written, %zu returned", what, strlen(doc), got);
  int depth = 0, in_str = 0;
  for (size_t i = 0; i < got; ++i) {
    char ch = doc[i];
    if (in_str) {
      if (ch == '\\') ++i;
      else if (ch == '"') in_str = 0;
    } else if (ch == '"') {
      in_str = 1;
    } else if (ch == '{' || ch == '[') {
      ++depth;
    } else if (ch == '}' || ch == ']') {
      --depth;
      CHECK(depth >= 0 && (depth > 0 || i == got - 1), "%s: unbalanced at %zu", what, i);
    }
  }
  CHECK(depth == 0 && !in_str && doc[0] == '{', "%s: not one whole object (depth %d)", what, depth);
}

int main(void) {
  char path[128], spec[160];
  snprintf(path, sizeof path, "/tmp/tern-capi-json-%d.sock", (int)getpid());
  snprintf(spec, sizeof spec, "shm:path=%s", path);
  tern_engine_opts o;
  tern_engine_opts_init(&o, sizeof o);
  CHECK(tern_engine_create(&o, &srv) == 0, "server engine");
  CHECK(tern_engine_create(&o, &cli) == 0, "client engine");
  CHECK(tern_engine_handle(srv, PROG, VERS, P_ECHO, h_echo, NULL) == 0, "handle");
  CHECK(tern_engine_listen(srv, spec) == 0, "listen");
  tern_conn* conn = NULL;
  CHECK(tern_engine_connect(cli, spec, &conn) == 0, "connect");
  uint64_t end = now_ms() + 5000;
  while (!tern_conn_ready(conn) && !tern_conn_failed(conn) && now_ms() < end) {
    tern_engine_poll(srv);
    tern_engine_poll(cli);
  }
  CHECK(tern_conn_ready(conn), "not connected");

  /* Between the sizing call and the real one the host keeps polling: here a
   * call completes each time, so counters gain digits (9 -> 10 calls, ...)
   * and the fresh document is longer than the size that was returned. */
  for (int round = 0; round < 120; ++round) {
    tern_engine* engines[2] = {cli, srv};
    for (int k = 0; k < 2; ++k) {
      size_t need = tern_engine_stats_json(engines[k], NULL, 0);
      CHECK(need > 100, "length %zu", need);
      one_call(conn);
      char* doc = malloc(need + 1);
      size_t got = tern_engine_stats_json(engines[k], doc, need + 1);
      check_whole(doc, got, need + 1, k == 0 ? "client" : "server");
      free(doc);
    }
  }
  /* Without a sizing call in between, a fresh document is returned: the
   * held one is not handed out forever. */
  one_call(conn);
  char big[1 << 16];
  size_t got = tern_engine_stats_json(cli, big, sizeof big);
  check_whole(big, got, sizeof big, "fresh");
  CHECK(strstr(big, "\"calls\":241") != NULL, "the fresh document counts all 241 calls");
  /* A buffer too short for anything still gets a NUL-terminated prefix. */
  char small[8];
  CHECK(tern_engine_stats_json(cli, small, sizeof small) > sizeof small && strlen(small) == 7, "cut like snprintf");

  tern_conn_close(conn);
  for (int i = 0; i < 1000; ++i) {
    tern_engine_poll(srv);
    tern_engine_poll(cli);
  }
  tern_engine_destroy(cli);
  tern_engine_destroy(srv);
  unlink(path);
  printf("capi_stats_json: ok\n");
  return 0;
}
