// Built by tests/install/check-install.sh against an installed Tern with
// `pkg-config --cflags --libs tern-runtime` (and --static, which must bring
// DPDK's static libraries along): pins itself, and asks for an EAL that
// nobody started, which must fail cleanly (kBadState with EAL, kUnsupported
// in a build without it) rather than fail to link or crash.
#include <tern/runtime/eal.h>

#include <cstdio>

int main() {
  if (auto st = tern::runtime::pin_current_thread(0); !st) {
    std::fprintf(stderr, "external_runtime: FAILED: %s\n", st.to_string().c_str());
    return 1;
  }
  auto rt = tern::runtime::Runtime::attach();
  if (rt || (rt.status().code() != tern::Errc::kBadState && rt.status().code() != tern::Errc::kUnsupported)) {
    std::fprintf(stderr, "external_runtime: FAILED: attach without EAL: %s\n",
                 rt ? "succeeded" : rt.status().to_string().c_str());
    return 1;
  }
  std::printf("external_runtime: pinned; attach without EAL: %s\n", errc_name(rt.status().code()));
  return 0;
}
