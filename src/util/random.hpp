#pragma once

#include <cstdint>
#include <string>

namespace rlock::util {

// 128 bits from getrandom(2), as 32 lowercase hex characters. Throws std::system_error on failure.
std::string random_token();
// `bytes` random bytes from getrandom(2), as lowercase hex.
std::string random_hex(size_t bytes);

// A uniformly random integer in [0, bound), from getrandom(2); for jitter, not secrets.
uint64_t random_below(uint64_t bound);

// Where jitter comes from: random_below, or a fixed source in tests. Returns a value in [0, bound).
using RandomBelow = uint64_t (*)(uint64_t bound);

}  // namespace rlock::util
