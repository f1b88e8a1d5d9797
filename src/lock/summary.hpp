#pragma once

#include "lock/name.hpp"
#include "lock/node.hpp"
#include "redis/connection.hpp"
#include "redis/reply.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rlock::lock {

// The kinds of event the scripts count in a lock's summary, in the order rlock shows them.
inline constexpr std::array<const char*, 9> k_outcomes = {"acquired",  "busy",    "released", "lost",   "superseded",
                                                          "preempted", "expired", "returned", "overrun"};

// One moment of a lock's summary: when, on which host, and (for the end of a hold) how it ended.
struct Moment {
  std::optional<int64_t> time_ms;  // server clock, ms since the epoch; nullopt: never (or not since it expired)
  std::string host;
  std::string kind;                // an end: released, lost, preempted or expired
  std::string exit_status;         // the command's, "" when there was none
  std::optional<int64_t> held_ms;  // an end: how long the hold lasted
  std::string outcome;             // an end: how its holder said it ended (protocol::outcome; "" unknown)
};

// A lock's summary (PREFIX{KEY}:sum, a hash of fixed fields the lock scripts keep, even without a
// history; see common/history.lua, summarize): what rlock check and rlock metrics read.
struct Summary {
  bool present = false;              // the hash exists
  int64_t now_ms = 0;                // the server's clock when it was read
  Moment start;                      // the last acquisition
  Moment end;                        // the last end of a hold: released, lost, preempted or expired
  Moment success;                    // the last success: a release (not forced) its holder said succeeded
  int64_t lost_since_success = 0;    // holds lost (lost or expired) since the last success
  int64_t failed_since_success = 0;  // holds ended without success since then (a preempted one aside)
  std::array<int64_t, k_outcomes.size()> counts{};  // per kind, in k_outcomes' order

  int64_t count(std::string_view kind) const;
};

// The commands that read a lock's summary and the server's clock (one pipeline).
std::vector<redis::Command> summary_read(const LockName& name);
// The summary from their replies. Throws Error 65 when the key holds another program's data.
Summary parse_summary(const LockName& name, const std::vector<redis::Reply>& replies);
// Reads it from one Redis.
Summary read_summary(Node& node, const LockName& name);
// The copies of several masters (a Redlock quorum, each master keeps its own) as one: the latest
// of each moment, the highest count of each kind.
Summary merge_summaries(const std::vector<Summary>& copies);

// The KEYs under prefix whose KEY matches the glob pattern that have a summary (SCAN, never KEYS).
std::vector<std::string> scan_summaries(Node& node, const std::string& prefix, const std::string& pattern);

}  // namespace rlock::lock
