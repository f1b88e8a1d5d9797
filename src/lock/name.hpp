#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace rlock::lock {

// The Redis keys of one lock. All share the hash tag {KEY}, so they live in one Cluster slot,
// and every script is given all of them (see scripts/common.lua for what each holds).
struct LockName {
  std::string prefix;  // "rlock:" by default
  std::string key;     // the user's KEY

  std::string lock_key() const { return prefix + "{" + key + "}"; }  // the exclusive holder's token
  std::string fence_key() const { return lock_key() + ":fence"; }    // fencing counter, never expires
  std::string info_key() const { return lock_key() + ":info"; }      // exclusive holder info
  std::string mailbox(std::string_view id) const { return lock_key() + ":mb:" + std::string(id); }

  // The keys of every lock script, the caller's mailbox last.
  std::vector<std::string> script_keys(std::string_view id) const {
    std::string base = lock_key();
    return {base,          fence_key(),    info_key(),      base + ":q",         base + ":w",    base + ":wl",
            base + ":h",   base + ":hi",   base + ":limit", base + ":slots",     mailbox(id)};
  }
};

}  // namespace rlock::lock
