#pragma once

#include <string>

namespace rlock::lock {

// The Redis keys of one lock. All share the hash tag {KEY}, so they live in one Cluster slot.
struct LockName {
  std::string prefix;  // "rlock:" by default
  std::string key;     // the user's KEY

  std::string lock_key() const { return prefix + "{" + key + "}"; }  // the token, with the TTL
  std::string fence_key() const { return lock_key() + ":fence"; }    // fencing counter, never expires
  std::string info_key() const { return lock_key() + ":info"; }      // holder info, expires with the lock
};

}  // namespace rlock::lock
