#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlock::lock {

// A lock held by an enclosing `run` (or a keepalive keeper), passed down to its process tree in
// RLOCK_HELD. Re-entry is for that tree alone: the hold names the process that anchors it (boot,
// pid, start time), and a process re-enters only if it descends from it on the same boot.
struct Hold {
  std::string lock_key;  // the lock's full Redis key
  std::string token;
  int64_t fence = 0;
  std::string boot_id;        // /proc/sys/kernel/random/boot_id where the hold was taken
  pid_t anchor = 0;           // the holding process (run's rlock, a keeper's watched process)
  uint64_t anchor_start = 0;  // its start time, so that a reused pid is not mistaken for it
};

// The variable that carries the holds of the enclosing process tree.
inline constexpr const char* k_holds_variable = "RLOCK_HELD";

// Parses the value of RLOCK_HELD: entries separated by newlines, fields (lock key, token, fence,
// boot id, anchor pid, anchor start) by spaces, each field percent-encoded. Malformed entries are
// skipped (the variable is a hint, verified against the process tree and Redis).
std::vector<Hold> parse_holds(std::string_view text);
// The value of RLOCK_HELD for holds.
std::string format_holds(const std::vector<Hold>& holds);
// The tokens of the holds of lock_key, in order. The server is not part of a hold: one server has
// many spellings (127.0.0.1, localhost, a Sentinel name), and the acquire script checks the
// 128-bit token against the lock anyway.
std::vector<std::string> tokens_for(const std::vector<Hold>& holds, std::string_view lock_key);

}  // namespace rlock::lock
