#include "guard.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "proc/raw_syscall.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <fmt/core.h>

#include <cerrno>
#include <cstring>

// The code that runs in the guard (and in the child before it execs) shares rlock's memory while
// rlock runs: it must not touch errno or any other thread-local or locked state of libc, nor
// allocate, nor be instrumented by sanitizers (whose runtime keeps per-thread state).
#define RLOCK_GUARD_CODE __attribute__((no_sanitize("address", "undefined"), noinline))

namespace rlock::proc {

namespace {

// Requests (rlock -> guard) and reports (guard -> rlock): one fixed-size message each, written
// atomically to a pipe.
struct Message {
  int32_t kind;
  int32_t value;
  int64_t time_ns;
};

constexpr int32_t k_op_deadline = 1;  // time_ns: SIGKILL the tree then
constexpr int32_t k_op_stop = 2;      // value: signal now; time_ns: SIGKILL then
constexpr int32_t k_op_signal = 3;    // value: signal to the tree
constexpr int32_t k_op_spawn = 4;     // start the command (g_setup is filled)

constexpr int32_t k_report_spawned = 1;  // value: the child's pid
constexpr int32_t k_report_failed = 2;   // value: errno of the clone or exec
constexpr int32_t k_report_exited = 3;   // value: wait status
constexpr int32_t k_report_stopped = 4;  // value: signal
constexpr int32_t k_report_continued = 5;
constexpr int32_t k_report_deadline = 6;
constexpr int32_t k_report_empty = 7;

// The kernel's struct sigaction (as rt_sigaction takes it).
struct KernelSigaction {
  unsigned long handler;
  unsigned long flags;
  unsigned long restorer;
  uint64_t mask;
};

// Everything the guard and the child's start need, filled by rlock before the clone.
struct Setup {
  const char* path;
  char* const* argv;
  char* const* sh_argv;  // for a file without #!: run it with /bin/sh, as execvp does
  char* const* envp;
  uint64_t child_mask;   // the signal mask the command starts with
  bool foreground;       // hand the terminal to the child's group
  bool sigpipe_default;  // the caller had SIGPIPE at its default action: restore it for the child
  int requests;          // the guard's ends of the pipes
  int reports;
  int rlock_requests;  // rlock's ends, closed in the guard (else the guard would keep its own
  int rlock_reports;   // request pipe open and never see rlock die)
  pid_t guard;
  int exec_errno;  // written by the child when exec fails
};

Setup g_setup;
alignas(64) char g_guard_stack[64 * 1024];
alignas(64) char g_child_stack[16 * 1024];

RLOCK_GUARD_CODE long sys_write_message(int fd, int32_t kind, int32_t value, int64_t time_ns) {
  Message m;
  m.kind = kind;
  m.value = value;
  m.time_ns = time_ns;
  return sys::call(SYS_write, fd, reinterpret_cast<long>(&m), sizeof m);
}

RLOCK_GUARD_CODE __attribute__((noreturn)) void sys_exit(int code) {
  for (;;) sys::call(SYS_exit, code);
}

// Appends the decimal digits of value to out.
RLOCK_GUARD_CODE char* put_number(char* out, long value) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  while (n > 0) *out++ = digits[--n];
  return out;
}

RLOCK_GUARD_CODE char* put_text(char* out, const char* text) {
  while (*text) *out++ = *text++;
  return out;
}

// Whether process pid is alive and not a zombie (a zombie can be signalled, but is dead).
RLOCK_GUARD_CODE bool alive(long pid) {
  char path[64];
  char* end = put_text(path, "/proc/");
  end = put_number(end, pid);
  end = put_text(end, "/stat");
  *end = '\0';
  long fd = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[512];
  long n = sys::call(SYS_read, fd, reinterpret_cast<long>(buffer), sizeof buffer);
  sys::call(SYS_close, fd);
  if (n <= 0) return false;
  // "pid (comm) S ...": the state follows the last ')'; comm may hold ')' itself.
  long close = -1;
  for (long i = 0; i < n; ++i) {
    if (buffer[i] == ')') close = i;
  }
  if (close < 0 || close + 2 >= n) return false;
  char state = buffer[close + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

// Appends the children of every thread of pid to pids (up to capacity); returns the new count.
RLOCK_GUARD_CODE long add_children(long pid, long* pids, long count, long capacity) {
  char path[64];
  char* end = put_text(path, "/proc/");
  end = put_number(end, pid);
  char* task_end = put_text(end, "/task");
  *task_end = '\0';
  long dir = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return count;
  char entries[1024];
  for (;;) {
    long n = sys::call(SYS_getdents64, dir, reinterpret_cast<long>(entries), sizeof entries);
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[]
      // d_reclen, little-endian on the architectures with raw system calls (a fork elsewhere).
      long reclen = static_cast<unsigned char>(entries[at + 16]) | (static_cast<unsigned char>(entries[at + 17]) << 8);
      if (reclen <= 0) break;
      const char* name = entries + at + 19;
      at += reclen;
      if (name[0] < '0' || name[0] > '9') continue;
      char file[96];
      char* f = put_text(file, path);
      *f++ = '/';
      f = put_text(f, name);
      f = put_text(f, "/children");
      *f = '\0';
      long fd = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(file), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char list[4096];
      long value = -1;
      for (;;) {
        long got = sys::call(SYS_read, fd, reinterpret_cast<long>(list), sizeof list);
        if (got <= 0) break;
        for (long i = 0; i < got; ++i) {
          char c = list[i];
          if (c >= '0' && c <= '9') {
            value = (value < 0 ? 0 : value * 10) + (c - '0');
          } else if (value >= 0) {
            if (count < capacity) pids[count++] = value;
            value = -1;
          }
        }
      }
      if (value >= 0 && count < capacity) pids[count++] = value;
      sys::call(SYS_close, fd);
    }
  }
  sys::call(SYS_close, dir);
  return count;
}

// One pass over root's descendants: sig to each live one; returns how many got it.
RLOCK_GUARD_CODE int signal_pass(pid_t root, int sig) {
  long pids[1024];
  long count = add_children(root, pids, 0, 1024);
  for (long i = 0; i < count; ++i) count = add_children(pids[i], pids, count, 1024);
  int signalled = 0;
  for (long i = 0; i < count; ++i) {
    if (!alive(pids[i])) continue;
    if (sys::call(SYS_kill, pids[i], sig) == 0) ++signalled;
  }
  return signalled;
}

// The child, started by the guard with CLONE_VM|CLONE_VFORK: it shares the memory until it execs.
RLOCK_GUARD_CODE int launch_child(void*) {
  Setup& s = g_setup;
  sys::call(SYS_setpgid, 0, 0);
  if (s.foreground) {
    int self = static_cast<int>(sys::call(SYS_getpid));
    sys::call(SYS_ioctl, STDIN_FILENO, TIOCSPGRP, reinterpret_cast<long>(&self));  // SIGTTOU is blocked here
  }
  sys::call(SYS_prctl, PR_SET_PDEATHSIG, SIGKILL);
  if (sys::call(SYS_getppid) != s.guard) sys_exit(exit_code::k_system);  // the guard died before prctl
  if (s.sigpipe_default) {
    KernelSigaction dfl{0, 0, 0, 0};
    sys::call(SYS_rt_sigaction, SIGPIPE, reinterpret_cast<long>(&dfl), 0, 8);
  }
  sys::call(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&s.child_mask), 0, 8);
  long r = sys::call(SYS_execve, reinterpret_cast<long>(s.path), reinterpret_cast<long>(s.argv),
                     reinterpret_cast<long>(s.envp));
  if (r == -ENOEXEC) {
    r = sys::call(SYS_execve, reinterpret_cast<long>("/bin/sh"), reinterpret_cast<long>(s.sh_argv),
                  reinterpret_cast<long>(s.envp));
  }
  s.exec_errno = static_cast<int>(-r);
  sys_exit(r == -ENOENT ? exit_code::k_not_found : exit_code::k_not_executable);
}

// Kills every process of the tree, reaps them, tells rlock, and ends the guard.
RLOCK_GUARD_CODE __attribute__((noreturn)) void kill_all_and_exit(pid_t self, int reports, bool rlock_alive) {
  for (int round = 0; round < 10000 && signal_pass(self, SIGKILL) > 0; ++round) {
    int status = 0;
    while (sys::call(SYS_wait4, -1, reinterpret_cast<long>(&status), WNOHANG, 0) > 0) {
    }
    sys::call(SYS_sched_yield);
  }
  int status = 0;
  // What could not be killed (another user's setuid process) is waited for: its tree is not over.
  while (sys::call(SYS_wait4, -1, reinterpret_cast<long>(&status), 0, 0) > 0) {
  }
  if (rlock_alive) sys_write_message(reports, k_report_empty, 0, 0);
  sys_exit(0);
}

RLOCK_GUARD_CODE void arm(int timer, int64_t at_ns) {
  struct {
    long interval_sec, interval_nsec, value_sec, value_nsec;
  } spec{0, 0, at_ns / 1'000'000'000, at_ns % 1'000'000'000};
  if (spec.value_sec == 0 && spec.value_nsec == 0) spec.value_nsec = 1;
  sys::call(SYS_timerfd_settime, timer, TFD_TIMER_ABSTIME, reinterpret_cast<long>(&spec), 0);
}

RLOCK_GUARD_CODE int guard_main(void*) {
  Setup& s = g_setup;
  uint64_t all = ~uint64_t(0);
  sys::call(SYS_rt_sigprocmask, SIG_SETMASK, reinterpret_cast<long>(&all), 0, 8);
  sys::call(SYS_close, s.rlock_requests);
  sys::call(SYS_close, s.rlock_reports);
  pid_t self = static_cast<pid_t>(sys::call(SYS_getpid));
  s.guard = self;
  sys::call(SYS_prctl, PR_SET_CHILD_SUBREAPER, 1);
  sys::call(SYS_prctl, PR_SET_NAME, reinterpret_cast<long>("rlock guard"));
  // A group of its own: a SIGKILL to rlock's group (kill -9 %1) leaves it to clean up.
  sys::call(SYS_setpgid, 0, 0);
  uint64_t chld = uint64_t(1) << (SIGCHLD - 1);
  int sigchld = static_cast<int>(sys::call(SYS_signalfd4, -1, reinterpret_cast<long>(&chld), 8,
                                           SFD_NONBLOCK | SFD_CLOEXEC));
  int timer = static_cast<int>(sys::call(SYS_timerfd_create, CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC));
  if (sigchld < 0 || timer < 0) {
    sys_write_message(s.reports, k_report_failed, sigchld < 0 ? static_cast<int32_t>(-sigchld) : -timer, 0);
    sys_exit(exit_code::k_system);
  }

  // Ready: wait for the command (the lock is being taken meanwhile). A closed pipe means rlock
  // needs no command (the lock was busy) or is gone.
  for (;;) {
    pollfd p{s.requests, POLLIN, 0};
    sys::call(SYS_ppoll, reinterpret_cast<long>(&p), 1, 0, 0, 8);
    Message m;
    long n = sys::call(SYS_read, s.requests, reinterpret_cast<long>(&m), sizeof m);
    if (n == -EAGAIN) continue;
    if (n != static_cast<long>(sizeof m)) sys_exit(0);
    if (m.kind == k_op_spawn) break;
  }

  // glibc's clone: it sets errno only when it fails, and rlock waits for our report meanwhile.
  pid_t child = ::clone(launch_child, g_child_stack + sizeof g_child_stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                        nullptr);
  if (child < 0) {
    sys_write_message(s.reports, k_report_failed, errno, 0);
    sys_exit(exit_code::k_system);
  }
  sys::call(SYS_setpgid, child, child);  // may fail after exec (EACCES): the child did it already
  if (s.exec_errno != 0) {
    int status = 0;
    sys::call(SYS_wait4, child, reinterpret_cast<long>(&status), 0, 0);
    sys_write_message(s.reports, k_report_failed, s.exec_errno, 1);
    sys_exit(0);
  }
  sys_write_message(s.reports, k_report_spawned, child, 0);

  bool stopping = false;
  int64_t kill_at = -1;
  pollfd fds[3] = {{s.requests, POLLIN, 0}, {sigchld, POLLIN, 0}, {timer, POLLIN, 0}};
  for (;;) {
    fds[0].revents = fds[1].revents = fds[2].revents = 0;
    sys::call(SYS_ppoll, reinterpret_cast<long>(fds), 3, 0, 0, 8);
    if (fds[0].revents) {
      for (;;) {
        Message m;
        long n = sys::call(SYS_read, s.requests, reinterpret_cast<long>(&m), sizeof m);
        if (n == -EAGAIN) break;
        // rlock is gone (killed, crashed) or gave up on us: nobody renews the lease any more.
        if (n != static_cast<long>(sizeof m)) kill_all_and_exit(self, s.reports, false);
        if (m.kind == k_op_deadline) {
          // A renewal moves the deadline, later as a rule; a stop under way is never put off.
          if (!stopping || m.time_ns < kill_at) kill_at = m.time_ns;
          arm(timer, kill_at);
        } else if (m.kind == k_op_stop) {
          if (m.value > 0) signal_pass(self, m.value);
          // The SIGKILL of a stop lands at its time, or at the lease's deadline if that is sooner.
          if (kill_at < 0 || m.time_ns < kill_at) kill_at = m.time_ns;
          stopping = true;
          arm(timer, kill_at);
        } else if (m.kind == k_op_signal && m.value > 0) {
          signal_pass(self, m.value);
        }
      }
    }
    if (fds[2].revents) {
      uint64_t expirations = 0;
      sys::call(SYS_read, timer, reinterpret_cast<long>(&expirations), sizeof expirations);
      for (int round = 0; round < 10000 && signal_pass(self, SIGKILL) > 0; ++round) sys::call(SYS_sched_yield);
      // The end of a stop sequence rlock asked for is no news; the lease's deadline passing
      // without one is: rlock did not stop the tree in time.
      if (!stopping) sys_write_message(s.reports, k_report_deadline, 0, 0);
    }
    if (fds[1].revents) {
      signalfd_siginfo info[4];
      while (sys::call(SYS_read, sigchld, reinterpret_cast<long>(info), sizeof info) > 0) {
      }
    }
    // Reap what changed, every round (a SIGCHLD may have merged with another).
    for (;;) {
      int status = 0;
      long r = sys::call(SYS_wait4, -1, reinterpret_cast<long>(&status), WNOHANG | WUNTRACED | WCONTINUED, 0);
      if (r == -ECHILD) {
        sys_write_message(s.reports, k_report_empty, 0, 0);
        sys_exit(0);
      }
      if (r <= 0) break;
      if (r != child) continue;  // an adopted orphan: only its end matters, and ECHILD tells it
      if (WIFSTOPPED(status)) {
        sys_write_message(s.reports, k_report_stopped, WSTOPSIG(status), 0);
      } else if (WIFCONTINUED(status)) {
        sys_write_message(s.reports, k_report_continued, 0, 0);
      } else {
        sys_write_message(s.reports, k_report_exited, status, 0);
      }
    }
  }
}

}  // namespace

int signal_descendants(pid_t root, int sig) {
  int total = signal_pass(root, sig);
  if (sig != SIGKILL) return total;
  for (int round = 0, n = total; round < 10000 && n > 0; ++round) {
    ::sched_yield();
    n = signal_pass(root, sig);
    total += n;
  }
  return total;
}

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

  Setup& s = g_setup;
  s = Setup{};
  s.requests = requests[0];
  s.reports = reports[1];
  s.rlock_requests = requests[1];
  s.rlock_reports = reports[0];
  s.guard = -1;

  // If the guard dies, the tree comes to rlock, which then kills it (take_events).
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
#if RLOCK_RAW_SYSCALLS
  m_pid = ::clone(guard_main, g_guard_stack + sizeof g_guard_stack, CLONE_VM | SIGCHLD, nullptr);
#else
  m_pid = ::fork();
  if (m_pid == 0) guard_main(nullptr);
#endif
  if (m_pid < 0) throw Error(exit_code::k_system, fmt::format("cannot start the command: {}", std::strerror(errno)));
  guard_requests.reset();
  guard_reports.reset();
}

void Guard::spawn(const SpawnSpec& spec) {
  ExecImage image(spec);
  // The guard reads these only once it has the request below (a system call apart).
  Setup& s = g_setup;
  s.path = spec.path.c_str();
  s.argv = image.argv();
  s.sh_argv = image.sh_argv();
  s.envp = image.envp();
  std::memcpy(&s.child_mask, spec.mask, sizeof s.child_mask);
  s.foreground = ::isatty(STDIN_FILENO) && ::tcgetpgrp(STDIN_FILENO) == ::getpgrp();
  s.sigpipe_default = spec.sigpipe_default;
  s.exec_errno = 0;
  m_spawned = true;
  send(k_op_spawn, 0, 0);

  // The first report says whether the command started. Waiting in a blocking read keeps rlock
  // off errno while the guard and the child may use it.
  Message first{};
  ssize_t n;
  do {
    pollfd p{m_reports.get(), POLLIN, 0};
    ::poll(&p, 1, -1);
    n = ::read(m_reports.get(), &first, sizeof first);
  } while (n < 0 && (errno == EINTR || errno == EAGAIN));
  if (n != static_cast<ssize_t>(sizeof first) || first.kind != k_report_spawned) {
    reap_guard();
    m_done = true;
    int err = n == static_cast<ssize_t>(sizeof first) ? first.value : EIO;
    if (n == static_cast<ssize_t>(sizeof first) && first.time_ns == 1) exec_failed(spec.argv[0], spec.path, err);
    throw Error(exit_code::k_system, fmt::format("cannot start the command: {}", std::strerror(err)));
  }
  m_child = first.value;
  if (s.foreground) m_took_terminal = ::tcsetpgrp(STDIN_FILENO, m_child) == 0 || ::tcgetpgrp(STDIN_FILENO) == m_child;
}

Guard::~Guard() {
  if (m_done) return;
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
  // has stands.
  [[maybe_unused]] ssize_t n = ::write(m_requests.get(), &m, sizeof m);
}

void Guard::set_deadline(util::BootClock::time_point kill_at) {
  send(k_op_deadline, 0, kill_at.time_since_epoch().count());
}

void Guard::stop(int sig, util::BootClock::time_point kill_at) {
  send(k_op_stop, sig, kill_at.time_since_epoch().count());
}

void Guard::signal_tree(int sig) { send(k_op_signal, sig, 0); }

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
      // (its subreaper): nobody may run on unsupervised.
      signal_descendants(::getpid(), SIGKILL);
      int status = 0;
      while (::waitpid(-1, &status, 0) > 0) {
      }
      m_pid = -1;
      m_done = true;
      events.push_back({GuardEvent::Kind::guard_lost, 0});
      break;
    }
    switch (m.kind) {
      case k_report_exited: events.push_back({GuardEvent::Kind::child_exited, m.value}); break;
      case k_report_stopped: events.push_back({GuardEvent::Kind::child_stopped, m.value}); break;
      case k_report_continued: events.push_back({GuardEvent::Kind::child_continued, 0}); break;
      case k_report_deadline: events.push_back({GuardEvent::Kind::deadline_kill, 0}); break;
      case k_report_empty:
        reap_guard();
        m_done = true;
        events.push_back({GuardEvent::Kind::tree_empty, 0});
        return events;
      default: break;
    }
  }
  return events;
}

}  // namespace rlock::proc
