#include "commands/commands.hpp"

#include "commands/common.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "lock/validity.hpp"
#include "log.hpp"
#include "proc/child.hpp"
#include "proc/signals.hpp"
#include "util/random.hpp"

#include <poll.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace rlock::commands {

namespace {

using Clock = std::chrono::steady_clock;
using util::Millis;

int poll_timeout(std::optional<Clock::time_point> wake) {
  if (!wake) return -1;
  auto ms = std::chrono::ceil<Millis>(*wake - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(ms, 0, 60'000));
}

// Takes the lock, supervises the child while renewing the lease from one loop, and gives the lock
// back. Single-threaded: signals arrive through a signalfd, the child's exit as SIGCHLD, and the
// poll timeout is the next renewal or deadline; renewal and release never race.
class Supervisor {
public:
  Supervisor(const RunOptions& options, std::string path)
      : m_options(options),
        m_path(std::move(path)),
        m_signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGCONT, SIGCHLD},
                  {SIGTTOU, SIGPIPE}),
        m_connection(options.connect.url, options.connect.timeouts, options.connect.tls),
        m_node(m_connection),
        m_name(lock_name(options.connect, options.take.key)),
        m_token(util::random_token()) {
    m_connection.set_interrupt(m_signals.fd(), [this] { drain_signals(); });
  }

  int run();

private:
  bool pause(Millis duration);
  void drain_signals();
  void reap();
  void on_signal(int signo);
  [[noreturn]] void exec_nested(const lock::Attempt& attempt, const std::string& token);
  void supervise(Clock::time_point sent_at);
  void renew(Clock::time_point now);
  void begin_stop(const std::string& why, bool lost);
  void release_quietly();
  std::optional<Clock::time_point> next_wake() const;

  const RunOptions& m_options;
  std::string m_path;  // the command's executable, resolved once
  proc::SignalSet m_signals;
  redis::Client m_connection;
  lock::ClientNode m_node;
  lock::LockName m_name;
  std::string m_token;

  std::optional<int> m_interrupted;  // a signal that arrived before the child existed
  std::optional<proc::Child> m_child;
  std::optional<int> m_child_status;

  std::optional<lock::Deadline> m_deadline;
  Clock::time_point m_next_renew;
  std::optional<Clock::time_point> m_max_hold_at;
  bool m_renewing = false;
  bool m_stopping = false;
  bool m_lost = false;      // ownership lost or abandoned: exit with --lost-exit-code
  bool m_owned = true;      // the lock may still be ours: release it at the end
  bool m_killed = false;
  Clock::time_point m_kill_at;
};

void Supervisor::reap() {
  if (!m_child) return;
  if (std::optional<int> status = m_child->try_reap()) m_child_status = status;
}

void Supervisor::drain_signals() {
  for (int s : m_signals.take()) on_signal(s);
}

void Supervisor::on_signal(int signo) {
  if (signo == SIGCHLD) {
    reap();
    return;
  }
  if (!m_child) {
    if (!m_interrupted) m_interrupted = signo;
    return;
  }
  if (m_child_status) return;
  // ^Z (SIGTSTP, SIGTTIN) stops the child, not rlock, which keeps renewing the lease it holds.
  log::verbose("forwarding {} to the child", proc::signal_name(signo));
  m_child->signal_group(signo);
}

bool Supervisor::pause(Millis duration) {
  pollfd fd{m_signals.fd(), POLLIN, 0};
  int n = ::poll(&fd, 1, static_cast<int>(duration.count()));
  if (n > 0) drain_signals();
  return !m_interrupted;
}

void Supervisor::exec_nested(const lock::Attempt& attempt, const std::string& token) {
  // An enclosing run holds this lock and keeps renewing it: run the command in its place, inside
  // the enclosing child's process group, and leave the hold alone.
  log::verbose("{} is already held by an enclosing run (fence {}): running the command under that hold",
               m_name.key, attempt.fence);
  ::setenv("RLOCK_KEY", m_options.take.key.c_str(), 1);
  ::setenv("RLOCK_TOKEN", token.c_str(), 1);
  ::setenv("RLOCK_FENCE", std::to_string(attempt.fence).c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : m_options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  ::sigprocmask(SIG_SETMASK, &m_signals.original_mask(), nullptr);
  ::execv(m_path.c_str(), argv.data());
  int err = errno;
  throw Error(err == ENOENT ? exit_code::k_not_found : exit_code::k_not_executable,
              fmt::format("{}: {}", m_options.argv[0], std::strerror(err)));
}

int Supervisor::run() {
  std::vector<lock::Hold> holds = enclosing_holds();
  std::vector<std::string> enclosing = lock::tokens_for(holds, m_name.lock_key());
  lock::Holder holder = this_holder(m_options.display_command);

  lock::Attempt attempt = take_lock(m_node, m_name, m_options.take, m_token, holder, enclosing,
                                    [this](Millis d) { return pause(d); });
  if (attempt.outcome == lock::Attempt::Outcome::reentered) exec_nested(attempt, enclosing.front());
  if (attempt.outcome == lock::Attempt::Outcome::busy) {
    if (m_interrupted) return exit_code::k_signal_base + *m_interrupted;
    if (!m_options.take.wait || m_options.take.wait->count() == 0) {
      log::info(fmt::format("{}; not waiting (-n)", busy_message(m_name, attempt)));
    } else {
      log::info(fmt::format("{}; gave up after {} (--wait)", busy_message(m_name, attempt),
                            util::format_duration(*m_options.take.wait)));
    }
    return m_options.take.conflict_exit_code;
  }
  log::verbose("acquired {} (fence {}, ttl {})", m_name.key, attempt.fence,
               util::format_duration(m_options.take.ttl));
  // A slow answer (or --wait-replicas) may have used up the lease: never start a child that
  // would have to be stopped before its first renewal.
  lock::Deadline fresh(attempt.sent_at, m_options.take.ttl);
  if (Clock::now() >= fresh.stop_at(m_options.kill_after)) {
    release_quietly();
    throw Error(exit_code::k_unavailable,
                fmt::format("acquiring {} took too long for its TTL of {}: not starting the command", m_name.key,
                            util::format_duration(m_options.take.ttl)));
  }
  if (m_interrupted) {
    release_quietly();
    return exit_code::k_signal_base + *m_interrupted;
  }

  holds.push_back({m_name.lock_key(), m_token, attempt.fence});
  proc::SpawnSpec spec;
  spec.path = m_path;
  spec.argv = m_options.argv;
  spec.env = {{"RLOCK_KEY", m_options.take.key},
              {"RLOCK_TOKEN", m_token},
              {"RLOCK_FENCE", std::to_string(attempt.fence)},
              {lock::k_holds_variable, lock::format_holds(holds)}};
  spec.mask = &m_signals.original_mask();
  try {
    m_child.emplace(spec);
  } catch (const Error&) {
    release_quietly();
    throw;
  }
  log::verbose("started the child, pid {}", m_child->pid());
  supervise(attempt.sent_at);

  if (m_owned) release_quietly();
  if (m_lost) return m_options.lost_exit_code;
  return proc::exit_code_of(m_child_status.value_or(0));
}

std::optional<Clock::time_point> Supervisor::next_wake() const {
  std::optional<Clock::time_point> wake;
  auto consider = [&wake](Clock::time_point t) {
    if (!wake || t < *wake) wake = t;
  };
  if (m_renewing) {
    consider(m_next_renew);
    consider(m_deadline->stop_at(m_options.kill_after));
  }
  if (m_max_hold_at && !m_stopping) consider(*m_max_hold_at);
  if (m_stopping && !m_killed) consider(m_kill_at);
  // After the child, its group may linger in a stop: look again soon.
  if (m_child_status && m_stopping) consider(Clock::now() + Millis(20));
  return wake;
}

void Supervisor::supervise(Clock::time_point sent_at) {
  const Millis ttl = m_options.take.ttl;
  m_deadline.emplace(sent_at, ttl);
  m_next_renew = sent_at + lock::validity::renew_interval(ttl);
  m_renewing = true;
  if (m_options.max_hold) m_max_hold_at = sent_at + *m_options.max_hold;

  for (;;) {
    if (m_child_status && (!m_stopping || !m_child->group_alive())) return;
    // Killed members not reaped yet (no init reaping them) must not hold rlock forever.
    if (m_child_status && m_killed && Clock::now() > m_kill_at + Millis(1000)) return;
    pollfd fd{m_signals.fd(), POLLIN, 0};
    int n = ::poll(&fd, 1, poll_timeout(next_wake()));
    if (n < 0 && errno != EINTR) throw Error(exit_code::k_system, fmt::format("poll: {}", std::strerror(errno)));
    if (n > 0) drain_signals();
    reap();  // a SIGCHLD may have merged with another

    auto now = Clock::now();
    if (m_child_status && !m_stopping) return;
    if (m_renewing && now >= m_next_renew) renew(now);
    now = Clock::now();
    if (m_renewing && now >= m_deadline->stop_at(m_options.kill_after)) {
      begin_stop("renewals kept failing; stopping the child before the lease can expire", true);
    }
    if (m_max_hold_at && !m_stopping && now >= *m_max_hold_at) {
      begin_stop(fmt::format("held for --max-hold {}", util::format_duration(*m_options.max_hold)), false);
    }
    if (m_stopping && !m_killed && Clock::now() >= m_kill_at) {
      log::verbose("the child's process group is still running: sending SIGKILL");
      m_child->signal_group(SIGKILL);
      m_killed = true;
    }
  }
}

void Supervisor::renew(Clock::time_point now) {
  const Millis ttl = m_options.take.ttl;
  // A renewal must not wait past the moment the child has to be stopped.
  m_connection.cap_waits(m_deadline->stop_at(m_options.kill_after));
  try {
    m_connection.follow_failover();
    bool owned = lock::extend(m_node, m_name, m_token, ttl);
    m_connection.cap_waits(std::nullopt);
    if (!owned) {
      m_owned = false;
      begin_stop("the lock expired or was taken over (its token no longer owns it)", true);
      return;
    }
    m_deadline->renewed(now);
    m_next_renew = now + lock::validity::renew_interval(ttl);
    log::verbose("renewed {} for {}", m_name.key, util::format_duration(ttl));
  } catch (const Error& e) {
    m_connection.cap_waits(std::nullopt);
    m_next_renew = Clock::now() + lock::validity::retry_interval(ttl);
    auto left = std::chrono::duration_cast<Millis>(m_deadline->stop_at(m_options.kill_after) - Clock::now());
    log::verbose("renewal failed ({}); retrying, {} before the child must be stopped", e.what(),
                 util::format_duration(std::max(left, Millis(0))));
  }
}

void Supervisor::begin_stop(const std::string& why, bool lost) {
  m_renewing = false;
  m_stopping = true;
  m_lost = true;
  auto now = Clock::now();
  m_kill_at = std::min(now + m_options.kill_after, m_deadline->kill_at());
  if (lost) {
    log::error(fmt::format("lost the lock {}: {}", m_name.key, why));
  } else {
    log::error(fmt::format("giving up the lock {}: {}", m_name.key, why));
  }
  if (m_child_status) return;
  log::verbose("sending {} to the child's process group, SIGKILL in {}", proc::signal_name(m_options.stop_signal),
               util::format_duration(std::chrono::duration_cast<Millis>(m_kill_at - now)));
  m_child->signal_group(m_options.stop_signal);
}

void Supervisor::release_quietly() {
  m_connection.cap_waits(std::nullopt);
  try {
    if (lock::release(m_node, m_name, m_token)) {
      log::verbose("released {}", m_name.key);
    } else {
      log::verbose("{} was no longer ours to release", m_name.key);
    }
  } catch (const Error& e) {
    log::warning(fmt::format("could not release {} ({}); it expires within {}", m_name.key, e.what(),
                             util::format_duration(m_options.take.ttl)));
  }
}

}  // namespace

int run(const RunOptions& options) {
  Supervisor supervisor(options, proc::find_executable(options.argv.front()));
  return supervisor.run();
}

}  // namespace rlock::commands
