#pragma once

#include "redis/connection.hpp"

#include <cstdint>
#include <optional>
#include <string>

namespace rlock::lock {

// What of a server's configuration bears on the safety of its locks (from INFO).
struct ServerFacts {
  std::string version;
  std::optional<int64_t> maxmemory;  // bytes; 0: no limit
  std::string policy;                // maxmemory-policy
  std::optional<bool> aof;           // appendonly
  std::string role;                  // master, slave
};

// Parses the text of an INFO reply (any sections).
ServerFacts parse_info(const std::string& text);

// What the server's eviction policy can do to locks, or nullopt when it cannot evict them: with
// a maxmemory limit, volatile-* policies may evict the lock keys (they have a TTL), allkeys-*
// ones the fence counters too.
std::optional<std::string> eviction_risk(const ServerFacts& facts);

// The command that tells: sent with the greeting of every connection (no round trip of its own).
inline redis::Command info_memory() { return {"INFO", "memory"}; }

// Warns when the INFO reply shows a policy that can evict locks; with strict, throws rlock::Error
// 78 instead. An error reply (an ACL without +info) checks nothing.
void check_eviction(const std::optional<redis::Reply>& info, const std::string& server, bool strict);

}  // namespace rlock::lock
