// rlock metrics: the locks' state and their summaries (lock/summary.hpp) in the Prometheus text
// exposition format, on stdout or atomically into a file for node_exporter's textfile collector.
#include "commands/commands.hpp"

#include "commands/common.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "lock/backend.hpp"
#include "lock/summary.hpp"
#include "log.hpp"
#include "util/file.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <set>
#include <system_error>

namespace rlock::commands {

namespace {

struct Lock {
  std::string key;
  lock::LockState state;
  lock::Summary summary;
};

// A label value as the exposition format escapes it: backslash, double quote, line feed.
std::string label_value(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '\\')
      out += "\\\\";
    else if (c == '"')
      out += "\\\"";
    else if (c == '\n')
      out += "\\n";
    else
      out += c;
  }
  return out;
}

std::string seconds_of(int64_t ms) { return fmt::format("{:.3f}", static_cast<double>(ms) / 1000.0); }

// One metric family: its HELP and TYPE lines, then a sample per lock (locks for which value says
// nothing have none).
class Exposition {
public:
  template <class F>
  void gauge(const char* name, const char* help, const std::vector<Lock>& locks, F value) {
    family(name, help, "gauge");
    for (const Lock& l : locks) {
      std::optional<std::string> v = value(l);
      if (v) m_out += fmt::format("{}{{key=\"{}\"}} {}\n", name, label_value(l.key), *v);
    }
  }
  void counters(const std::vector<Lock>& locks) {
    family("rlock_events_total", "Events of the lock by kind, as its summary counts them (rlock log lists them).",
           "counter");
    for (const Lock& l : locks) {
      for (const char* kind : lock::k_outcomes) {
        m_out += fmt::format("rlock_events_total{{key=\"{}\",event=\"{}\"}} {}\n", label_value(l.key), kind,
                             l.summary.count(kind));
      }
    }
  }
  const std::string& text() const { return m_out; }

private:
  void family(const char* name, const char* help, const char* type) {
    m_out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  std::string m_out;
};

std::optional<std::string> timestamp(const std::optional<int64_t>& ms) { return seconds_of(ms.value_or(0)); }

// Whether the figures that follow were read, and when: a file that Redis did not answer for says
// so, and a file that stopped being written shows its age.
std::string freshness(bool up, int64_t read_at_ms) {
  return fmt::format(
      "# HELP rlock_up Whether rlock metrics read the locks from Redis (1), or could not (0: no lock's figures "
      "follow).\n# TYPE rlock_up gauge\nrlock_up {}\n"
      "# HELP rlock_read_timestamp_seconds When rlock metrics read these figures (with rlock_up 0, tried to), by "
      "its host's clock.\n# TYPE rlock_read_timestamp_seconds gauge\nrlock_read_timestamp_seconds {}\n",
      up ? 1 : 0, seconds_of(read_at_ms));
}

void write_textfile(const std::string& path, const std::string& text) {
  try {
    util::write_file_atomic(path, text, 0644);
  } catch (const std::system_error& e) {
    throw Error(exit_code::k_system, fmt::format("cannot write --textfile {}: {}", path, e.code().message()));
  }
}

std::string exposition(const std::vector<Lock>& locks) {
  Exposition e;
  e.gauge("rlock_held", "Whether the lock is held (1), lingering included, or free (0).", locks,
          [](const Lock& l) { return std::optional<std::string>(l.state.held ? "1" : "0"); });
  e.gauge("rlock_holders", "Holders of the lock (a shared or semaphore lock may have several).", locks,
          [](const Lock& l) { return std::optional<std::string>(std::to_string(l.state.holder_count)); });
  e.gauge("rlock_waiters", "Contenders waiting in the lock's queue.", locks,
          [](const Lock& l) { return std::optional<std::string>(std::to_string(l.state.queue_length)); });
  e.gauge("rlock_held_seconds", "How long the longest hold going on has lasted (0 when free or lingering).", locks,
          [](const Lock& l) {
            int64_t held = 0;
            for (const lock::HolderState& h : l.state.holders) {
              if (!h.lingering && h.held_for_ms) held = std::max(held, *h.held_for_ms);
            }
            return std::optional<std::string>(seconds_of(held));
          });
  e.gauge("rlock_last_start_timestamp_seconds", "When the lock was last acquired (0: not in its summary).", locks,
          [](const Lock& l) { return timestamp(l.summary.start.time_ms); });
  e.gauge(
      "rlock_last_success_timestamp_seconds",
      "When a hold last ended in success: its command exited 0 by itself, in a hold rlock did not end, or it had no "
      "command (0: never).",
      locks, [](const Lock& l) { return timestamp(l.summary.success.time_ms); });
  e.gauge("rlock_last_end_timestamp_seconds",
          "When a hold last ended: released, lost, preempted or expired (0: never).", locks,
          [](const Lock& l) { return timestamp(l.summary.end.time_ms); });
  e.gauge("rlock_last_exit_code", "The exit status of the last ended hold's command (none without a command).", locks,
          [](const Lock& l) -> std::optional<std::string> {
            long long code = 0;
            if (!util::parse_int(l.summary.end.exit_status, 0, 255, code)) return std::nullopt;
            return std::to_string(code);
          });
  e.gauge("rlock_last_duration_seconds", "How long the last ended hold lasted.", locks,
          [](const Lock& l) -> std::optional<std::string> {
            if (!l.summary.end.held_ms) return std::nullopt;
            return seconds_of(*l.summary.end.held_ms);
          });
  e.gauge("rlock_lost_since_success",
          "Holds lost (lost, or expired: a holder that died or was cut off) since the "
          "last success.",
          locks,
          [](const Lock& l) { return std::optional<std::string>(std::to_string(l.summary.lost_since_success)); });
  e.gauge("rlock_failed_since_success",
          "Holds in a row that ended without success (exit status not 0, or ended by rlock; a preempted one aside).",
          locks,
          [](const Lock& l) { return std::optional<std::string>(std::to_string(l.summary.failed_since_success)); });
  e.counters(locks);
  return e.text();
}

// The locks to show: the names given, the locks that the patterns given match (no KEY: every
// lock under the prefix) that are held, waited for or have a summary. Locks found by scanning that
// hold another program's data are left out.
std::vector<Lock> read_locks(lock::Backend& backend, const MetricsOptions& o) {
  std::set<std::string> names(o.expect.begin(), o.expect.end()), found;
  for (const std::string& k : o.keys) {
    if (!is_pattern(k)) names.insert(k);
  }
  for (const std::string& k : o.keys.empty() ? std::vector<std::string>{"*"} : o.keys) {
    if (!is_pattern(k)) continue;
    for (std::string& f : matching_locks(backend, o.connect.prefix, k)) {
      if (names.count(f) == 0) found.insert(std::move(f));
    }
  }
  std::vector<std::pair<std::string, bool>> keys;  // (KEY, found by scanning)
  keys.reserve(names.size() + found.size());
  for (const std::string& k : names) keys.emplace_back(k, false);
  for (const std::string& k : found) keys.emplace_back(k, true);
  std::sort(keys.begin(), keys.end());
  std::vector<Lock> locks;
  for (const auto& [key, scanned] : keys) {
    // A label value is UTF-8: a KEY found that is not cannot be shown.
    if (!util::valid_utf8(key)) {
      log::verbose("skipping a lock whose name is not UTF-8: {}", util::printable(key));
      continue;
    }
    try {
      lock::LockName name = lock_name(o.connect, key);
      lock::LockState state = backend.inspect(name);
      lock::Summary summary = backend.read_summary(name);
      locks.push_back({key, std::move(state), std::move(summary)});
    } catch (const Error& e) {
      if (!scanned || e.exit_code() != exit_code::k_data) throw;
      log::verbose("skipping {}: {}", util::printable(key), e.what());
    }
  }
  return locks;
}

}  // namespace

int metrics(const MetricsOptions& options) {
  const int64_t read_at =
      std::chrono::duration_cast<util::Millis>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string text;
  try {
    std::unique_ptr<lock::Backend> backend = lock::open_backend(options.connect, std::nullopt);
    text = freshness(true, read_at) + exposition(read_locks(*backend, options));
  } catch (const Error& e) {
    // The figures could not be read: the file says so, rather than serve the last ones for ever.
    if (options.textfile.empty()) throw;
    try {
      write_textfile(options.textfile, freshness(false, read_at));
    } catch (const Error& w) {
      log::error(w.what());
    }
    throw;
  }
  if (options.textfile.empty()) {
    write_stdout(text);
    return exit_code::k_ok;
  }
  write_textfile(options.textfile, text);
  return exit_code::k_ok;
}

}  // namespace rlock::commands
