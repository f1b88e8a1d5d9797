#include "inspect.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <map>

namespace rlock::lock {

namespace {

using redis::Reply;

std::optional<int64_t> to_int(const std::string& text) {
  long long v = 0;
  if (!util::parse_int(text, INT64_MIN, INT64_MAX, v)) return std::nullopt;
  return v;
}

std::optional<int64_t> to_int(const Reply& r) {
  if (r.type == Reply::Type::integer) return r.integer;
  return to_int(r.str);
}

// Escapes the glob metacharacters of Redis's MATCH in literal text.
std::string glob_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

std::optional<int64_t> since_to_held(std::optional<int64_t> since, int64_t now) {
  if (!since) return std::nullopt;
  return std::max<int64_t>(0, now - *since);
}

}  // namespace

namespace {

// "<id>.<field>" -> value, from the flat reply of HGETALL.
std::map<std::string, std::string> field_map(const Reply& r) {
  std::map<std::string, std::string> out;
  for (size_t i = 0; i + 1 < r.elements.size(); i += 2) out[r.elements[i].str] = r.elements[i + 1].str;
  return out;
}

std::string field(const std::map<std::string, std::string>& m, const std::string& id, const char* name) {
  auto it = m.find(id + "." + name);
  return it == m.end() ? std::string() : it->second;
}

}  // namespace

std::vector<redis::Command> inspect_commands(const LockName& name) {
  // Single-key commands in one round trip, not a script: read-only ACL users may run them, and
  // each follows its own ASK redirection while the lock's slot is being migrated.
  std::vector<std::string> k = name.script_keys("0000000000000000");
  return {{"TYPE", k[0]},
          {"PTTL", k[0]},
          {"HGETALL", k[2]},
          {"GET", k[1]},
          {"GET", k[8]},
          {"ZRANGE", k[6], "0", "-1", "WITHSCORES"},
          {"HGETALL", k[7]},
          {"ZRANGE", k[3], "0", "-1"},
          {"ZRANGE", k[5], "0", "-1", "WITHSCORES"},
          {"HGETALL", k[4]},
          {"TIME"}};
}

LockState inspect(Node& node, const LockName& name, int max_waiters) {
  return parse_inspect(name, node.pipeline(inspect_commands(name)), max_waiters);
}

LockState parse_inspect(const LockName& name, const std::vector<Reply>& r, int max_waiters, std::string* holder_id) {
  if (r.size() != 11) {
    throw Error(exit_code::k_internal, fmt::format("unexpected reply from Redis for {}: malformed answers",
                                                   name.lock_key()));
  }
  // Another program's data at any of the lock's keys is named, as the lock scripts name it: status
  // and run agree on what is wrong.
  for (size_t i = 0; i < r.size(); ++i) {
    if (r[i].is_error() && r[i].error_code() == "WRONGTYPE") {
      const redis::Command command = inspect_commands(name)[i];  // names the key it read
      if (command.size() > 1) throw foreign_data(command[1]);
    }
    check_reply(r[i], name);
  }
  const std::string& kind = r[0].str;
  if (kind != "none" && kind != "string") throw foreign_data(name.lock_key());
  if (r[3].type == Reply::Type::string && !to_int(r[3])) throw foreign_data(name.fence_key());
  int64_t now = 0;
  if (r[10].elements.size() == 2) {
    now = to_int(r[10].elements[0]).value_or(0) * 1000 + to_int(r[10].elements[1]).value_or(0) / 1000;
  }
  LockState s;
  s.key = name.key;
  s.fence = to_int(r[3]);
  s.limit = to_int(r[4]);
  if (kind == "string") {
    HolderState h;
    if (r[1].type == Reply::Type::integer && r[1].integer >= 0) h.ttl_left_ms = r[1].integer;
    for (const auto& [f, value] : field_map(r[2])) {
      if (f == "host") h.holder.host = value;
      else if (f == "pid") h.holder.pid = value;
      else if (f == "user") h.holder.user = value;
      else if (f == "cmd") h.holder.command = value;
      else if (f == "since") h.since_ms = to_int(value);
      else if (f == "ttl") h.lease_ms = to_int(value);
      else if (f == "fence") h.fence = to_int(value);
      else if (f == "id" && holder_id) *holder_id = value;
    }
    auto kp = field_map(r[2]);
    if (auto keeper = to_int(kp["keeper"])) {
      h.keeper = KeeperInfo{static_cast<pid_t>(*keeper), static_cast<pid_t>(to_int(kp["watch"]).value_or(0))};
    }
    h.held_for_ms = since_to_held(h.since_ms, now);
    if (!h.fence) h.fence = s.fence;
    s.held = true;
    s.holders.push_back(std::move(h));
  }
  std::map<std::string, std::string> hi = field_map(r[6]);
  const auto& holders = r[5].elements;
  for (size_t i = 0; i + 1 < holders.size(); i += 2) {
    std::optional<int64_t> expiry = to_int(holders[i + 1].str);
    if (!expiry || *expiry <= now) continue;  // lapsed: reaped at the next change
    const std::string& id = holders[i].str;
    HolderState h;
    h.holder = {field(hi, id, "h"), field(hi, id, "p"), field(hi, id, "u"), field(hi, id, "c")};
    h.since_ms = to_int(field(hi, id, "s"));
    h.held_for_ms = since_to_held(h.since_ms, now);
    h.fence = to_int(field(hi, id, "f"));
    h.lease_ms = to_int(field(hi, id, "ttl"));
    h.slot = static_cast<int>(to_int(field(hi, id, "slot")).value_or(0));
    h.shared = field(hi, id, "m") == "s";
    h.ttl_left_ms = *expiry - now;
    if (auto keeper = to_int(field(hi, id, "kp"))) {
      h.keeper = KeeperInfo{static_cast<pid_t>(*keeper), static_cast<pid_t>(to_int(field(hi, id, "kw")).value_or(0))};
    }
    s.mode = h.shared ? Mode::shared : Mode::semaphore;
    s.held = true;
    s.holders.push_back(std::move(h));
  }
  std::map<std::string, int64_t> leases;
  const auto& wl = r[8].elements;
  for (size_t i = 0; i + 1 < wl.size(); i += 2) leases[wl[i].str] = to_int(wl[i + 1].str).value_or(0);
  std::map<std::string, std::string> w = field_map(r[9]);
  for (const Reply& entry : r[7].elements) {
    const std::string& id = entry.str;
    auto lease = leases.find(id);
    if (lease == leases.end() || lease->second <= now) continue;  // a dead waiter, about to be dropped
    ++s.queue_length;
    if (static_cast<int>(s.waiters.size()) >= max_waiters) continue;
    WaiterState ws;
    ws.holder = {field(w, id, "h"), field(w, id, "p"), field(w, id, "u"), field(w, id, "c")};
    ws.since_ms = to_int(field(w, id, "s"));
    ws.waited_ms = since_to_held(ws.since_ms, now);
    ws.shared = field(w, id, "m") == "s";
    ws.position = s.queue_length;
    s.waiters.push_back(std::move(ws));
  }
  return s;
}

std::vector<std::string> scan_keys(Node& node, const std::string& prefix, const std::string& pattern) {
  std::string match = glob_escape(prefix) + "{" + pattern + "}*";
  std::vector<std::string> keys;
  for (const std::string& full : node.scan(match)) {
    // PREFIX{KEY}, PREFIX{KEY}:h (shared or semaphore holders) or PREFIX{KEY}:q (waiters): a lock
    // someone holds or waits for; not its :fence or other companions.
    if (full.size() < prefix.size() + 2 || full.compare(0, prefix.size(), prefix) != 0 || full[prefix.size()] != '{') {
      continue;
    }
    std::string_view rest = std::string_view(full).substr(prefix.size() + 1);
    for (std::string_view suffix : {"}", "}:h", "}:q"}) {
      if (rest.size() > suffix.size() && rest.substr(rest.size() - suffix.size()) == suffix) {
        keys.emplace_back(rest.substr(0, rest.size() - suffix.size()));
        break;
      }
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace rlock::lock
