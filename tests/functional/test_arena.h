// The arena of a functional test's engines.
//
// An engine maps and faults in its whole arena when it is created
// (MAP_POPULATE: no page fault on the datapath), and the kernel zeroes every
// page of it. At the default 128 MiB, the two engines of a test case cost
// ~0.25 s of kernel time to create and tear down, which was most of what a
// functional test case took, in every build configuration alike (a
// sanitizer does not slow the kernel). 32 MiB still holds the pools the
// defaults derive from it -- 1,024 receive and 2,048 send buffers of 4 KiB,
// a 16 MiB bulk pool (sixteen 1 MiB calls at once) -- and 4 MiB for the
// test's own buffers (Engine::alloc). A test that needs more says so.
#pragma once

#include <cstddef>

namespace tern::rpc {

inline constexpr size_t kTestArenaBytes = 32u << 20;

}  // namespace tern::rpc
