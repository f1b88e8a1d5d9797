#pragma once

#include "proc/child.hpp"
#include "util/clock.hpp"
#include "util/fd.hpp"

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rlock::proc {

// What the guard reports about the child's tree.
struct GuardEvent {
  enum class Kind {
    child_exited,     // value: the child's wait status
    child_stopped,    // value: the signal that stopped it
    child_continued,  //
    deadline_kill,    // the kill deadline passed: the guard sent SIGKILL to the whole tree
    tree_empty,       // every process of the tree has exited; the guard exits too
    guard_lost,       // the guard itself died (killed from outside); rlock killed the tree
  };
  Kind kind;
  int value = 0;
};

// The guard: a small process between rlock and its child, which keeps the child's whole tree
// from outliving the lease whatever happens to rlock.
//
//   rlock (Redis, renewals, signals, output; watches the guard)
//     └─ guard: subreaper of the tree, kill deadline on CLOCK_BOOTTIME, stop sequence
//          └─ child, its children, and whatever they leave behind (orphans come to the guard)
//
// - It holds the kill deadline on a timerfd, armed before the command starts: run moves it on
//   every renewal; if it passes (rlock is blocked, stopped, or cut off from Redis), the guard
//   SIGKILLs every process of the tree without the help of rlock's loop.
// - It reaches the whole tree at any size: the child's process group first (one system call),
//   a cgroup of the tree's own where one can be made (cgroup.kill: every process, wherever it
//   went), else /proc, in passes with reaping between them (proc/tree.hpp).
// - When rlock dies (SIGKILL, the OOM killer), the guard sees its request pipe close and kills
//   the tree at once; a setuid child (whose PR_SET_PDEATHSIG the kernel clears) included.
// - As the subreaper, it knows when the last process of the tree is gone, background jobs and
//   daemonised (setsid, double-forked) ones included.
// - rlock watches the guard in turn, from the command's start on: a stopped guard is continued,
//   and when a kill deadline passes without the guard's word, rlock kills the tree itself.
//
// It shares rlock's memory (clone with CLONE_VM: no fork, whose page copying costs more here
// than the rest of a run) and makes only raw system calls (proc/guard_main.cpp). It reports over
// a pipe; run asks it over another.
class Guard {
public:
  // Starts the guard, which then waits for spawn(): run starts it before taking the lock, so
  // that its start overlaps the round trip to Redis. Throws rlock::Error 71 when it cannot.
  Guard();
  ~Guard();
  Guard(const Guard&) = delete;
  Guard& operator=(const Guard&) = delete;

  // Throws rlock::Error 71, before the lock is taken, when the command's tree could not be
  // followed: /proc is not this PID namespace's (unmounted, or another namespace's) and no
  // cgroup can be made for it. Waits for the guard's start only in that case.
  void check_reach();
  // Starts the command through the guard, with its kill deadline armed before it exists. Returns
  // false, with nothing executed, when kill_at passed before the command could be (rlock or the
  // guard was held up: stopped, frozen, swapped out); the guard checks before it starts the
  // child, and the child right before its execve. Throws rlock::Error 71 when it cannot, and
  // 126/127 when the command cannot be executed.
  [[nodiscard]] bool spawn(const SpawnSpec& spec, util::BootClock::time_point kill_at);

  // Whether rlock killed the tree while it waited for the start's report (the deadline passed
  // with the guard silent): what had started, if anything, is gone.
  bool killed_during_start() const { return m_killed_during_start; }

  // The child's pid, which is also its process group.
  pid_t child() const { return m_child; }
  pid_t pid() const { return m_pid; }
  // Whether the child's group took the terminal's foreground (rlock was in the foreground).
  bool took_terminal() const { return m_took_terminal; }
  // Whether the tree has a cgroup of its own.
  bool in_cgroup() const { return m_cgroup; }

  // Readable when the guard has something to report.
  int fd() const { return m_reports.get(); }
  // The reports waiting now; does not block. After tree_empty the tree is gone and the guard
  // removes its cgroup and exits (reaped when the Guard ends); after guard_lost it is gone.
  std::vector<GuardEvent> take_events();

  // SIGKILL for the whole tree at kill_at (CLOCK_BOOTTIME) unless moved again; never earlier
  // than a stop already under way asked for.
  void set_deadline(util::BootClock::time_point kill_at);
  // The stop sequence: sig (0: none) to every process of the tree now, SIGKILL to all at kill_at.
  void stop(int sig, util::BootClock::time_point kill_at);
  // sig to every process of the tree (SIGCONT after a job-control stop, say).
  void signal_tree(int sig);
  // Whether the tree is gone (tree_empty or guard_lost was reported).
  bool done() const { return m_done; }
  // After guard_lost: whether processes of the tree were still alive at the kill deadline (they
  // did not die of SIGKILL in time), when rlock stopped waiting for them.
  bool left_running() const { return m_left_running; }

  // When rlock must check that the guard acted: a little after the kill deadline.
  std::optional<util::BootClock::time_point> check_at() const;
  // At check_at(): the guard did not report the tree gone (it is stopped, or starved): rlock
  // continues it and kills the tree itself. Returns true when it had to.
  bool enforce();
  // After a SIGCHLD: continues the guard if it was stopped; true when it was.
  bool continue_if_stopped();

  // How long after the kill deadline rlock steps in.
  static constexpr std::chrono::milliseconds k_grace{100};
  // How often spawn(), waiting for the start's report, checks that the guard is not stopped and
  // the deadline not passed.
  static constexpr std::chrono::milliseconds k_spawn_check{50};

private:
  void send(int32_t op, int32_t arg, int64_t time_ns);
  void reap_guard();
  void kill_tree_here();

  pid_t m_pid = -1;
  pid_t m_child = -1;
  bool m_took_terminal = false;
  bool m_done = false;
  bool m_spawned = false;
  bool m_ready = false;
  int m_reach = 0;  // guard::k_reach_* bits, once m_ready
  bool m_cgroup = false;
  bool m_stopping = false;
  bool m_killed_during_start = false;
  bool m_left_running = false;
  std::optional<util::BootClock::time_point> m_kill_at;
  util::Fd m_requests;  // rlock's end: closing it (or dying) makes the guard kill the tree
  util::Fd m_reports;
};

}  // namespace rlock::proc
