#include "common.hpp"

#include "commands/keeper.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/backoff.hpp"
#include "lock/server.hpp"
#include "log.hpp"
#include "proc/ancestry.hpp"
#include "util/file.hpp"
#include "util/random.hpp"
#include "util/text.hpp"

#include <pwd.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace rlock::commands {

namespace {

using Clock = util::BootClock;

// A token is what random_token makes; anything else in a token file is garbage.
bool plausible_token(std::string_view token) {
  if (token.size() < 16 || token.size() > 256) return false;
  for (char c : token) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

// One updating line on a terminal while waiting.
bool dumb_terminal() {
  const char* term = std::getenv("TERM");
  return !term || !*term || std::string_view(term) == "dumb";
}

// "3rd" for 3.
std::string ordinal(int n) {
  const char* suffix = "th";
  if (n % 100 < 11 || n % 100 > 13) {
    if (n % 10 == 1) suffix = "st";
    else if (n % 10 == 2) suffix = "nd";
    else if (n % 10 == 3) suffix = "rd";
  }
  return fmt::format("{}{}", n, suffix);
}

class WaitLine {
public:
  WaitLine() : m_enabled(::isatty(STDERR_FILENO) && log::level() == log::Level::normal && !dumb_terminal()) {}
  ~WaitLine() {
    if (m_shown) write("\r\x1b[K");
  }
  void show(const std::string& text) {
    if (!m_enabled) return;
    write(fmt::format("\r\x1b[Krlock: {}", util::printable(text)));
    m_shown = true;
  }

private:
  static void write(const std::string& s) { log::raw(s); }
  bool m_enabled;
  bool m_shown = false;
};

std::string holder_text(const lock::Attempt& a) {
  std::string who;
  if (!a.holder.host.empty()) who = fmt::format(" by {} pid {}", a.holder.host, a.holder.pid);
  if (a.held_for) who += fmt::format(" for {}", util::format_duration(*a.held_for));
  if (!a.holder.command.empty()) who += fmt::format(" ({})", a.holder.command);
  return who;
}

}  // namespace

lock::LockName lock_name(const ConnectOptions& connect, const std::string& key) { return {connect.prefix, key}; }

lock::Holder this_holder(const std::string& command) {
  lock::Holder h;
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) == 0) h.host = host;
  h.pid = std::to_string(::getpid());
  const char* user = std::getenv("USER");
  if (!user || !*user) user = std::getenv("LOGNAME");
  if (user && *user) {
    h.user = user;
  } else if (const passwd* pw = ::getpwuid(::getuid())) {  // only when the environment does not say
    h.user = pw->pw_name;
  } else {
    h.user = fmt::format("uid {}", ::getuid());
  }
  h.command = command.size() > 200 ? command.substr(0, 197) + "..." : command;
  return h;
}

std::vector<lock::Hold> enclosing_holds() {
  std::vector<lock::Hold> holds = run_holds();
  std::vector<lock::Hold> kept = keeper::enclosing_holds();
  holds.insert(holds.end(), kept.begin(), kept.end());
  return holds;
}

std::vector<lock::Hold> run_holds() {
  const char* value = std::getenv(lock::k_holds_variable);
  if (!value || !*value) return {};
  std::vector<lock::Hold> holds = lock::parse_holds(value);
  // Only the holder's own tree re-enters: not a process that inherited the variable and left it
  // (setsid'ed away from an ended run, ssh SendEnv, sudo -E from another session, a copy).
  std::erase_if(holds, [](const lock::Hold& h) {
    return h.boot_id.empty() || h.boot_id != proc::boot_id() || !proc::descends_from(h.anchor, h.anchor_start);
  });
  return holds;
}

void write_stdout(const std::string& text) {
  const char* data = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(STDOUT_FILENO, data, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(exit_code::k_system, fmt::format("cannot write to standard output: {}", std::strerror(errno)));
    data += n;
    left -= static_cast<size_t>(n);
  }
}

std::string busy_message(const lock::LockName& name, const lock::Attempt& attempt) {
  std::string queue = attempt.queue_length > 0 ? fmt::format("; {} waiting", attempt.queue_length) : "";
  return fmt::format("{} is held{}{}", name.key, holder_text(attempt), queue);
}

std::string busy_outcome(const lock::LockName& name, const lock::Attempt& attempt, const TakeOptions& options) {
  if (!options.wait || options.wait->count() == 0) return fmt::format("{}; not waiting (-n)", busy_message(name, attempt));
  return fmt::format("{}; gave up after {} (--wait)", busy_message(name, attempt), util::format_duration(*options.wait));
}

lock::Contender make_contender(const TakeOptions& options, const lock::Holder& holder) {
  lock::Contender c;
  c.token = lock::new_token();
  c.ttl = options.ttl;
  c.holder = holder;
  c.limit = options.limit;
  c.mode = options.shared ? lock::Mode::shared : options.limit > 1 ? lock::Mode::semaphore : lock::Mode::exclusive;
  return c;
}

lock::Attempt take_lock(Locker& locker, const lock::LockName& name, const TakeOptions& options,
                        const lock::Contender& contender, const std::vector<std::string>& enclosing_tokens,
                        const WaitHooks& hooks) {
  auto start = Clock::now();
  std::optional<Clock::time_point> give_up;
  if (options.wait) give_up = start + *options.wait;
  const bool waiting = !options.wait || options.wait->count() > 0;
  lock::Backoff backoff;
  WaitLine line;
  bool reached = false;  // the server has answered once: later failures are blips to wait out
  bool queued = false;   // we have (or had) a place in the queue: leave it when giving up
  int position = 0;
  std::vector<std::string> watch;
  lock::Attempt a;

  int contended_tries = 0;
  auto leave = [&] {
    if (!queued) return;
    try {
      locker.cancel(name, contender.token);
    } catch (const Error& e) {
      log::verbose("could not leave the queue of {} ({}); the place lapses within seconds", name.key, e.what());
    }
  };

  for (;;) {
    try {
      if (queued) {
        util::Millis beat = k_heartbeat;
        if (give_up) beat = std::min(beat, std::chrono::ceil<util::Millis>(*give_up - Clock::now()));
        a = locker.wait_turn(name, contender, watch, std::max(beat, util::Millis(1)));
      } else {
        a = locker.try_acquire(name, contender, waiting, enclosing_tokens);
      }
      reached = true;
    } catch (const Error& e) {
      if (hooks.interrupted()) {
        leave();
        return lock::Attempt{};
      }
      // A server that cannot serve for a moment (TRYAGAIN, LOADING...), or one that went away
      // after answering (a restart, a failover), is waited out while the wait lasts, but never
      // reported as busy; a wait step after it joins the queue again if the queue was lost. A
      // server never reached is a configuration problem: exit 69 at once rather than wait on a
      // typo.
      bool transient = dynamic_cast<const lock::TransientError*>(&e) != nullptr ||
                       (reached && e.exit_code() == exit_code::k_unavailable);
      bool can_wait = waiting && (!give_up || Clock::now() + util::Millis(50) < *give_up);
      if (!transient || !can_wait) {
        if (!transient) leave();
        throw;
      }
      log::verbose("{}; retrying", e.what());
      util::Millis sleep = backoff.next(std::nullopt);
      if (give_up) sleep = std::min(sleep, std::chrono::ceil<util::Millis>(*give_up - Clock::now()));
      if (!hooks.pause(std::max(sleep, util::Millis(1)))) {
        leave();
        return lock::Attempt{};
      }
      continue;
    }
    if (a.outcome == lock::Attempt::Outcome::acquired && options.wait_replicas > 0) {
      try {
        locker.confirm_replicas(name, options.wait_replicas, options.wait_timeout);
      } catch (const Error&) {
        locker.release(name, contender.token);
        throw;
      }
    }
    // A quorum has no queue: a busy lock is tried again after a random delay while the wait
    // lasts; one that nobody holds on a majority (leftovers, a split vote) is the next attempt's
    // business even with -n.
    if (locker.quorum() && a.outcome == lock::Attempt::Outcome::busy &&
        ((waiting && (!give_up || Clock::now() < *give_up)) || (a.contended && ++contended_tries < 4))) {
      line.show(fmt::format("waiting for {}: held{}", name.key, holder_text(a)));
      util::Millis sleep = backoff.next(a.ttl_left);
      if (give_up) sleep = std::min(sleep, std::chrono::ceil<util::Millis>(*give_up - Clock::now()));
      if (!waiting) sleep = util::Millis(10 + static_cast<int64_t>(util::random_below(40)));
      if (!hooks.pause(std::max(sleep, util::Millis(1)))) return lock::Attempt{};
      continue;
    }
    if (a.outcome != lock::Attempt::Outcome::queued) {
      if (a.outcome == lock::Attempt::Outcome::acquired && queued) {
        log::verbose("acquired {} after waiting {}", name.key,
                     util::format_duration(std::chrono::duration_cast<util::Millis>(Clock::now() - start)));
      }
      return a;  // acquired, reentered, or busy (-n)
    }
    if (!queued) log::verbose("waiting for {}: held{}", name.key, holder_text(a));
    queued = true;
    watch = a.watch;
    if (a.position != position) {
      log::verbose("waiting for {}: position {} of {}", name.key, a.position, a.queue_length);
      position = a.position;
    }
    auto waited = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - start);
    line.show(fmt::format("waiting for {}: held{}; {} of {} in line; waited {}", name.key, holder_text(a),
                          ordinal(a.position), a.queue_length,
                          waited.count() < 60 ? fmt::format("{}s", waited.count()) : util::format_duration(waited)));
    if (hooks.interrupted() || (give_up && Clock::now() >= *give_up)) {
      leave();
      a.outcome = lock::Attempt::Outcome::busy;
      return a;
    }
  }
}

std::string read_token(const TokenSource& source) {
  std::string token;
  if (!source.file.empty()) {
    try {
      token = std::string(util::trim(util::read_small_file(source.file, 4096)));
    } catch (const std::system_error& e) {
      throw Error(exit_code::k_data, fmt::format("cannot read token file {}: {}", source.file, e.code().message()));
    } catch (const std::length_error&) {
      throw Error(exit_code::k_data, fmt::format("token file {} is too large to be a token", source.file));
    }
    if (!plausible_token(token)) {
      throw Error(exit_code::k_data,
                  fmt::format("token file {} does not hold an rlock token (written by rlock acquire --token-file?)",
                              source.file));
    }
    return token;
  }
  const char* value = std::getenv(source.env.c_str());
  if (!value || !*value) {
    throw Error(exit_code::k_usage,
                fmt::format("no token: set {} to the token printed by rlock acquire, or use --token-file",
                            source.env));
  }
  token = std::string(util::trim(value));
  if (!plausible_token(token)) {
    throw Error(exit_code::k_data, fmt::format("{} does not hold an rlock token", source.env));
  }
  return token;
}

}  // namespace rlock::commands
