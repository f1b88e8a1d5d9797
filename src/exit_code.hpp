#pragma once

// The exit codes of rlock(1), EXIT STATUS, named once.
namespace rlock::exit_code {

inline constexpr int k_ok = 0;
// check, in the Nagios plugin convention (0 is OK): every failure of check is UNKNOWN.
inline constexpr int k_warning = 1;
inline constexpr int k_critical = 2;
inline constexpr int k_unknown = 3;
inline constexpr int k_not_held = 1;      // status: free; release/extend: token no longer owns KEY
inline constexpr int k_usage = 64;        // bad command line
inline constexpr int k_data = 65;         // unreadable or malformed token file, foreign data at a lock's name
inline constexpr int k_unavailable = 69;  // Redis cannot be reached or timed out
inline constexpr int k_internal = 70;     // a bug or an unexpected server reply
inline constexpr int k_system = 71;       // fork, exec set-up, file I/O
inline constexpr int k_busy = 75;         // lock held by another (-E overrides)
inline constexpr int k_lost = 76;         // run: lock lost, child stopped (--lost-exit-code overrides)
inline constexpr int k_permission = 77;   // AUTH or ACL refused
inline constexpr int k_config = 78;       // bad URL, bad config file
// Right after sysexits.h's 64-78, which rlock uses for its errors, and below the shell's 126-165.
inline constexpr int k_superseded = 79;  // a newer --supersede request replaced this one (--superseded-exit-code)
inline constexpr int k_preempted = 80;   // run: a --preempt request stopped the command (--preempted-exit-code)
inline constexpr int k_not_executable = 126;
inline constexpr int k_not_found = 127;
inline constexpr int k_signal_base = 128;  // the child died of signal N: 128 + N

}  // namespace rlock::exit_code
