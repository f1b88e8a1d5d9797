#include "history.hpp"

#include "lock/protocol.hpp"
#include "util/duration.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <ctime>
#include <map>

namespace rlock::lock {

namespace {

std::optional<int64_t> number(const std::string& text) {
  long long v = 0;
  if (!util::parse_int(text, INT64_MIN, INT64_MAX, v)) return std::nullopt;
  return v;
}

using util::iso_time;
using util::json_or_null;

std::string text_or_null(const std::string& text) { return text.empty() ? "null" : util::json_quote(text); }

}  // namespace

redis::Command log_range(const LockName& name, size_t count, const std::string& after) {
  if (after.empty()) return {"XREVRANGE", name.log_key(), "+", "-", "COUNT", std::to_string(count)};
  // The id right after `after` (an exclusive start needs Redis 6.2; this works on 5).
  std::string start = "0-1";
  size_t dash = after.find('-');
  std::optional<int64_t> ms = number(after.substr(0, dash));
  std::optional<int64_t> seq = dash == std::string::npos ? std::optional<int64_t>(0) : number(after.substr(dash + 1));
  if (ms && seq) start = fmt::format("{}-{}", *ms, *seq + 1);
  return {"XRANGE", name.log_key(), start, "+", "COUNT", std::to_string(count)};
}

std::vector<Event> parse_events(const redis::Reply& reply, const std::string& key) {
  std::vector<Event> events;
  for (const redis::Reply& entry : reply.elements) {
    if (entry.elements.size() != 2) continue;
    Event e;
    e.key = key;
    e.stream_id = entry.elements[0].str;
    e.time_ms = number(e.stream_id.substr(0, e.stream_id.find('-'))).value_or(0);
    namespace field = protocol::event_field;
    const auto& f = entry.elements[1].elements;
    for (size_t i = 0; i + 1 < f.size(); i += 2) {
      const std::string& name = f[i].str;
      const std::string& value = f[i + 1].str;
      if (name == field::kind)
        e.kind = value;
      else if (name == field::host)
        e.holder.host = value;
      else if (name == field::pid)
        e.holder.pid = value;
      else if (name == field::user)
        e.holder.user = value;
      else if (name == field::cmd)
        e.holder.command = value;
      else if (name == field::fence)
        e.fence = number(value);
      else if (name == field::waited)
        e.waited_ms = number(value);
      else if (name == field::held)
        e.held_ms = number(value);
      else if (name == field::exit)
        e.exit_status = value;
      else if (name == field::by)
        e.by = value;
      else if (name == field::id)
        e.contender = value;
      else if (name == field::time)
        e.time_ms = number(value).value_or(e.time_ms);  // recorded late: when it happened
    }
    events.push_back(std::move(e));
  }
  return events;
}

std::vector<Event> merge_copies(const std::vector<std::vector<Event>>& copies) {
  std::map<std::pair<std::string, std::string>, Event> merged;
  std::vector<Event> anonymous;
  for (const std::vector<Event>& copy : copies) {
    for (const Event& e : copy) {
      if (e.contender.empty()) {
        anonymous.push_back(e);
        continue;
      }
      auto [it, added] = merged.try_emplace({e.contender, e.kind}, e);
      if (!added && e.time_ms < it->second.time_ms) it->second.time_ms = e.time_ms;
    }
  }
  std::vector<Event> out = std::move(anonymous);
  for (auto& [id, e] : merged) out.push_back(std::move(e));
  sort_by_time(out);
  return out;
}

void sort_by_time(std::vector<Event>& events) {
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.time_ms < b.time_ms; });
}

std::string format_event(const Event& e, bool with_key) {
  std::string line = iso_time(e.time_ms);
  if (with_key) line += " " + util::printable(e.key);
  line += fmt::format(" {} {} pid {}", util::printable(e.kind),
                      util::printable(e.holder.host.empty() ? "?" : e.holder.host),
                      util::printable(e.holder.pid.empty() ? "?" : e.holder.pid));
  if (!e.holder.user.empty()) line += " user " + util::printable(e.holder.user);
  if (e.fence) line += fmt::format(" fence {}", *e.fence);
  if (e.waited_ms) line += " waited " + util::format_duration(util::Millis(*e.waited_ms));
  if (e.held_ms) line += " held " + util::format_duration(util::Millis(*e.held_ms));
  if (!e.exit_status.empty()) line += " exit " + util::printable(e.exit_status);
  if (!e.by.empty()) {
    Holder by = parse_who(e.by);
    line += by.pid.empty() ? " by " + util::printable(e.by)
                           : fmt::format(" by {} pid {} ({})", util::printable(by.host), util::printable(by.pid),
                                         util::printable(by.command));
  }
  if (!e.holder.command.empty()) line += ": " + util::printable(e.holder.command);
  return line;
}

std::string event_json(const Event& e) {
  std::optional<int64_t> pid = number(e.holder.pid);
  std::optional<int64_t> exit = number(e.exit_status);
  std::string by = "null";
  if (!e.by.empty()) {
    Holder h = parse_who(e.by);
    by = h.pid.empty()
             ? util::json_quote(e.by)
             : fmt::format("{{\"host\":{},\"pid\":{},\"user\":{},\"cmd\":{}}}", util::json_quote(h.host),
                           json_or_null(number(h.pid)), util::json_quote(h.user), util::json_quote(h.command));
  }
  return fmt::format(
      "{{\"time\":{},\"time_ms\":{},\"key\":{},\"event\":{},\"host\":{},\"pid\":{},\"user\":{},\"cmd\":{},"
      "\"fence\":{},\"waited_ms\":{},\"held_ms\":{},\"exit\":{},\"by\":{}}}",
      util::json_quote(iso_time(e.time_ms)), e.time_ms, util::json_quote(e.key), util::json_quote(e.kind),
      text_or_null(e.holder.host), json_or_null(pid), text_or_null(e.holder.user), text_or_null(e.holder.command),
      json_or_null(e.fence), json_or_null(e.waited_ms), json_or_null(e.held_ms), json_or_null(exit), by);
}

}  // namespace rlock::lock
