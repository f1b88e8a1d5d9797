#include "server.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

namespace rlock::lock {

ServerFacts parse_info(std::string_view text) {
  ServerFacts f;
  // Line by line, in place: a Redlock member's INFO is about 5 KB, read on every connection.
  while (!text.empty()) {
    size_t end = text.find('\n');
    std::string_view line = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view() : text.substr(end + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t colon = line.find(':');
    if (colon == std::string_view::npos || line.front() == '#') continue;
    std::string_view name = line.substr(0, colon);
    std::string_view value = line.substr(colon + 1);
    long long n = 0;
    if (name == "redis_version")
      f.version = value;
    else if (name == "maxmemory" && util::parse_int(value, 0, INT64_MAX, n))
      f.maxmemory = n;
    else if (name == "maxmemory_policy")
      f.policy = value;
    else if (name == "aof_enabled")
      f.aof = value == "1";
    else if (name == "role")
      f.role = value;
    else if (name == "redis_mode")
      f.cluster = f.cluster || value == "cluster";
    else if (name == "cluster_enabled")
      f.cluster = f.cluster || value == "1";
    else if (name == "run_id")
      f.run_id = value;
    else if (name == "uptime_in_seconds" && util::parse_int(value, 0, INT64_MAX, n))
      f.uptime_s = n;
  }
  return f;
}

std::optional<std::string> eviction_risk(const ServerFacts& f) {
  if (!f.maxmemory || *f.maxmemory == 0 || f.policy.empty() || f.policy == "noeviction") return std::nullopt;
  if (f.policy.rfind("volatile-", 0) == 0) {
    return fmt::format(
        "maxmemory-policy {} can evict lock keys (they have a TTL) when memory runs out: a held lock "
        "can vanish and be taken by another holder",
        f.policy);
  }
  return fmt::format(
      "maxmemory-policy {} can evict any key when memory runs out: held locks, and the fence "
      "counters that keep fencing tokens increasing",
      f.policy);
}

std::optional<std::string> restart_text(const ServerFacts& f, util::Millis held, const std::string& server) {
  // INFO counts whole seconds of the wall clock: a server up for U seconds started less than U+1
  // seconds ago.
  if (!f.uptime_s || (*f.uptime_s + 1) * 1000 > held.count()) return std::nullopt;
  std::string persistence = !f.aof ? "" : *f.aof ? ", appendonly yes" : ", appendonly no";
  return fmt::format(
      "{} restarted {} ago, after the lock was taken (run_id {}, uptime {}s{}){}", server,
      *f.uptime_s > 0 ? util::format_duration(util::Millis(*f.uptime_s * 1000)) : std::string("under a second"),
      f.run_id.empty() ? "?" : f.run_id, *f.uptime_s, persistence,
      f.aof && !*f.aof ? ": without persistence it lost the lock with the rest of its data (rlock(7), GUARANTEES)"
                       : ": the lock was not in the data it loaded");
}

Error cluster_member_error(const std::string& server) {
  return Error(
      exit_code::k_config,
      fmt::format("{} is a Redis Cluster node: a Cluster cannot be a Redlock member (its own failover can lose "
                  "the lock a quorum counts on); give independent masters",
                  server));
}

namespace {

constexpr std::string_view k_cached_cluster = "cluster";
constexpr std::string_view k_cached_server = "server";

}  // namespace

std::string cached_policy(const ServerFacts& f) {
  std::string_view kind = f.cluster ? k_cached_cluster : k_cached_server;
  if (!eviction_risk(f)) return std::string(kind);
  return fmt::format("{} {} {}", kind, *f.maxmemory, f.policy);
}

std::optional<bool> cached_cluster(const std::string& cached) {
  std::string_view kind = std::string_view(cached).substr(0, cached.find(' '));
  if (kind == k_cached_cluster) return true;
  if (kind == k_cached_server) return false;
  return std::nullopt;
}

void check_cached_policy(const std::string& cached, const std::string& server) {
  std::string_view rest = cached;
  if (cached_cluster(cached)) {
    size_t kind_end = rest.find(' ');
    if (kind_end == std::string_view::npos) return;
    rest.remove_prefix(kind_end + 1);
  }
  size_t space = rest.find(' ');
  if (space == std::string::npos) return;
  ServerFacts f;
  long long n = 0;
  if (!util::parse_int(rest.substr(0, space), 0, INT64_MAX, n)) return;
  f.maxmemory = n;
  f.policy = std::string(rest.substr(space + 1));
  std::optional<std::string> risk = eviction_risk(f);
  if (!risk) return;
  log::warning(
      fmt::format("{}: {}; set maxmemory-policy noeviction (or --strict to refuse such a server)", server, *risk));
}

void check_eviction(const std::optional<redis::Reply>& info, const std::string& server, bool strict) {
  if (!info || info->type != redis::Reply::Type::string) return;
  check_eviction(parse_info(info->str), server, strict);
}

void check_eviction(const ServerFacts& facts, const std::string& server, bool strict) {
  std::optional<std::string> risk = eviction_risk(facts);
  if (!risk) return;
  if (strict) {
    throw Error(exit_code::k_config,
                fmt::format("{}: {}; refusing (--strict): set maxmemory-policy noeviction", server, *risk));
  }
  log::warning(
      fmt::format("{}: {}; set maxmemory-policy noeviction (or --strict to refuse such a server)", server, *risk));
}

}  // namespace rlock::lock
