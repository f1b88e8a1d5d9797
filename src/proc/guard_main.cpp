// The guard process: the code that runs between rlock and the command, in rlock's memory.
//
// Everything here follows the rules at the top of proc/raw_syscall.hpp (raw system calls, no
// errno, no allocation, no instrumentation): while rlock runs, the guard shares its memory and
// its thread-local storage, and the child shares them until it execs.
#include "proc/guard_protocol.hpp"

#include "exit_code.hpp"
#include "proc/raw_syscall.hpp"
#include "proc/tree.hpp"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <initializer_list>

namespace rlock::proc::guard {

Setup g_setup;

namespace {

alignas(64) char g_child_stack[16 * 1024];

// The kernel's struct sigaction (as rt_sigaction takes it).
struct KernelSigaction {
  unsigned long handler;
  unsigned long flags;
  unsigned long restorer;
  uint64_t mask;
};

RLOCK_GUARD_CODE long sys_write_message(int fd, int32_t kind, int32_t value, int64_t time_ns) {
  Message m;
  m.kind = kind;
  m.value = value;
  m.time_ns = time_ns;
  return sys::call(SYS_write, fd, reinterpret_cast<long>(&m), sizeof m);
}

// Reports gathered to go out in one write (a few messages: far below PIPE_BUF, so the write is
// whole or nothing, as a single message's).
struct Reports {
  Message batch[8];
  int count = 0;
  RLOCK_GUARD_CODE void add(int fd, int32_t kind, int32_t value) {
    if (count == 8) flush(fd);
    batch[count++] = Message{kind, value, 0};
  }
  RLOCK_GUARD_CODE void flush(int fd) {
    if (count > 0) {
      sys::call(SYS_write, fd, reinterpret_cast<long>(batch), static_cast<long>(sizeof(Message)) * count);
    }
    count = 0;
  }
};

RLOCK_GUARD_CODE __attribute__((noreturn)) void sys_exit(int code) {
  for (;;) sys::call(SYS_exit, code);
}

using sys::put_number;
using sys::put_text;

// CLOCK_BOOTTIME in nanoseconds, as util::BootClock counts it (rlock's deadlines are on it).
RLOCK_GUARD_CODE int64_t boot_ns() {
  struct {
    long sec, nsec;
  } now{0, 0};
  sys::call(SYS_clock_gettime, CLOCK_BOOTTIME, reinterpret_cast<long>(&now));
  return static_cast<int64_t>(now.sec) * 1'000'000'000 + now.nsec;
}

// Whether the command may still be executed: its first kill deadline has not passed. Checked
// by the guard before it starts the child and by the child right before each execve, so that
// a rlock or a guard held up (stopped, frozen, swapped out) never starts a command on a lease
// that may have ended: the next holder may be running.
RLOCK_GUARD_CODE bool too_late(const Setup& s) { return s.start_by > 0 && boot_ns() >= s.start_by; }

// The child's check right before an execve: past the deadline it exits unexecuted, and says so
// (late) to the guard, which it shares memory with.
RLOCK_GUARD_CODE void exit_if_late(Setup& s) {
  if (!too_late(s)) return;
  s.late = true;
  sys_exit(exit_code::k_system);
}

// The cgroup v2 hierarchy's mount point, if it is mounted where systemd puts it.
RLOCK_GUARD_CODE const char* cgroup2_mount() {
  struct {
    long type;
    long rest[15];
  } fs;
  constexpr long k_cgroup2_magic = 0x63677270;
  for (const char* path : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    if (sys::call(SYS_statfs, reinterpret_cast<long>(path), reinterpret_cast<long>(&fs)) == 0 &&
        fs.type == k_cgroup2_magic) {
      return path;
    }
  }
  return nullptr;
}

// Removes the empty cgroups of guards that were killed before they could (rlock.PID where no
// process PID lives), with the cgroups under them (a nested run's, the command's own): at most a
// few a run, each bounded (remove_cgroup). A populated one cannot be removed, and a live guard's
// is never touched. Bounded whatever the parent holds: at most 64 of its rlock.PID entries are
// looked at, so that a start does not cost one check per run alive on the host. Each guard starts
// at another place in the directory (cgroupfs takes any position: it lists by a hash of the
// name), from `seed`, and goes round to its start: with more than 64 runs alive, another run
// looks at the others.
RLOCK_GUARD_CODE void remove_stale_cgroups(const char* parent, unsigned long seed) {
  long dir = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(parent), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return;
  char entries[8192];
  int removed = 0;
  int checked = 0;
  long start = static_cast<long>((seed * 2654435761UL) & 0x7fffffffUL);
  if (sys::call(SYS_lseek, dir, start, SEEK_SET) != start) start = 0;
  for (int pass = start == 0 ? 1 : 0; pass < 2 && removed < 8 && checked < 64; ++pass) {
    if (pass == 1 && start != 0 && sys::call(SYS_lseek, dir, 0, SEEK_SET) != 0) break;
    while (removed < 8 && checked < 64) {
      long n = sys::call(SYS_getdents64, dir, reinterpret_cast<long>(entries), sizeof entries);
      if (n <= 0) break;
      for (long at = 0; at < n && removed < 8 && checked < 64;) {
        long reclen =
            static_cast<unsigned char>(entries[at + 16]) | (static_cast<unsigned char>(entries[at + 17]) << 8);
        if (reclen <= 0) break;
        const char* name = entries + at + 19;
        at += reclen;
        const char* prefix = "rlock.";
        int i = 0;
        while (prefix[i] && name[i] == prefix[i]) ++i;
        if (prefix[i] || name[i] < '0' || name[i] > '9') continue;
        long pid = 0;
        for (; name[i] >= '0' && name[i] <= '9'; ++i) pid = pid * 10 + (name[i] - '0');
        if (name[i] != '\0') continue;
        ++checked;
        if (sys::call(SYS_kill, pid, 0) != -ESRCH) continue;
        if (remove_cgroup(static_cast<int>(dir), name) == 0) ++removed;
      }
    }
  }
  sys::call(SYS_close, dir);
}

// Gives the tree a cgroup of its own under the guard's (cgroup v2, where the guard may create
// one: a delegated subtree, or root): PARENT/rlock.PID. Best effort: without one, the tree is
// followed through /proc.
RLOCK_GUARD_CODE void make_cgroup(Setup& s) {
  s.cgroup[0] = '\0';
  s.cgroup_dir = s.cgroup_list = s.cgroup_kill = -1;
  const char* mount = cgroup2_mount();
  if (!mount) return;
  // This process's cgroup: the "0::PATH" line of /proc/self/cgroup ("/" when it cannot be read).
  char own[384] = "/";
  long fd = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>("/proc/self/cgroup"), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    char text[1024];
    long n = sys::call(SYS_read, fd, reinterpret_cast<long>(text), sizeof text - 1);
    sys::call(SYS_close, fd);
    for (long i = 0; n > 0 && i + 3 < n; ++i) {
      if ((i == 0 || text[i - 1] == '\n') && text[i] == '0' && text[i + 1] == ':' && text[i + 2] == ':') {
        long j = 0;
        for (long k = i + 3; k < n && text[k] != '\n' && j + 1 < static_cast<long>(sizeof own); ++k) own[j++] = text[k];
        own[j] = '\0';
        break;
      }
    }
  }
  char* end = s.cgroup + sizeof s.cgroup - 32;
  char* at = put_text(s.cgroup, end, mount);
  if (!(own[0] == '/' && own[1] == '\0')) at = put_text(at, end, own);
  *at = '\0';
  remove_stale_cgroups(s.cgroup, static_cast<unsigned long>(s.guard));
  at = put_text(at, end, "/rlock.");
  at = put_number(at, end, s.guard);
  *at = '\0';
  if (at >= end) {
    s.cgroup[0] = '\0';
    return;
  }
  long made = sys::call(SYS_mkdirat, AT_FDCWD, reinterpret_cast<long>(s.cgroup), 0755);
  if (made == -EEXIST) {  // left by an earlier guard with this pid that was killed
    remove_cgroup(AT_FDCWD, s.cgroup);
    made = sys::call(SYS_mkdirat, AT_FDCWD, reinterpret_cast<long>(s.cgroup), 0755);
  }
  if (made != 0) {
    s.cgroup[0] = '\0';
    return;
  }
  s.cgroup_dir = static_cast<int>(
      sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(s.cgroup), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  char file[sizeof s.cgroup + 16];
  char* f = put_text(file, file + sizeof file - 1, s.cgroup);
  char* base = f;
  *put_text(base, file + sizeof file - 1, "/cgroup.procs") = '\0';
  s.cgroup_list = static_cast<int>(sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(file), O_RDONLY | O_CLOEXEC));
  *put_text(base, file + sizeof file - 1, "/cgroup.kill") = '\0';
  s.cgroup_kill = static_cast<int>(sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(file), O_WRONLY | O_CLOEXEC));
  if (s.cgroup_dir < 0 || s.cgroup_list < 0) {
    for (int* x : {&s.cgroup_dir, &s.cgroup_list, &s.cgroup_kill}) {
      if (*x >= 0) sys::call(SYS_close, *x);
      *x = -1;
    }
    sys::call(SYS_unlinkat, AT_FDCWD, reinterpret_cast<long>(s.cgroup), AT_REMOVEDIR);
    s.cgroup[0] = '\0';
  }
}

// Removes the tree's cgroup (empty once the tree is gone), and the cgroups made under it: a
// nested run's that was killed, or the command's own.
RLOCK_GUARD_CODE void drop_cgroup(Setup& s) {
  if (!s.cgroup[0]) return;
  for (int* x : {&s.cgroup_dir, &s.cgroup_list, &s.cgroup_kill}) {
    if (*x >= 0) sys::call(SYS_close, *x);
    *x = -1;
  }
  remove_cgroup(AT_FDCWD, s.cgroup);
  s.cgroup[0] = '\0';
}

// The command was not started: its deadline passed first. Nothing was executed.
RLOCK_GUARD_CODE __attribute__((noreturn)) void report_late_and_exit(Setup& s) {
  drop_cgroup(s);
  sys_write_message(s.reports, k_report_late, 0, 0);
  sys_exit(0);
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
  exit_if_late(s);
  long r = sys::call(SYS_execve, reinterpret_cast<long>(s.path), reinterpret_cast<long>(s.argv),
                     reinterpret_cast<long>(s.envp));
  if (r == -ENOEXEC) {
    exit_if_late(s);
    r = sys::call(SYS_execve, reinterpret_cast<long>("/bin/sh"), reinterpret_cast<long>(s.sh_argv),
                  reinterpret_cast<long>(s.envp));
  }
  s.exec_errno = static_cast<int>(-r);
  sys_exit(r == -ENOENT ? exit_code::k_not_found : exit_code::k_not_executable);
}

// clone3 with CLONE_VM|CLONE_VFORK into the tree's cgroup: the child starts inside it, with no
// migration afterwards (a write to cgroup.procs can wait for an RCU grace period, milliseconds).
// The child runs fn on the stack given, then exits. Returns the child's pid or -errno.
RLOCK_GUARD_CODE long clone_into_cgroup(int (*fn)(void*), int cgroup) {
  // Every field set by hand: no memset (libc, instrumented) in the guard.
  struct clone_args args;
  args.flags = CLONE_VM | CLONE_VFORK | CLONE_INTO_CGROUP;
  args.pidfd = 0;
  args.child_tid = 0;
  args.parent_tid = 0;
  args.exit_signal = SIGCHLD;
  args.stack = reinterpret_cast<__u64>(g_child_stack);
  args.stack_size = sizeof g_child_stack;
  args.tls = 0;
  args.set_tid = 0;
  args.set_tid_size = 0;
  args.cgroup = static_cast<__u64>(cgroup);
#if defined(__x86_64__)
  long ret;
  register long function __asm__("r10") = reinterpret_cast<long>(fn);
  __asm__ volatile(
      "syscall\n\t"
      "test %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      // The child, on its own stack (16-byte aligned: the call keeps the ABI's alignment).
      "xor %%ebp, %%ebp\n\t"
      "xor %%edi, %%edi\n\t"
      "call *%%r10\n\t"
      "mov %%eax, %%edi\n\t"
      "mov $60, %%eax\n\t"  // SYS_exit
      "syscall\n\t"
      "hlt\n\t"
      "1:\n\t"
      : "=a"(ret)
      : "a"(SYS_clone3), "D"(&args), "S"(sizeof args), "r"(function)
      : "rcx", "r11", "memory");
  return ret;
#elif defined(__aarch64__)
  register long x8 __asm__("x8") = SYS_clone3;
  register long x0 __asm__("x0") = reinterpret_cast<long>(&args);
  register long x1 __asm__("x1") = sizeof args;
  register long function __asm__("x9") = reinterpret_cast<long>(fn);
  __asm__ volatile(
      "svc 0\n\t"
      "cbnz x0, 1f\n\t"
      "mov x29, xzr\n\t"
      "mov x0, xzr\n\t"
      "blr x9\n\t"
      "mov x8, #93\n\t"  // SYS_exit
      "svc 0\n\t"
      "1:\n\t"
      : "+r"(x0)
      : "r"(x8), "r"(x1), "r"(function)
      : "x30", "memory");
  return x0;
#else
  (void)fn;
  (void)cgroup;
  return -ENOSYS;
#endif
}

// Signals every process of the tree once: the child's group, then the cgroup's processes, or
// the descendants found through /proc, outside that group.
RLOCK_GUARD_CODE void signal_tree(Setup& s, pid_t self, int sig) {
  pid_t group = s.child > 0 && !s.child_reaped ? s.child : 0;
  if (group > 0) sys::call(SYS_kill, -group, sig);
  if (s.cgroup_list >= 0) {
    signal_cgroup(raw_kernel(), s.cgroup_list, sig, group);
  } else if (s.proc_ok) {
    signal_pass(raw_kernel(), self, sig, group);
  }
}

// SIGKILL to every process of the tree: the group, the cgroup in one write, then /proc passes
// with reaping between them until none is left alive.
RLOCK_GUARD_CODE void kill_tree(Setup& s, pid_t self) {
  if (s.child > 0 && !s.child_reaped) sys::call(SYS_kill, -s.child, SIGKILL);
  if (s.cgroup_kill >= 0) {
    sys::call(SYS_write, s.cgroup_kill, reinterpret_cast<long>("1"), 1);
  } else if (s.cgroup_list >= 0) {
    signal_cgroup(raw_kernel(), s.cgroup_list, SIGKILL);
  }
  if (s.proc_ok) kill_descendants(raw_kernel(), self);
}

// Kills every process of the tree, reaps them, tells rlock, and ends the guard.
RLOCK_GUARD_CODE __attribute__((noreturn)) void kill_all_and_exit(Setup& s, pid_t self, int reports, bool rlock_alive) {
  kill_tree(s, self);
  int status = 0;
  // What could not be killed (another user's setuid process) is waited for: its tree is not over.
  while (sys::call(SYS_wait4, -1, reinterpret_cast<long>(&status), 0, 0) > 0) {
  }
  drop_cgroup(s);
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

}  // namespace

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
  int sigchld =
      static_cast<int>(sys::call(SYS_signalfd4, -1, reinterpret_cast<long>(&chld), 8, SFD_NONBLOCK | SFD_CLOEXEC));
  int timer = static_cast<int>(sys::call(SYS_timerfd_create, CLOCK_BOOTTIME, TFD_NONBLOCK | TFD_CLOEXEC));
  if (sigchld < 0 || timer < 0) {
    sys_write_message(s.reports, k_report_failed, sigchld < 0 ? static_cast<int32_t>(-sigchld) : -timer, 0);
    sys_exit(exit_code::k_system);
  }

  // How the tree can be followed, found while rlock takes the lock.
  s.proc_ok = proc_is_ours("/proc");
  make_cgroup(s);
  sys_write_message(s.reports, k_report_ready, (s.proc_ok ? k_reach_proc : 0) | (s.cgroup[0] ? k_reach_cgroup : 0), 0);

  // Wait for the command. A closed pipe means rlock needs no command (the lock was busy) or is
  // gone.
  int64_t first_deadline = 0;
  for (;;) {
    pollfd p{s.requests, POLLIN, 0};
    sys::call(SYS_ppoll, reinterpret_cast<long>(&p), 1, 0, 0, 8);
    Message m;
    long n = sys::call(SYS_read, s.requests, reinterpret_cast<long>(&m), sizeof m);
    if (n == -EAGAIN) continue;
    if (n != static_cast<long>(sizeof m)) {
      drop_cgroup(s);
      sys_exit(0);
    }
    if (m.kind == k_op_spawn) {
      first_deadline = m.time_ns;
      break;
    }
  }
  // The deadline holds before the command exists: a rlock stopped right after the spawn leaves
  // no command running without one.
  int64_t kill_at = first_deadline;
  if (kill_at > 0) arm(timer, kill_at);
  s.start_by = first_deadline;
  s.late = false;
  if (too_late(s)) report_late_and_exit(s);

  long child = s.cgroup[0] ? clone_into_cgroup(launch_child, s.cgroup_dir) : -ENOSYS;
  if (child < 0) {
    // No cgroup after all (clone3 missing, or not allowed there): /proc follows the tree.
    drop_cgroup(s);
    // glibc's clone: it sets errno only when it fails, and rlock waits for our report meanwhile.
    child = ::clone(launch_child, g_child_stack + sizeof g_child_stack, CLONE_VM | CLONE_VFORK | SIGCHLD, nullptr);
    if (child < 0) {
      sys_write_message(s.reports, k_report_failed, errno, 0);
      sys_exit(exit_code::k_system);
    }
  }
  sys::call(SYS_setpgid, child, child);  // may fail after exec (EACCES): the child did it already
  if (s.late) {
    int status = 0;
    sys::call(SYS_wait4, child, reinterpret_cast<long>(&status), 0, 0);
    report_late_and_exit(s);
  }
  if (s.exec_errno != 0) {
    int status = 0;
    sys::call(SYS_wait4, child, reinterpret_cast<long>(&status), 0, 0);
    drop_cgroup(s);
    sys_write_message(s.reports, k_report_failed, s.exec_errno, 1);
    sys_exit(0);
  }
  s.child = static_cast<pid_t>(child);
  sys_write_message(s.reports, k_report_spawned, static_cast<int32_t>(child),
                    (s.proc_ok ? k_reach_proc : 0) | (s.cgroup[0] ? k_reach_cgroup : 0));

  bool stopping = false;
  bool stop_signalled = false;  // the stop signal went out: once per hold, whoever asks again
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
        if (n != static_cast<long>(sizeof m)) kill_all_and_exit(s, self, s.reports, false);
        if (m.kind == k_op_deadline) {
          // A renewal moves the deadline, later as a rule; a stop under way is never put off.
          if (!stopping || m.time_ns < kill_at) kill_at = m.time_ns;
          arm(timer, kill_at);
        } else if (m.kind == k_op_stop) {
          // A second request to stop (a loss after --leftovers kill or a --preempt, say) only
          // brings the SIGKILL forward: the command's handler runs once.
          if (m.value > 0 && !stop_signalled) {
            signal_tree(s, self, m.value);
            stop_signalled = true;
          }
          // The SIGKILL of a stop lands at its time, or at the lease's deadline if that is sooner.
          if (kill_at <= 0 || m.time_ns < kill_at) kill_at = m.time_ns;
          stopping = true;
          arm(timer, kill_at);
        } else if (m.kind == k_op_signal && m.value > 0) {
          signal_tree(s, self, m.value);
        }
      }
    }
    if (fds[2].revents) {
      uint64_t expirations = 0;
      sys::call(SYS_read, timer, reinterpret_cast<long>(&expirations), sizeof expirations);
      kill_tree(s, self);
      // The end of a stop sequence rlock asked for is no news; the lease's deadline passing
      // without one is: rlock did not stop the tree in time.
      if (!stopping) sys_write_message(s.reports, k_report_deadline, 0, 0);
      stopping = true;
    }
    if (fds[1].revents) {
      signalfd_siginfo info[4];
      while (sys::call(SYS_read, sigchld, reinterpret_cast<long>(info), sizeof info) > 0) {
      }
    }
    // Reap what changed, every round (a SIGCHLD may have merged with another). The reports of
    // one round go out in one write: the command's exit and the tree's end (the usual pair)
    // wake rlock once, not twice, and rlock is not woken by the first only to preempt the guard
    // before it can say the second.
    Reports out;
    for (;;) {
      int status = 0;
      long r = sys::call(SYS_wait4, -1, reinterpret_cast<long>(&status), WNOHANG | WUNTRACED | WCONTINUED, 0);
      if (r == -ECHILD) {
        // The tree is gone: said first, so that rlock releases the lock while the cgroup is
        // removed (an rmdir can take a while); rlock reaps the guard after the release.
        out.add(s.reports, k_report_empty, 0);
        out.flush(s.reports);
        drop_cgroup(s);
        sys_exit(0);
      }
      if (r <= 0) break;
      if (r != child) continue;  // an adopted orphan: only its end matters, and ECHILD tells it
      if (WIFSTOPPED(status)) {
        out.add(s.reports, k_report_stopped, WSTOPSIG(status));
      } else if (WIFCONTINUED(status)) {
        out.add(s.reports, k_report_continued, 0);
      } else {
        s.child_reaped = true;
        out.add(s.reports, k_report_exited, status);
      }
    }
    out.flush(s.reports);
  }
}

}  // namespace rlock::proc::guard
