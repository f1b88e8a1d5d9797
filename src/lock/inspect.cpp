#include "inspect.hpp"

#include "error.hpp"
#include "exit_code.hpp"

#include <fmt/core.h>

#include <algorithm>

namespace rlock::lock {

namespace {

std::optional<int64_t> to_int(const std::string& text) {
  try {
    size_t used = 0;
    long long v = std::stoll(text, &used);
    if (used != text.size()) return std::nullopt;
    return v;
  } catch (const std::exception&) {
    return std::nullopt;
  }
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

}  // namespace

LockState inspect(Node& node, const LockName& name) {
  std::vector<redis::Reply> r = node.pipeline({{"TYPE", name.lock_key()},
                                               {"PTTL", name.lock_key()},
                                               {"HGETALL", name.info_key()},
                                               {"GET", name.fence_key()},
                                               {"TIME"}});
  for (const redis::Reply& reply : r) check_reply(reply, name);
  LockState s;
  s.key = name.key;
  const std::string& kind = r[0].str;
  if (kind != "none" && kind != "string") check_reply(redis::Reply{redis::Reply::Type::error, 0, "WRONGTYPE", {}}, name);
  s.held = kind == "string";
  if (r[3].type == redis::Reply::Type::string) s.fence = to_int(r[3].str);
  if (!s.held) return s;
  if (r[1].type == redis::Reply::Type::integer && r[1].integer >= 0) s.ttl_left_ms = r[1].integer;
  const auto& info = r[2].elements;
  for (size_t i = 0; i + 1 < info.size(); i += 2) {
    const std::string& field = info[i].str;
    const std::string& value = info[i + 1].str;
    if (field == "host") s.holder.host = value;
    else if (field == "pid") s.holder.pid = value;
    else if (field == "user") s.holder.user = value;
    else if (field == "cmd") s.holder.command = value;
    else if (field == "since") s.since_ms = to_int(value);
    else if (field == "ttl") s.lease_ms = to_int(value);
    else if (field == "fence") {
      // The counter may have moved on if the info is stale; the info's fence is this holder's.
      if (auto f = to_int(value)) s.fence = f;
    }
  }
  if (r[4].type == redis::Reply::Type::array && r[4].elements.size() == 2 && s.since_ms) {
    auto secs = to_int(r[4].elements[0].str);
    auto micros = to_int(r[4].elements[1].str);
    if (secs && micros) s.held_for_ms = std::max<int64_t>(0, *secs * 1000 + *micros / 1000 - *s.since_ms);
  }
  return s;
}

std::vector<std::string> scan_keys(Node& node, const std::string& prefix, const std::string& pattern) {
  std::string match = glob_escape(prefix) + "{" + pattern + "}";
  std::vector<std::string> keys;
  for (const std::string& full : node.scan(match)) {
    {
      // PREFIX{KEY}: the lock itself, not its :fence or :info companions.
      if (full.size() < prefix.size() + 2 || full.compare(0, prefix.size(), prefix) != 0 ||
          full[prefix.size()] != '{' || full.back() != '}') {
        continue;
      }
      keys.push_back(full.substr(prefix.size() + 1, full.size() - prefix.size() - 2));
    }
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace rlock::lock
