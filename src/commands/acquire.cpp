#include "commands/commands.hpp"

#include "commands/common.hpp"
#include "commands/keeper.hpp"
#include "lock/backend.hpp"
#include "lock/renewal.hpp"
#include "lock/take.hpp"
#include "lock/validity.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "util/file.hpp"
#include "util/random.hpp"
#include "util/text.hpp"
#include "proc/signals.hpp"
#include "proc/ancestry.hpp"
#include "proc/watch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <cstring>
#include <ctime>
#include <system_error>

namespace rlock::commands {

namespace {

void print(const std::string& text) { write_stdout(text + "\n"); }

// Whether token is the hold of an enclosing run (RLOCK_HELD): that run alone renews and releases it.
bool held_by_enclosing_run(const lock::LockName& name, const std::string& token) {
  std::vector<std::string> tokens = lock::tokens_for(run_holds(), name.lock_key());
  return std::find(tokens.begin(), tokens.end(), token) != tokens.end();
}

// Whether rlock's parent has died (rlock was handed to a subreaper or init meanwhile).
bool parent_gone() { return ::getppid() <= 1; }

// The loss a keeper recorded: exit 1, saying when and why.
int report_loss(const std::string& key, const keeper::Ending& e) {
  // In UTC, as every time rlock prints; whole seconds.
  std::string when = util::iso_time(e.when_ms);
  when.erase(when.size() - 5, 4);  // the milliseconds (".123") before the Z
  log::error(fmt::format("{} was lost at {} while its keeper held it: {}", key, when, e.reason));
  log::event(log::Severity::err, "{} was lost at {} while its keeper held it: {}", key, when, e.reason);
  return exit_code::k_not_held;
}

// Until when release and extend try again a server that cannot be reached or cannot serve: the
// lease they act on is not known here, so for --io-timeout.
util::BootClock::time_point retry_until(const lock::Servers& connect) {
  return util::BootClock::now() + connect.timeouts.command;
}

// --keepalive --keeper-log FILE: the keeper logs there once detached, where it cannot complain:
// find out now.
void check_keeper_log(const AcquireOptions& options) {
  if (!options.keepalive || options.keeper_log.empty() || options.keeper_log == "syslog:") return;
  int f = ::open(options.keeper_log.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (f < 0) {
    throw Error(exit_code::k_system,
                fmt::format("cannot write the keeper log {}: {}", options.keeper_log, std::strerror(errno)));
  }
  ::close(f);
}

// --keepalive: opens the watched process before anything else: if it is gone, or its pid was
// reused, no lock is taken for it.
void watch_caller(const AcquireOptions& options, pid_t caller, std::optional<proc::Watched>& watched) {
  if (!options.keepalive) return;
  if (caller <= 1) throw Error(exit_code::k_usage, "--keepalive: the calling process is gone (give --pid PID)");
  watched.emplace(caller);
  if (!options.watch_pid && parent_gone()) throw Error(exit_code::k_usage, "--keepalive: the calling process is gone");
}

// The wait for the lock. A signal while waiting leaves the queue at once (not after the place
// lapses); it is recorded in interrupted, for the caller to end rlock as it would have.
lock::Attempt take(lock::Backend& locker, const lock::LockName& name, const AcquireOptions& options,
                   const lock::Contender& contender, const std::vector<std::string>& enclosing,
                   proc::SignalSet& signals, std::optional<int>& interrupted) {
  auto drain = [&signals, &interrupted] {
    for (int s : signals.take()) {
      if (!interrupted) interrupted = s;
    }
    return interrupted.has_value();
  };
  locker.set_interrupt(signals.fd(), drain);
  WaitDisplay display(name);
  std::optional<PreemptNotice> notice;
  if (options.take.preempt) notice.emplace(locker, name, "--preemptible", "preemptible");
  lock::WaitHooks hooks{[&](util::Millis d) {
                          pollfd p{signals.fd(), POLLIN, 0};
                          if (util::poll_until(&p, 1, util::BootClock::now() + d) > 0) drain();
                          return !interrupted;
                        },
                        [&] { return interrupted.has_value(); },
                        [&](const lock::Attempt& attempt, util::Millis waited) {
                          display(attempt, waited);
                          if (notice) (*notice)(attempt);
                        },
                        display.fresh_every(), display.first_shown()};
  lock::Attempt a = lock::take_lock(locker, name, wait_limits(options.take), contender, enclosing, hooks);
  display.done(a);
  return a;
}

// The exit code of a lock not taken (busy, or superseded), after saying why; nullopt when it was.
std::optional<int> not_taken(const lock::LockName& name, const lock::Attempt& a, const AcquireOptions& options) {
  if (a.outcome == lock::Attempt::Outcome::superseded) {
    std::string why = superseded_message(name, a);
    log::info(why);
    log::event(log::Severity::notice, "superseded: {} (rlock acquire)", why);
    return options.take.superseded_exit_code;
  }
  if (a.outcome == lock::Attempt::Outcome::busy) {
    std::string busy = busy_outcome(name, a, options.take);
    log::info(busy);
    log::event(log::Severity::notice, "busy: {} (rlock acquire)", busy);
    return options.take.conflict_exit_code;
  }
  return std::nullopt;
}

// A lock acquired (not reentered): checks that its lease holds for a while yet and starts its
// keeper (--keepalive); gives the lock back when either fails.
void keep(lock::Backend& locker, const lock::LockName& name, const std::string& token, const lock::Attempt& a,
          const AcquireOptions& options, const lock::Holder& holder, pid_t caller,
          std::optional<proc::Watched>& watched, const lock::Ending& unused) {
  if (log::verbose_enabled()) log::verbose_line(acquired_text(name, a, options.take.ttl));
  // A slow answer (or --wait-replicas) may have used up the lease: a token handed out must hold
  // the lock for a while yet.
  if (util::BootClock::now() >= lock::Deadline(a.sent_at, options.take.ttl).valid_until()) {
    locker.release(name, token, unused);
    throw Error(exit_code::k_unavailable,
                fmt::format("acquiring {} took too long for its TTL of {}: its lease may have run out already; no "
                            "token is handed out",
                            name.key, util::format_duration(options.take.ttl)));
  }
  if (log::syslog_events_enabled()) {
    log::event(log::Severity::info, "acquired {} (fence {}, ttl {}) for a later rlock release{}", name.key, a.fence,
               util::format_duration(options.take.ttl), watched ? "; a keeper renews it" : "");
  }
  try {
    locker.check_eviction_after(options.take.strict);
    if (watched) {
      keeper::Spec spec{
          options.connect,    name,    token, options.take.ttl, a.sent_at, caller, options.max_hold, options.signal,
          options.keeper_log, a.fence, holder};
      pid_t k = keeper::start(spec, *watched);
      log::verbose("keeper pid {} holds {} while pid {} lives", k, name.key, caller);
    }
  } catch (const Error&) {
    locker.release(name, token, unused);
    throw;
  }
}

// Prints the token (or writes it to --token-file).
void write_token(const std::string& token, const lock::Attempt& a, const AcquireOptions& options) {
  if (!options.token_file.empty()) {
    util::write_file_atomic(options.token_file, token + "\n", 0600);
  } else if (options.json) {
    print(fmt::format("{{\"key\":{},\"token\":{},\"fence\":{},\"ttl_ms\":{},\"reentered\":{},\"slot\":{}}}",
                      util::json_quote(options.take.key), util::json_quote(token), a.fence, options.take.ttl.count(),
                      a.outcome == lock::Attempt::Outcome::reentered, a.slot > 0 ? std::to_string(a.slot) : "null"));
  } else {
    print(token);
  }
}

// The token could not be handed out: nobody learned it, so the lock is given back rather than left
// stuck until its TTL; then the error, as rlock(1) words it.
[[noreturn]] void undo_hand_out(const std::exception& e, lock::Backend& locker, const lock::LockName& name,
                                const std::string& token, const lock::Attempt& a, const AcquireOptions& options,
                                bool kept, const lock::Ending& unused) {
  if (a.outcome == lock::Attempt::Outcome::acquired) {
    if (!kept || !keeper::stop(token, options.connect.timeouts.command + util::Millis(1000))) {
      locker.release(name, token, unused);
    }
  }
  if (const auto* se = dynamic_cast<const std::system_error*>(&e)) {
    if (se->code() == std::errc::too_many_symbolic_link_levels) {
      throw Error(exit_code::k_system, fmt::format("cannot write the token: {} is a symbolic link; rlock does not "
                                                   "write a token through one",
                                                   util::printable(options.token_file)));
    }
    throw Error(exit_code::k_system, fmt::format("cannot write the token to {}: {}",
                                                 util::printable(options.token_file), se->code().message()));
  }
  throw;
}

}  // namespace

int acquire(const AcquireOptions& options) {
  std::unique_ptr<lock::Backend> backend = lock::open_backend(options.connect, options.take.ttl);
  lock::Backend& locker = *backend;
  lock::LockName name = lock_name(options.connect, options.take.key);
  std::vector<lock::Hold> holds = enclosing_holds();
  std::vector<std::string> enclosing = lock::tokens_for(holds, name.lock_key());
  lock::Holder holder = this_holder(fmt::format("rlock acquire {}", options.take.key));
  // rlock exits at once: the process that keeps the lock is the one that called it (or --pid).
  pid_t caller = options.watch_pid ? *options.watch_pid : options.keepalive ? proc::calling_process() : ::getppid();
  holder.pid = std::to_string(caller);
  std::optional<proc::Watched> watched;
  check_keeper_log(options);
  watch_caller(options, caller, watched);
  lock::Contender contender = make_contender(options.take, holder);
  std::string token = contender.token;
  if (options.stdout_closed && options.token_file.empty()) {
    throw Error(exit_code::k_usage,
                "standard output is closed: there is nowhere to print the token (use "
                "--token-file F)");
  }
  locker.check_eviction_before(name, options.take.strict);

  proc::SignalSet signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}, {});
  std::optional<int> interrupted;
  lock::Attempt a = take(locker, name, options, contender, enclosing, signals, interrupted);
  const lock::Ending unused{"", holder, a.fence, false, std::nullopt};  // never used: no lingering
  if (interrupted) {
    if (a.outcome == lock::Attempt::Outcome::acquired) locker.release(name, token, unused);
    proc::die_by(*interrupted, false);
    return exit_code::k_signal_base + *interrupted;
  }
  if (std::optional<int> code = not_taken(name, a, options)) return *code;
  if (a.outcome == lock::Attempt::Outcome::reentered) {
    // Held by an enclosing run: hand out that hold's token; release of it leaves the hold alone.
    token = enclosing[a.enclosing];
    log::verbose("{} is already held by an enclosing run (fence {})", name.key, a.fence);
  } else {
    keep(locker, name, token, a, options, holder, caller, watched, unused);
  }

  try {
    write_token(token, a, options);
  } catch (const std::exception& e) {
    undo_hand_out(e, locker, name, token, a, options, watched.has_value(), unused);
  }
  return exit_code::k_ok;
}

int release(const ReleaseOptions& options) {
  std::unique_ptr<lock::Backend> backend = lock::open_backend(options.connect, std::nullopt);
  lock::Backend& locker = *backend;
  lock::LockName name = lock_name(options.connect, options.key);
  if (options.force) {
    lock::ForcedRelease r = locker.force_release(name);
    if (!r.was_held) {
      log::info(fmt::format("{} was not held", options.key));
      return exit_code::k_not_held;
    }
    if (!r.holder.host.empty()) {
      log::info(fmt::format("removed {}, held by {}@{} pid {} ({}), fence {}", options.key, r.holder.user,
                            r.holder.host, r.holder.pid, r.holder.cmd,
                            r.fence ? std::to_string(*r.fence) : std::string("?")));
    }
    if (r.shared_holds > 0)
      log::info(fmt::format("removed {} shared or semaphore holds of {}", r.shared_holds, options.key));
    log::event(log::Severity::warning, "released {} by force (--force){}", options.key,
               r.holder.host.empty() ? ""
                                     : fmt::format(", held by {}@{} pid {} ({})", r.holder.user, r.holder.host,
                                                   r.holder.pid, r.holder.cmd));
    return exit_code::k_ok;
  }
  std::string token = read_token(options.token);
  if (held_by_enclosing_run(name, token)) {
    log::verbose("{} is held by an enclosing run, which releases it", options.key);
    return exit_code::k_ok;
  }
  // A keepalive hold: its keeper gives the lock back (it never renews a released lock), or
  // recorded that the lock was lost.
  if (std::optional<keeper::Ending> e = keeper::stop(token, options.connect.timeouts.command + util::Millis(1000))) {
    if (e->lost) return report_loss(options.key, *e);
    log::verbose("released {} (its keeper gave it back)", options.key);
    log::event(log::Severity::info, "released {} (its keeper gave it back)", options.key);
    return exit_code::k_ok;
  }
  // The end of a hold that was used: it lingers until the --min-hold it recorded when taken.
  lock::Ending ending{"", this_holder(fmt::format("rlock release {}", options.key)), 0, true, std::nullopt};
  ending.outcome = lock::HoldOutcome::success;  // an acquire/release pair, without a command
  // A server that restarts, or cannot serve for a moment, is tried again for --io-timeout at the
  // renewals' retry interval: a lock left behind would keep the next waiter out for its TTL.
  lock::Released released = lock::release_within(locker, name, token, ending, retry_until(options.connect),
                                                 lock::validity::retry_interval(lock::k_default_ttl));
  if (released == lock::Released::unknown) {
    log::warning(fmt::format("could not tell whether {} was still held: {}", options.key,
                             locker.quorum() ? "no majority of the masters agreed"
                                             : "an earlier attempt, whose answer was lost, may have released it"));
    return exit_code::k_ok;
  }
  if (released == lock::Released::not_held) {
    log::error(fmt::format("{} is not held with this token (it expired, or another holder has it)", options.key));
    log::event(log::Severity::err, "release of {}: not held with this token (it expired, or another holder has it)",
               options.key);
    return exit_code::k_not_held;
  }
  log::verbose("released {}", options.key);
  log::event(log::Severity::info, "released {}", options.key);
  return exit_code::k_ok;
}

int extend(const ExtendOptions& options) {
  std::unique_ptr<lock::Backend> backend = lock::open_backend(options.connect, std::nullopt);
  lock::Backend& locker = *backend;
  lock::LockName name = lock_name(options.connect, options.key);
  std::string token = read_token(options.token);
  if (held_by_enclosing_run(name, token)) {
    // The enclosing run renews it on its own schedule; a shorter TTL here would undercut it.
    log::verbose("{} is held by an enclosing run, which renews it", options.key);
    return exit_code::k_ok;
  }
  if (std::optional<keeper::Ending> e = keeper::recorded_loss(token)) return report_loss(options.key, *e);
  // A quorum needs the lease's TTL for the validity: --ttl, else the TTL the lock was taken with,
  // which each master knows (its extend reports it back), so --ttl is required there.
  if (locker.quorum() && !options.ttl) {
    throw Error(exit_code::k_usage, "extend with several URLs (a Redlock quorum) needs -t/--ttl");
  }
  std::optional<lock::Extension> extension;
  util::Millis ttl = options.ttl.value_or(lock::k_default_ttl);
  // Retried as release is.
  lock::retry_within(locker, retry_until(options.connect), lock::validity::retry_interval(ttl), {},
                     [&] { extension = locker.extend(name, token, options.ttl, ttl, 0); });
  if (!extension) {
    log::error(fmt::format("{} is not held with this token (it expired, or another holder has it)", options.key));
    return exit_code::k_not_held;
  }
  log::verbose("extended {} to {}", options.key, util::format_duration(extension->ttl));
  return exit_code::k_ok;
}

}  // namespace rlock::commands
