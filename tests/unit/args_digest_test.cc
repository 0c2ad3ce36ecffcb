// ServerCall::args_digest()'s function (engine/args_digest.h): keyed, so
// that a peer cannot make two different calls digest alike.
#include "engine/args_digest.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/process_key.h"

namespace tern::rpc {
namespace {

// The digest the engine used before it was keyed: a multiply and a rotate
// per eight bytes. Each step is invertible, so a second preimage is closed
// form: change the first word, then choose the second so that the state
// after it is the same as before.
uint64_t old_digest(std::span<const uint8_t> b) {
  uint64_t h = 0x9E3779B97F4A7C15ull;
  size_t i = 0;
  for (; i + 8 <= b.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, b.data() + i, 8);
    h = std::rotl((h ^ w) * 0xFF51AFD7ED558CCDull, 29);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, b.data() + i, b.size() - i);
  h = std::rotl((h ^ tail ^ (uint64_t{b.size()} << 56)) * 0xC4CEB9FE1A85EC53ull, 31);
  return h ^ (h >> 33);
}

std::vector<uint8_t> second_preimage(const std::vector<uint8_t>& a) {
  // a is two words w0, w1. State after w0: s1 = rotl((h0 ^ w0) * C, 29);
  // the state after w1 depends on s1 ^ w1 only. Pick w0' != w0, and
  // w1' = s1' ^ s1 ^ w1.
  uint64_t w0, w1;
  std::memcpy(&w0, a.data(), 8);
  std::memcpy(&w1, a.data() + 8, 8);
  const uint64_t h0 = 0x9E3779B97F4A7C15ull, c = 0xFF51AFD7ED558CCDull;
  const uint64_t s1 = std::rotl((h0 ^ w0) * c, 29);
  const uint64_t w0b = w0 ^ 0xdeadbeef;
  const uint64_t s1b = std::rotl((h0 ^ w0b) * c, 29);
  const uint64_t w1b = s1b ^ s1 ^ w1;
  std::vector<uint8_t> b(16);
  std::memcpy(b.data(), &w0b, 8);
  std::memcpy(b.data() + 8, &w1b, 8);
  return b;
}

TEST(ArgsDigest, AClosedFormSecondPreimageOfTheOldDigestNoLongerCollides) {
  std::vector<uint8_t> a(16);
  for (int i = 0; i < 16; ++i) a[i] = static_cast<uint8_t>(i * 13 + 1);
  const std::vector<uint8_t> b = second_preimage(a);
  ASSERT_NE(a, b);
  ASSERT_EQ(old_digest(a), old_digest(b)) << "the construction is a collision of the old digest";
  EXPECT_NE(args_digest(process_key(), a, {}), args_digest(process_key(), b, {}));
}

TEST(ArgsDigest, OtherKeysGiveOtherDigests) {
  const std::vector<uint8_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const uint64_t mine = args_digest(process_key(), a, {});
  EXPECT_EQ(mine, args_digest(process_key(), a, {})) << "stable within the process";
  EXPECT_NE(mine, args_digest(random_sip_key(), a, {}));
  EXPECT_NE(mine, args_digest(SipKey{}, a, {})) << "the process key is not the zero key";
  // Another process has another key: run this binary again (a fork would
  // share this image's key), asking it for the digest of the same bytes.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    close(fds[0]);
    const std::string fd = std::to_string(fds[1]);
    setenv("TERN_TEST_DIGEST_FD", fd.c_str(), 1);
    execl("/proc/self/exe", "args_digest_child", "--gtest_filter=ArgsDigest.ChildDigest", static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  uint64_t theirs = 0;
  const ssize_t n = read(fds[0], &theirs, 8);
  close(fds[0]);
  int st = 0;
  waitpid(pid, &st, 0);
  ASSERT_EQ(n, 8) << "the child wrote no digest";
  EXPECT_NE(mine, theirs) << "two processes, one key";
}

// The other half of the test above, in the process it starts.
TEST(ArgsDigest, ChildDigest) {
  const char* fd = getenv("TERN_TEST_DIGEST_FD");
  if (fd == nullptr) GTEST_SKIP() << "run by OtherKeysGiveOtherDigests";
  const std::vector<uint8_t> a = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const uint64_t d = args_digest(process_key(), a, {});
  ASSERT_EQ(write(atoi(fd), &d, 8), 8);
}

// The pieces are delimited: moving bytes between the inline arguments and
// a read chunk, or between chunks, changes the digest.
TEST(ArgsDigest, PiecesAreDelimited) {
  const std::vector<uint8_t> all = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const SipKey k = random_sip_key();
  ReadChunkData c1{0, std::span<const uint8_t>(all).subspan(4)};
  ReadChunkData c2{0, std::span<const uint8_t>(all).subspan(6)};
  const uint64_t d1 = args_digest(k, std::span<const uint8_t>(all).first(4), {&c1, 1});
  const uint64_t d2 = args_digest(k, std::span<const uint8_t>(all).first(6), {&c2, 1});
  EXPECT_NE(d1, d2);
  EXPECT_NE(d1, args_digest(k, all, {}));
}

}  // namespace
}  // namespace tern::rpc
