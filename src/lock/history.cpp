#include "history.hpp"

#include "lock/protocol.hpp"
#include "util/duration.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <ctime>
#include <map>
#include <string_view>

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

redis::Command log_range(const LockName& name, const LogRange& range) {
  std::string count = std::to_string(range.count);
  if (range.after.empty()) {
    // Stream ids are the server's ms: "T" is T-0 as a start and T-(max) as an end.
    std::string end = range.until_ms ? std::to_string(std::max<int64_t>(0, *range.until_ms)) : "+";
    std::string start = range.since_ms ? std::to_string(std::max<int64_t>(0, *range.since_ms)) : "-";
    return {"XREVRANGE", name.log_key(), end, start, "COUNT", count};
  }
  // The id right after `after` (an exclusive start needs Redis 6.2; this works on 5).
  std::string start = "0-1";
  const std::string& after = range.after;
  size_t dash = after.find('-');
  std::optional<int64_t> ms = number(after.substr(0, dash));
  std::optional<int64_t> seq = dash == std::string::npos ? std::optional<int64_t>(0) : number(after.substr(dash + 1));
  if (ms && seq) start = fmt::format("{}-{}", *ms, *seq + 1);
  return {"XRANGE", name.log_key(), start, "+", "COUNT", count};
}

redis::Command follow_command(const std::vector<std::pair<LockName, std::string>>& names,
                              std::optional<int64_t> block_ms) {
  redis::Command argv = {"XREAD", "COUNT", "1000"};
  if (block_ms) {
    argv.emplace_back("BLOCK");
    argv.push_back(std::to_string(*block_ms));
  }
  argv.emplace_back("STREAMS");
  for (const auto& [name, after] : names) argv.push_back(name.log_key());
  for (const auto& [name, after] : names) argv.push_back(after.empty() ? "0-0" : after);
  return argv;
}

std::vector<Event> parse_follow(const redis::Reply& reply, const std::vector<std::pair<LockName, std::string>>& names,
                                std::map<std::string, std::string>& last) {
  std::map<std::string, std::string> keys;  // history key -> KEY
  for (const auto& [name, after] : names) keys.emplace(name.log_key(), name.key);
  std::vector<Event> events;
  for (const redis::Reply& stream : reply.elements) {
    if (stream.elements.size() != 2) continue;
    auto it = keys.find(stream.elements[0].str);
    if (it == keys.end()) continue;
    std::vector<Event> mine = parse_events(stream.elements[1], it->second);
    if (mine.empty()) continue;
    last[it->second] = mine.back().stream_id;
    events.insert(events.end(), mine.begin(), mine.end());
  }
  return events;
}

int hash_slot(const std::string& redis_key) {
  std::string_view key = redis_key;
  size_t open = key.find('{');
  if (open != std::string_view::npos) {
    size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close > open + 1) key = key.substr(open + 1, close - open - 1);
  }
  uint16_t crc = 0;
  for (char ch : key) {
    auto c = static_cast<unsigned char>(ch);
    crc = static_cast<uint16_t>(crc ^ (c << 8));
    for (int bit = 0; bit < 8; ++bit) {
      crc = (crc & 0x8000) != 0 ? static_cast<uint16_t>((crc << 1) ^ 0x1021) : static_cast<uint16_t>(crc << 1);
    }
  }
  return crc & 16383;
}

namespace {

// Reads `digits` decimal digits at text[pos], moving pos on.
std::optional<int> digits_at(const std::string& text, size_t& pos, size_t digits) {
  if (pos + digits > text.size()) return std::nullopt;
  int v = 0;
  for (size_t i = 0; i < digits; ++i) {
    char c = text[pos + i];
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  pos += digits;
  return v;
}

bool take(const std::string& text, size_t& pos, char c) {
  if (pos < text.size() && text[pos] == c) {
    ++pos;
    return true;
  }
  return false;
}

// The clock part after the date: hh:mm[:ss[.fff...]] into t and ms; false when malformed.
bool parse_clock(const std::string& text, size_t& pos, tm& t, int64_t& ms) {
  std::optional<int> hh = digits_at(text, pos, 2);
  if (!hh || !take(text, pos, ':')) return false;
  std::optional<int> mm = digits_at(text, pos, 2);
  if (!mm || *hh > 23 || *mm > 59) return false;
  t.tm_hour = *hh;
  t.tm_min = *mm;
  if (!take(text, pos, ':')) return true;
  std::optional<int> ss = digits_at(text, pos, 2);
  if (!ss || *ss > 60) return false;
  t.tm_sec = *ss;
  if (!take(text, pos, '.') && !take(text, pos, ',')) return true;
  int64_t scale = 100;
  size_t first = pos;
  while (pos < text.size() && text[pos] >= '0' && text[pos] <= '9') {
    ms += (text[pos] - '0') * scale;
    scale /= 10;
    ++pos;
  }
  return pos > first;
}

// The zone at the end: Z, +hh:mm, +hhmm or +hh (or -), in seconds east of UTC.
std::optional<int64_t> parse_offset(const std::string& text, size_t& pos) {
  if (take(text, pos, 'Z') || take(text, pos, 'z')) return 0;
  int sign = take(text, pos, '+') ? 1 : take(text, pos, '-') ? -1 : 0;
  if (sign == 0) return std::nullopt;
  std::optional<int> hh = digits_at(text, pos, 2);
  if (!hh || *hh > 23) return std::nullopt;
  int mm = 0;
  if (pos < text.size()) {
    take(text, pos, ':');
    std::optional<int> m = digits_at(text, pos, 2);
    if (!m || *m > 59) return std::nullopt;
    mm = *m;
  }
  return sign * (int64_t{*hh} * 3600 + int64_t{mm} * 60);
}

}  // namespace

std::optional<int64_t> parse_log_time(const std::string& text, int64_t now_ms) {
  if (std::optional<util::Millis> ago = util::parse_duration(text)) return now_ms - ago->count();
  tm t{};
  size_t pos = 0;
  // A time of day alone (04:10): today's, in UTC, as log prints its times (or in the zone given).
  if (text.size() >= 5 && text[2] == ':') {
    time_t now = static_cast<time_t>(now_ms / 1000);
    if (::gmtime_r(&now, &t) == nullptr) return std::nullopt;
    t.tm_hour = t.tm_min = t.tm_sec = 0;
    int64_t ms = 0;
    if (!parse_clock(text, pos, t, ms)) return std::nullopt;
    int64_t offset = 0;
    if (pos < text.size()) {
      std::optional<int64_t> zone = parse_offset(text, pos);
      if (!zone || pos != text.size()) return std::nullopt;
      offset = *zone;
    }
    return (int64_t{timegm(&t)} - offset) * 1000 + ms;
  }
  std::optional<int> year = digits_at(text, pos, 4);
  if (!year || !take(text, pos, '-')) return std::nullopt;
  std::optional<int> month = digits_at(text, pos, 2);
  if (!month || !take(text, pos, '-')) return std::nullopt;
  std::optional<int> day = digits_at(text, pos, 2);
  if (!day || *month < 1 || *month > 12 || *day < 1 || *day > 31) return std::nullopt;
  t.tm_year = *year - 1900;
  t.tm_mon = *month - 1;
  t.tm_mday = *day;
  int64_t ms = 0;
  if (take(text, pos, 'T') || take(text, pos, 't') || take(text, pos, ' ')) {
    if (!parse_clock(text, pos, t, ms)) return std::nullopt;
  }
  std::optional<int64_t> offset;
  if (pos < text.size()) {
    offset = parse_offset(text, pos);
    if (!offset || pos != text.size()) return std::nullopt;
  }
  time_t secs = 0;
  if (offset) {
    secs = timegm(&t) - *offset;
  } else {
    t.tm_isdst = -1;  // local time, as ISO 8601 reads a time without a zone
    secs = mktime(&t);
  }
  if (secs == static_cast<time_t>(-1)) return std::nullopt;
  return int64_t{secs} * 1000 + ms;
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
    // The record who (whatever fields protocol.txt gives it), then the event's own fields.
    e.holder = protocol::Who::read(protocol::who_fields::event_field, [&f](std::string_view want) {
      for (size_t i = 0; i + 1 < f.size(); i += 2) {
        if (f[i].str == want) return f[i + 1].str;
      }
      return std::string();
    });
    for (size_t i = 0; i + 1 < f.size(); i += 2) {
      const std::string& name = f[i].str;
      const std::string& value = f[i + 1].str;
      if (name == field::kind)
        e.kind = value;
      else if (name == field::fence)
        e.fence = number(value);
      else if (name == field::waited)
        e.waited_ms = number(value);
      else if (name == field::held)
        e.held_ms = number(value);
      else if (name == field::exit)
        e.exit_status = value;
      else if (name == field::outcome)
        e.outcome = value;
      else if (name == field::by)
        e.by = value;
      else if (name == field::id)
        e.contender = value;
      else if (name == field::tick)
        e.tick = number(value);
      else if (name == field::period)
        e.period_ms = number(value);
      else if (name == field::holder_host)
        e.held_by.host = value;
      else if (name == field::holder_pid)
        e.held_by.pid = value;
      else if (name == field::holder_cmd)
        e.held_by.cmd = value;
      else if (name == field::lingering)
        e.lingering = value == "1";
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

bool of_tick(const Event& e, int64_t at) {
  if (!e.tick) return false;
  int64_t half = e.period_ms && *e.period_ms > 0 ? *e.period_ms / 2 : 500;
  return *e.tick - at < half && at - *e.tick <= half;
}

void sort_by_time(std::vector<Event>& events) {
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.time_ms < b.time_ms; });
}

std::string outcome_text(const std::string& outcome) {
  namespace word = protocol::outcome;
  if (outcome == word::max_hold) return "stopped at --max-hold";
  if (outcome == word::guard_killed) return "killed: its guard was killed";
  if (outcome == word::not_owned) return "its token no longer owned the lock";
  if (outcome == word::renewals_failed) return "renewals kept failing";
  if (outcome == word::deadline) return "the lease ran out before rlock could renew it";
  if (outcome == word::restarted) return "the server restarted and lost it";
  return "";
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
  if (std::string why = outcome_text(e.outcome); !why.empty()) line += " (" + why + ")";
  if (e.tick) {
    // The tick that ran (a refusal: busy, naming who ran it), or the one taken or skipped.
    std::string tick = iso_time((*e.tick + 500) / 1000 * 1000);
    tick.erase(tick.size() - 5, 4);  // the milliseconds (".000") before the Z
    line += " tick " + tick + (e.kind == "busy" && !e.by.empty() ? " done" : e.kind == "overrun" ? " skipped" : "");
  }
  if (!e.by.empty()) {
    Holder by = parse_who(e.by);
    line += by.pid.empty() ? " by " + util::printable(e.by)
                           : fmt::format(" by {} pid {} ({})", util::printable(by.host), util::printable(by.pid),
                                         util::printable(by.cmd));
  }
  if (!e.held_by.host.empty() || !e.held_by.pid.empty()) {
    line += fmt::format(" held by {} pid {} ({}){}", util::printable(e.held_by.host.empty() ? "?" : e.held_by.host),
                        util::printable(e.held_by.pid.empty() ? "?" : e.held_by.pid), util::printable(e.held_by.cmd),
                        e.lingering ? ", only lingering (--min-hold)" : "");
  }
  if (!e.holder.cmd.empty()) line += ": " + util::printable(e.holder.cmd);
  if (!e.holder.note.empty()) line += " [" + util::printable(e.holder.note) + "]";
  if (!e.holder.job.empty()) line += " in " + util::printable(e.holder.job);
  return line;
}

std::string event_json(const Event& e) {
  std::optional<int64_t> pid = number(e.holder.pid);
  std::optional<int64_t> exit = number(e.exit_status);
  std::string by = "null";
  if (!e.by.empty()) {
    Holder h = parse_who(e.by);
    by = h.pid.empty() ? util::json_quote(e.by)
                       : fmt::format("{{\"host\":{},\"pid\":{},\"user\":{},\"cmd\":{}}}", util::json_quote(h.host),
                                     json_or_null(number(h.pid)), util::json_quote(h.user), util::json_quote(h.cmd));
  }
  std::string held_by = "null";
  if (!e.held_by.host.empty() || !e.held_by.pid.empty()) {
    held_by = fmt::format("{{\"host\":{},\"pid\":{},\"cmd\":{},\"lingering\":{}}}", text_or_null(e.held_by.host),
                          json_or_null(number(e.held_by.pid)), text_or_null(e.held_by.cmd), e.lingering);
  }
  return fmt::format(
      "{{\"time\":{},\"time_ms\":{},\"key\":{},\"event\":{},\"host\":{},\"pid\":{},\"user\":{},\"cmd\":{},"
      "\"job\":{},\"note\":{},\"fence\":{},\"waited_ms\":{},\"held_ms\":{},\"exit\":{},\"outcome\":{},\"by\":{},"
      "\"holder\":{},"
      "\"tick\":{},\"period_ms\":{}}}",
      util::json_quote(iso_time(e.time_ms)), e.time_ms, util::json_quote(e.key), util::json_quote(e.kind),
      text_or_null(e.holder.host), json_or_null(pid), text_or_null(e.holder.user), text_or_null(e.holder.cmd),
      text_or_null(e.holder.job), text_or_null(e.holder.note), json_or_null(e.fence), json_or_null(e.waited_ms),
      json_or_null(e.held_ms), json_or_null(exit), text_or_null(e.outcome), by, held_by,
      e.tick ? util::json_quote(iso_time(*e.tick)) : std::string("null"), json_or_null(e.period_ms));
}

}  // namespace rlock::lock
