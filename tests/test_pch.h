// What nearly every test file includes, precompiled once per build directory
// and put in front of every file that uses gtest (-Dtest_pch=true, which
// scripts/test.sh sets; tests/meson.build, scripts/test-pch.py): parsing
// them took ~0.5-0.8 CPU-seconds of each test file's 3-9 (docs/testing.md).
//
// No include guard: it is compiled as a header on its own and force-included
// once per file.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>
