#include "base/process_key.h"

#include <fcntl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "base/log.h"

namespace tern {

namespace {

bool fill_random(void* buf, size_t len) {
  auto* p = static_cast<uint8_t*>(buf);
  size_t got = 0;
  while (got < len) {
    ssize_t n = getrandom(p + got, len - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    break;
  }
  if (got == len) return true;
  // A kernel without getrandom (before 3.17) or a seccomp filter that
  // forbids it: the same pool through the device.
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  got = 0;
  while (got < len) {
    ssize_t n = read(fd, p + got, len - got);
    if (n > 0) {
      got += static_cast<size_t>(n);
    } else if (!(n < 0 && errno == EINTR)) {
      break;
    }
  }
  close(fd);
  return got == len;
}

}  // namespace

SipKey random_sip_key() {
  SipKey k;
  uint64_t b[2];
  if (fill_random(b, sizeof b)) {
    k.k0 = b[0], k.k1 = b[1];
    return k;
  }
  // No source of randomness at all: a key a peer could guess with effort
  // (time, pid, an address) is still better than none; say so.
  TERN_LOG(kWarn, "base", "no random source (getrandom, /dev/urandom): hash keys are guessable");
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  k.k0 = static_cast<uint64_t>(ts.tv_nsec) * 0x9E3779B97F4A7C15ull ^ static_cast<uint64_t>(getpid());
  k.k1 = static_cast<uint64_t>(ts.tv_sec) ^ reinterpret_cast<uintptr_t>(&k);
  return k;
}

namespace {
SipKey& key_slot() {
  static SipKey key = random_sip_key();
  return key;
}
}  // namespace

const SipKey& process_key() { return key_slot(); }

void set_process_key_for_simulation(const SipKey& key) { key_slot() = key; }

}  // namespace tern
