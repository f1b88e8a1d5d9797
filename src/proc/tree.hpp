#pragma once

// Finding and signalling every process of a command's tree, with raw system calls only, so that
// the guard (which shares rlock's memory while both run) can do it; rlock uses the same code when
// it must act in the guard's place. The rules of that code are at the top of proc/raw.hpp.
//
// A tree is followed in one of two ways:
//  - a cgroup of its own (cgroup v2, where one is delegated): every process of the tree is in it,
//    wherever it went (another session, another group); cgroup.procs lists them and cgroup.kill
//    kills them all in one write;
//  - /proc, from the root's children down (/proc/PID/task/TID/children), when /proc is this PID
//    namespace's (its pids are the ones kill(2) takes).
// The child's process group is signalled first in either case: one system call for the usual tree.

#include <sys/types.h>

#include <cstdint>

namespace rlock::proc {

// What the tree code needs of the kernel: raw system calls in rlock and the guard, fakes in the
// unit tests (which give a /proc of their own and record the signals).
struct Kernel {
  const char* proc = "/proc";        // where /proc is
  long (*kill)(long pid, long sig);  // kill(2): 0, or -errno
  long (*reap)();                    // reaps one exited child: its pid, 0 when none is ready
                                     // (-ECHILD when the caller has no child left)
  long (*pgid)(long pid) = nullptr;  // getpgid(2): the process group, or -errno (none: unknown)
  long (*now)() = nullptr;           // CLOCK_BOOTTIME in ns, for deadlines (none: no deadline)
};

// The guard's kernel: raw system calls on /proc.
const Kernel& raw_kernel();

// How far one pass looks: processes found alive per pass. A bigger tree takes more passes.
inline constexpr long k_pass_capacity = 2048;

// One pass over the live descendants of root (found through kernel.proc): sig to each, but to
// those in process group `signalled` (when not 0), which the caller signalled as a group just
// before: each process gets sig once. Returns how many got it.
long signal_pass(const Kernel& kernel, pid_t root, int sig, pid_t signalled = 0);

// SIGKILL to every descendant of root, in passes until a pass finds none alive, reaping between
// passes when root is the caller (a subreaper reaps the orphans it was given): no cap on the
// size of the tree. With until_ns (CLOCK_BOOTTIME, kernel.now), no pass starts after it: a
// process that does not die (an uninterruptible sleep) ends the passes there. Returns the number
// of processes killed.
long kill_descendants(const Kernel& kernel, pid_t root, long until_ns = 0);

// For the caller (root) when its children are the tree's, given to it as their subreaper: SIGKILL
// to every descendant and reaping of every child, until it has no child left or until_ns passes
// (CLOCK_BOOTTIME, kernel.now). Whether no child is left.
bool end_tree(const Kernel& kernel, pid_t root, long until_ns);

// sig to every process listed in a cgroup.procs file (fd, read from its start), but to those in
// process group `signalled` (when not 0), as signal_pass. Returns how many.
long signal_cgroup(const Kernel& kernel, int procs_fd, int sig, pid_t signalled = 0);

// Whether /proc is this PID namespace's: /proc/self names this process's pid.
bool proc_is_ours(const char* proc);

// How far remove_cgroup goes below the cgroup it removes: levels, and directories in all.
inline constexpr int k_cgroup_depth = 8;
inline constexpr long k_cgroup_count = 64;

// Removes the cgroup directory `name` (relative to the directory open as `at`, or AT_FDCWD) and,
// when it has cgroups of its own (a nested run's, or one the command made), those first,
// depth-first: at most k_cgroup_depth levels below it and k_cgroup_count directories in all. A
// cgroup with processes in it stays, and so do those above it. Returns 0 when `name` is gone,
// else -errno.
long remove_cgroup(int at, const char* name);

}  // namespace rlock::proc
