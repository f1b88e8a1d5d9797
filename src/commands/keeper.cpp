#include "commands/keeper_parts.hpp"

#include "lock/backend.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "lock/lease.hpp"
#include "lock/renewal.hpp"
#include "lock/schedule.hpp"
#include "lock/validity.hpp"
#include "log.hpp"
#include "proc/ancestry.hpp"
#include "proc/signals.hpp"
#include "util/file.hpp"
#include "util/text.hpp"

#include <poll.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

namespace rlock::commands::keeper {

namespace {

using namespace detail;

using Clock = util::BootClock;
using util::Millis;

int64_t wall_ms() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  return static_cast<int64_t>(tv.tv_sec) * 1000 + tv.tv_usec / 1000;
}

// The keeper's side: the hold of one lock, for as long as the watched process lives.
class Keeper {
public:
  Keeper(const Spec& spec, proc::Watched& watched, std::string state_path)
      : m_spec(spec),
        m_watched(watched),
        m_state_path(std::move(state_path)),
        m_signals({SIGTERM, SIGINT, SIGHUP}, {SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU}),
        m_backend(lock::open_backend(spec.connect, spec.ttl)),
        m_schedule(spec.sent_at, spec.ttl, Millis(0), spec.connect.timeouts.command) {
    m_state.lock_key = spec.name.lock_key();
    m_state.token = spec.token;
    m_state.boot_id = proc::boot_id();
    m_state.keeper = ::getpid();
    m_state.keeper_start = proc::start_time(::getpid()).value_or(0);
    m_state.watched = watched.pid();
    m_state.watched_start = watched.start();
    if (spec.max_hold) m_max_hold_at = spec.sent_at + *spec.max_hold;
  }

  // Renews once (recording the keeper with the hold) and says so on armed; then keeps the lock.
  int run(int armed);

private:
  void save(const std::string& status, const std::string& reason);
  bool renew();
  int lose(const std::string& reason);
  void release_leftovers();
  int give_back(bool requested);

  const Spec& m_spec;
  proc::Watched& m_watched;
  std::string m_state_path;
  State m_state;
  proc::SignalSet m_signals;
  std::unique_ptr<lock::Backend> m_backend;
  lock::Schedule m_schedule;
  std::optional<Clock::time_point> m_max_hold_at;
};

void Keeper::save(const std::string& status, const std::string& reason) {
  m_state.status = status;
  m_state.reason = reason;
  m_state.when_ms = wall_ms();
  try {
    util::write_file_atomic(m_state_path, format_state(m_state), 0600);
  } catch (const std::exception& e) {
    log::warning(fmt::format("cannot write the keeper state {}: {}", m_state_path, e.what()));
  }
}

// One renewal within its budget: true when the lock is still ours (or may be: an error is
// retried), false when it is lost.
bool Keeper::renew() {
  lock::Renewal r =
      lock::renew(*m_backend, m_schedule,
                  {m_spec.name, m_spec.token, m_spec.ttl, m_spec.fence, lock::KeeperInfo{::getpid(), m_watched.pid()}});
  if (r.outcome == lock::Renewal::Outcome::renewed) {
    log::verbose("renewed {} for {}", m_spec.name.key, util::format_duration(r.extension->ttl));
  } else if (r.outcome == lock::Renewal::Outcome::failed) {
    log::verbose("renewal failed ({}); retrying", r.error);
  }
  return r.outcome != lock::Renewal::Outcome::lost;
}

// Lost on a majority, the token may still hold the lock on a quorum's other masters: give it back
// there rather than leave it until its TTL. The scripts compare the token, so nobody else's lock
// is touched; an error leaves the rest to expire.
void Keeper::release_leftovers() {
  m_backend->cap_waits(Clock::now() + m_spec.connect.timeouts.command);
  try {
    m_backend->release(m_spec.name, m_spec.token, lock::Ending{"", m_spec.holder, m_spec.fence, false, std::nullopt});
  } catch (const Error&) {
  }
}

int Keeper::lose(const std::string& reason) {
  log::error(fmt::format("lost the lock {}: {}", m_spec.name.key, reason));
  log::event(log::Severity::err, "lost {} (kept alive for pid {}): {}", m_spec.name.key, m_watched.pid(), reason);
  save("lost", reason);
  // Never taken again: the process that relied on it is told, if it asked to be.
  if (m_spec.signal > 0 && !m_watched.ended()) ::kill(m_watched.pid(), m_spec.signal);
  return exit_code::k_lost;
}

int Keeper::give_back(bool requested) {
  auto now = Clock::now();
  m_backend->cap_waits(now + m_spec.connect.timeouts.command);
  // A server that restarted, or cannot serve for a moment, is tried again within the lease, as the
  // renewals do; asked by `rlock release`, which waits for the answer, within --io-timeout.
  auto until = m_schedule.valid_until();
  if (requested) until = std::min(until, now + m_spec.connect.timeouts.command);
  bool released = false;
  try {
    // Not known lost unless a majority says so: an unknown end lapses on its own.
    // The hold was used (its token handed out): with --min-hold, it lingers.
    lock::Ending ending{"", m_spec.holder, m_spec.fence, true, std::nullopt};
    ending.outcome = lock::HoldOutcome::success;  // an acquire/release pair, without a command
    released = lock::release_within(*m_backend, m_spec.name, m_spec.token, ending, until,
                                    lock::validity::retry_interval(m_spec.ttl)) != lock::Released::not_held;
  } catch (const Error& e) {
    log::warning(fmt::format("could not release {} ({}); it expires within {}", m_spec.name.key, e.what(),
                             util::format_duration(m_spec.ttl)));
    released = true;  // not known lost: it lapses on its own
  }
  if (!released) return lose("the lock expired or was taken over before it was released");
  log::verbose("released {}", m_spec.name.key);
  if (!requested) {
    log::event(log::Severity::info, "released {}: pid {}, which it was kept for, ended", m_spec.name.key,
               m_watched.pid());
  }
  if (requested) {
    save("released", "");  // release reads it, then removes it
  } else {
    ::unlink(m_state_path.c_str());  // the watched process ended: nobody will ask
  }
  return exit_code::k_ok;
}

int Keeper::run(int armed) {
  save("running", "");
  // The first renewal records the keeper with the hold and proves the connection.
  bool ok = false;
  std::string why = "the lock was lost before the keeper could renew it";
  try {
    auto sent_at = Clock::now();
    ok = m_backend
             ->extend(m_spec.name, m_spec.token, m_spec.ttl, m_spec.ttl, m_spec.fence,
                      lock::ExtendNote{lock::KeeperInfo{::getpid(), m_watched.pid()}})
             .has_value();
    if (ok) m_schedule.renewed(sent_at);
  } catch (const Error& e) {
    why = e.what();
  }
  std::string message = ok ? "A" : "F" + why;
  [[maybe_unused]] ssize_t n = ::write(armed, message.data(), message.size());
  ::close(armed);
  if (!ok) {
    ::unlink(m_state_path.c_str());
    return exit_code::k_unavailable;
  }
  log::verbose("keeping {} for pid {}", m_spec.name.key, m_watched.pid());

  for (;;) {
    std::optional<Clock::time_point> wake = std::min(m_schedule.next_renewal(), m_schedule.stop_at());
    if (m_max_hold_at) wake = std::min(*wake, *m_max_hold_at);
    if (m_watched.fd() < 0) wake = std::min(*wake, Clock::now() + Millis(proc::Watched::k_poll_interval_ms));
    pollfd fds[2] = {{m_signals.fd(), POLLIN, 0}, {m_watched.fd(), POLLIN, 0}};
    util::poll_until(fds, m_watched.fd() >= 0 ? 2 : 1, wake);
    if (!m_signals.take().empty()) {
      log::verbose("asked to release {}", m_spec.name.key);
      return give_back(true);
    }
    if (m_watched.ended()) {
      log::verbose("process {} ended: releasing {}", m_watched.pid(), m_spec.name.key);
      return give_back(false);
    }
    auto now = Clock::now();
    if (m_max_hold_at && now >= *m_max_hold_at) {
      give_back(false);
      return lose(fmt::format("given up after --max-hold {}", util::format_duration(*m_spec.max_hold)));
    }
    if (now >= m_schedule.stop_at()) {
      release_leftovers();
      return lose("renewals kept failing until the lease's deadline");
    }
    if (now >= m_schedule.next_renewal() && !renew()) {
      release_leftovers();
      return lose("the lock expired or was taken over (its token no longer owns it)");
    }
  }
}

}  // namespace

namespace detail {

int keep(const Spec& spec, proc::Watched& watched, const std::string& state_path, int armed) {
  try {
    Keeper keeper(spec, watched, state_path);
    return keeper.run(armed);
  } catch (const std::exception& e) {
    log::error(e.what());
  }
  return exit_code::k_internal;
}

}  // namespace detail

}  // namespace rlock::commands::keeper
