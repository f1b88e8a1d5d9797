#pragma once

#include "lock/backend.hpp"
#include "util/duration.hpp"

#include <sys/types.h>

#include <csignal>
#include <optional>
#include <string>
#include <vector>

namespace rlock::commands {

// Where the locks live, common to every command.
using ConnectOptions = lock::Servers;

// How to take a lock (run, acquire).
struct TakeOptions {
  std::string key;
  util::Millis ttl{30'000};
  std::optional<util::Millis> wait;  // nullopt: wait forever
  int conflict_exit_code = 75;
  int wait_replicas = 0;  // WAIT for this many replicas after acquiring
  util::Millis wait_timeout{1'000};
  bool strict = false;       // refuse a server that may evict locks, instead of warning
  bool shared = false;       // --shared
  int limit = 1;             // --limit N: a semaphore of N holders when N > 1
  util::Millis min_hold{0};  // --min-hold: the hold lingers until this long after it was taken
  bool supersede = false;    // --supersede: newest wins among the waiters that give it
  bool preempt = false;      // --preempt: stop a --preemptible holder and be served next
};

// What run does with the processes its command leaves running when it exits.
enum class Leftovers {
  wait,  // keep the lock (renewing it) until every one has exited, as flock(1) keeps its lock
  kill,  // end them (--signal, then SIGKILL after --kill-after), then release
};

struct RunOptions {
  ConnectOptions connect;
  TakeOptions take;
  std::vector<std::string> argv;  // the child: argv after --, or {"/bin/sh", "-c", "--", S}
  std::string display_command;    // the command as shown by status
  int stop_signal = SIGTERM;
  util::Millis kill_after{5'000};
  int lost_exit_code = 76;
  std::optional<util::Millis> max_hold;
  Leftovers leftovers = Leftovers::wait;
  bool preemptible = false;  // --preemptible: a --preempt request may stop this hold
};

struct AcquireOptions {
  ConnectOptions connect;
  TakeOptions take;
  std::string token_file;  // empty: print the token
  bool json = false;
  bool stdout_closed = false;  // the caller closed stdout: nowhere to print the token
  // --keepalive: a keeper renews the lock while the watched process lives, and releases it then.
  bool keepalive = false;
  std::optional<pid_t> watch_pid;        // --pid; default: rlock's parent
  int signal = 0;                        // --signal: to the watched process on loss (0: none)
  std::optional<util::Millis> max_hold;  // --max-hold
  std::string keeper_log;                // --keeper-log: a file, or "syslog:"
};

// Where release and extend find the token: never argv.
struct TokenSource {
  std::string file;                 // --token-file, wins when set
  std::string env = "RLOCK_TOKEN";  // --token-env
};

struct ReleaseOptions {
  ConnectOptions connect;
  std::string key;
  TokenSource token;
  bool force = false;
};

struct ExtendOptions {
  ConnectOptions connect;
  std::string key;
  TokenSource token;
  std::optional<util::Millis> ttl;  // nullopt: the TTL the lock was taken with
};

struct StatusOptions {
  ConnectOptions connect;
  std::vector<std::string> keys;  // empty: every lock under the prefix
  bool json = false;
};

struct ListOptions {
  ConnectOptions connect;
  std::string pattern = "*";
  bool json = false;
};

struct LogOptions {
  ConnectOptions connect;
  std::vector<std::string> keys;  // empty: every lock under the prefix
  size_t count = 0;               // -n: the last N events (0: all that are kept)
  bool json = false;
  bool follow = false;  // --follow: stream new events until interrupted
};

}  // namespace rlock::commands
