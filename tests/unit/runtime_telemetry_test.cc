// Tern's telemetry under EAL: the registry's commands reach DPDK's telemetry
// socket, and DPDK's own dpdk-telemetry.py shows them. Its own executable:
// a process can start EAL once.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/stats.h"
#include "runtime/eal.h"
#include "telemetry/registry.h"

namespace tern::runtime {
namespace {

struct Engine {
  Counter calls;
  static void provide(void* ctx, telemetry::Reply* out) {
    out->add_stats({{"calls", &static_cast<Engine*>(ctx)->calls}});
    out->add_string("driver", "shm");
  }
};

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  pclose(p);
  return out;
}

TEST(EalTelemetry, DpdkTelemetryScriptShowsTernCommands) {
  if (access("/usr/bin/dpdk-telemetry.py", X_OK) != 0) GTEST_SKIP() << "dpdk-telemetry.py (Debian's dpdk-dev) is not installed";
  char tmpl[] = "/tmp/tern-eal-telemetry-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string dir = tmpl;
  // EAL puts its runtime directory (and the telemetry socket) under
  // $RUNTIME_DIRECTORY/dpdk/<file prefix>; so does the script look for it.
  setenv("RUNTIME_DIRECTORY", dir.c_str(), 1);
  std::string prefix = "tern-tel-" + std::to_string(getpid());

  Engine e;
  e.calls.add(123);
  auto src = telemetry::register_source("engine", "", Engine::provide, &e);  // before EAL: announced at start
  ASSERT_TRUE(src.is_ok());

  EalOptions o;
  o.lcores = "0";
  o.huge = HugeMode::kOff;
  o.file_prefix = prefix;
  o.telemetry = true;
  auto rt = Runtime::start(o);
  ASSERT_TRUE(rt.is_ok()) << rt.status().to_string();

  Engine later;
  later.calls.add(5);
  auto conn = telemetry::register_source("conn", src->id() + ".1", Engine::provide, &later);  // a kind after start
  ASSERT_TRUE(conn.is_ok());

  std::string out = run("printf '/tern/engines\\n/tern/engine," + src->id() + "\\n/tern/conns," + src->id() +
                        "\\n/tern/conn," + src->id() + ".1\\n/tern/engine,99\\n' | RUNTIME_DIRECTORY=" + dir +
                        " python3 /usr/bin/dpdk-telemetry.py -f " + prefix + " 2>&1");
  EXPECT_NE(out.find("{\"/tern/engines\": [\"" + src->id() + "\"]}"), std::string::npos) << out;
  EXPECT_NE(out.find("{\"/tern/engine\": {\"calls\": 123, \"driver\": \"shm\"}}"), std::string::npos) << out;
  EXPECT_NE(out.find("{\"/tern/conns\": [\"" + src->id() + ".1\"]}"), std::string::npos) << out;
  EXPECT_NE(out.find("{\"/tern/conn\": {\"calls\": 5, \"driver\": \"shm\"}}"), std::string::npos) << out;
  EXPECT_NE(out.find("{\"/tern/engine\": null}"), std::string::npos) << out;

  // Gone sources answer null; DPDK keeps the command.
  src->reset();
  out = run("printf '/tern/engine,0\\n' | RUNTIME_DIRECTORY=" + dir + " python3 /usr/bin/dpdk-telemetry.py -f " +
            prefix + " 2>&1");
  EXPECT_NE(out.find("{\"/tern/engine\": null}"), std::string::npos) << out;

  rt->reset();
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace tern::runtime
