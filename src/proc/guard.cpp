// rlock's side of the guard: starting it, asking it, hearing it, and watching it.
#include "guard.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "proc/guard_protocol.hpp"
#include "proc/raw_syscall.hpp"
#include "proc/tree.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <fmt/core.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace rlock::proc {

using guard::g_setup;
using guard::Message;

namespace {

alignas(64) char g_guard_stack[128 * 1024];

long no_reap() { return 0; }

// rlock's view of the kernel when it acts in the guard's place: the guard's orphans are the
// guard's to reap, not rlock's.
Kernel rlock_kernel() {
  Kernel k = raw_kernel();
  k.reap = no_reap;
  return k;
}

}  // namespace

Guard::Guard() {
  int requests[2];
  int reports[2];
  if (::pipe2(requests, O_CLOEXEC) != 0 || ::pipe2(reports, O_CLOEXEC) != 0) {
    throw Error(exit_code::k_system, fmt::format("cannot start the command: pipe: {}", std::strerror(errno)));
  }
  m_requests.reset(requests[1]);
  m_reports.reset(reports[0]);
  util::Fd guard_requests(requests[0]);
  util::Fd guard_reports(reports[1]);
  // Nobody ever waits in a read or write of these: each side polls, then takes what is there.
  for (int fd : {requests[0], requests[1], reports[0], reports[1]}) ::fcntl(fd, F_SETFL, O_NONBLOCK);

  guard::Setup& s = g_setup;
  s = guard::Setup{};
  s.requests = requests[0];
  s.reports = reports[1];
  s.rlock_requests = requests[1];
  s.rlock_reports = reports[0];
  s.guard = -1;
  s.cgroup_dir = s.cgroup_list = s.cgroup_kill = -1;

  // If the guard dies, the tree comes to rlock, which then kills it (take_events).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
#if RLOCK_RAW_SYSCALLS
  m_pid = ::clone(guard::guard_main, g_guard_stack + sizeof g_guard_stack, CLONE_VM | SIGCHLD, nullptr);
#else
  m_pid = ::fork();
  if (m_pid == 0) guard::guard_main(nullptr);
#endif
  if (m_pid < 0) throw Error(exit_code::k_system, fmt::format("cannot start the command: {}", std::strerror(errno)));
  guard_requests.reset();
  guard_reports.reset();
}

void Guard::check_reach() {
  if (proc_is_ours("/proc")) return;
  // /proc cannot follow the tree here: only a cgroup can. The guard says whether it made one.
  auto until = util::BootClock::now() + std::chrono::seconds(2);
  while (!m_ready && !m_done) {
    pollfd p{m_reports.get(), POLLIN, 0};
    if (util::poll_until(&p, 1, until) <= 0) break;
    take_events();
  }
  if (m_ready && (m_reach & guard::k_reach_cgroup)) return;
  throw Error(exit_code::k_system,
              "cannot follow the command's processes: /proc is not this PID namespace's (it is unmounted, or "
              "another namespace's: mount it, e.g. unshare --mount-proc) and no cgroup v2 could be made for them; "
              "without either, rlock could not stop the whole tree if the lock were lost, so it does not run it");
}

bool Guard::spawn(const SpawnSpec& spec, util::BootClock::time_point kill_at) {
  ExecImage image(spec);
  // The guard reads these only once it has the request below (a system call apart).
  guard::Setup& s = g_setup;
  s.path = spec.path.c_str();
  s.argv = image.argv();
  s.sh_argv = image.sh_argv();
  s.envp = image.envp();
  std::memcpy(&s.child_mask, spec.mask, sizeof s.child_mask);
  s.foreground = ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  s.sigpipe_default = spec.sigpipe_default;
  s.exec_errno = 0;
  m_spawned = true;
  m_kill_at = kill_at;
  send(guard::k_op_spawn, 0, kill_at.time_since_epoch().count());

  // The first report after the start says whether the command started. The wait for it is
  // bounded by the deadline as the run loop's is: a stopped guard (which could neither start the
  // command nor keep the deadline) is continued, and once the kill deadline has passed without
  // its word (the guard is starved, or held up between the start and its report), rlock kills
  // the tree itself, as enforce() does later.
  Message first{};
  ssize_t n;
  std::optional<util::BootClock::time_point> kill_again;
  for (;;) {
    pollfd p{m_reports.get(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(k_spawn_check.count())) == 0) {
      continue_if_stopped();
      auto now = util::BootClock::now();
      if (now >= kill_at + k_grace && (!kill_again || now >= *kill_again)) {
        kill_tree_here();
        m_killed_during_start = true;
        kill_again = now + std::chrono::milliseconds(250);
      }
      continue;
    }
    n = ::read(m_reports.get(), &first, sizeof first);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n != static_cast<ssize_t>(sizeof first) || first.kind != guard::k_report_ready) break;
    m_ready = true;
    m_reach = first.value;
  }
  if (n == static_cast<ssize_t>(sizeof first) && first.kind == guard::k_report_late) {
    // The deadline passed before the command could start (rlock or the guard was held up):
    // nothing was executed. A child that took the terminal before it found out gave it up by
    // exiting: the terminal comes back to rlock's group.
    reap_guard();
    m_done = true;
    if (s.foreground) ::tcsetpgrp(STDIN_FILENO, ::getpgrp());
    return false;
  }
  if (n != static_cast<ssize_t>(sizeof first) || first.kind != guard::k_report_spawned) {
    reap_guard();
    m_done = true;
    int err = n == static_cast<ssize_t>(sizeof first) ? first.value : EIO;
    if (n == static_cast<ssize_t>(sizeof first) && first.time_ns == 1) exec_failed(spec.argv[0], spec.path, err);
    throw Error(exit_code::k_system, fmt::format("cannot start the command: {}", std::strerror(err)));
  }
  m_child = first.value;
  m_cgroup = (first.time_ns & guard::k_reach_cgroup) != 0;
  if (s.foreground) m_took_terminal = ::tcsetpgrp(STDIN_FILENO, m_child) == 0 || ::tcgetpgrp(STDIN_FILENO) == m_child;
  return true;
}

Guard::~Guard() {
  if (m_done) {
    reap_guard();  // after a tree_empty report, the guard may still be removing the cgroup
    return;
  }
  if (!m_spawned) {
    // No command was started (the lock was busy, or the wait ended): the guard just leaves.
    m_requests.reset();
    reap_guard();
    return;
  }
  // Unwound past (an error in rlock): the guard ends the tree when its request pipe closes.
  m_requests.reset();
  pollfd p{m_reports.get(), POLLIN, 0};
  auto until = util::BootClock::now() + std::chrono::seconds(2);
  while (util::poll_until(&p, 1, until) > 0) {
    Message m;
    if (::read(m_reports.get(), &m, sizeof m) <= 0) break;
  }
  reap_guard();
}

void Guard::reap_guard() {
  if (m_pid <= 0) return;
  int status = 0;
  ::waitpid(m_pid, &status, 0);
  m_pid = -1;
}

void Guard::send(int32_t op, int32_t arg, int64_t time_ns) {
  if (m_done) return;
  Message m{op, arg, time_ns};
  // Never blocks: a full pipe (the guard stuck) loses the request, and the deadline it already
  // has stands; rlock's own watch (enforce) covers a guard that does not act.
  [[maybe_unused]] ssize_t n = ::write(m_requests.get(), &m, sizeof m);
}

void Guard::set_deadline(util::BootClock::time_point kill_at) {
  if (!m_stopping) m_kill_at = kill_at;
  send(guard::k_op_deadline, 0, kill_at.time_since_epoch().count());
}

void Guard::stop(int sig, util::BootClock::time_point kill_at) {
  m_kill_at = m_stopping && m_kill_at ? std::min(*m_kill_at, kill_at) : kill_at;
  m_stopping = true;
  send(guard::k_op_stop, sig, kill_at.time_since_epoch().count());
}

void Guard::signal_tree(int sig) { send(guard::k_op_signal, sig, 0); }

std::optional<util::BootClock::time_point> Guard::check_at() const {
  if (!m_spawned || m_done || !m_kill_at) return std::nullopt;
  return *m_kill_at + k_grace;
}

void Guard::kill_tree_here() {
  if (m_child > 0 && !g_setup.child_reaped) ::kill(-m_child, SIGKILL);
  // The guard writes the path once, before it reports ready, and clears it at its end.
  char cgroup[sizeof g_setup.cgroup];
  std::memcpy(cgroup, const_cast<const char*>(g_setup.cgroup), sizeof cgroup);
  cgroup[sizeof cgroup - 1] = '\0';
  // Before the start's report, the guard's ready report says whether the tree has a cgroup.
  bool cgroup_made = m_cgroup || (m_spawned && m_child < 0 && (m_reach & guard::k_reach_cgroup) != 0);
  if (cgroup_made && cgroup[0]) {
    util::Fd kill_file(::open((std::string(cgroup) + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC));
    if (!kill_file.valid() || ::write(kill_file.get(), "1", 1) != 1) {
      util::Fd procs(::open((std::string(cgroup) + "/cgroup.procs").c_str(), O_RDONLY | O_CLOEXEC));
      if (procs.valid()) signal_cgroup(rlock_kernel(), procs.get(), SIGKILL);
    }
  }
  // Bounded: a process that does not die at once (an uninterruptible sleep) is looked at again at
  // the next enforce, while rlock's loop goes on.
  if (m_pid > 0 && proc_is_ours("/proc")) {
    kill_descendants(rlock_kernel(), m_pid, (util::BootClock::now() + k_grace).time_since_epoch().count());
  }
}

bool Guard::enforce() {
  if (m_done || !m_kill_at || util::BootClock::now() < *m_kill_at + k_grace) return false;
  if (m_pid > 0) ::kill(m_pid, SIGCONT);
  kill_tree_here();
  // Once more later if the tree is still not reported gone (the guard reaps and reports).
  m_kill_at = util::BootClock::now() + std::chrono::milliseconds(250);
  return true;
}

bool Guard::continue_if_stopped() {
  if (m_pid <= 0 || m_done) return false;
  siginfo_t info{};
  if (::waitid(P_PID, static_cast<id_t>(m_pid), &info, WSTOPPED | WNOHANG) != 0) return false;
  if (info.si_pid != m_pid || info.si_code != CLD_STOPPED) return false;
  ::kill(m_pid, SIGCONT);
  return true;
}

std::vector<GuardEvent> Guard::take_events() {
  std::vector<GuardEvent> events;
  if (m_done) return events;
  for (;;) {
    Message m;
    ssize_t n = ::read(m_reports.get(), &m, sizeof m);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // EAGAIN: nothing more now
    if (n == 0) {
      // The guard died without saying the tree was over: it was killed. The tree came to rlock
      // (its subreaper): nobody may run on unsupervised. It is killed and reaped until none of it
      // is left, but not past the kill deadline (rlock renews nothing meanwhile): a process that
      // does not die (an uninterruptible sleep) is left behind then, and said.
      kill_tree_here();
      auto now = util::BootClock::now();
      auto until = std::max(m_kill_at.value_or(now), now + k_grace);
      m_left_running = !end_tree(raw_kernel(), ::getpid(), until.time_since_epoch().count());
      if (g_setup.cgroup[0]) remove_cgroup(AT_FDCWD, const_cast<const char*>(g_setup.cgroup));
      m_pid = -1;
      m_done = true;
      events.push_back({GuardEvent::Kind::guard_lost, 0});
      break;
    }
    switch (m.kind) {
      case guard::k_report_ready:
        m_ready = true;
        m_reach = m.value;
        break;
      case guard::k_report_exited: events.push_back({GuardEvent::Kind::child_exited, m.value}); break;
      case guard::k_report_stopped: events.push_back({GuardEvent::Kind::child_stopped, m.value}); break;
      case guard::k_report_continued: events.push_back({GuardEvent::Kind::child_continued, 0}); break;
      case guard::k_report_deadline: events.push_back({GuardEvent::Kind::deadline_kill, 0}); break;
      case guard::k_report_empty:
        // The guard removes the tree's cgroup and exits: it is reaped when the Guard ends
        // (after the release), so that the release need not wait for it.
        m_done = true;
        events.push_back({GuardEvent::Kind::tree_empty, 0});
        return events;
      default: break;
    }
  }
  return events;
}

}  // namespace rlock::proc
