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

std::string random_token() {
  unsigned char bytes[16];
  fill_random(bytes, sizeof bytes);
  static constexpr char k_hex[] = "0123456789abcdef";
  std::string token;
  token.reserve(2 * sizeof bytes);
  for (unsigned char b : bytes) {
    token += k_hex[b >> 4];
    token += k_hex[b & 0xf];
  }
  return token;
}

uint64_t random_below(uint64_t bound) {
  if (bound == 0) return 0;
  uint64_t value = 0;
  fill_random(&value, sizeof value);
  return value % bound;
}

}  // namespace rlock::util
