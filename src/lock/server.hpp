#pragma once

#include "error.hpp"
#include "redis/connection.hpp"
#include "util/duration.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace rlock::lock {

// What of a server's configuration bears on the safety of its locks (from INFO).
struct ServerFacts {
  std::string version;
  std::optional<int64_t> maxmemory;  // bytes; 0: no limit
  std::string policy;                // maxmemory-policy
  std::optional<bool> aof;           // appendonly
  std::string role;                  // master, slave
  bool cluster = false;              // a Redis Cluster node (redis_mode:cluster)
  std::string run_id;                // changes at every start of the server
  std::optional<int64_t> uptime_s;   // seconds since it started
};

// Parses the text of an INFO reply (any sections).
ServerFacts parse_info(std::string_view text);

// What the server's eviction policy can do to locks, or nullopt when it cannot evict them: with
// a maxmemory limit, volatile-* policies may evict the lock keys (they have a TTL), allkeys-*
// ones the fence counters too.
std::optional<std::string> eviction_risk(const ServerFacts& facts);

// The command that tells: sent with the greeting of every connection (no round trip of its own).
inline redis::Command info_memory() { return {"INFO", "memory"}; }
// A Redlock member's greeting when the call acquires: the default sections, which also say
// whether it is a Cluster node and keeps an append-only file (a multi-section INFO would need
// Redis 7).
inline redis::Command info_member() { return {"INFO"}; }
// A Redlock member's greeting otherwise: the server section alone (run_id, uptime, whether it is
// a Cluster node: redis_mode), at about a fifth of the server's time and a ninth of the bytes.
inline redis::Command info_identity() { return {"INFO", "server"}; }

// What a server that surely started less than `held` ago did to a lock held that long, for a
// message ("... restarted 3s ago (run_id ..., appendonly no): ..."); nullopt when it may have
// been up longer (INFO's uptime is in whole seconds), or does not say.
std::optional<std::string> restart_text(const ServerFacts& facts, util::Millis held, const std::string& server);

// The error for a Cluster node given as a Redlock member (exit 78).
Error cluster_member_error(const std::string& server);

// The eviction check's cache (LockName::policy_key): what the server is ("cluster" for a Redis
// Cluster node, else "server"), then, for a server that can evict locks, "MAXMEMORY POLICY"; kept
// an hour by the SET that remember_policy makes: the policy rarely changes, and a stale answer
// only delays a warning, where a cron job run every few minutes would otherwise pay an INFO and a
// SET a run. (Earlier versions wrote the policy part alone, or "".)
std::string cached_policy(const ServerFacts& facts);
// Whether the cache says the server is a Cluster node; nullopt when it does not say (an earlier
// version's).
std::optional<bool> cached_cluster(const std::string& cached);
inline constexpr int64_t k_policy_kept_ms = 3'600'000;
inline redis::Command remember_policy(const std::string& key, const std::string& cached) {
  return {"SET", key, cached, "PX", std::to_string(k_policy_kept_ms)};
}
// Warns when the cached policy is one that can evict locks.
void check_cached_policy(const std::string& cached, const std::string& server);

// Warns when the INFO reply shows a policy that can evict locks; with strict, throws rlock::Error
// 78 instead. An error reply (an ACL without +info) checks nothing.
void check_eviction(const std::optional<redis::Reply>& info, const std::string& server, bool strict);
// The same from facts already parsed.
void check_eviction(const ServerFacts& facts, const std::string& server, bool strict);

}  // namespace rlock::lock
