#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlock::lock {

// A lock held by an enclosing `run`, passed down to its process tree in RLOCK_HELD.
struct Hold {
  std::string lock_key;  // the lock's full Redis key
  std::string token;
  int64_t fence = 0;
};

// The variable that carries the holds of the enclosing process tree.
inline constexpr const char* k_holds_variable = "RLOCK_HELD";

// Parses the value of RLOCK_HELD: entries separated by newlines, fields (lock key, token, fence)
// by spaces, each field percent-encoded. Malformed entries are skipped (the variable is a hint verified against Redis).
std::vector<Hold> parse_holds(std::string_view text);
// The value of RLOCK_HELD for holds.
std::string format_holds(const std::vector<Hold>& holds);
// The tokens of the holds of lock_key. The server is not part of a hold: one server has many
// spellings (127.0.0.1, localhost, a Sentinel name), and the acquire script checks the 128-bit
// token against the lock anyway.
std::vector<std::string> tokens_for(const std::vector<Hold>& holds, std::string_view lock_key);

}  // namespace rlock::lock
