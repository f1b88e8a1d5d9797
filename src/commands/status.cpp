#include "commands/commands.hpp"

#include "commands/common.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "lock/inspect.hpp"
#include "lock/server.hpp"
#include "util/text.hpp"

#include <unistd.h>

#include <fmt/core.h>

#include <ctime>

namespace rlock::commands {

namespace {

std::string iso_time(int64_t ms) {
  time_t secs = static_cast<time_t>(ms / 1000);
  tm utc{};
  gmtime_r(&secs, &utc);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:03}Z", utc.tm_year + 1900, utc.tm_mon + 1, utc.tm_mday,
                     utc.tm_hour, utc.tm_min, utc.tm_sec, ms % 1000);
}

template <typename T>
std::string json_or_null(const std::optional<T>& v) {
  return v ? fmt::format("{}", *v) : "null";
}

std::string json_text_or_null(bool present, const std::string& text) {
  return present ? util::json_quote(text) : "null";
}

bool is_number(const std::string& text) {
  return !text.empty() && text.size() < 19 && text.find_first_not_of("0123456789") == std::string::npos;
}

std::string to_json(const lock::LockState& s) {
  return fmt::format(
      "{{\"key\":{},\"held\":{},\"host\":{},\"pid\":{},\"user\":{},\"command\":{},\"since\":{},\"since_ms\":{},"
      "\"held_for_ms\":{},\"ttl_ms\":{},\"lease_ms\":{},\"fence\":{}}}",
      util::json_quote(s.key), s.held, json_text_or_null(s.held, s.holder.host),
      s.held && is_number(s.holder.pid) ? s.holder.pid : "null", json_text_or_null(s.held, s.holder.user),
      json_text_or_null(s.held, s.holder.command),
      s.since_ms ? util::json_quote(iso_time(*s.since_ms)) : "null", json_or_null(s.since_ms),
      json_or_null(s.held_for_ms), json_or_null(s.ttl_left_ms), json_or_null(s.lease_ms), json_or_null(s.fence));
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

void print_table(const std::vector<lock::LockState>& states) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"KEY", "STATE", "HOST", "PID", "USER", "HELD FOR", "TTL", "FENCE", "COMMAND"});
  for (const lock::LockState& s : states) {
    if (!s.held) {
      rows.push_back({util::printable(s.key), "free", "-", "-", "-", "-", "-", s.fence ? std::to_string(*s.fence) : "-",
                      "-"});
      continue;
    }
    rows.push_back({util::printable(s.key), "held", util::printable(s.holder.host), util::printable(s.holder.pid),
                    util::printable(s.holder.user), ms_text(s.held_for_ms, "?"), ms_text(s.ttl_left_ms, "none"),
                    s.fence ? std::to_string(*s.fence) : "-", util::printable(s.holder.command)});
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
  write_stdout(out);
}

void print_json(const std::vector<lock::LockState>& states, bool single) {
  std::string out;
  if (single) {
    out = to_json(states.front());
  } else {
    out = "[";
    for (size_t i = 0; i < states.size(); ++i) out += (i ? "," : "") + to_json(states[i]);
    out += "]";
  }
  out += "\n";
  write_stdout(out);
}

// The state of each key. Keys found by scanning (skip_foreign) that hold another program's data
// are left out; named keys that do are an error.
std::vector<lock::LockState> inspect_all(lock::Node& node, const ConnectOptions& connect,
                                         const std::vector<std::string>& keys, bool skip_foreign) {
  std::vector<lock::LockState> states;
  states.reserve(keys.size());
  for (const std::string& key : keys) {
    try {
      states.push_back(lock::inspect(node, lock_name(connect, key)));
    } catch (const Error& e) {
      if (!skip_foreign || e.exit_code() != exit_code::k_data) throw;
      log::verbose("skipping {}: {}", key, e.what());
    }
  }
  return states;
}

// status -v: what the server's configuration means for its locks, before the table.
void print_server(redis::Client& connection) {
  redis::Reply info = connection.call({"INFO"});
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

}  // namespace

int status(const StatusOptions& options) {
  redis::Client connection(options.connect.url, options.connect.timeouts, options.connect.tls);
  lock::ClientNode node(connection);
  if (log::verbose_enabled() && !options.json) print_server(connection);
  bool all = options.keys.empty();
  std::vector<std::string> keys = all ? lock::scan_keys(node, options.connect.prefix, "*") : options.keys;
  std::vector<lock::LockState> states = inspect_all(node, options.connect, keys, all);
  if (all) std::erase_if(states, [](const lock::LockState& s) { return !s.held; });
  if (options.json) {
    print_json(states, options.keys.size() == 1);
  } else if (!states.empty()) {
    print_table(states);
  }
  if (all) return states.empty() ? exit_code::k_not_held : exit_code::k_ok;
  for (const lock::LockState& s : states) {
    if (!s.held) return exit_code::k_not_held;
  }
  return exit_code::k_ok;
}

int list(const ListOptions& options) {
  redis::Client connection(options.connect.url, options.connect.timeouts, options.connect.tls);
  lock::ClientNode node(connection);
  std::vector<lock::LockState> states =
      inspect_all(node, options.connect, lock::scan_keys(node, options.connect.prefix, options.pattern), true);
  std::erase_if(states, [](const lock::LockState& s) { return !s.held; });
  if (options.json) {
    print_json(states, false);
  } else if (!states.empty()) {
    print_table(states);
  }
  return exit_code::k_ok;
}

}  // namespace rlock::commands
