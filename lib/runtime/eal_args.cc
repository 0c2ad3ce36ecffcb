// The EAL argument vector, kept apart from eal.cc so that it needs no DPDK
// (runtime_args_test runs in builds without the EAL runtime too).
#include "mem/arena.h"
#include "runtime/eal.h"

namespace tern::runtime {

std::vector<std::string> eal_args(const EalOptions& opt, const char* prog) {
  std::vector<std::string> a = {prog, "-l", opt.lcores};
  bool huge = opt.huge == HugeMode::kOn || (opt.huge == HugeMode::kAuto && mem::free_hugepages_2m() > 0);
  if (huge) {
    // In-memory mode needs no hugetlbfs mount and leaves no files behind.
    a.push_back("--in-memory");
  } else {
    a.push_back("--no-huge");
    a.push_back("-m");
    a.push_back(std::to_string(opt.memory_mb));
  }
  a.push_back("--no-pci");
  if (!opt.telemetry) a.push_back("--no-telemetry");
  if (opt.file_prefix.empty())
    a.push_back("--no-shconf");
  else
    a.push_back("--file-prefix=" + opt.file_prefix);
  if (!opt.log_level.empty()) a.push_back("--log-level=" + opt.log_level);
  a.insert(a.end(), opt.extra_args.begin(), opt.extra_args.end());
  return a;
}

}  // namespace tern::runtime
