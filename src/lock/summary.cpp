#include "summary.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/lease.hpp"
#include "lock/protocol.hpp"
#include "util/text.hpp"

#include <algorithm>
#include <functional>
#include <map>
#include <string_view>

namespace rlock::lock {

namespace {

// k_outcomes is the protocol's event kinds in the order rlock shows them: every kind, once.
constexpr bool every_event_shown() {
  for (std::string_view kind : protocol::event::k_all) {
    if (std::count_if(k_outcomes.begin(), k_outcomes.end(), [&](const char* k) { return kind == k; }) != 1) {
      return false;
    }
  }
  return k_outcomes.size() == protocol::event::k_all.size();
}
static_assert(every_event_shown(), "k_outcomes must list each event kind of lock/protocol.txt once");

std::optional<int64_t> summary_number(const std::string& text) {
  long long v = 0;
  if (!util::parse_int(text, INT64_MIN, INT64_MAX, v)) return std::nullopt;
  return v;
}

// The later of two moments (a copy without a time is older than any).
const Moment& later(const Moment& a, const Moment& b) {
  if (!b.time_ms) return a;
  if (!a.time_ms) return b;
  return *b.time_ms > *a.time_ms ? b : a;
}

}  // namespace

int64_t Summary::count(std::string_view kind) const {
  for (size_t i = 0; i < k_outcomes.size(); ++i) {
    if (kind == k_outcomes[i]) return counts[i];
  }
  return 0;
}

std::vector<redis::Command> summary_read(const LockName& name) { return {{"HGETALL", name.summary_key()}, {"TIME"}}; }

Summary parse_summary(const LockName& name, const std::vector<redis::Reply>& replies) {
  if (replies.size() != 2) throw Error(exit_code::k_internal, "unexpected reply from Redis: malformed answers");
  const redis::Reply& all = replies[0];
  if (all.is_error()) {
    if (all.error_code() == "WRONGTYPE") throw foreign_data(name.summary_key());
    check_reply(all, name);
  }
  check_reply(replies[1], name);
  Summary s;
  const redis::Reply& time = replies[1];
  if (time.elements.size() == 2) {
    s.now_ms = summary_number(time.elements[0].str).value_or(0) * 1000 +
               summary_number(time.elements[1].str).value_or(0) / 1000;
  }
  std::map<std::string, std::string, std::less<>> f;
  for (size_t i = 0; i + 1 < all.elements.size(); i += 2) f[all.elements[i].str] = all.elements[i + 1].str;
  s.present = !f.empty();
  auto text = [&f](std::string_view field) {
    auto it = f.find(field);
    return it == f.end() ? std::string() : it->second;
  };
  auto number = [&text](std::string_view field) { return summary_number(text(field)); };
  namespace sum = protocol::summary;
  s.start = {number(sum::started), text(sum::started_host), "", "", std::nullopt, ""};
  s.end = {number(sum::ended),    text(sum::ended_host),   text(sum::ended_kind),
           text(sum::ended_exit), number(sum::ended_held), text(sum::ended_outcome)};
  s.success = {number(sum::success),    text(sum::success_host),   std::string(protocol::event::released),
               text(sum::success_exit), number(sum::success_held), std::string(protocol::outcome::success)};
  s.lost_since_success = number(sum::lost_since_success).value_or(0);
  s.failed_since_success = number(sum::failed_since_success).value_or(0);
  for (size_t i = 0; i < k_outcomes.size(); ++i) {
    s.counts[i] = number(std::string(sum::count) + k_outcomes[i]).value_or(0);
  }
  return s;
}

Summary read_summary(Node& node, const LockName& name) {
  return parse_summary(name, node.pipeline(summary_read(name)));
}

Summary merge_summaries(const std::vector<Summary>& copies) {
  Summary out;
  for (const Summary& s : copies) {
    out.present = out.present || s.present;
    out.now_ms = std::max(out.now_ms, s.now_ms);
    out.start = later(out.start, s.start);
    out.end = later(out.end, s.end);
    // The holds since the last success, as the copy that saw it counts them (no success
    // anywhere: the most any copy counted).
    const Moment& success = later(out.success, s.success);
    if (!out.success.time_ms && !s.success.time_ms) {
      out.lost_since_success = std::max(out.lost_since_success, s.lost_since_success);
      out.failed_since_success = std::max(out.failed_since_success, s.failed_since_success);
    } else if (&success == &s.success) {
      out.lost_since_success = s.lost_since_success;
      out.failed_since_success = s.failed_since_success;
    }
    out.success = success;
    for (size_t i = 0; i < k_outcomes.size(); ++i) out.counts[i] = std::max(out.counts[i], s.counts[i]);
  }
  return out;
}

std::vector<std::string> scan_summaries(Node& node, const std::string& prefix, const std::string& pattern) {
  std::string match;
  for (char c : prefix) {
    if (c == '*' || c == '?' || c == '[' || c == ']' || c == '\\') match += '\\';
    match += c;
  }
  match += "{" + pattern + "}:sum";
  constexpr std::string_view suffix = "}:sum";
  std::vector<std::string> keys;
  for (const std::string& full : node.scan(match)) {
    if (full.size() < prefix.size() + 1 + suffix.size() + 1 || full.compare(0, prefix.size(), prefix) != 0 ||
        full[prefix.size()] != '{' || full.compare(full.size() - suffix.size(), suffix.size(), suffix) != 0) {
      continue;
    }
    keys.push_back(full.substr(prefix.size() + 1, full.size() - prefix.size() - 1 - suffix.size()));
  }
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  return keys;
}

}  // namespace rlock::lock
