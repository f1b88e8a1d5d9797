#include "random.hpp"

#include <sys/random.h>

#include <cerrno>
#include <system_error>

namespace rlock::util {

namespace {

void fill_random(void* buffer, size_t size) {
  auto* out = static_cast<unsigned char*>(buffer);
  while (size > 0) {
    ssize_t n = ::getrandom(out, size, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "getrandom");
    }
    out += n;
    size -= static_cast<size_t>(n);
  }
}

}  // namespace

std::string random_hex(size_t count) {
  unsigned char bytes[64];
  if (count > sizeof bytes) count = sizeof bytes;
  fill_random(bytes, count);
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * count);
  for (size_t i = 0; i < count; ++i) {
    out += k_hex[bytes[i] >> 4];
    out += k_hex[bytes[i] & 0xf];
  }
  return out;
}

std::string random_token() { return random_hex(16); }

uint64_t random_below(uint64_t bound) {
  if (bound == 0) return 0;
  uint64_t value = 0;
  fill_random(&value, sizeof value);
  return value % bound;
}

}  // namespace rlock::util
