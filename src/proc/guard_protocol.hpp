#pragma once

// What rlock (proc/guard.cpp) and the guard process (proc/guard_main.cpp) share: the messages
// on their two pipes, and the set-up rlock fills in before the guard reads it. The guard shares
// rlock's memory (CLONE_VM), so Setup is a static both see; its fields are written by one side
// and read by the other only after a message on a pipe says they are ready.

#include <sys/types.h>

#include <cstdint>

namespace rlock::proc::guard {

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
constexpr int32_t k_op_spawn = 4;     // start the command (Setup is filled); time_ns: its first deadline

constexpr int32_t k_report_spawned = 1;  // value: the child's pid
constexpr int32_t k_report_failed = 2;   // value: errno of the clone or exec; time_ns 1: exec failed
constexpr int32_t k_report_exited = 3;   // value: wait status
constexpr int32_t k_report_stopped = 4;  // value: signal
constexpr int32_t k_report_continued = 5;
constexpr int32_t k_report_deadline = 6;
constexpr int32_t k_report_empty = 7;
constexpr int32_t k_report_ready = 8;  // value: k_reach_* bits (how the tree can be followed)
constexpr int32_t k_report_late = 9;   // the first deadline passed before the command could start: nothing ran

constexpr int32_t k_reach_proc = 1;    // /proc is this PID namespace's
constexpr int32_t k_reach_cgroup = 2;  // the tree gets a cgroup of its own

// Everything the guard and the child's start need, filled by rlock before the clone (and for
// the command, before k_op_spawn); the guard's findings, filled before k_report_ready.
struct Setup {
  // rlock's part.
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

  // The guard's part.
  pid_t guard;
  bool proc_ok;                // /proc is this PID namespace's
  char cgroup[512];            // the tree's cgroup directory ("" when there is none)
  int cgroup_dir;              // the directory, open (clone3 starts the child in it)
  int cgroup_list;             // its cgroup.procs, open for reading (to signal every process)
  int cgroup_kill;             // its cgroup.kill (-1 before Linux 5.14)
  volatile pid_t child;        // the command, once started
  volatile bool child_reaped;  // its pid (and process group) may be reused: signal the group no more
  int64_t start_by;            // the first kill deadline (CLOCK_BOOTTIME, ns): nothing is executed at or after it
  int exec_errno;              // written by the child when exec fails
  volatile bool late;          // written by the child when start_by passed before its exec
  int cgroup_errno;            // written by the child when it could not enter the cgroup
};

extern Setup g_setup;

// The guard process's main function (clone's fn): runs until the tree is gone.
int guard_main(void*);

}  // namespace rlock::proc::guard
