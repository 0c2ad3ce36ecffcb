/*
 * tern-c-poller: Tern's C API inside an SPDK-style reactor.
 *
 * A reactor is one thread that runs registered pollers in a loop; each poller
 * is a function and a context that does a bounded amount of work and says
 * whether it found any (busy) or not (idle), as SPDK's pollers return
 * SPDK_POLLER_BUSY / SPDK_POLLER_IDLE. A timed poller runs at most once per
 * period. Here one poller drives a server engine, another a client engine
 * that keeps --depth calls outstanding with checked payloads, and a timed one
 * ends the run; both engines share the one reactor thread, as a test
 * arrangement (a real target gives each core its own reactor and engines).
 *
 *   tern-c-poller [--calls N] [--seconds S] [--depth D] [--size B] [--bulk B]
 *                 [--spec DEVICE]
 *
 * Each call sends B (--size) bytes of arguments that depend on its sequence
 * number; the server answers with every byte plus one, and, with --bulk, fills
 * the call's write chunk with a pattern of the sequence number. The client
 * checks every byte. The run ends after N calls or S seconds, whichever comes
 * first; the exit status is 0 only if every call completed, succeeded and
 * carried the right bytes.
 */
/* clock_gettime, unlink: POSIX, which -std=c11 alone hides. */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tern/tern.h"

/* ---------------------------------------------------------------- the reactor */

enum { POLLER_IDLE = 0, POLLER_BUSY = 1, MAX_POLLERS = 8 };

typedef int (*poller_fn)(void* ctx);

typedef struct poller {
  const char* name;
  poller_fn fn;
  void* ctx;
  uint64_t period_ns; /* 0: every iteration */
  uint64_t next_ns;
  uint64_t busy, idle; /* runs that found work, and runs that did not */
} poller;

typedef struct reactor {
  poller pollers[MAX_POLLERS];
  int npollers;
  bool stop;
  uint64_t iterations;
} reactor;

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void reactor_register(reactor* r, const char* name, poller_fn fn, void* ctx, uint64_t period_us) {
  if (r->npollers == MAX_POLLERS) {
    fprintf(stderr, "reactor: too many pollers\n");
    exit(2);
  }
  poller* p = &r->pollers[r->npollers++];
  memset(p, 0, sizeof *p);
  p->name = name;
  p->fn = fn;
  p->ctx = ctx;
  p->period_ns = period_us * 1000u;
  p->next_ns = now_ns() + p->period_ns;
}

static void reactor_run(reactor* r) {
  while (!r->stop) {
    uint64_t now = 0;
    for (int i = 0; i < r->npollers; ++i) {
      poller* p = &r->pollers[i];
      if (p->period_ns != 0) {
        if (now == 0) now = now_ns();
        if (now < p->next_ns) continue;
        p->next_ns = now + p->period_ns;
      }
      if (p->fn(p->ctx) == POLLER_BUSY) p->busy++;
      else p->idle++;
    }
    r->iterations++;
  }
}

/* ---------------------------------------------------------------- the server */

enum { PROG = 0x20000fee, VERS = 1, PROC_PLUS_ONE = 1, MAX_SIZE = 1024 };

static uint8_t pat(uint64_t seq, size_t i) { return (uint8_t)(seq * 131u + i * 7u + (i >> 8)); }

typedef struct server {
  tern_engine* eng;
  uint64_t served;
  uint64_t failed_replies;
} server;

/* Arguments: u64 sequence number, then bytes. Results: each byte plus one.
 * A write chunk, if the client offered one, is filled with pat(seq). */
static void serve_plus_one(void* ctx, tern_server_call* call) {
  server* s = ctx;
  size_t n;
  const uint8_t* a = tern_server_call_args(call, &n);
  uint8_t out[MAX_SIZE];
  if (n < 8 || n > sizeof out) {
    if (tern_server_call_reply_error(call, TERN_ACCEPT_GARBAGE_ARGS) != 0) s->failed_replies++;
    return;
  }
  uint64_t seq;
  memcpy(&seq, a, 8);
  for (size_t i = 0; i < n; ++i) out[i] = (uint8_t)(a[i] + 1);
  uint32_t cap = tern_server_call_bulk_capacity(call);
  uint8_t* bulk = NULL;
  if (cap > 0) {
    bulk = tern_server_call_bulk_buffer(call, cap);
    if (bulk == NULL) {
      if (tern_server_call_reply_error(call, TERN_ACCEPT_SYSTEM_ERR) != 0) s->failed_replies++;
      return;
    }
    for (uint32_t i = 0; i < cap; ++i) bulk[i] = pat(seq, i);
  }
  if (tern_server_call_reply(call, out, n, bulk, cap) != 0) s->failed_replies++;
  s->served++;
}

static int server_poller(void* ctx) {
  server* s = ctx;
  return tern_engine_poll(s->eng) > 0 ? POLLER_BUSY : POLLER_IDLE;
}

/* ---------------------------------------------------------------- the client */

/* The client's life, one state at a time. */
typedef enum client_state {
  CLIENT_CONNECTING, /* connect() issued; waiting for ready or failed */
  CLIENT_RUNNING,    /* keeping `depth` calls outstanding */
  CLIENT_DRAINING,   /* target reached: no new calls; waiting for the outstanding */
  CLIENT_DONE        /* every call completed; the connection is closed */
} client_state;

typedef struct client client;

/* One outstanding call: its buffers and what it must come back with. */
typedef struct slot {
  client* cl;
  uint64_t seq;
  bool busy;
  uint8_t args[MAX_SIZE];
  uint8_t* bulk; /* registered memory, `bulk_len` bytes */
} slot;

struct client {
  tern_engine* eng;
  tern_conn* conn;
  client_state state;
  slot* slots;
  uint32_t depth, size, bulk_len;
  uint64_t target;   /* calls to issue; 0: until time is up */
  uint64_t next_seq; /* calls issued */
  uint64_t inflight;
  uint64_t completed, ok, bad_status, bad_bytes, refused;
  tern_call_status first_bad_status;
  uint64_t t_start, t_end;
};

static void on_reply(void* ctx, const tern_call_reply* r) {
  slot* s = ctx;
  client* c = s->cl;
  s->busy = false;
  c->inflight--;
  c->completed++;
  if (r->status != TERN_CALL_OK) {
    if (c->bad_status++ == 0) c->first_bad_status = r->status;
    return;
  }
  bool good = r->results_len == c->size;
  for (size_t i = 0; good && i < c->size; ++i) good = r->results[i] == (uint8_t)(s->args[i] + 1);
  good = good && r->bulk_recv_len == c->bulk_len;
  for (uint32_t i = 0; good && i < c->bulk_len; ++i) good = s->bulk[i] == pat(s->seq, i);
  if (good) c->ok++;
  else c->bad_bytes++;
}

static int issue(client* c, slot* s) {
  s->seq = c->next_seq;
  memcpy(s->args, &s->seq, 8);
  for (uint32_t i = 8; i < c->size; ++i) s->args[i] = pat(s->seq ^ 0x55, i);
  if (c->bulk_len > 0) memset(s->bulk, 0, c->bulk_len);
  tern_call call = {.size = sizeof call,
                    .prog = PROG,
                    .vers = VERS,
                    .proc = PROC_PLUS_ONE,
                    .args = s->args,
                    .args_len = c->size,
                    .bulk_recv = c->bulk_len > 0 ? s->bulk : NULL,
                    .bulk_recv_len = c->bulk_len,
                    .done = on_reply,
                    .ctx = s};
  int rc = tern_conn_call(c->conn, &call);
  if (rc == 0) {
    s->busy = true;
    c->inflight++;
    c->next_seq++;
  }
  return rc;
}

static int client_poller(void* ctx) {
  client* c = ctx;
  int work = tern_engine_poll(c->eng);
  switch (c->state) {
    case CLIENT_CONNECTING:
      if (tern_conn_failed(c->conn)) {
        char why[256];
        tern_conn_error(c->conn, why, sizeof why);
        fprintf(stderr, "tern-c-poller: connection failed: %s\n", why);
        tern_conn_close(c->conn);
        c->conn = NULL;
        c->state = CLIENT_DONE;
        return POLLER_BUSY;
      }
      if (!tern_conn_ready(c->conn)) break;
      c->state = CLIENT_RUNNING;
      c->t_start = now_ns();
      /* fall through */
    case CLIENT_RUNNING:
      for (uint32_t i = 0; i < c->depth && (c->target == 0 || c->next_seq < c->target); ++i) {
        if (c->slots[i].busy) continue;
        int rc = issue(c, &c->slots[i]);
        if (rc == -EAGAIN) break; /* credits or backlog: the next poll frees some */
        if (rc != 0) {
          fprintf(stderr, "tern-c-poller: call refused: %s\n", tern_strerror(rc));
          c->refused++;
          c->state = CLIENT_DRAINING;
          break;
        }
        work++;
      }
      if (c->target != 0 && c->next_seq >= c->target) c->state = CLIENT_DRAINING;
      if (c->state == CLIENT_RUNNING && tern_conn_failed(c->conn)) c->state = CLIENT_DRAINING;
      break;
    case CLIENT_DRAINING:
      if (c->inflight != 0) break;
      c->t_end = now_ns();
      tern_conn_close(c->conn);
      c->conn = NULL;
      c->state = CLIENT_DONE;
      work++;
      break;
    case CLIENT_DONE:
      break;
  }
  return work > 0 ? POLLER_BUSY : POLLER_IDLE;
}

/* ---------------------------------------------------------------- the clock */

typedef struct watch {
  reactor* r;
  client* cl;
  uint64_t deadline_ns; /* 0: none */
} watch;

/* Timed (every millisecond): stops issuing when time is up, and the reactor
 * when the client is done. */
static int watch_poller(void* ctx) {
  watch* w = ctx;
  if (w->cl->state == CLIENT_RUNNING && w->deadline_ns != 0 && now_ns() >= w->deadline_ns) {
    w->cl->state = CLIENT_DRAINING;
    return POLLER_BUSY;
  }
  if (w->cl->state == CLIENT_DONE) {
    w->r->stop = true;
    return POLLER_BUSY;
  }
  return POLLER_IDLE;
}

/* ---------------------------------------------------------------- main */

static void print_stat(void* ctx, const char* name, uint64_t value) {
  if (value != 0) printf(" %s=%" PRIu64, name, value);
  (void)ctx;
}

static void usage(void) {
  fprintf(stderr,
          "usage: tern-c-poller [--calls N] [--seconds S] [--depth D] [--size B] [--bulk B] [--spec DEVICE]\n"
          "  --calls N    stop after N calls (default 10000; 0: no limit)\n"
          "  --seconds S  stop issuing after S seconds (default 0: no limit)\n"
          "  --depth D    calls kept outstanding (default 16, at most 1024)\n"
          "  --size B     bytes of inline arguments per call, 8..%d (default 64)\n"
          "  --bulk B     bytes of bulk results per call through a write chunk (default 0)\n"
          "  --spec S     device spec (default shm:path=/tmp/tern-c-poller-PID.sock)\n",
          MAX_SIZE);
  exit(2);
}

int main(int argc, char** argv) {
  uint64_t calls = 10000, seconds = 0;
  uint32_t depth = 16, size = 64, bulk = 0;
  char spec[256] = "", path[200] = "";
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    if (i + 1 >= argc) usage();
    const char* v = argv[++i];
    if (strcmp(a, "--calls") == 0) calls = strtoull(v, NULL, 0);
    else if (strcmp(a, "--seconds") == 0) seconds = strtoull(v, NULL, 0);
    else if (strcmp(a, "--depth") == 0) depth = (uint32_t)strtoul(v, NULL, 0);
    else if (strcmp(a, "--size") == 0) size = (uint32_t)strtoul(v, NULL, 0);
    else if (strcmp(a, "--bulk") == 0) bulk = (uint32_t)strtoul(v, NULL, 0);
    else if (strcmp(a, "--spec") == 0) snprintf(spec, sizeof spec, "%s", v);
    else usage();
  }
  if ((calls == 0 && seconds == 0) || depth == 0 || depth > 1024 || size < 8 || size > MAX_SIZE) usage();
  if (spec[0] == 0) {
    snprintf(path, sizeof path, "/tmp/tern-c-poller-%d.sock", (int)getpid());
    snprintf(spec, sizeof spec, "shm:path=%s", path);
  }

  tern_engine_opts o;
  tern_engine_opts_init(&o, sizeof o);
  o.credits = depth < 32 ? 32 : depth;
  o.arena_bytes = 64u << 20;
  if (bulk > o.max_bulk) o.max_bulk = bulk;
  server srv = {0};
  client cli = {0};
  int rc = tern_engine_create(&o, &srv.eng);
  if (rc == 0) rc = tern_engine_handle(srv.eng, PROG, VERS, PROC_PLUS_ONE, serve_plus_one, &srv);
  if (rc == 0) rc = tern_engine_listen(srv.eng, spec);
  if (rc == 0) rc = tern_engine_create(&o, &cli.eng);
  if (rc == 0) rc = tern_engine_connect(cli.eng, spec, &cli.conn);
  if (rc != 0) {
    fprintf(stderr, "tern-c-poller: %s: %s\n", tern_strerror(rc), tern_last_error());
    return 1;
  }
  cli.depth = depth;
  cli.size = size;
  cli.bulk_len = bulk;
  cli.target = calls;
  cli.slots = calloc(depth, sizeof *cli.slots);
  if (cli.slots == NULL) return 1;
  for (uint32_t i = 0; i < depth; ++i) {
    cli.slots[i].cl = &cli;
    if (bulk > 0 && (cli.slots[i].bulk = tern_engine_alloc(cli.eng, bulk, 0)) == NULL) {
      fprintf(stderr, "tern-c-poller: %s\n", tern_last_error());
      return 1;
    }
  }

  reactor r = {0};
  watch w = {&r, &cli, seconds != 0 ? now_ns() + seconds * 1000000000u : 0};
  reactor_register(&r, "server", server_poller, &srv, 0);
  reactor_register(&r, "client", client_poller, &cli, 0);
  reactor_register(&r, "watch", watch_poller, &w, 1000);
  reactor_run(&r);

  /* Let the server see the close before it goes. */
  for (int i = 0; i < 1000; ++i) tern_engine_poll(srv.eng);
  double secs = cli.t_end > cli.t_start ? (double)(cli.t_end - cli.t_start) / 1e9 : 0;
  printf("tern-c-poller: %" PRIu64 " calls in %.3f s: %.0f calls/s (depth %u, %u B args, %u B bulk)\n",
         cli.completed, secs, secs > 0 ? (double)cli.completed / secs : 0.0, depth, size, bulk);
  printf("  ok %" PRIu64 ", bad status %" PRIu64 ", bad bytes %" PRIu64 ", refused %" PRIu64
         "; server served %" PRIu64 ", failed replies %" PRIu64 "\n",
         cli.ok, cli.bad_status, cli.bad_bytes, cli.refused, srv.served, srv.failed_replies);
  if (cli.bad_status != 0) printf("  first bad status: %s\n", tern_call_status_name(cli.first_bad_status));
  for (int i = 0; i < r.npollers; ++i)
    printf("  poller %-6s busy %" PRIu64 " idle %" PRIu64 "\n", r.pollers[i].name, r.pollers[i].busy,
           r.pollers[i].idle);
  printf("  client:");
  tern_engine_stats(cli.eng, print_stat, NULL);
  printf("\n  server:");
  tern_engine_stats(srv.eng, print_stat, NULL);
  printf("\n");

  bool pass = cli.completed == cli.next_seq && cli.ok == cli.completed && cli.completed > 0 &&
              (calls == 0 || seconds != 0 || cli.completed == calls) && srv.failed_replies == 0 && cli.refused == 0;
  tern_engine_destroy(cli.eng);
  tern_engine_destroy(srv.eng);
  free(cli.slots);
  if (path[0] != 0) unlink(path);
  printf("tern-c-poller: %s\n", pass ? "PASS" : "FAIL");
  return pass ? 0 : 1;
}
