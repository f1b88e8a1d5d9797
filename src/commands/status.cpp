#include "commands/commands.hpp"

#include "commands/common.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "lock/backend.hpp"
#include "lock/history.hpp"
#include "lock/inspect.hpp"
#include "lock/server.hpp"
#include "lock/summary.hpp"
#include "util/text.hpp"

#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <ctime>
#include <memory>

namespace rlock::commands {

namespace {

using util::iso_time;
using util::json_or_null;

std::string json_text_or_null(bool present, const std::string& text) {
  return present ? util::json_quote(text) : "null";
}

bool is_number(const std::string& text) {
  return !text.empty() && text.size() < 19 && text.find_first_not_of("0123456789") == std::string::npos;
}

const char* mode_name(const lock::LockState& s) {
  if (!s.held) return nullptr;
  switch (s.mode) {
    case lock::Mode::shared: return "shared";
    case lock::Mode::semaphore: return "semaphore";
    default: return "exclusive";
  }
}

std::string pid_json(const std::string& pid) { return is_number(pid) ? pid : "null"; }

std::string holder_json(const lock::HolderState& h) {
  return fmt::format(
      "{{\"host\":{},\"pid\":{},\"user\":{},\"command\":{},\"job\":{},\"note\":{},\"since\":{},"
      "\"since_ms\":{},"
      "\"held_for_ms\":{},\"ttl_ms\":{},\"lease_ms\":{},\"fence\":{},\"slot\":{},\"shared\":{},\"keeper_pid\":{},"
      "\"watched_pid\":{},\"state\":{},\"preemptible\":{},\"tick\":{},\"tick_state\":{}}}",
      util::json_quote(h.holder.host), pid_json(h.holder.pid), util::json_quote(h.holder.user),
      util::json_quote(h.holder.cmd), json_text_or_null(!h.holder.job.empty(), h.holder.job),
      json_text_or_null(!h.holder.note.empty(), h.holder.note),
      h.since_ms ? util::json_quote(iso_time(*h.since_ms)) : "null", json_or_null(h.since_ms),
      json_or_null(h.held_for_ms), json_or_null(h.ttl_left_ms), json_or_null(h.lease_ms), json_or_null(h.fence),
      h.slot > 0 ? std::to_string(h.slot) : "null", h.shared, h.keeper ? std::to_string(h.keeper->keeper) : "null",
      h.keeper ? std::to_string(h.keeper->watched) : "null",
      h.lingering ? "\"lingering\""
      : h.keeper  ? "\"kept\""
                  : "\"held\"",
      h.preemptible, h.tick ? util::json_quote(iso_time(*h.tick)) : "null",
      !h.tick      ? "null"
      : h.tick_ran ? "\"ran\""
                   : "\"pending\"");
}

std::string waiter_json(const lock::WaiterState& w) {
  return fmt::format(
      "{{\"host\":{},\"pid\":{},\"user\":{},\"command\":{},\"job\":{},\"note\":{},\"shared\":{},\"waiting_since\":{},"
      "\"waiting_since_ms\":{},\"waited_ms\":{},\"position\":{}}}",
      util::json_quote(w.holder.host), pid_json(w.holder.pid), util::json_quote(w.holder.user),
      util::json_quote(w.holder.cmd), json_text_or_null(!w.holder.job.empty(), w.holder.job),
      json_text_or_null(!w.holder.note.empty(), w.holder.note), w.shared,
      w.since_ms ? util::json_quote(iso_time(*w.since_ms)) : "null", json_or_null(w.since_ms),
      json_or_null(w.waited_ms), w.position);
}

std::string masters_json(const lock::LockState& s) {
  if (s.masters.empty()) return "null";
  std::string out = "[";
  for (size_t i = 0; i < s.masters.size(); ++i) {
    const lock::MasterView& m = s.masters[i];
    out += fmt::format("{}{{\"url\":{},\"agrees\":{},\"held\":{},\"host\":{},\"pid\":{},\"error\":{}}}", i ? "," : "",
                       util::json_quote(m.url), m.agrees, m.held, m.held ? util::json_quote(m.holder.host) : "null",
                       m.held ? pid_json(m.holder.pid) : "null", m.error.empty() ? "null" : util::json_quote(m.error));
  }
  return out + "]";
}

// The last end of a hold of a free lock (from its summary), or null.
std::string last_json(const std::optional<lock::Moment>& m) {
  if (!m || !m->time_ms) return "null";
  long long exit = 0;
  bool has_exit = util::parse_int(m->exit_status, 0, 255, exit);
  return fmt::format(
      "{{\"event\":{},\"time\":{},\"time_ms\":{},\"host\":{},\"held_ms\":{},\"exit\":{},\"outcome\":{}}}",
      util::json_quote(m->kind), util::json_quote(iso_time(*m->time_ms)), *m->time_ms,
      json_text_or_null(!m->host.empty(), m->host), json_or_null(m->held_ms), has_exit ? std::to_string(exit) : "null",
      json_text_or_null(!m->outcome.empty(), m->outcome));
}

// "released 2026-11-27T04:15:04.120Z by host4 after 3s, exit 0": the last end of a hold.
std::string last_text(const lock::Moment& m) {
  std::string out = fmt::format("{} {} by {}", util::printable(m.kind), iso_time(*m.time_ms),
                                util::printable(m.host.empty() ? "?" : m.host));
  if (m.held_ms) out += " after " + util::format_duration(util::Millis(*m.held_ms));
  if (!m.exit_status.empty()) out += ", exit " + util::printable(m.exit_status);
  if (std::string why = lock::outcome_text(m.outcome); !why.empty()) out += " (" + why + ")";
  return out;
}

std::string to_json(const lock::LockState& s, const std::optional<lock::Moment>& last) {
  // The top-level holder fields describe the exclusive holder, or the first shared or semaphore one.
  static const lock::HolderState none;
  const lock::HolderState& h = s.holders.empty() ? none : s.holders.front();
  bool held = s.held;
  std::string holders, waiters;
  for (const lock::HolderState& x : s.holders) holders += (holders.empty() ? "" : ",") + holder_json(x);
  for (const lock::WaiterState& w : s.waiters) waiters += (waiters.empty() ? "" : ",") + waiter_json(w);
  const char* mode = mode_name(s);
  return fmt::format(
      "{{\"key\":{},\"held\":{},\"host\":{},\"pid\":{},\"user\":{},\"command\":{},\"job\":{},\"note\":{},"
      "\"since\":{},\"since_ms\":{},"
      "\"held_for_ms\":{},\"ttl_ms\":{},\"lease_ms\":{},\"fence\":{},\"mode\":{},\"limit\":{},\"holders\":[{}],"
      "\"holder_count\":{},\"queue_length\":{},\"waiters\":[{}],\"masters\":{},\"agreeing\":{},\"state\":{},"
      "\"last\":{}}}",
      util::json_quote(s.key), held, json_text_or_null(held, h.holder.host), held ? pid_json(h.holder.pid) : "null",
      json_text_or_null(held, h.holder.user), json_text_or_null(held, h.holder.cmd),
      json_text_or_null(held && !h.holder.job.empty(), h.holder.job),
      json_text_or_null(held && !h.holder.note.empty(), h.holder.note),
      h.since_ms ? util::json_quote(iso_time(*h.since_ms)) : "null", json_or_null(h.since_ms),
      json_or_null(h.held_for_ms), json_or_null(h.ttl_left_ms), json_or_null(h.lease_ms),
      json_or_null(held && h.fence ? h.fence : s.fence), mode ? util::json_quote(mode) : "null", json_or_null(s.limit),
      holders, s.holder_count, s.queue_length, waiters, masters_json(s),
      s.masters.empty() ? "null" : std::to_string(s.agreeing),
      !held ? "\"free\""
      : std::all_of(s.holders.begin(), s.holders.end(), [](const lock::HolderState& x) { return x.lingering; })
          ? "\"lingering\""
          : "\"held\"",
      last_json(last));
}

// The columns text takes on a terminal: its code points (printable text has no control characters).
size_t display_width(const std::string& text) {
  size_t n = 0;
  for (char c : text) n += (static_cast<unsigned char>(c) & 0xC0) != 0x80;
  return n;
}

std::string ms_text(const std::optional<int64_t>& ms, const char* none) {
  return ms ? util::format_duration(util::Millis(*ms)) : none;
}

std::string state_text(const lock::LockState& s, const lock::HolderState& h) {
  if (h.lingering)
    return s.mode == lock::Mode::semaphore ? fmt::format("lingering {}/{}", h.slot, s.limit.value_or(0)) : "lingering";
  std::string kept = h.keeper ? " (kept)" : "";
  switch (s.mode) {
    case lock::Mode::shared: return "shared" + kept;
    case lock::Mode::semaphore: return fmt::format("slot {}/{}{}", h.slot, s.limit.value_or(0), kept);
    default: return h.keeper ? "kept" : !h.tick ? "held" : h.tick_ran ? "held (tick ran)" : "held (tick pending)";
  }
}

// The last end of a hold of each state's lock (status KEY of a free lock), or none: parallel to
// the states, or empty.
using Lasts = std::vector<std::optional<lock::Moment>>;

const std::optional<lock::Moment>& last_of(const Lasts& lasts, size_t i) {
  static const std::optional<lock::Moment> none;
  return i < lasts.size() ? lasts[i] : none;
}

// One row per holder (a shared or semaphore lock has several), or one for a free lock; after the
// table, a free lock's last end when known, and with verbose every waiter.
void print_table(const std::vector<lock::LockState>& states, bool verbose, const Lasts& lasts = {}) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"KEY", "STATE", "HOST", "PID", "USER", "HELD FOR", "TTL", "FENCE", "WAITING", "COMMAND"});
  std::string waiting_list;
  for (size_t i = 0; i < states.size(); ++i) {
    const lock::LockState& s = states[i];
    std::string key = util::printable(s.key);
    std::string waiting = std::to_string(s.queue_length);
    if (const std::optional<lock::Moment>& last = last_of(lasts, i); last && last->time_ms) {
      waiting_list += fmt::format("{} last: {}\n", key, last_text(*last));
    }
    if (!s.held) {
      rows.push_back({key, "free", "-", "-", "-", "-", "-", s.fence ? std::to_string(*s.fence) : "-", waiting, "-"});
    }
    for (const lock::HolderState& h : s.holders) {
      rows.push_back({key, state_text(s, h), util::printable(h.holder.host), util::printable(h.holder.pid),
                      util::printable(h.holder.user), ms_text(h.held_for_ms, "?"), ms_text(h.ttl_left_ms, "none"),
                      h.fence ? std::to_string(*h.fence) : "-", waiting, util::printable(h.holder.cmd)});
    }
    // A quorum: how many masters agree, and every one that does not (always shown).
    if (!s.masters.empty() && static_cast<size_t>(s.agreeing) < s.masters.size()) {
      waiting_list += fmt::format("{}: {} of {} masters agree\n", key, s.agreeing, s.masters.size());
      for (const lock::MasterView& m : s.masters) {
        if (m.agrees) continue;
        if (!m.error.empty()) {
          std::string why =
              m.error.compare(0, m.url.size() + 2, m.url + ": ") == 0 ? m.error.substr(m.url.size() + 2) : m.error;
          waiting_list += fmt::format("{}: {} did not answer: {}\n", key, m.url, util::printable(why));
        } else if (m.held) {
          waiting_list += fmt::format("{}: {} disagrees: held there by {} pid {}\n", key, m.url,
                                      util::printable(m.holder.host), util::printable(m.holder.pid));
        } else {
          waiting_list += fmt::format("{}: {} disagrees: free there\n", key, m.url);
        }
      }
    }
    if (!verbose) continue;
    for (const lock::HolderState& h : s.holders) {
      if (!h.holder.job.empty()) {
        waiting_list += fmt::format("{} held by pid {} on {} in CI job {}\n", key, util::printable(h.holder.pid),
                                    util::printable(h.holder.host), util::printable(h.holder.job));
      }
      if (!h.holder.note.empty()) {
        waiting_list += fmt::format("{} held by pid {} on {}: {}\n", key, util::printable(h.holder.pid),
                                    util::printable(h.holder.host), util::printable(h.holder.note));
      }
      if (!h.keeper) continue;
      waiting_list += fmt::format("{} kept alive by keeper pid {} on {} while pid {} lives\n", key, h.keeper->keeper,
                                  util::printable(h.holder.host), h.keeper->watched);
    }
    for (const lock::WaiterState& w : s.waiters) {
      waiting_list +=
          fmt::format("{} waiter {}: {} pid {} ({}), {}waiting for {} ({})\n", key, w.position,
                      util::printable(w.holder.host), util::printable(w.holder.pid), util::printable(w.holder.cmd),
                      w.shared ? "shared, " : "", ms_text(w.waited_ms, "?"), w.since_ms ? iso_time(*w.since_ms) : "?");
    }
  }
  std::vector<size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], display_width(row[i]));
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - display_width(row[i]) + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  write_stdout(out + waiting_list);
}

void print_json(const std::vector<lock::LockState>& states, bool single, const Lasts& lasts = {}) {
  std::string out;
  if (single) {
    out = to_json(states.front(), last_of(lasts, 0));
  } else {
    out = "[";
    for (size_t i = 0; i < states.size(); ++i) out += (i ? "," : "") + to_json(states[i], last_of(lasts, i));
    out += "]";
  }
  out += "\n";
  write_stdout(out);
}

// The state of each key. Keys found by scanning (skip_foreign) that hold another program's data
// are left out; named keys that do are an error.
std::vector<lock::LockState> inspect_all(lock::Backend& locker, const ConnectOptions& connect,
                                         const std::vector<std::string>& keys, bool skip_foreign) {
  std::vector<lock::LockState> states;
  states.reserve(keys.size());
  for (const std::string& key : keys) {
    try {
      states.push_back(locker.inspect(lock_name(connect, key)));
    } catch (const Error& e) {
      if (!skip_foreign || e.exit_code() != exit_code::k_data) throw;
      log::verbose("skipping {}: {}", key, e.what());
    }
  }
  return states;
}

// status -v: what the server's configuration means for its locks, before the table.
void print_server_of(redis::Client& connection) {
  redis::Reply info;
  try {
    info = connection.call({"INFO"});
  } catch (const Error& e) {
    if (e.exit_code() != exit_code::k_permission) throw;
    info = redis::Reply{redis::Reply::Type::error, 0, "NOPERM: the ACL user may not run INFO", {}};
  }
  if (info.type != redis::Reply::Type::string) {
    write_stdout(fmt::format("server {}: INFO refused ({}): cannot tell its eviction policy or persistence\n",
                             connection.url().display(), util::printable(info.str)));
    return;
  }
  lock::ServerFacts f = lock::parse_info(info.str);
  std::string policy = f.policy.empty() ? "unknown" : f.policy;
  std::optional<std::string> risk = lock::eviction_risk(f);
  std::string out = fmt::format("server {}: Redis {}, {}\n", connection.url().display(), util::printable(f.version),
                                util::printable(f.role));
  out += fmt::format("  maxmemory-policy {} (maxmemory {}): {}\n", util::printable(policy),
                     f.maxmemory ? std::to_string(*f.maxmemory) : "?", risk ? *risk : "locks are never evicted");
  if (f.aof) {
    out += fmt::format("  appendonly {}: {}\n", *f.aof ? "yes" : "no",
                       *f.aof ? "locks survive a restart as far as appendfsync allows"
                              : "a restart without persistence frees every lock at once (mutual exclusion then needs "
                                "restarts delayed by one TTL)");
  }
  write_stdout(out);
}

// For each named lock that is free, the last end of a hold, from its summary (none when it has
// none, or when the summary cannot be read: the state is status's answer).
Lasts read_lasts(lock::Backend& locker, const ConnectOptions& connect, const std::vector<lock::LockState>& states) {
  Lasts lasts(states.size());
  for (size_t i = 0; i < states.size(); ++i) {
    if (states[i].held) continue;
    try {
      lock::Summary summary = locker.read_summary(lock_name(connect, states[i].key));
      if (summary.end.time_ms) lasts[i] = summary.end;
    } catch (const Error& e) {
      log::verbose("could not read the last run of {}: {}", states[i].key, e.what());
    }
  }
  return lasts;
}

void print_server(lock::Backend& locker) {
  if (redis::Client* one = locker.single()) {
    print_server_of(*one);
    return;
  }
  write_stdout(fmt::format("Redlock quorum of independent masters: {}\n", locker.display()));
}

}  // namespace

int status(const StatusOptions& options) {
  std::unique_ptr<lock::Backend> backend = lock::open_backend(options.connect, std::nullopt);
  lock::Backend& locker = *backend;
  bool all = options.keys.empty();
  std::vector<std::string> keys = all ? locker.scan_keys(options.connect.prefix, "*") : options.keys;
  std::vector<lock::LockState> states = inspect_all(locker, options.connect, keys, all);
  if (all) std::erase_if(states, [](const lock::LockState& s) { return !s.held && s.queue_length == 0; });
  Lasts lasts = all ? Lasts{} : read_lasts(locker, options.connect, states);
  if (options.json) {
    print_json(states, options.keys.size() == 1, lasts);
  } else {
    if (log::verbose_enabled()) print_server(locker);  // after the lock was read: a refused login says so first
    if (!states.empty()) {
      print_table(states, log::verbose_enabled(), lasts);
    } else if (all) {
      // Silence would look like a failure to read: say so (the exit status stays 1).
      write_stdout(fmt::format("no lock is held (prefix {})\n", util::printable(options.connect.prefix)));
    }
  }
  if (all) return states.empty() ? exit_code::k_not_held : exit_code::k_ok;
  for (const lock::LockState& s : states) {
    if (!s.held) return exit_code::k_not_held;
  }
  return exit_code::k_ok;
}

int list(const ListOptions& options) {
  std::unique_ptr<lock::Backend> backend = lock::open_backend(options.connect, std::nullopt);
  lock::Backend& locker = *backend;
  std::vector<lock::LockState> states =
      inspect_all(locker, options.connect, locker.scan_keys(options.connect.prefix, options.pattern), true);
  std::erase_if(states, [](const lock::LockState& s) { return !s.held && s.queue_length == 0; });
  if (options.json) {
    print_json(states, false);
  } else if (!states.empty()) {
    print_table(states, log::verbose_enabled());
  }
  return exit_code::k_ok;
}

}  // namespace rlock::commands
