#pragma once

#include "commands/option_table.hpp"
#include "exit_code.hpp"
#include "lock/backend.hpp"
#include "lock/validity.hpp"
#include "redis/connection.hpp"
#include "redis/tls.hpp"
#include "util/duration.hpp"

#include <sys/types.h>

#include <csignal>
#include <optional>
#include <string>
#include <vector>

// Each command's options, as the commands get them: checked, converted, defaults applied. The
// option table at the end says which option fills which field; cli/convert.cpp fills those, and
// the ones that need more than a field (the URLs, the token, -c...) by hand.

namespace rlock::commands {

// Where the locks live, common to every command.
using ConnectOptions = lock::Servers;
// The Redis when no URL is given (--url's default).
inline constexpr const char* k_default_url = "redis://127.0.0.1:6379";

// What rlock prints on stderr and logs, common to every command (-q, -v, --syslog).
struct OutputOptions {
  bool quiet = false;
  bool verbose = false;
  bool syslog = false;
};

// How to take a lock (run, acquire).
struct TakeOptions {
  std::string key;
  util::Millis ttl = lock::k_default_ttl;
  std::optional<util::Millis> wait;  // nullopt: wait forever
  int conflict_exit_code = exit_code::k_busy;
  int superseded_exit_code = exit_code::k_superseded;
  int wait_replicas = 0;  // WAIT for this many replicas after acquiring
  util::Millis wait_timeout{1'000};
  bool strict = false;       // refuse a server that may evict locks, instead of warning
  bool shared = false;       // --shared
  int limit = 1;             // --limit N: a semaphore of N holders when N > 1
  util::Millis min_hold{0};  // --min-hold: the hold lingers until this long after the command started
  bool supersede = false;    // --supersede: newest wins among the waiters that give it
  bool preempt = false;      // --preempt: stop a --preemptible holder and be served next
  std::string note;          // --note TEXT: recorded with the hold (status, log)
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
  int preempted_exit_code = exit_code::k_preempted;
  bool cancel_in_progress = false;  // --cancel-in-progress: --supersede --preempt --preemptible
  // --once-per: run once per tick of this period across hosts
  std::optional<util::Millis> once_per;
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
  std::string since;    // --since D|TIME: only events recorded since then (lock::parse_log_time)
  std::string until;    // --until D|TIME: ... and until then
  std::string tick;     // --tick TIME: only the events of the --once-per tick at TIME
};

// A limit of rlock check, in the Nagios plugins' habit: over warn is a WARNING, over crit a
// CRITICAL ("--max-held 1h,2h"; one value: CRITICAL only).
template <class T>
struct Threshold {
  std::optional<T> warn;
  std::optional<T> crit;
  bool given() const { return warn || crit; }
};

struct CheckOptions {
  ConnectOptions connect;
  std::vector<std::string> keys;
  Threshold<util::Millis> succeeded_within;  // since the last success
  Threshold<util::Millis> max_held;          // the current hold's length
  Threshold<long long> max_waiting;          // the queue's length
  Threshold<long long> max_lost;             // holds lost since the last success
  Threshold<long long> max_failures;         // holds ended without success since the last success
  bool json = false;
};

struct MetricsOptions {
  ConnectOptions connect;
  std::vector<std::string> keys;    // empty: every lock under the prefix
  std::vector<std::string> expect;  // --expect: exported even when never run, or unused since
  std::string textfile;             // --textfile: written atomically instead of stdout
};

// The option table: every option of every command, one row each, in the order and words of
// `--help` (and of the man page's OPTIONS). A command's rows come first, in the order of its
// --help, then the global ones (every command registers them after its own). Rows that several
// commands share come before those of one. Adding an option: a field above, a row here, its use,
// and its entry in man/rlock.1.scd; the help, the environment, the config file, the completions
// and the docs test follow from the row.
inline constexpr auto k_options = [] {
  using enum Kind;  // flag, value: here only
  // clang-format off
  return std::to_array<OptionSpec>({
      // names                        on           kind   type   config                    env
      //   help ({} stands for the default), default[, field, check, env_also, excludes, repeated, hidden, builtin]
      // How to take the lock: run and acquire.
      {"-t,--ttl",                    on::take,    value, "D",   "ttl",                    "RLOCK_TTL",
       "lease length (default {})", "", field<&TakeOptions::ttl>(), {.min = lock::validity::k_min_ttl.count()}},
      {"-w,--wait,--timeout",         on::take,    value, "D",   "wait",                   "RLOCK_WAIT",
       "wait at most D, in FIFO order (default: {})", "forever", field<&TakeOptions::wait>(), {.zero_ok = true}},
      {"-n,--no-wait,--nb,--nonblock", on::take,   flag,  "",    "",                       "",
       "fail at once if the lock is held (same as -w 0)", "", {}, {}, "", "--wait"},
      {"-E,--conflict-exit-code",     on::take,    value, "N",   "conflict-exit-code",     "RLOCK_CONFLICT_EXIT_CODE",
       "exit code when the lock is busy or the wait ran out (default {})", "",
       field<&TakeOptions::conflict_exit_code>(), {.min = 0, .max = 255, .words = "an exit code"}},
      {"--superseded-exit-code",      on::take,    value, "N",   "superseded-exit-code",   "RLOCK_SUPERSEDED_EXIT_CODE",
       "exit code when a newer --supersede request replaced this one (default {})", "",
       field<&TakeOptions::superseded_exit_code>(), {.min = 0, .max = 255, .words = "an exit code"}},
      {"-s,--shared",                 on::take,    flag,  "",    "",                       "",
       "a shared hold: many shared holders, or one exclusive", "", field<&TakeOptions::shared>()},
      {"-x,--exclusive",              on::take,    flag,  "",    "",                       "",
       "an exclusive hold (the default)", "", {}, {}, "", "--shared"},
      {"--limit",                     on::take,    value, "N",   "limit",                  "RLOCK_LIMIT",
       "a semaphore: up to N holders at once; all must agree on N", "", field<&TakeOptions::limit>(),
       {.min = 1, .max = 1'000'000, .words = "a number of holders"}},
      {"--wait-replicas",             on::take,    value, "N",   "wait-replicas",          "RLOCK_WAIT_REPLICAS",
       "after acquiring, wait for N replicas to acknowledge (best effort)", "", field<&TakeOptions::wait_replicas>(),
       {.min = 0, .max = 1000, .words = "a number of replicas"}},
      {"--wait-timeout",              on::take,    value, "D",   "wait-timeout",           "RLOCK_WAIT_TIMEOUT",
       "how long --wait-replicas waits (default {})", "", field<&TakeOptions::wait_timeout>()},
      {"--strict",                    on::take,    flag,  "",    "strict",                 "RLOCK_STRICT",
       "refuse a server whose maxmemory-policy can evict locks (default: {})", "warn", field<&TakeOptions::strict>()},
      {"--min-hold",                  on::take,    value, "D",   "min-hold",               "RLOCK_MIN_HOLD",
       "keep the lock until D after the command started (acquire: after it was taken), even if it ends sooner",
       "",
       field<&TakeOptions::min_hold>(), {.zero_ok = true}},
      {"--supersede",                 on::take,    flag,  "",    "supersede",              "RLOCK_SUPERSEDE",
       "newest wins: replace the older waiters that also gave --supersede (they exit 79)", "",
       field<&TakeOptions::supersede>()},
      {"--preempt",                   on::take,    flag,  "",    "preempt",                "RLOCK_PREEMPT",
       "stop a --preemptible holder and be served next; other holders are waited for", "",
       field<&TakeOptions::preempt>()},
      {"--note",                      on::take,    value, "TEXT", "",                      "RLOCK_NOTE",
       "a note recorded with the hold or the place in the queue, shown by status and log (at most 200 bytes)", "",
       field<&TakeOptions::note>()},
      // flock's -o and -F have no meaning for a lease: accepted only to be refused with a reason.
      {"-o,--close",                  on::take,    flag,  "",    "",                       "",
       "", "", {}, {}, "", "", false, true},
      {"-F,--no-fork",                on::take,    flag,  "",    "",                       "",
       "", "", {}, {}, "", "", false, true},
      // run.
      {"-c,--command",                on::run,     value, "S",   "",                       "",
       "run S with /bin/sh -c instead of COMMAND", ""},
      {"--signal",                    on::run,     value, "SIG", "signal",                 "RLOCK_SIGNAL",
       "signal sent to the child when the lock is lost (default {})", "TERM"},
      {"--kill-after",                on::run,     value, "D",   "kill-after",             "RLOCK_KILL_AFTER",
       "then SIGKILL after D (default {})", "", field<&RunOptions::kill_after>(), {.zero_ok = true}},
      {"--lost-exit-code",            on::run,     value, "N",   "lost-exit-code",         "RLOCK_LOST_EXIT_CODE",
       "exit code when the lock was lost (default {})", "", field<&RunOptions::lost_exit_code>(),
       {.min = 0, .max = 255, .words = "an exit code"}},
      {"--max-hold",                  on::run,     value, "D",   "max-hold",               "RLOCK_MAX_HOLD",
       "stop the child as if lost after D", "", field<&RunOptions::max_hold>()},
      {"--preemptible",               on::run,     flag,  "",    "preemptible",            "RLOCK_PREEMPTIBLE",
       "a --preempt request may stop the command (--signal, then SIGKILL); rlock then exits 80", "",
       field<&RunOptions::preemptible>()},
      {"--preempted-exit-code",       on::run,     value, "N",   "preempted-exit-code",    "RLOCK_PREEMPTED_EXIT_CODE",
       "exit code when a --preempt request stopped the command (default {})", "",
       field<&RunOptions::preempted_exit_code>(), {.min = 0, .max = 255, .words = "an exit code"}},
      {"--cancel-in-progress",        on::run,     flag,  "",    "cancel-in-progress",     "RLOCK_CANCEL_IN_PROGRESS",
       "newest wins, as CI's cancel-in-progress: --supersede --preempt --preemptible", "",
       field<&RunOptions::cancel_in_progress>()},
      {"--once-per",                  on::run,     value, "D",   "once-per",               "RLOCK_ONCE_PER",
       "run once per tick of D across hosts: runs that fire less than D/2 apart (by the server's clock) are one "
       "tick; the others exit 75 once it ran (D needs a unit, at least 1s)", "", field<&RunOptions::once_per>(),
       {.min = 1'000, .unit = true}},
      {"--leftovers",                 on::run,     value, "WHAT","leftovers",              "RLOCK_LEFTOVERS",
       "processes the command leaves running when it exits: wait (keep the lock until they end) or kill (end them); "
       "default {}", "wait"},
      // acquire.
      {"--token-file",                on::acquire, value, "F",   "",                       "",
       "write the token to F (mode 0600) instead of stdout", "", field<&AcquireOptions::token_file>()},
      {"--json",                      on::acquire, flag,  "",    "",                       "",
       "print key, token, fence and TTL as JSON", "", field<&AcquireOptions::json>()},
      {"--keepalive",                 on::acquire, flag,  "",    "",                       "",
       "a keeper renews the lock while the calling process (or --pid) lives, and releases it then", "",
       field<&AcquireOptions::keepalive>()},
      {"--pid",                       on::acquire, value, "PID", "",                       "",
       "with --keepalive: the process whose life the hold follows", ""},
      {"--signal",                    on::acquire, value, "SIG", "signal",                 "RLOCK_SIGNAL",
       "with --keepalive: signal sent to that process if the lock is lost (default: {})", "none"},
      {"--max-hold",                  on::acquire, value, "D",   "max-hold",               "RLOCK_MAX_HOLD",
       "with --keepalive: give the lock up after D", "", field<&AcquireOptions::max_hold>()},
      {"--keeper-log",                on::acquire, value, "F",   "keeper-log",             "RLOCK_KEEPER_LOG",
       "with --keepalive: the keeper logs to file F, or to syslog with syslog: (default: {})", "no log",
       field<&AcquireOptions::keeper_log>()},
      // release, extend.
      {"-t,--ttl",                    on::extend,  value, "D",   "ttl",                    "RLOCK_TTL",
       "new TTL (default: {})", "the TTL the lock was taken with", field<&ExtendOptions::ttl>(),
       {.min = lock::validity::k_min_ttl.count()}},
      {"--token-file",                on::release | on::extend, value, "F", "",            "",
       "read the token from F", "", field<&TokenSource::file>()},
      {"--token-env",                 on::release | on::extend, value, "NAME", "token-env", "RLOCK_TOKEN_ENV",
       "read the token from variable NAME (default {})", "", field<&TokenSource::env>()},
      {"--force",                     on::release, flag,  "",    "",                       "",
       "remove the lock without its token and print who held it", "", field<&ReleaseOptions::force>()},
      // status, list, log.
      {"--json",                      on::status,  flag,  "",    "",                       "",
       "print JSON (an object for one KEY, else an array)", "", field<&StatusOptions::json>()},
      {"--json",                      on::list,    flag,  "",    "",                       "",
       "print a JSON array", "", field<&ListOptions::json>()},
      {"-n,--lines",                  on::log,     value, "N",   "",                       "",
       "the last N events (default: {})", "all that are kept", field<&LogOptions::count>(),
       {.min = 1, .max = 100'000, .words = "a number of events"}},
      {"--json",                      on::log,     flag,  "",    "",                       "",
       "print one JSON object a line", "", field<&LogOptions::json>()},
      {"-f,--follow",                 on::log,     flag,  "",    "",                       "",
       "print new events as they come, until interrupted", "", field<&LogOptions::follow>()},
      {"--since",                     on::log,     value, "D",   "",                       "",
       "only events since D ago, or since TIME (RFC 3339: 2026-11-27T08:00:00Z; 08:00: today, UTC)", "",
       field<&LogOptions::since>()},
      {"--until",                     on::log,     value, "D",   "",                       "",
       "only events until D ago, or until TIME", "", field<&LogOptions::until>(), {}, "", "--follow"},
      {"--tick",                      on::log,     value, "TIME","",                       "",
       "only the events of the --once-per tick at TIME (or D ago): who took it, ran it, was refused or skipped",
       "", field<&LogOptions::tick>(), {}, "", "--follow"},
      // check, metrics. A limit is read by name (cli/convert.cpp): one value, or WARN,CRIT.
      {"--succeeded-within",          on::check,   value, "D",   "",                       "",
       "CRITICAL when the last success is older than D (D,D: WARNING over the first, CRITICAL over the second)",
       ""},
      {"--max-held",                  on::check,   value, "D",   "",                       "",
       "CRITICAL when the lock has been held longer than D (D,D: WARNING, CRITICAL)", ""},
      {"--max-waiting",               on::check,   value, "N",   "",                       "",
       "CRITICAL when more than N wait for the lock (N,N: WARNING, CRITICAL)", ""},
      {"--max-lost",                  on::check,   value, "N",   "",                       "",
       "CRITICAL when more than N holds were lost since the last success (N,N: WARNING, CRITICAL)", ""},
      {"--max-failures",              on::check,   value, "N",   "",                       "",
       "CRITICAL when more than N runs in a row ended without success (N,N: WARNING, CRITICAL)", ""},
      {"--json",                      on::check,   flag,  "",    "",                       "",
       "print the state and the data of each KEY as JSON (same exit status)", "", field<&CheckOptions::json>()},
      {"--textfile",                  on::metrics, value, "F",   "",                       "",
       "write the metrics to F atomically (node_exporter's textfile collector) instead of stdout; when Redis "
       "does not answer, F says so (rlock_up 0)", "", field<&MetricsOptions::textfile>()},
      // Repeatable; the environment and the config file give the keys as one text, space separated.
      {"--expect",                    on::metrics, value, "KEY", "expect",                 "RLOCK_EXPECT",
       "a job that should run: exported even if it never ran, or its record expired", "", {}, {}, "", "", true},
      // Every command, before or after its name. -h and -V are CLI11's own.
      {"-h,--help",                   on::global,  flag,  "",    "",                       "",
       "Print this help message and exit", "", {}, {}, "", "", false, false, Builtin::help},
      {"-V,--version",                on::global,  flag,  "",    "",                       "",
       "Display program version information and exit", "", {}, {}, "", "", false, false, Builtin::version},
      // Repeatable: several URLs of independent masters make a Redlock quorum. The environment and
      // the config file give them as one text, space (or comma) separated.
      {"-u,--url",                    on::global,  value, "URL", "url",                    "RLOCK_URL",
       "redis://[user[:pass]@]host[:port][/db], rediss://... (TLS), unix:///path.sock[?db=N] or "
       "redis+sentinel://host:port[,host:port]/MASTER[/db] (default {}); several -u: a Redlock quorum of independent "
       "masters", k_default_url, {}, {}, "REDIS_URL", "", true},
      {"--node-timeout",              on::global,  value, "D",   "node-timeout",           "RLOCK_NODE_TIMEOUT",
       "with several URLs: each master's timeout (default {})", "2% of the TTL, at least 50ms",
       field<&lock::Servers::node_timeout>()},
      {"--connect-timeout",           on::global,  value, "D",   "connect-timeout",        "RLOCK_CONNECT_TIMEOUT",
       "connect timeout, name lookup included (default {})", "", field<&redis::Timeouts::connect>()},
      {"--io-timeout",                on::global,  value, "D",   "io-timeout",             "RLOCK_IO_TIMEOUT",
       "each Redis command's timeout (default {})", "", field<&redis::Timeouts::command>()},
      {"--prefix",                    on::global,  value, "P",   "prefix",                 "RLOCK_PREFIX",
       "key namespace (default {})", "", field<&lock::Servers::prefix>()},
      {"--password-file",             on::global,  value, "F",   "password-file",          "RLOCK_PASSWORD_FILE",
       "read the password from F (first line)", ""},
      {"--cacert",                    on::global,  value, "F",   "cacert",                 "RLOCK_CACERT",
       "CA certificates for rediss:// (default: {})", "the system's", field<&redis::TlsOptions::cacert>()},
      {"--cert",                      on::global,  value, "F",   "cert",                   "RLOCK_CERT",
       "client certificate for rediss://", "", field<&redis::TlsOptions::cert>()},
      // RLOCK_KEY is what run tells its child the lock's name is: the TLS key file needs another name.
      {"--key",                       on::global,  value, "F",   "key",                    "RLOCK_TLS_KEY",
       "client certificate's key for rediss:// (env RLOCK_TLS_KEY)", "", field<&redis::TlsOptions::key>()},
      {"--insecure",                  on::global,  flag,  "",    "insecure",               "RLOCK_INSECURE",
       "do not verify the server's certificate", "", field<&redis::TlsOptions::insecure>()},
      {"--sentinel-user",             on::global,  value, "NAME", "sentinel-user",         "RLOCK_SENTINEL_USER",
       "ACL user for the sentinels of a redis+sentinel:// URL", ""},
      {"--sentinel-password-file",    on::global,  value, "F",   "sentinel-password-file", "RLOCK_SENTINEL_PASSWORD_FILE",
       "read the sentinels' password from F (env RLOCK_SENTINEL_PASSWORD)", ""},
      // Not a setting: config_path (cli/settings.cpp) reads RLOCK_CONFIG before the file is read.
      {"--config",                    on::global,  value, "F",   "",                       "RLOCK_CONFIG",
       "TOML config file (default {})", "$XDG_CONFIG_HOME/rlock/config.toml"},
      {"-q,--quiet",                  on::global,  flag,  "",    "quiet",                  "RLOCK_QUIET",
       "print nothing but errors", "", field<&OutputOptions::quiet>()},
      {"-v,--verbose",                on::global,  flag,  "",    "verbose",                "RLOCK_VERBOSE",
       "print a timestamped timeline on stderr", "", field<&OutputOptions::verbose>()},
      {"--syslog",                    on::global,  flag,  "",    "syslog",                 "RLOCK_SYSLOG",
       "also log to syslog: acquired, busy, lost, released, with key, holder and durations", "",
       field<&OutputOptions::syslog>()},
      {"--log-length",                on::global,  value, "N",   "log-length",             "RLOCK_LOG_LENGTH",
       "events of history kept per lock, at least (up to ~100 more), for rlock log (default {}; 0: none)", "",
       field<&lock::Servers::log_length>(), {.min = 0, .max = 100'000, .words = "a number of events"}},
  });
  // clang-format on
}();

}  // namespace rlock::commands
