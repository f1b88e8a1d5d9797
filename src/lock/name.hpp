#pragma once

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace rlock::lock {

// The companions of a lock's key, in the order the scripts declare them (scripts/common.lua, K):
// what each holds is documented there and in rlock(7), REDIS DATA LAYOUT.
enum class Part {
  fence,        // fencing counter
  info,         // the exclusive holder
  queue,        // the waiters, in arrival order
  waiters,      // the waiters' data
  leases,       // the waiters' leases
  holders,      // shared and semaphore holders, by lease expiry
  holder_info,  // their data
  semaphore,    // the semaphore's limit and highest slot
  free_slots,   // semaphore slots given back
  superseding,  // waiters that asked to supersede older ones
  notices,      // waiters told to leave
  log,          // the lock's history (a stream)
  tick,         // --once-per: the last tick run
  summary,      // the lock's summary: last start, end and success, a count per outcome (a hash)
};

// The Redis keys of one lock. All share the hash tag {KEY}, so they live in one Cluster slot,
// and every script is given all of them.
struct LockName {
  std::string prefix;  // "rlock:" by default
  std::string key;     // the user's KEY

  // PREFIX{KEY}: the exclusive holder's token, or a lingering hold's mark.
  std::string lock_key() const { return prefix + "{" + key + "}"; }
  // PREFIX{KEY}:SUFFIX.
  std::string key_of(Part part) const { return lock_key() + ":" + std::string(suffix(part)); }
  std::string fence_key() const { return key_of(Part::fence); }
  std::string info_key() const { return key_of(Part::info); }
  std::string log_key() const { return key_of(Part::log); }
  // The server's eviction policy as rlock last read it, kept a minute (no lock script touches it):
  // the eviction check reads it with the first command, and asks INFO only when it is missing.
  std::string policy_key() const { return lock_key() + ":policy"; }
  std::string summary_key() const { return key_of(Part::summary); }
  // The mailbox of a contender (by its token's id), pushed when its hold or its place ends.
  std::string mailbox(std::string_view id) const { return lock_key() + ":mb:" + std::string(id); }

  // The keys of every lock script: the lock, its parts in k_parts' order, the caller's mailbox,
  // then the summary.
  std::vector<std::string> script_keys(std::string_view id) const {
    std::vector<std::string> keys{lock_key()};
    for (Part p : k_parts) keys.push_back(key_of(p));
    keys.push_back(mailbox(id));
    keys.push_back(summary_key());
    return keys;
  }

  static constexpr std::array<Part, 13> k_parts = {
      Part::fence,   Part::info,        Part::queue,     Part::waiters,    Part::leases,
      Part::holders, Part::holder_info, Part::semaphore, Part::free_slots, Part::superseding,
      Part::notices, Part::log,         Part::tick};

  static constexpr std::string_view suffix(Part part) {
    switch (part) {
      case Part::fence: return "fence";
      case Part::info: return "info";
      case Part::queue: return "q";
      case Part::waiters: return "w";
      case Part::leases: return "wl";
      case Part::holders: return "h";
      case Part::holder_info: return "hi";
      case Part::semaphore: return "sem";
      case Part::free_slots: return "free";
      case Part::superseding: return "sq";
      case Part::notices: return "gone";
      case Part::log: return "log";
      case Part::tick: return "tick";
      case Part::summary: return "sum";
    }
    return "";
  }
};

}  // namespace rlock::lock
