/*
 * tern_telemetry_open/close from C: a C host with an engine exposes its
 * counters on a Unix socket without polling for it, and scripts/tern-stats
 * (argv[1], the real tool) reads them; one socket per process; close removes
 * the file; no path and no $TERN_TELEMETRY_SOCK is a clear -EINVAL.
 */
#define _POSIX_C_SOURCE 200809L

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "tern/tern.h"

#include "capi_check.h"

/* Runs tern-stats on `sock` with `cmd` and returns its first line. */
static void ask(const char* tool, const char* sock, const char* cmd, char* out, size_t len) {
  char line[1024];
  snprintf(line, sizeof line, "timeout 20 python3 %s -s %s %s", tool, sock, cmd);
  FILE* p = popen(line, "r");
  CHECK(p != NULL, "popen %s", line);
  out[0] = 0;
  if (fgets(out, (int)len, p) == NULL) out[0] = 0;
  int rc = pclose(p);
  CHECK(rc == 0, "%s exited %d: %s", line, rc, out);
}

int main(int argc, char** argv) {
  CHECK(argc == 2, "usage: tern-capi-telemetry-test TERN-STATS");
  const char* tool = argv[1];
  char sock[128], out[4096];
  snprintf(sock, sizeof sock, "/tmp/tern-capi-tel-%d.sock", (int)getpid());

  unsetenv("TERN_TELEMETRY_SOCK");
  CHECK(tern_telemetry_open(NULL) == -EINVAL && strstr(tern_last_error(), "TERN_TELEMETRY_SOCK") != NULL,
        "no path and no environment");

  tern_engine_opts o;
  tern_engine_opts_init(&o, sizeof o);
  tern_engine* e = NULL;
  CHECK(tern_engine_create(&o, &e) == 0, "engine");

  CHECK(tern_telemetry_open(sock) == 0, "open at %s", sock);
  CHECK(tern_telemetry_open(sock) == -EALREADY, "a second open");
  /* Nobody polls: the library's own thread answers. */
  ask(tool, sock, "/tern/engines", out, sizeof out);
  CHECK(strstr(out, "{\"/tern/engines\": [\"") != NULL, "engines: %s", out);
  ask(tool, sock, "/tern/engine,0", out, sizeof out);
  CHECK(strstr(out, "\"calls\": 0") != NULL && strstr(out, "\"replies\": 0") != NULL, "engine 0: %s", out);

  tern_telemetry_close();
  struct stat sb;
  CHECK(stat(sock, &sb) != 0, "the socket file stays after close");
  tern_telemetry_close(); /* none open: nothing */

  /* $TERN_TELEMETRY_SOCK when no path is given. */
  setenv("TERN_TELEMETRY_SOCK", sock, 1);
  CHECK(tern_telemetry_open(NULL) == 0, "open at $TERN_TELEMETRY_SOCK");
  CHECK(stat(sock, &sb) == 0 && S_ISSOCK(sb.st_mode), "the socket at $TERN_TELEMETRY_SOCK");
  tern_telemetry_close();
  /* A path that cannot be listened on. */
  CHECK(tern_telemetry_open("/nonexistent-dir/x.sock") == -EINVAL, "an unlistenable path");

  tern_engine_destroy(e);
  printf("capi_telemetry: ok\n");
  return 0;
}
