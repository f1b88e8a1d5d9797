// rlock check: a monitoring check of locks in the Nagios plugin convention, from each lock's state
// and its summary (PREFIX{KEY}:sum, kept by the lock scripts; see lock/summary.hpp).
#include "commands/commands.hpp"

#include "commands/common.hpp"
#include "exit_code.hpp"
#include "lock/backend.hpp"
#include "lock/summary.hpp"
#include "util/duration.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <cctype>
#include <memory>
#include <type_traits>

namespace rlock::commands {

namespace {

// The states of the Nagios plugin convention, worst last, as exit codes.
enum State { ok = exit_code::k_ok, warning = exit_code::k_warning, critical = exit_code::k_critical };

const char* state_name(int state) {
  switch (state) {
    case ok: return "OK";
    case warning: return "WARNING";
    case critical: return "CRITICAL";
    default: return "UNKNOWN";
  }
}

// Text from Redis for a status line: printable, and without the "|" that starts perfdata.
std::string shown(const std::string& text) {
  std::string out;
  for (char c : util::printable(text)) {
    if (c == '|')
      out += "\\x7c";
    else
      out += c;
  }
  return out;
}

std::string ago(int64_t now, int64_t then) {
  return util::format_duration(util::Millis(std::max<int64_t>(0, now - then)));
}

// One lock, as check sees it.
struct Checked {
  std::string key;
  lock::LockState lock;
  lock::Summary summary;
  std::optional<int64_t> held_ms;           // the longest hold going on (a lingering one aside)
  std::optional<int64_t> since_success_ms;  // how long ago the last success was
  int state = ok;
  std::vector<std::string> reasons;  // why it is not OK
  bool unmatched = false;            // a pattern that no lock matches
};

std::string limit_text(util::Millis d) { return util::format_duration(d); }
std::string limit_text(long long n) { return std::to_string(n); }

// How a value compares with a threshold: its state, and the reason when it is not OK (words: its
// format, where {} stands for the limit passed).
template <class T>
void judge(Checked& c, const Threshold<T>& t, T value, const char* words) {
  int state = ok;
  T limit{};
  if (t.crit && value > *t.crit) {
    state = critical;
    limit = *t.crit;
  } else if (t.warn && value > *t.warn) {
    state = warning;
    limit = *t.warn;
  }
  if (state == ok) return;
  c.state = std::max(c.state, state);
  c.reasons.push_back(fmt::format(fmt::runtime(words), limit_text(limit)));
}

// An end's details: its exit status, how long it lasted, and why rlock ended it.
std::string moment_details(const lock::Moment& m) {
  std::vector<std::string> parts;
  if (!m.exit_status.empty()) parts.push_back("exit " + shown(m.exit_status));
  if (m.held_ms) parts.push_back(util::format_duration(util::Millis(*m.held_ms)));
  if (std::string why = lock::outcome_text(m.outcome); !why.empty()) parts.push_back(why);
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out.empty() ? "" : " (" + out + ")";
}

Checked judge_lock(const CheckOptions& o, const std::string& key, lock::LockState state, lock::Summary summary) {
  Checked c;
  c.key = key;
  c.lock = std::move(state);
  c.summary = std::move(summary);
  const int64_t now = c.summary.now_ms;
  for (const lock::HolderState& h : c.lock.holders) {
    if (!h.lingering && h.held_for_ms) c.held_ms = std::max(c.held_ms.value_or(0), *h.held_for_ms);
  }
  if (c.summary.success.time_ms) c.since_success_ms = std::max<int64_t>(0, now - *c.summary.success.time_ms);

  if (o.succeeded_within.given()) {
    if (c.since_success_ms) {
      judge(c, o.succeeded_within, util::Millis(*c.since_success_ms), "no success within {}");
    } else {
      c.state = critical;
      c.reasons.push_back("no success within " + limit_text(*o.succeeded_within.crit));
    }
  }
  if (c.held_ms) judge(c, o.max_held, util::Millis(*c.held_ms), "held over {}");
  judge(c, o.max_waiting, static_cast<long long>(c.lock.queue_length), "more than {} waiting");
  judge(c, o.max_lost, static_cast<long long>(c.summary.lost_since_success),
        "more than {} lost since the last success");
  judge(c, o.max_failures, static_cast<long long>(c.summary.failed_since_success), "more than {} failed in a row");
  // A check that judges nothing would say OK whatever happened: it asks for a limit instead.
  if (!o.succeeded_within.given() && !o.max_held.given() && !o.max_waiting.given() && !o.max_lost.given() &&
      !o.max_failures.given()) {
    c.state = exit_code::k_unknown;
    c.reasons.emplace_back(
        "no limit given: give --succeeded-within, --max-failures, --max-held, --max-waiting or --max-lost");
  }
  // Nothing to judge: a name nobody used (a typo?), or unused for as long as a summary is kept.
  if (!c.summary.present && !c.lock.held && c.lock.queue_length == 0 && c.state == ok) c.state = exit_code::k_unknown;
  return c;
}

// What a lock's line says: the last success, a later end that was no success, the hold going on,
// the waiters, the losses.
std::string description(const Checked& c) {
  if (c.unmatched) return "no lock under the prefix matches the pattern (held, waited for, or with a record)";
  const lock::Summary& s = c.summary;
  const int64_t now = s.now_ms;
  std::string out;
  if (s.success.time_ms) {
    out = fmt::format("last success {} ago on {}{}", ago(now, *s.success.time_ms), shown(s.success.host),
                      moment_details(s.success));
  } else if (s.present) {
    out = "no success recorded";
  } else if (!c.lock.held && c.lock.queue_length == 0) {
    out = "no record (never used, or unused for 31 days)";
  }
  auto add = [&out](const std::string& part) { out += (out.empty() ? "" : "; ") + part; };
  if (s.end.time_ms && (!s.success.time_ms || *s.end.time_ms > *s.success.time_ms)) {
    add(fmt::format("last end {} ago on {}: {}{}", ago(now, *s.end.time_ms), shown(s.end.host), shown(s.end.kind),
                    moment_details(s.end)));
  }
  if (c.lock.held && !c.lock.holders.empty()) {
    const lock::HolderState& h = c.lock.holders.front();
    std::string more = c.lock.holder_count > 1 ? fmt::format(" and {} more", c.lock.holder_count - 1) : "";
    add(fmt::format("{} by {} pid {}{} for {}", h.lingering ? "lingering" : "held",
                    shown(h.holder.host.empty() ? "?" : h.holder.host),
                    shown(h.holder.pid.empty() ? "?" : h.holder.pid), more,
                    h.held_for_ms ? util::format_duration(util::Millis(*h.held_for_ms)) : "?"));
  }
  if (c.lock.queue_length > 0) add(fmt::format("{} waiting", c.lock.queue_length));
  if (s.failed_since_success > 0) {
    add(fmt::format("{} failed in a row", s.failed_since_success));
  }
  if (s.lost_since_success > 0) add(fmt::format("{} lost since the last success", s.lost_since_success));
  for (const std::string& r : c.reasons) add(r);
  return out;
}

// One perfdata label: quoted, a quote doubled, no "=".
std::string label(const std::string& key, const char* what) {
  std::string text = util::printable(key) + " " + what;
  std::string out = "'";
  for (char c : text) {
    if (c == '\'')
      out += "''";
    else if (c == '=' || c == '|')
      out += '_';
    else
      out += c;
  }
  return out + "'";
}

template <class T>
std::string limits(const Threshold<T>& t) {
  auto value = [](const std::optional<T>& v) -> std::string {
    if (!v) return "";
    if constexpr (std::is_same_v<T, util::Millis>) {
      return fmt::format("{}", static_cast<double>(v->count()) / 1000.0);
    } else {
      return std::to_string(*v);
    }
  };
  return value(t.warn) + ";" + value(t.crit);
}

std::string seconds(int64_t ms) { return fmt::format("{}", static_cast<double>(ms) / 1000.0); }

std::string perfdata(const CheckOptions& o, const std::vector<Checked>& all) {
  std::vector<std::string> items;
  for (const Checked& c : all) {
    if (c.unmatched) continue;
    if (c.since_success_ms) {
      items.push_back(fmt::format("{}={}s;{};0", label(c.key, "since_success"), seconds(*c.since_success_ms),
                                  limits(o.succeeded_within)));
    }
    items.push_back(
        fmt::format("{}={}s;{};0", label(c.key, "held"), seconds(c.held_ms.value_or(0)), limits(o.max_held)));
    items.push_back(fmt::format("{}={};{};0", label(c.key, "waiting"), c.lock.queue_length, limits(o.max_waiting)));
    items.push_back(fmt::format("{}={};{};0", label(c.key, "lost"), c.summary.lost_since_success, limits(o.max_lost)));
    items.push_back(
        fmt::format("{}={};{};0", label(c.key, "failures"), c.summary.failed_since_success, limits(o.max_failures)));
  }
  std::string out;
  for (const std::string& i : items) out += (out.empty() ? "" : " ") + i;
  return out;
}

std::string moment_json(const lock::Moment& m, bool end) {
  if (!m.time_ms) return "null";
  std::string out = fmt::format("{{\"time\":{},\"time_ms\":{},\"host\":{}",
                                util::json_quote(util::iso_time(*m.time_ms)), *m.time_ms, util::json_quote(m.host));
  if (end) {
    long long exit = 0;
    bool numeric = util::parse_int(m.exit_status, 0, 255, exit);
    out += fmt::format(",\"event\":{},\"exit\":{},\"held_ms\":{}", util::json_quote(m.kind),
                       numeric ? std::to_string(exit) : "null", util::json_or_null(m.held_ms));
  }
  return out + "}";
}

std::string to_json(const Checked& c) {
  std::string reasons, counts;
  for (const std::string& r : c.reasons) reasons += (reasons.empty() ? "" : ",") + util::json_quote(r);
  for (const char* kind : lock::k_outcomes) {
    counts += fmt::format("{}\"{}\":{}", counts.empty() ? "" : ",", kind, c.summary.count(kind));
  }
  return fmt::format(
      "{{\"key\":{},\"state\":\"{}\",\"reasons\":[{}],\"text\":{},\"held\":{},\"holders\":{},\"held_ms\":{},"
      "\"waiting\":{},\"last_start\":{},\"last_end\":{},\"last_success\":{},\"since_success_ms\":{},"
      "\"lost_since_success\":{},\"failed_since_success\":{},\"counts\":{{{}}}}}",
      util::json_quote(c.key), state_name(c.state), reasons, util::json_quote(description(c)), c.lock.held,
      c.lock.holder_count, util::json_or_null(c.held_ms), c.lock.queue_length, moment_json(c.summary.start, false),
      moment_json(c.summary.end, true), moment_json(c.summary.success, true), util::json_or_null(c.since_success_ms),
      c.summary.lost_since_success, c.summary.failed_since_success, counts);
}

// The locks to check: the names given, and the locks each pattern matches (as log expands them),
// each once; a pattern that matches none is UNKNOWN.
std::vector<Checked> check_locks(lock::Backend& backend, const CheckOptions& options) {
  std::vector<Checked> all;
  std::vector<std::string> keys;
  for (const std::string& given : options.keys) {
    if (!is_pattern(given)) {
      if (std::find(keys.begin(), keys.end(), given) == keys.end()) keys.push_back(given);
      continue;
    }
    std::vector<std::string> matched = matching_locks(backend, options.connect.prefix, given);
    if (matched.empty()) {
      Checked c;
      c.key = given;
      c.unmatched = true;
      c.state = exit_code::k_unknown;
      all.push_back(std::move(c));
    }
    for (std::string& m : matched) {
      if (std::find(keys.begin(), keys.end(), m) == keys.end()) keys.push_back(std::move(m));
    }
  }
  for (const std::string& key : keys) {
    lock::LockName name = lock_name(options.connect, key);
    lock::LockState state = backend.inspect(name);
    lock::Summary summary = backend.read_summary(name);
    all.push_back(judge_lock(options, key, std::move(state), std::move(summary)));
  }
  return all;
}

}  // namespace

int check(const CheckOptions& options) {
  std::unique_ptr<lock::Backend> backend = lock::open_backend(options.connect, std::nullopt);
  int worst = ok;
  std::vector<Checked> all = check_locks(*backend, options);
  for (const Checked& c : all) worst = std::max(worst, c.state);
  if (options.json) {
    std::string keys;
    for (const Checked& c : all) keys += (keys.empty() ? "" : ",") + to_json(c);
    write_stdout(fmt::format("{{\"state\":\"{}\",\"exit\":{},\"keys\":[{}]}}\n", state_name(worst), worst, keys));
    return worst;
  }
  std::string out;
  if (all.size() == 1) {
    out = fmt::format("RLOCK {} - {}: {} | {}\n", state_name(worst), shown(all[0].key), description(all[0]),
                      perfdata(options, all));
  } else {
    // Which keys are in which state, then a line per key: the worst first, then as given.
    std::vector<const Checked*> order;
    order.reserve(all.size());
    for (const Checked& c : all) order.push_back(&c);
    std::stable_sort(order.begin(), order.end(),
                     [](const Checked* a, const Checked* b) { return a->state > b->state; });
    std::string counts;
    for (int state : {static_cast<int>(exit_code::k_unknown), static_cast<int>(critical), static_cast<int>(warning),
                      static_cast<int>(ok)}) {
      std::string names;
      int n = 0;
      for (const Checked* c : order) {
        if (c->state != state) continue;
        ++n;
        names += (names.empty() ? "" : ", ") + shown(c->key);
      }
      if (n == 0) continue;
      std::string lower = state_name(state);
      std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char ch) { return std::tolower(ch); });
      counts += fmt::format("{}{} {}{}", counts.empty() ? "" : ", ", n, lower,
                            state == ok ? "" : fmt::format(" ({})", names));
    }
    out = fmt::format("RLOCK {} - {} locks: {} | {}\n", state_name(worst), all.size(), counts, perfdata(options, all));
    for (const Checked* c : order)
      out += fmt::format("{} {}: {}\n", state_name(c->state), shown(c->key), description(*c));
  }
  write_stdout(out);
  return worst;
}

}  // namespace rlock::commands
