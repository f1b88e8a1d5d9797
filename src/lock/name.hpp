#pragma once

#include "lock/protocol.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace rlock::lock {

// The companions of a lock's key, in the order the scripts declare them (lock/protocol.txt, key):
// what each holds is documented there and in rlock(7), REDIS DATA LAYOUT.
using protocol::Part;

// The Redis keys of one lock. All share the hash tag {KEY}, so they live in one Cluster slot,
// and every script is given all of them.
struct LockName {
  std::string prefix;  // "rlock:" by default
  std::string key;     // the user's KEY

  // PREFIX{KEY}: the exclusive holder's token, or a lingering hold's mark.
  std::string lock_key() const { return prefix + "{" + key + "}"; }
  // PREFIX{KEY}:SUFFIX.
  std::string key_of(Part part) const { return lock_key() + ":" + std::string(protocol::suffix(part)); }
  std::string fence_key() const { return key_of(Part::fence); }
  std::string info_key() const { return key_of(Part::info); }
  std::string log_key() const { return key_of(Part::log); }
  // The server's eviction policy as rlock last read it, kept a minute (no lock script touches it):
  // the eviction check reads it with the first command, and asks INFO only when it is missing.
  std::string policy_key() const { return lock_key() + ":" + std::string(protocol::side::policy); }
  std::string summary_key() const { return key_of(Part::summary); }
  // The mailbox of a contender (by its token's id), pushed when its hold or its place ends.
  std::string mailbox(std::string_view id) const {
    return lock_key() + ":" + std::string(protocol::k_mailbox) + ":" + std::string(id);
  }

  // The keys of every lock script: the lock, its parts in k_parts' order, the caller's mailbox,
  // then the parts of k_parts_after (the summary).
  std::vector<std::string> script_keys(std::string_view id) const {
    std::vector<std::string> keys{lock_key()};
    for (Part p : protocol::k_parts) keys.push_back(key_of(p));
    keys.push_back(mailbox(id));
    for (Part p : protocol::k_parts_after) keys.push_back(key_of(p));
    return keys;
  }
};

}  // namespace rlock::lock
