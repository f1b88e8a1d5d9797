// rlock log: the history of the locks, from every host, as the lock scripts recorded it.
#include "commands/commands.hpp"

#include "commands/common.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "lock/backend.hpp"
#include "lock/history.hpp"
#include "log.hpp"
#include "util/clock.hpp"
#include "util/text.hpp"

#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <map>
#include <memory>
#include <set>

namespace rlock::commands {

namespace {

using Clock = util::BootClock;

// The most events read of one lock (a history holds --log-length events, and up to about 100 more).
constexpr size_t k_all = 100'000;
// -f: how often the KEYs of a pattern (or of every key) are looked up again, so that a history
// created meanwhile is followed too: the longest a new history's first events wait to be shown.
constexpr auto k_rescan = std::chrono::milliseconds(2'000);
// -f on one KEY or fixed KEYs: how long one XREAD blocks (it is sent again at once after).
constexpr int64_t k_block_ms = 10'000;
// -f on a Cluster whose keys are in several slots: one XREAD (and connection) per slot, for at
// most this many slots.
constexpr size_t k_most_slots = 16;
// -f where blocking XREADs cannot cover the keys (a Redlock quorum, or a Cluster whose keys are
// in more than k_most_slots slots): how often each key is read.
constexpr auto k_poll = std::chrono::milliseconds(1'000);
// -f after a lost connection: the first and the longest wait before trying again.
constexpr auto k_backoff_first = std::chrono::milliseconds(100);
constexpr auto k_backoff_most = std::chrono::milliseconds(5'000);

class Printer {
public:
  Printer(bool json, bool with_key) : m_json(json), m_with_key(with_key) {}
  // Prints the events; false when stdout is a closed pipe (`rlock log -f | head`): a normal end.
  bool print(const std::vector<lock::Event>& events) {
    std::string out;
    for (const lock::Event& e : events)
      out += (m_json ? lock::event_json(e) : lock::format_event(e, m_with_key)) + "\n";
    if (out.empty()) return true;
    try {
      write_stdout(out);
    } catch (const Error&) {
      if (errno == EPIPE) return false;
      throw;
    }
    return true;
  }

private:
  bool m_json;
  bool m_with_key;
};

// --since or --until: ms since the epoch, or exit 64.
std::optional<int64_t> time_option(const char* name, const std::string& text, int64_t now_ms) {
  if (text.empty()) return std::nullopt;
  std::optional<int64_t> ms = lock::parse_log_time(text, now_ms);
  if (!ms) {
    throw Error(exit_code::k_usage,
                fmt::format("{}: '{}' is neither a duration (30m, 2h, 1d) nor a time (2026-11-27T08:00:00Z, or 08:00 "
                            "today in UTC)",
                            name, util::printable(text)));
  }
  return ms;
}

// The KEYs of the arguments: names as given, patterns (and no argument: every key) looked up.
class Keys {
public:
  Keys(lock::Backend& backend, const LogOptions& options) : m_backend(backend), m_options(options) {
    for (const std::string& k : options.keys) (is_pattern(k) ? m_patterns : m_names).push_back(k);
    if (options.keys.empty()) m_patterns.emplace_back("*");
  }
  // Whether some KEY comes from a pattern (it may change: look them up again).
  bool changing() const { return !m_patterns.empty(); }
  bool several() const { return changing() || m_names.size() > 1; }
  const std::vector<std::string>& names() const { return m_names; }
  const std::vector<std::string>& patterns() const { return m_patterns; }
  // The pattern's KEYs that have a history now.
  std::vector<std::string> matching(const std::string& pattern) {
    return m_backend.scan_logs(m_options.connect.prefix, pattern);
  }
  // Every KEY now, each once, in order.
  std::vector<std::string> all() {
    std::set<std::string> keys(m_names.begin(), m_names.end());
    for (const std::string& p : m_patterns) {
      for (std::string& k : matching(p)) keys.insert(std::move(k));
    }
    return {keys.begin(), keys.end()};
  }

private:
  lock::Backend& m_backend;
  const LogOptions& m_options;
  std::vector<std::string> m_names;
  std::vector<std::string> m_patterns;
};

// --follow: new events as they come until killed, across lost connections.
class Follower {
public:
  Follower(lock::Backend& backend, const LogOptions& options, Keys& keys, Printer& printer,
           std::map<std::string, std::string> last)
      : m_backend(backend), m_options(options), m_keys(keys), m_printer(printer), m_last(std::move(last)) {
    for (const std::string& k : keys.names()) m_last.try_emplace(k);
    m_mode = backend.single() != nullptr ? Mode::one : Mode::poll;
  }

  int run() {
    auto backoff = k_backoff_first;
    bool lost = false;
    Clock::time_point lost_at{};
    for (;;) {
      bool more = true;
      try {
        if (lost) {
          // One TIME first (the reader's ACL has it): the reconnection is told when it happens,
          // not after the next blocking read.
          if (redis::Client* c = m_backend.single()) c->call({"TIME"});
          log::info(
              fmt::format("reconnected to {} after {}; following on from the last event seen", m_backend.display(),
                          util::format_duration(std::chrono::duration_cast<util::Millis>(Clock::now() - lost_at))));
          lost = false;
          backoff = k_backoff_first;
        }
        more = step();
      } catch (const Error& e) {
        if (e.exit_code() != exit_code::k_unavailable) throw;
        if (redis::Client* c = m_backend.single()) c->forget_master();
        m_slots.clear();
        if (!lost) {
          lost = true;
          lost_at = Clock::now();
          log::warning(fmt::format("{}; trying again until it answers", e.what()));
        }
        util::poll_until(nullptr, 0, Clock::now() + backoff);
        backoff = std::min<std::chrono::milliseconds>(backoff * 2, k_backoff_most);
        continue;
      }
      if (!more) return exit_code::k_ok;
    }
  }

private:
  enum class Mode { one, slots, poll };
  Mode m_mode = Mode::one;
  struct SlotReader {
    std::vector<std::string> keys;                              // the KEYs of one Cluster slot
    std::unique_ptr<redis::Connection> conn;                    // to the node that serves it
    std::vector<std::pair<lock::LockName, std::string>> names;  // of the XREAD under way
    bool in_flight = false;
  };

  // One round: looks the keys up again when due, then waits for new events and prints them.
  // False when stdout is closed.
  bool step() {
    if (m_keys.changing() && Clock::now() >= m_rescan_at) {
      for (const std::string& k : m_keys.all()) m_last.try_emplace(k);  // a new one: from its start
      m_rescan_at = Clock::now() + k_rescan;
    }
    std::vector<lock::Event> fresh = m_mode == Mode::one     ? wait_for_events()
                                     : m_mode == Mode::slots ? wait_by_slot()
                                                             : poll_events();
    lock::sort_by_time(fresh);
    return m_printer.print(fresh);
  }

  // One XREAD BLOCK over every key (one server, a Sentinel master, or a Cluster whose keys share
  // a slot), until an event or the next lookup of the keys.
  std::vector<lock::Event> wait_for_events() {
    Clock::time_point until = m_keys.changing() ? m_rescan_at : Clock::now() + std::chrono::milliseconds(k_block_ms);
    auto block =
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    if (m_last.empty()) {
      util::poll_until(nullptr, 0, until);
      return {};
    }
    std::vector<std::pair<lock::LockName, std::string>> names;
    names.reserve(m_last.size());
    for (const auto& [key, id] : m_last) names.emplace_back(lock_name(m_options.connect, key), id);
    redis::Reply r = m_backend.single()->call_blocking(lock::follow_command(names, block), util::Millis(block));
    if (r.is_error()) {
      if (r.error_code() == "CROSSSLOT") {
        // A Cluster whose keys are in several slots: no one command reads them all.
        log::verbose("the histories are in several Cluster slots: one XREAD per slot");
        m_mode = Mode::slots;
        return {};
      }
      int code = r.error_code() == "WRONGTYPE" ? exit_code::k_data : exit_code::k_internal;
      throw Error(code, fmt::format("{}: unexpected reply to XREAD: {}", m_backend.display(), r.str));
    }
    return lock::parse_follow(r, names, m_last);
  }

  // A Cluster: one XREAD BLOCK per slot, each on a connection of its own to the node that serves
  // the slot, all waited for from one poll; a slot's XREAD is sent again when it has answered.
  // More slots than k_most_slots: each key read in turn (poll_events).
  std::vector<lock::Event> wait_by_slot() {
    std::map<int, std::vector<std::string>> by_slot;
    for (const auto& [key, id] : m_last)
      by_slot[lock::hash_slot(lock_name(m_options.connect, key).log_key())].push_back(key);
    if (by_slot.size() > k_most_slots) {
      log::verbose("the histories are in {} Cluster slots: reading each key once a second", by_slot.size());
      m_mode = Mode::poll;
      m_slots.clear();
      return {};
    }
    for (auto it = m_slots.begin(); it != m_slots.end();) {
      auto found = by_slot.find(it->first);
      if (found == by_slot.end()) {
        it = m_slots.erase(it);
        continue;
      }
      if (found->second != it->second.keys && it->second.conn) {
        it->second.conn->abandon();  // an XREAD without the new keys: sent again with them
        it->second.in_flight = false;
      }
      ++it;
    }
    Clock::time_point until = m_keys.changing() ? m_rescan_at : Clock::now() + std::chrono::milliseconds(k_block_ms);
    auto block =
        std::max<int64_t>(1, std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count());
    for (auto& [slot, keys] : by_slot) {
      SlotReader& r = m_slots[slot];
      r.keys = keys;
      if (r.in_flight) continue;
      if (!r.conn) {
        // Routed once (MOVED followed) to the node that serves the slot; then a connection of its own.
        m_backend.single()->call(lock::log_range(lock_name(m_options.connect, keys.front()), 1, ""));
        r.conn = m_backend.single()->open_sibling();
      }
      r.names.clear();
      for (const std::string& k : keys) r.names.emplace_back(lock_name(m_options.connect, k), m_last[k]);
      r.conn->start({lock::follow_command(r.names, block)}, util::Millis(block));
      r.in_flight = true;
    }
    return until_one_answers();
  }

  std::vector<lock::Event> until_one_answers() {
    std::vector<lock::Event> fresh;
    for (;;) {
      bool answered = false;
      std::vector<pollfd> fds;
      std::vector<redis::Connection*> owners;
      std::optional<Clock::time_point> deadline;
      for (auto& [slot, r] : m_slots) {
        if (!r.in_flight) continue;
        if (r.conn->finished()) {
          answered = true;
          collect(r, fresh);
          continue;
        }
        fds.push_back(r.conn->pending());
        owners.push_back(r.conn.get());
        if (!deadline || r.conn->deadline() < *deadline) deadline = r.conn->deadline();
      }
      if (answered || fds.empty()) return fresh;
      util::poll_until(fds.data(), fds.size(), deadline);
      for (redis::Connection* c : owners) c->advance();
    }
  }

  // A slot's XREAD has answered: its events, or the slot moved (read it again where it went).
  void collect(SlotReader& r, std::vector<lock::Event>& fresh) {
    r.in_flight = false;
    redis::Reply reply = r.conn->result().front();  // a lost connection throws: the caller retries
    if (!reply.is_error()) {
      std::vector<lock::Event> mine = lock::parse_follow(reply, r.names, m_last);
      fresh.insert(fresh.end(), mine.begin(), mine.end());
      return;
    }
    std::string code = reply.error_code();
    if (code == "MOVED" || code == "ASK") {
      r.conn.reset();
      return;
    }
    int exit = code == "WRONGTYPE" ? exit_code::k_data : exit_code::k_unavailable;
    throw Error(exit, fmt::format("{}: XREAD: {}", r.conn->endpoint().display(), reply.str));
  }

  // Each key read once per k_poll (a Redlock quorum merges the masters' copies).
  std::vector<lock::Event> poll_events() {
    util::poll_until(nullptr, 0, Clock::now() + k_poll);
    std::vector<lock::Event> fresh;
    for (auto& [key, id] : m_last) {
      std::vector<lock::Event> mine =
          m_backend.read_log(lock_name(m_options.connect, key), k_all, id.empty() ? "0-0" : id);
      if (!mine.empty()) id = mine.back().stream_id;
      fresh.insert(fresh.end(), mine.begin(), mine.end());
    }
    return fresh;
  }

  lock::Backend& m_backend;
  const LogOptions& m_options;
  Keys& m_keys;
  Printer& m_printer;
  std::map<std::string, std::string> m_last;  // KEY -> the last stream id seen ("": none yet)
  std::map<int, SlotReader> m_slots;
  Clock::time_point m_rescan_at = Clock::now() + k_rescan;
};

}  // namespace

int history(const LogOptions& options) {
  const int64_t now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  lock::LogRange range;
  range.count = options.count > 0 ? options.count : k_all;
  range.since_ms = time_option("--since", options.since, now_ms);
  range.until_ms = time_option("--until", options.until, now_ms);
  std::optional<int64_t> tick = time_option("--tick", options.tick, now_ms);
  // --tick: every event kept is read, and those of that tick shown (-n counts among them).
  if (tick) range.count = k_all;

  std::unique_ptr<lock::Backend> backend = lock::open_backend(options.connect, std::nullopt);
  Keys keys(*backend, options);
  Printer printer(options.json, keys.several());

  std::map<std::string, std::string> last;  // key -> the last stream id seen
  std::vector<lock::Event> events;
  std::vector<std::string> unknown;  // the names and patterns without a history
  auto read = [&](const std::string& key) {
    lock::LockName name = lock_name(options.connect, key);
    std::vector<lock::Event> mine = backend->read_log(name, range);
    if (mine.empty() && (range.since_ms || range.until_ms)) {
      // Nothing in the window: whether there is a history at all.
      std::vector<lock::Event> newest = backend->read_log(name, 1, "");
      if (!newest.empty()) last[key] = newest.back().stream_id;
      return !newest.empty();
    }
    if (!mine.empty()) last[key] = mine.back().stream_id;
    events.insert(events.end(), mine.begin(), mine.end());
    return !mine.empty();
  };
  std::set<std::string> seen;
  for (const std::string& key : keys.names()) {
    if (seen.insert(key).second && !read(key)) unknown.push_back(key);
  }
  for (const std::string& pattern : keys.patterns()) {
    std::vector<std::string> found = keys.matching(pattern);
    bool any = false;
    for (const std::string& key : found) any = (!seen.insert(key).second || read(key)) || any;
    if (!any && !options.keys.empty()) unknown.push_back(pattern);
  }
  lock::sort_by_time(events);
  if (tick) {
    std::erase_if(events, [&](const lock::Event& e) { return !lock::of_tick(e, *tick); });
    if (options.count > 0 && events.size() > options.count)
      events.erase(events.begin(), events.end() - static_cast<std::ptrdiff_t>(options.count));
  }
  if (events.size() > range.count)
    events.erase(events.begin(), events.end() - static_cast<std::ptrdiff_t>(range.count));
  if (!printer.print(events)) return exit_code::k_ok;
  if (options.follow) return Follower(*backend, options, keys, printer, std::move(last)).run();
  for (const std::string& key : unknown) log::info(fmt::format("no history for {}", util::printable(key)));
  if (!unknown.empty()) return exit_code::k_not_held;
  if (last.empty() && !options.json && options.keys.empty()) {
    log::info(fmt::format("no lock has a history (prefix {})", util::printable(options.connect.prefix)));
  }
  return exit_code::k_ok;
}

}  // namespace rlock::commands
