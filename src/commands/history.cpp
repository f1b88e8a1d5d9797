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

#include <cerrno>
#include <map>
#include <memory>

namespace rlock::commands {

namespace {

using Clock = util::BootClock;

// The most events read of one lock (a history holds at most --log-length events).
constexpr size_t k_all = 100'000;

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

}  // namespace

int history(const LogOptions& options) {
  std::unique_ptr<lock::Backend> backend = lock::open_backend(options.connect, std::nullopt);
  const bool every_key = options.keys.empty();
  const size_t count = options.count > 0 ? options.count : k_all;
  auto keys_now = [&] { return every_key ? backend->scan_logs(options.connect.prefix, "*") : options.keys; };
  std::vector<std::string> keys = keys_now();
  Printer printer(options.json, every_key || keys.size() > 1);

  std::map<std::string, std::string> last;  // key -> the last stream id seen
  std::vector<lock::Event> events;
  for (const std::string& key : keys) {
    std::vector<lock::Event> mine = backend->read_log(lock_name(options.connect, key), count, "");
    if (!mine.empty()) last[key] = mine.back().stream_id;
    events.insert(events.end(), mine.begin(), mine.end());
  }
  lock::sort_by_time(events);
  if (events.size() > count) events.erase(events.begin(), events.end() - static_cast<std::ptrdiff_t>(count));
  if (!printer.print(events)) return exit_code::k_ok;
  if (events.empty() && !options.json && !options.follow && every_key) {
    log::info(fmt::format("no lock has a history (prefix {})", util::printable(options.connect.prefix)));
  }
  if (!options.follow) return exit_code::k_ok;

  // --follow: new events as they come, from every key (new keys too, without KEY), until killed.
  auto rescan_at = Clock::now() + std::chrono::seconds(2);
  for (;;) {
    util::poll_until(nullptr, 0, Clock::now() + std::chrono::milliseconds(250));
    if (every_key && Clock::now() >= rescan_at) {
      keys = keys_now();
      rescan_at = Clock::now() + std::chrono::seconds(2);
    }
    std::vector<lock::Event> fresh;
    for (const std::string& key : keys) {
      auto it = last.find(key);
      std::vector<lock::Event> mine =
          backend->read_log(lock_name(options.connect, key), k_all, it == last.end() ? "0-0" : it->second);
      if (!mine.empty()) last[key] = mine.back().stream_id;
      fresh.insert(fresh.end(), mine.begin(), mine.end());
    }
    lock::sort_by_time(fresh);
    if (!printer.print(fresh)) return exit_code::k_ok;
  }
}

}  // namespace rlock::commands
