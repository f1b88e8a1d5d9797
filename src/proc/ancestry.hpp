#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace rlock::proc {

// This boot's id (/proc/sys/kernel/random/boot_id): with a pid and its start time, it names one
// process for the life of the system, wherever the pid is read.
const std::string& boot_id();

// When process pid started, in clock ticks since boot (field 22 of /proc/PID/stat); nullopt when
// it does not exist.
std::optional<uint64_t> start_time(pid_t pid);

// The parent of pid (0 when unknown).
pid_t parent_of(pid_t pid);

// The process that called this one: its parent, or, when the parent is a forked copy of its own
// parent (the subshell a shell forks for $(...), a pipeline or a redirection, which runs the
// command and ends with it), the shell above it: the script's shell.
pid_t calling_process();

// Whether pid is alive and not a zombie.
bool process_alive(pid_t pid);

// Whether this process descends from the process (pid, start time), following parent links up
// from here. A process that left the tree (started from elsewhere with a copied environment) does
// not; one whose parent died was handed to the subreaper, which stays in the tree.
bool descends_from(pid_t pid, uint64_t start);

// A process as ps shows it: its pid and its command line (arguments joined by spaces, or its
// name in brackets when it has none), as the process set it: not to be shown unescaped.
struct Process {
  pid_t pid = 0;
  std::string command;
};
// The descendants of root (its children, theirs...), from /proc, lowest pid first: at most max of
// them, and their number in all in total. None when /proc cannot be read.
std::vector<Process> descendants(pid_t root, size_t max, size_t& total);

}  // namespace rlock::proc
