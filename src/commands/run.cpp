#include "commands/commands.hpp"

#include "commands/common.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "lock/backend.hpp"
#include "lock/preempt_watch.hpp"
#include "lock/renewal.hpp"
#include "lock/schedule.hpp"
#include "lock/validity.hpp"
#include "lock/take.hpp"
#include "log.hpp"
#include "proc/ancestry.hpp"
#include "proc/child.hpp"
#include "proc/guard.hpp"
#include "proc/signals.hpp"
#include "util/clock.hpp"
#include "util/text.hpp"

#include <poll.h>
#include <termios.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

namespace rlock::commands {

namespace {

using Clock = util::BootClock;
using util::Millis;

Millis until(Clock::time_point t) { return std::chrono::duration_cast<Millis>(t - Clock::now()); }

bool is_job_control_stop(int sig) { return sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU; }

// Takes the lock, supervises the child's tree while renewing the lease from one loop, and gives
// the lock back.
//
// The loop is single-threaded: signals arrive through a signalfd, the child's tree is watched by
// the guard (proc::Guard), and the poll's wake-up is the next renewal or deadline, on
// CLOCK_BOOTTIME. Renewal and release never race. Nothing in the loop blocks but its poll: output
// to stderr is non-blocking (log::set_nonblocking), every Redis wait is capped before the moment
// the child must be stopped, and the guard holds the kill deadline on a kernel timer of its own,
// so the tree is killed in time even if this loop is stuck or rlock is stopped or killed.
class Supervisor {
public:
  // Where a run is. The lock is taken (taking), the command started under it (starting), run
  // with its lease renewed (running); its tree is stopped, either with the lease still renewed
  // (stopping: preempted, --leftovers kill) or with the lock lost or given up and no renewal any
  // more (abandoning); then, once the tree is gone, the lock is given back (releasing).
  enum class Phase { taking, starting, running, stopping, abandoning, releasing };

  Supervisor(const RunOptions& options, std::string path)
      : m_options(options),
        m_path(std::move(path)),
        m_signals({SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGTSTP, SIGTTIN, SIGTTOU, SIGCONT, SIGCHLD},
                  {}),
        m_backend(lock::open_backend(options.connect, options.take.ttl)),
        m_name(lock_name(options.connect, options.take.key)) {
    // While waiting, a signal that ends the wait also cuts short the Redis call under way (a
    // BLPOP of up to a heartbeat); once the command runs, calls go on and signals are forwarded.
    m_backend->set_interrupt(m_signals.fd(), [this] {
      drain_signals();
      return m_interrupted.has_value() && !command_started();
    });
  }

  int run();

private:
  // Sleeps up to `duration` (stderr drained): take_signals() takes the signals that arrive; ends
  // early, false, once ended() holds.
  bool sleep(Millis duration, const std::function<void()>& take_signals, const std::function<bool()>& ended);

  // Waiting for the lock.
  bool pause(Millis duration);
  [[noreturn]] void exec_nested(const lock::Attempt& attempt, const std::string& token);
  int interrupted_while_waiting();

  // Holding it.
  bool start_child(const lock::Attempt& attempt, std::vector<lock::Hold> holds);
  // This process's start time (proc::start_time), read once.
  uint64_t own_start() {
    if (m_own_start == 0) m_own_start = proc::start_time(::getpid()).value_or(0);
    return m_own_start;
  }
  bool mark_tick();
  int tick_not_marked(const std::string& why);
  int lost_before_start();
  void lost_during_start();
  void supervise();
  std::optional<Clock::time_point> next_wake() const;
  void drain_signals();
  void on_signal(int signo);
  void on_guard_event(const proc::GuardEvent& event);
  void renew();
  // Stops the command's tree for `why`: a loss (lock::is_loss), or rlock's own decision
  // (--max-hold), which gives the lock up all the same.
  void begin_stop(const std::string& why, lock::HoldOutcome outcome);
  void on_preempted(const lock::Holder& by);
  void on_guard_silent();
  void report_leftovers();
  void follow_job_stop(int sig);
  void give_terminal_back();
  int finish();
  lock::HoldOutcome outcome() const;
  void explain_loss();
  bool pause_releasing(Millis duration);
  void release_quietly();
  std::string held_for() const;
  // The option to name in a message: the one the user gave (--cancel-in-progress stands for
  // --supersede, --preempt and --preemptible).
  const char* flag(const char* option) const { return m_options.cancel_in_progress ? "--cancel-in-progress" : option; }

  bool command_started() const { return m_phase >= Phase::running; }
  // The lease is renewed while the command runs, and while a stop that keeps the lock goes on.
  bool renewing() const { return m_phase == Phase::running || m_phase == Phase::stopping; }
  // The lock is lost or given up: its tree is stopped without renewing it, and rlock exits with
  // --lost-exit-code.
  void abandon() {
    m_phase = Phase::abandoning;
    m_lost = true;
  }

  const RunOptions& m_options;
  std::string m_path;  // the command's executable, resolved once
  proc::SignalSet m_signals;
  std::unique_ptr<lock::Backend> m_backend;
  lock::LockName m_name;
  lock::Contender m_contender;
  std::string m_token;  // m_contender.token
  Phase m_phase = Phase::taking;

  std::optional<int> m_interrupted;  // a signal that made rlock give up waiting
  std::optional<proc::Guard> m_guard;
  std::optional<int> m_child_status;
  std::optional<int> m_fatal_signal;  // INT/QUIT/TERM/HUP received while the tree ran in the background
  bool m_terminal = false;            // the child's group has the terminal's foreground

  std::optional<lock::Schedule> m_schedule;
  std::optional<Clock::time_point> m_max_hold_at;
  bool m_lost = false;  // ownership lost or abandoned: exit with --lost-exit-code
  bool m_guard_lost = false;
  // Why rlock ended the hold (a loss, --max-hold, a --preempt request, its guard killed): the
  // outcome the release records; nullopt: the command ended by itself.
  std::optional<lock::HoldOutcome> m_stopped_for;
  // Since when renewals have failed (the first failure in a row), and the last one's error.
  std::optional<std::chrono::system_clock::time_point> m_failing_since;
  std::string m_failure;
  std::optional<Clock::time_point> m_ended_at;  // when the command's tree was gone
  int64_t m_fence = 0;          // this hold's fencing token (a quorum sets a restarted master again with it)
  Clock::time_point m_began{};  // when run started
  uint64_t m_own_start = 0;     // this process's start time, for its hold (own_start: read once)
  std::optional<Clock::time_point> m_acquired_at;
  Clock::time_point m_command_at{};            // when the command was started: --min-hold counts from there
  std::optional<lock::PreemptWatch> m_watch;   // --preemptible
  std::optional<lock::Holder> m_preempted_by;  // a --preempt request stopped the command
  // When to say which leftovers of the command keep the lock (--leftovers wait), if they still do.
  std::optional<Clock::time_point> m_leftovers_at;
};

// --- waiting ---------------------------------------------------------------------------------

bool Supervisor::sleep(Millis duration, const std::function<void()>& take_signals, const std::function<bool()>& ended) {
  auto wake = Clock::now() + duration;
  while (!ended()) {
    pollfd fds[2] = {{m_signals.fd(), POLLIN, 0}, {log::pending_fd(), POLLOUT, 0}};
    int n = util::poll_until(fds, fds[1].fd >= 0 ? 2 : 1, wake);
    if (fds[1].revents) log::drain();
    if (fds[0].revents) take_signals();
    if (n == 0 || Clock::now() >= wake) break;
  }
  return !ended();
}

bool Supervisor::pause(Millis duration) {
  return sleep(
      duration, [this] { drain_signals(); }, [this] { return m_interrupted.has_value(); });
}

int Supervisor::interrupted_while_waiting() {
  int sig = *m_interrupted;
  m_guard.reset();  // it never started a command: it leaves, and is reaped, now
  log::verbose("{} while waiting for {}: giving up", proc::signal_name(sig), m_name.key);
  log::flush(Clock::now() + std::chrono::seconds(1));
  // Die by the signal, as a command without rlock in between would: a calling shell script that
  // got the same Ctrl-C then stops too (it waits for its command to die of SIGINT).
  proc::die_by(sig, false);
  return exit_code::k_signal_base + sig;
}

void Supervisor::exec_nested(const lock::Attempt& attempt, const std::string& token) {
  // An enclosing run holds this lock and keeps renewing it: run the command in its place, inside
  // the enclosing tree, and leave the hold alone.
  log::verbose("{} is already held by an enclosing run (fence {}): running the command under that hold", m_name.key,
               attempt.fence);
  log::flush(Clock::now() + std::chrono::seconds(1));
  ::setenv("RLOCK_KEY", m_options.take.key.c_str(), 1);
  ::setenv("RLOCK_TOKEN", token.c_str(), 1);
  ::setenv("RLOCK_FENCE", std::to_string(attempt.fence).c_str(), 1);
  std::vector<char*> argv;
  for (const std::string& a : m_options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  if (proc::sigpipe_was_default()) ::signal(SIGPIPE, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &m_signals.original_mask(), nullptr);
  ::execv(m_path.c_str(), argv.data());
  int err = errno;
  proc::exec_failed(m_options.argv[0], m_path, err);
}

int Supervisor::run() {
  m_began = Clock::now();
  log::set_nonblocking();
  std::vector<lock::Hold> holds = enclosing_holds();
  std::vector<std::string> enclosing = lock::tokens_for(holds, m_name.lock_key());
  lock::Holder holder = this_holder(m_options.display_command);
  m_contender = make_contender(m_options.take, holder);
  m_contender.preemptible = m_options.preemptible;
  // The tick is when this run fired (its start), which the scripts place on the server's clock:
  // no host's wall clock counts.
  if (m_options.once_per) m_contender.once_per = lock::Contender::OncePer{*m_options.once_per, m_began};
  m_token = m_contender.token;
  m_backend->check_eviction_before(m_name, m_options.take.strict);
  // The guard starts now, while the lock is being taken (its start overlaps the round trip),
  // unless the lock may be re-entered, where the command runs in rlock's place instead. A tree
  // that could not be followed is refused before the lock is taken.
  if (enclosing.empty()) {
    m_guard.emplace();
    m_guard->check_reach();
    // What names this process in the hold the command inherits (RLOCK_HOLDS), read now when the
    // run may wait: a hand-off starts the command the moment the lock is ours, with nothing left
    // to read. (A -n run, which a busy lock ends, reads it only if it gets the lock.)
    if (!m_options.take.wait || m_options.take.wait->count() > 0) {
      proc::boot_id();
      own_start();
    }
  }

  lock::Attempt attempt;
  {
    WaitDisplay display(m_name);
    // A waiter that would stop its holder says so when the holder cannot be stopped.
    std::optional<PreemptNotice> notice;
    if (m_options.take.preempt) {
      notice.emplace(*m_backend, m_name, m_options.cancel_in_progress ? "--cancel-in-progress" : "--preemptible",
                     m_options.cancel_in_progress ? "cancellable" : "preemptible");
    }
    lock::WaitHooks hooks{[this](Millis d) { return pause(d); }, [this] { return m_interrupted.has_value(); },
                          [&](const lock::Attempt& a, Millis waited) {
                            display(a, waited);
                            if (notice) (*notice)(a);
                          },
                          display.fresh_every(), display.first_shown()};
    attempt = lock::take_lock(*m_backend, m_name, wait_limits(m_options.take), m_contender, enclosing, hooks);
    display.done(attempt);
  }
  if (attempt.outcome == lock::Attempt::Outcome::reentered) exec_nested(attempt, enclosing[attempt.enclosing]);
  if (attempt.outcome == lock::Attempt::Outcome::superseded) {
    std::string why = superseded_message(m_name, attempt, flag("--supersede"));
    log::info(why);
    log::event(log::Severity::notice, "superseded: {}; skipped: {}", why, m_options.display_command);
    return m_options.take.superseded_exit_code;
  }
  if (attempt.outcome == lock::Attempt::Outcome::done) {
    // The usual end of every host but one at each tick: said on a terminal or with -v, quiet under
    // cron (its exit code and rlock log say it).
    std::string done = tick_done_message(m_name, attempt, *m_options.once_per);
    if (::isatty(STDERR_FILENO)) {
      log::info(done);
    } else {
      log::verbose("{}", done);
    }
    log::event(log::Severity::notice, "busy: {}: {}", done, m_options.display_command);
    return m_options.take.conflict_exit_code;
  }
  if (attempt.outcome == lock::Attempt::Outcome::busy) {
    if (m_interrupted) return interrupted_while_waiting();
    std::string busy = busy_outcome(m_name, attempt, m_options.take);
    log::info(busy);
    log::event(log::Severity::notice, "busy: {}; skipped: {}", busy, m_options.display_command);
    return m_options.take.conflict_exit_code;
  }
  m_phase = Phase::starting;
  if (log::verbose_enabled()) log::verbose_line(acquired_text(m_name, attempt, m_options.take.ttl));
  m_backend->check_eviction_after(m_options.take.strict);
  // A slow answer (or --wait-replicas) may have used up the lease: never start a child that
  // would have to be stopped before its first renewal.
  lock::Schedule fresh(attempt.sent_at, m_options.take.ttl, m_options.kill_after, m_options.connect.timeouts.command);
  if (Clock::now() >= fresh.stop_at()) {
    release_quietly();
    throw Error(exit_code::k_unavailable,
                fmt::format("acquiring {} took too long for its TTL of {}: not starting the command", m_name.key,
                            util::format_duration(m_options.take.ttl)));
  }
  if (m_interrupted) {
    release_quietly();
    return interrupted_while_waiting();
  }
  m_schedule = fresh;
  m_fence = attempt.fence;
  m_acquired_at = attempt.sent_at;
  if (log::syslog_events_enabled()) {
    log::event(log::Severity::info, "acquired {} (fence {}, ttl {}) after waiting {}: {}", m_name.key, attempt.fence,
               util::format_duration(m_options.take.ttl),
               util::format_duration(std::chrono::duration_cast<Millis>(attempt.sent_at - m_began)),
               m_options.display_command);
  }
  if (m_options.once_per && !mark_tick()) {
    if (m_interrupted) {
      release_quietly();
      return interrupted_while_waiting();
    }
    return tick_not_marked(m_lost ? "the lock was lost" : "Redis did not confirm it");
  }
  if (!start_child(attempt, std::move(holds))) return lost_before_start();
  m_command_at = Clock::now();
  if (m_guard->killed_during_start()) lost_during_start();
  supervise();
  return finish();
}

// --- holding ---------------------------------------------------------------------------------

bool Supervisor::start_child(const lock::Attempt& attempt, std::vector<lock::Hold> holds) {
  holds.push_back({m_name.lock_key(), m_token, attempt.fence, proc::boot_id(), ::getpid(), own_start()});
  proc::SpawnSpec spec;
  spec.path = m_path;
  spec.argv = m_options.argv;
  spec.env = {{"RLOCK_KEY", m_options.take.key},
              {"RLOCK_TOKEN", m_token},
              {"RLOCK_FENCE", std::to_string(attempt.fence)},
              {lock::k_holds_variable, lock::format_holds(holds)}};
  if (attempt.slot > 0) spec.env.emplace_back("RLOCK_SLOT", std::to_string(attempt.slot));
  spec.mask = &m_signals.original_mask();
  spec.sigpipe_default = proc::sigpipe_was_default();
  try {
    if (!m_guard) m_guard.emplace();
    if (!m_guard->spawn(spec, m_schedule->kill_at())) return false;
  } catch (const Error&) {
    release_quietly();
    throw;
  }
  m_phase = Phase::running;
  m_terminal = m_guard->took_terminal();
  if (m_options.max_hold) m_max_hold_at = attempt.sent_at + *m_options.max_hold;
  if (m_options.preemptible)
    m_watch = lock::PreemptWatch::open(*m_backend, m_name, m_contender.id(), m_options.take.ttl);
  log::verbose("started the command, pid {}{}", m_guard->child(), m_terminal ? " (it has the terminal)" : "");
  return true;
}

bool Supervisor::mark_tick() {
  // The tick runs now: marked in a renewal, so that the command also starts on a fresh lease.
  // Tried again, while the lease lasts, as renewals are.
  for (;;) {
    lock::Renewal r =
        lock::renew(*m_backend, *m_schedule, {m_name, m_token, m_options.take.ttl, m_fence, std::nullopt, true});
    switch (r.outcome) {
      case lock::Renewal::Outcome::renewed: return true;
      case lock::Renewal::Outcome::lost: m_lost = true; return false;
      case lock::Renewal::Outcome::unconfirmed:
        log::verbose("marking the tick of {} not counted: no majority of the sentinels confirms the master",
                     m_name.key);
        break;
      case lock::Renewal::Outcome::failed:
        log::verbose("marking the tick of {} failed ({})", m_name.key, r.error);
        break;
    }
    Millis retry = lock::validity::retry_interval(m_options.take.ttl);
    if (m_interrupted || Clock::now() + retry >= m_schedule->stop_at() || !pause(retry)) return false;
  }
}

int Supervisor::tick_not_marked(const std::string& why) {
  // The give-back puts the tick back, where the mark may have taken effect: another host may run
  // it.
  release_quietly();
  if (m_lost) {
    log::error(
        fmt::format("lost the lock {} before its command could start ({}); the command was not run", m_name.key, why));
    log::event(log::Severity::err, "lost {} before the command could start; not run: {}", m_name.key,
               m_options.display_command);
    return m_options.lost_exit_code;
  }
  throw Error(exit_code::k_unavailable,
              fmt::format("could not record that {} runs its tick ({}) before its lease ran short; the command was "
                          "not run, and the tick is left to another run",
                          m_name.key, why));
}

int Supervisor::lost_before_start() {
  // rlock (or the guard) was held up between the lease's check and the command's start: a
  // stopped or frozen process, a swapping host. The kill deadline passed, so the lease may have
  // ended and the next holder may be running: the guard executed nothing.
  m_lost = true;
  log::error(
      fmt::format("lost the lock {}: its deadline passed before the command could start (rlock was held up); "
                  "the command was not run",
                  m_name.key));
  log::event(log::Severity::err,
             "lost {} after holding it {}: its deadline passed before the command could start; not run: {}", m_name.key,
             held_for(), m_options.display_command);
  release_quietly();
  return m_options.lost_exit_code;
}

void Supervisor::lost_during_start() {
  // The deadline passed while the guard had not yet said whether the command started (rlock or
  // the guard was held up): rlock killed the tree itself. Said once; the stop is under way.
  abandon();
  m_stopped_for = lock::HoldOutcome::deadline;
  log::error(
      fmt::format("lost the lock {}: its deadline passed while the command was being started (rlock or its "
                  "guard was held up); rlock killed whatever of it had started",
                  m_name.key));
  log::event(log::Severity::err, "lost {}: its deadline passed while the command was being started; killed: {}",
             m_name.key, m_options.display_command);
}

std::optional<Clock::time_point> Supervisor::next_wake() const {
  std::optional<Clock::time_point> wake;
  auto consider = [&wake](Clock::time_point t) {
    if (!wake || t < *wake) wake = t;
  };
  if (renewing()) {
    consider(m_schedule->next_renewal());
    consider(m_schedule->stop_at());
  }
  if (m_max_hold_at && m_phase == Phase::running) consider(*m_max_hold_at);
  if (m_watch && m_phase == Phase::running) consider(m_watch->wake());
  if (m_guard) {
    if (auto check = m_guard->check_at()) consider(*check);
  }
  if (m_leftovers_at) consider(*m_leftovers_at);
  return wake;
}

void Supervisor::supervise() {
  while (!m_guard->done()) {
    pollfd fds[4] = {{m_signals.fd(), POLLIN, 0},
                     {m_guard->fd(), POLLIN, 0},
                     {log::pending_fd(), POLLOUT, 0},
                     m_watch && m_phase == Phase::running ? m_watch->pending() : pollfd{-1, 0, 0}};
    int n = util::poll_until(fds, 4, next_wake());
    if (n < 0) throw Error(exit_code::k_system, fmt::format("poll: {}", std::strerror(errno)));
    if (fds[2].revents) log::drain();
    if (fds[0].revents) drain_signals();
    for (const proc::GuardEvent& e : m_guard->take_events()) on_guard_event(e);
    if (m_guard->done()) break;

    // The kill deadline passed and the guard did not report the tree gone: it is stopped or
    // starved. rlock continues it and kills the tree itself.
    if (m_guard->enforce()) on_guard_silent();
    // Woken by a --preempt request: the renewal says who asked.
    if (m_watch && m_phase == Phase::running && m_watch->step()) renew();
    auto now = Clock::now();
    if (renewing() && now >= m_schedule->stop_at()) {
      auto since = m_failing_since.value_or(std::chrono::system_clock::now());
      auto ms = [](std::chrono::system_clock::time_point t) {
        return std::chrono::duration_cast<Millis>(t.time_since_epoch()).count();
      };
      begin_stop(fmt::format("renewals kept failing since {} ({} ago): {}; stopping the command before the lease "
                             "can expire",
                             util::iso_time(ms(since)),
                             util::format_duration(
                                 std::chrono::duration_cast<Millis>(std::chrono::system_clock::now() - since)),
                             m_failure.empty() ? "no answer" : m_failure),
                 lock::HoldOutcome::renewals_failed);
    } else if (renewing() && now >= m_schedule->next_renewal()) {
      renew();
    }
    if (m_leftovers_at && Clock::now() >= *m_leftovers_at) report_leftovers();
    if (m_max_hold_at && m_phase == Phase::running && Clock::now() >= *m_max_hold_at) {
      begin_stop(fmt::format("held for --max-hold {}", util::format_duration(*m_options.max_hold)),
                 lock::HoldOutcome::max_hold);
    }
  }
}

void Supervisor::drain_signals() {
  for (int s : m_signals.take()) on_signal(s);
}

void Supervisor::on_signal(int signo) {
  if (signo == SIGCHLD) {
    // The guard reports on the tree; it reaps, rlock reaps the guard. A stopped guard could not
    // keep its deadline: it is continued at once.
    if (m_guard && m_guard->continue_if_stopped()) {
      log::warning("the guard process that watches the command was stopped; rlock continued it");
    }
    return;
  }
  if (!m_guard || m_guard->child() < 0) {
    // Still waiting for the lock: job control stops rlock itself; the others end the wait.
    if (is_job_control_stop(signo)) {
      proc::stop_self(signo, false);
    } else if (signo != SIGCONT && !m_interrupted) {
      m_interrupted = signo;
    }
    return;
  }
  if (m_guard->done()) return;
  if (m_child_status) {
    // The command is over; what it left behind runs on. A signal for rlock is for them now.
    log::verbose("forwarding {} to the processes the command left running", proc::signal_name(signo));
    m_guard->signal_tree(signo);
    if (signo == SIGINT || signo == SIGQUIT || signo == SIGTERM || signo == SIGHUP) m_fatal_signal = signo;
    return;
  }
  log::verbose("forwarding {} to the command", proc::signal_name(signo));
  ::kill(-m_guard->child(), signo);
}

void Supervisor::on_guard_event(const proc::GuardEvent& event) {
  using Kind = proc::GuardEvent::Kind;
  switch (event.kind) {
    case Kind::child_exited:
      m_child_status = event.value;
      give_terminal_back();
      log::verbose("the command exited ({})", proc::exit_code_of(event.value));
      if (m_options.leftovers == Leftovers::kill && m_phase == Phase::running) {
        log::verbose("ending the processes it left running (--leftovers kill)");
        m_phase = Phase::stopping;
        m_guard->stop(m_options.stop_signal, std::min(Clock::now() + m_options.kill_after, m_schedule->kill_at()));
      } else if (m_options.leftovers == Leftovers::wait &&
                 (progress_mode() != Progress::none || log::verbose_enabled())) {
        m_leftovers_at = Clock::now() + k_progress_after;
      }
      break;
    case Kind::child_stopped: follow_job_stop(event.value); break;
    case Kind::child_continued: break;
    case Kind::deadline_kill:
      // The loop did not stop the tree in time (it was blocked or stopped): the guard did.
      if (m_guard->killed_during_start()) break;  // said already: rlock killed it first
      abandon();
      if (!m_stopped_for) m_stopped_for = lock::HoldOutcome::deadline;
      log::error(
          fmt::format("lost the lock {}: its lease ran out before rlock could renew it; the command's "
                      "processes were killed",
                      m_name.key));
      log::event(log::Severity::err,
                 "lost {} after holding it {}: the lease ran out before rlock could renew it; the command's "
                 "processes were killed",
                 m_name.key, held_for());
      break;
    case Kind::tree_empty: give_terminal_back(); break;
    case Kind::guard_lost:
      m_guard_lost = true;
      if (!m_stopped_for) m_stopped_for = lock::HoldOutcome::guard_killed;
      give_terminal_back();
      log::error("the guard process that watched the command was killed; rlock killed the command");
      if (m_guard->left_running()) {
        log::error(
            fmt::format("{}: processes of the command's tree were not gone by the kill deadline (SIGKILL did "
                        "not end them: an uninterruptible sleep, or a tracer that holds them); rlock stopped "
                        "waiting for them",
                        m_name.key));
      }
      break;
  }
}

void Supervisor::renew() {
  lock::Renewal r = lock::renew(*m_backend, *m_schedule, {m_name, m_token, m_options.take.ttl, m_fence, {}});
  auto left = [&] { return util::format_duration(std::max(until(m_schedule->stop_at()), Millis(0))); };
  switch (r.outcome) {
    case lock::Renewal::Outcome::lost:
      // finish() still releases: on a quorum the token may hold the lock on a minority.
      begin_stop("the lock expired or was taken over (its token no longer owns it)", lock::HoldOutcome::not_owned);
      return;
    case lock::Renewal::Outcome::unconfirmed:
      log::verbose(
          "renewal of {} not counted: no majority of the sentinels confirms the master; {} before the "
          "command must be stopped",
          m_name.key, left());
      return;
    case lock::Renewal::Outcome::failed:
      if (!m_failing_since) m_failing_since = std::chrono::system_clock::now();
      m_failure = r.error;
      log::verbose("renewal failed ({}); retrying, {} before the command must be stopped", r.error, left());
      return;
    case lock::Renewal::Outcome::renewed:
      m_failing_since.reset();
      m_guard->set_deadline(m_schedule->kill_at());
      log::verbose("renewed {} for {}", m_name.key, util::format_duration(r.extension->ttl));
      if (r.extension->preempted_by && m_options.preemptible) on_preempted(*r.extension->preempted_by);
      return;
  }
}

void Supervisor::begin_stop(const std::string& why, lock::HoldOutcome outcome) {
  const bool lost = lock::is_loss(outcome);
  abandon();
  m_stopped_for = outcome;
  auto now = Clock::now();
  auto kill_at = std::min(now + m_options.kill_after, m_schedule->kill_at());
  log::error(fmt::format("{} the lock {}: {}", lost ? "lost" : "giving up", m_name.key, why));
  log::event(log::Severity::err, "{} {} after holding it {}: {}; stopping the command", lost ? "lost" : "gave up",
             m_name.key, held_for(), why);
  log::verbose("sending {} to the command's processes, SIGKILL in {}", proc::signal_name(m_options.stop_signal),
               util::format_duration(std::chrono::duration_cast<Millis>(kill_at - now)));
  m_guard->stop(m_options.stop_signal, kill_at);
}

void Supervisor::on_guard_silent() {
  if (m_phase == Phase::running) {
    // The lease's deadline passed with the command running: whatever the guard did, the lock is
    // not known to be ours any more.
    abandon();
    if (!m_stopped_for) m_stopped_for = lock::HoldOutcome::deadline;
    log::error(
        fmt::format("lost the lock {}: its lease ran out before rlock could renew it, and the guard did not "
                    "stop the command in time (it was stopped or starved): rlock killed the command's "
                    "processes itself",
                    m_name.key));
    return;
  }
  log::warning(
      "the guard did not stop the command by its deadline (it was stopped or starved): rlock killed the "
      "command's processes itself");
}

void Supervisor::report_leftovers() {
  // Said once, where people look: a step that seems to hang after its command ended says why.
  m_leftovers_at.reset();
  if (m_guard->done() || m_phase != Phase::running) return;
  constexpr size_t k_named = 5;
  size_t total = 0;
  std::vector<proc::Process> left = proc::descendants(m_guard->pid(), k_named, total);
  if (total == 0) return;
  std::string names;
  for (const proc::Process& p : left) {
    names += fmt::format("{}pid {} ({})", names.empty() ? "" : ", ", p.pid, util::printable(p.command));
  }
  if (total > left.size()) names += fmt::format(" and {} more", total - left.size());
  log::info(
      fmt::format("{}: the command exited ({}), but {} it left running {} the lock: {}; waiting for {} "
                  "(--leftovers kill ends them)",
                  m_name.key, proc::exit_code_of(m_child_status.value_or(0)),
                  total == 1 ? "a process" : fmt::format("{} processes", total), total == 1 ? "keeps" : "keep", names,
                  total == 1 ? "it" : "them"));
}

void Supervisor::on_preempted(const lock::Holder& by) {
  if (m_phase != Phase::running) return;
  // The lock stays ours, renewed, until the tree is gone; then the preemptor is served next (or,
  // if it left meanwhile, the next waiter: the stop, once begun, goes on).
  m_phase = Phase::stopping;
  m_preempted_by = by;
  m_stopped_for = lock::HoldOutcome::preempted;
  auto now = Clock::now();
  auto kill_at = std::min(now + m_options.kill_after, m_schedule->kill_at());
  log::info(fmt::format("{} is wanted by {} ({}): stopping the command", m_name.key, who_text(by), flag("--preempt")));
  log::verbose("sending {} to the command's processes, SIGKILL in {}", proc::signal_name(m_options.stop_signal),
               util::format_duration(std::chrono::duration_cast<Millis>(kill_at - now)));
  m_guard->stop(m_options.stop_signal, kill_at);
}

void Supervisor::follow_job_stop(int sig) {
  // Stopped through the terminal (Ctrl-Z, or a read from it in the background): give the
  // terminal back and stop with it, as a job, so that the shell gets its prompt back. Stopped,
  // rlock cannot renew: the guard kills the tree when the lease's deadline passes, so a command
  // resumed too late never runs on an expired lease.
  if (!m_terminal && !is_job_control_stop(sig)) {
    log::verbose("the command was stopped ({}); rlock keeps its lock", proc::signal_name(sig));
    return;
  }
  if (!m_terminal) return;
  give_terminal_back();
  log::verbose("the command was stopped ({}): stopping too and giving the terminal back; the lease runs out in {}",
               proc::signal_name(sig), util::format_duration(std::max(until(m_schedule->kill_at()), Millis(0))));
  log::flush(Clock::now() + Millis(200));
  proc::stop_self(is_job_control_stop(sig) ? sig : SIGTSTP, true);
  // Continued (fg or bg). The SIGCONT that did it waits in the signalfd: it is for rlock, not to
  // be forwarded.
  log::verbose("continued");
  for (int s : m_signals.take()) {
    if (s != SIGCONT) on_signal(s);
  }
  for (const proc::GuardEvent& e : m_guard->take_events()) on_guard_event(e);
  if (m_guard->done() || m_child_status) return;
  // The lease must be known good before the command runs again.
  if (renewing()) renew();
  if (m_phase != Phase::running) return;  // lost meanwhile: the stop sequence runs on the stopped tree
  bool foreground = ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  if (foreground) m_terminal = ::tcsetpgrp(STDIN_FILENO, m_guard->child()) == 0;
  ::kill(-m_guard->child(), SIGCONT);
}

void Supervisor::give_terminal_back() {
  if (!m_terminal) return;
  m_terminal = false;
  ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
}

lock::HoldOutcome Supervisor::outcome() const {
  if (m_stopped_for) return *m_stopped_for;
  return m_child_status && proc::exit_code_of(*m_child_status) == 0 ? lock::HoldOutcome::success
                                                                    : lock::HoldOutcome::failed;
}

void Supervisor::explain_loss() {
  // A lock found gone may have gone with the server's data: a restart without persistence.
  if (m_stopped_for != lock::HoldOutcome::not_owned || !m_acquired_at) return;
  try {
    std::optional<std::string> restart =
        m_backend->restarted_within(std::chrono::duration_cast<Millis>(Clock::now() - *m_acquired_at));
    if (!restart) return;
    m_stopped_for = lock::HoldOutcome::restarted;
    log::error(fmt::format("{}: {}", m_name.key, *restart));
  } catch (const Error& e) {
    log::verbose("could not ask the server whether it restarted ({})", e.what());
  }
}

int Supervisor::finish() {
  m_phase = Phase::releasing;
  m_ended_at = Clock::now();
  // The watch's BLPOP on our own mailbox ends first: the release pushes that mailbox to wake the
  // next waiter (a --preempt request watches it), and a BLPOP of ours would take the wake-up.
  m_watch.reset();
  // Released even when lost: once the tree is gone, whatever the token still holds (a quorum's
  // minority) is given back. The scripts compare the token, so nobody else's lock is touched.
  m_backend->cap_waits(std::nullopt);
  explain_loss();
  // The command started: the hold lingers for what is left of --min-hold since then, measured on
  // this host's monotonic clock and counted by the server from its own (no wall clock compared).
  lock::Ending ending{m_child_status ? std::to_string(proc::exit_code_of(*m_child_status)) : "", m_contender.holder,
                      m_fence, true,
                      m_options.take.min_hold - std::chrono::duration_cast<Millis>(Clock::now() - m_command_at)};
  ending.outcome = outcome();
  // How long it held the lock, until its command's tree was gone: the release may come later.
  ending.held = std::chrono::duration_cast<Millis>(*m_ended_at - m_acquired_at.value_or(*m_ended_at));
  // A server that restarted, or cannot serve for a moment, is tried again within the lease, as
  // the renewals do: a lock left behind would keep the next waiter out for a whole TTL. After a
  // loss (the server did not answer, most often), for one more TTL: the loss is recorded once it
  // answers, with how long the hold lasted and why.
  auto until = m_schedule->valid_until();
  if (lock::is_loss(ending.outcome)) until = std::max(until, Clock::now() + m_options.take.ttl);
  try {
    lock::Released released = lock::release_within(*m_backend, m_name, m_token, ending, until,
                                                   lock::validity::retry_interval(m_options.take.ttl),
                                                   [this](Millis d) { return pause_releasing(d); });
    switch (released) {
      case lock::Released::released: log::verbose("released {}", m_name.key); break;
      case lock::Released::not_held:
        if (m_lost) break;
        // The command ran on a lock that was no longer ours at some point: never report that as
        // success.
        m_lost = true;
        log::error(
            fmt::format("lost the lock {}: when the command ended, its token no longer owned it (it expired, "
                        "was deleted, or was taken over)",
                        m_name.key));
        log::event(log::Severity::err, "lost {}: when the command ended after {}, its token no longer owned it",
                   m_name.key, held_for());
        break;
      case lock::Released::unknown:
        // Renewals proved the lock ours while the command ran; what a minority says at the end
        // (or a release whose first answer was lost) proves no loss.
        log::warning(
            fmt::format("could not tell whether {} was still held when the command ended: {}; it expires "
                        "within {} where it is left",
                        m_name.key,
                        m_backend->quorum() ? "no majority of the masters agreed"
                                            : "an earlier attempt, whose answer was lost, may have released it",
                        util::format_duration(m_options.take.ttl)));
        break;
    }
  } catch (const Error& e) {
    if (m_lost) {
      log::verbose("could not give back what remains of {} ({})", m_name.key, e.what());
    } else if (e.exit_code() == exit_code::k_data) {
      // Another program's data took the lock's key: the command ran on a lock no longer ours.
      m_lost = true;
      log::error(fmt::format("lost the lock {}: when the command ended, {}", m_name.key, e.what()));
      log::event(log::Severity::err, "lost {}: when the command ended after {}, {}", m_name.key, held_for(), e.what());
    } else {
      log::warning(fmt::format("could not release {} ({}); it expires within {}", m_name.key, e.what(),
                               util::format_duration(m_options.take.ttl)));
    }
  }
  if (m_guard_lost) return exit_code::k_system;
  if (m_lost) return m_options.lost_exit_code;
  int status = m_child_status.value_or(0);
  if (m_preempted_by) {
    log::info(fmt::format("{}: the command was stopped for {} ({})", m_name.key, who_text(*m_preempted_by),
                          flag("--preempt")));
    log::event(log::Severity::notice, "preempted {} after holding it {}: {} asked for it ({})", m_name.key, held_for(),
               who_text(*m_preempted_by), flag("--preempt"));
    return m_options.preempted_exit_code;
  }
  if (log::syslog_events_enabled()) {
    log::event(log::Severity::info, "released {} after holding it {}; the command exited with {}", m_name.key,
               held_for(), proc::exit_code_of(status));
  }
  // Ctrl-C and Ctrl-\ at the terminal reached only the command, which had the terminal: pass
  // them on to the caller, as the terminal would have without rlock in between, so that a
  // calling script or loop stops too.
  bool by_terminal = m_guard && m_guard->took_terminal() && WIFSIGNALED(status) &&
                     (WTERMSIG(status) == SIGINT || WTERMSIG(status) == SIGQUIT);
  if (by_terminal || m_fatal_signal) {
    int sig = by_terminal ? WTERMSIG(status) : *m_fatal_signal;
    log::flush(Clock::now() + std::chrono::seconds(1));
    proc::die_by(sig, by_terminal);
  }
  return proc::exit_code_of(status);
}

bool Supervisor::pause_releasing(Millis duration) {
  // Between attempts at the release: INT, QUIT, TERM or HUP gives up (rlock then dies by it).
  auto take = [this] {
    for (int s : m_signals.take()) {
      if (s == SIGINT || s == SIGQUIT || s == SIGTERM || s == SIGHUP) m_fatal_signal = s;
    }
  };
  return sleep(duration, take, [this] { return m_fatal_signal.has_value(); });
}

std::string Supervisor::held_for() const {
  if (!m_acquired_at) return "0s";
  return util::format_duration(std::chrono::duration_cast<Millis>(Clock::now() - *m_acquired_at));
}

void Supervisor::release_quietly() {
  m_watch.reset();
  m_backend->cap_waits(std::nullopt);
  try {
    if (m_backend->release(m_name, m_token, lock::Ending{"", m_contender.holder, m_fence, false, std::nullopt}) ==
        lock::Released::released) {
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
