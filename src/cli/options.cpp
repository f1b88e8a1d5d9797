// The option table: every option of every command, one row each, in the order and words of
// `--help` (and of the man page's OPTIONS). CLI11 registration, the settings that the environment
// (RLOCK_NAME) and the config file (name = value) may also give (cli/settings.cpp layers them),
// and `rlock --dump-options` (read by tests/docs.bats and the shell completions) all come from it;
// cli/convert.cpp checks and converts the values.
#include "cli/options.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>

namespace rlock::cli {

const std::array<Command, 7> k_commands = {{
    {"run", "take KEY, run a command while renewing it, release it"},
    {"acquire", "take KEY and keep it after rlock exits; print the token"},
    {"release", "give KEY back (token from --token-file or $RLOCK_TOKEN)"},
    {"extend", "reset KEY's TTL (token from --token-file or $RLOCK_TOKEN)"},
    {"status", "who holds KEY: host, pid, user, command, since, TTL, fence"},
    {"list", "the held locks under the prefix (SCAN)"},
    {"log", "who held, waited for, skipped or lost KEY, from every host"},
}};

// A command's rows come first, in the order of its --help, then the global ones (every command
// registers them after its own). Rows that several commands share come before those of one.
const std::vector<OptionSpec> k_options = {
    // How to take the lock: run and acquire.
    {"-t,--ttl",
     on::take,
     Kind::value,
     "D",
     "lease length (default {})",
     "30s",
     "ttl",
     "RLOCK_TTL",
     "",
     {.text = &Raw::ttl}},
    {"-w,--wait,--timeout",
     on::take,
     Kind::value,
     "D",
     "wait at most D, in FIFO order (default: {})",
     "forever",
     "wait",
     "RLOCK_WAIT",
     "",
     {.text = &Raw::wait}},
    {"-n,--no-wait,--nb,--nonblock",
     on::take,
     Kind::flag,
     "",
     "fail at once if the lock is held (same as -w 0)",
     "",
     "",
     "",
     "",
     {.flag = &Raw::no_wait},
     "--wait"},
    {"-E,--conflict-exit-code",
     on::take,
     Kind::value,
     "N",
     "exit code when the lock is busy (default {})",
     "75",
     "conflict-exit-code",
     "RLOCK_CONFLICT_EXIT_CODE",
     "",
     {.text = &Raw::conflict_exit_code}},
    {"-s,--shared",
     on::take,
     Kind::flag,
     "",
     "a shared hold: many shared holders, or one exclusive",
     "",
     "",
     "",
     "",
     {.flag = &Raw::shared}},
    {"-x,--exclusive",
     on::take,
     Kind::flag,
     "",
     "an exclusive hold (the default)",
     "",
     "",
     "",
     "",
     {.flag = &Raw::exclusive},
     "--shared"},
    {"--limit",
     on::take,
     Kind::value,
     "N",
     "a semaphore: up to N holders at once; all must agree on N",
     "",
     "limit",
     "RLOCK_LIMIT",
     "",
     {.text = &Raw::limit}},
    {"--wait-replicas",
     on::take,
     Kind::value,
     "N",
     "after acquiring, wait for N replicas to acknowledge (best effort)",
     "",
     "wait-replicas",
     "RLOCK_WAIT_REPLICAS",
     "",
     {.text = &Raw::wait_replicas}},
    {"--wait-timeout",
     on::take,
     Kind::value,
     "D",
     "how long --wait-replicas waits (default {})",
     "1s",
     "wait-timeout",
     "RLOCK_WAIT_TIMEOUT",
     "",
     {.text = &Raw::wait_timeout}},
    {"--strict",
     on::take,
     Kind::flag,
     "",
     "refuse a server whose maxmemory-policy can evict locks (default: {})",
     "warn",
     "strict",
     "RLOCK_STRICT",
     "",
     {.flag = &Raw::strict}},
    {"--min-hold",
     on::take,
     Kind::value,
     "D",
     "keep the lock until D after it was taken, even if the command ends sooner (once per cron tick)",
     "",
     "min-hold",
     "RLOCK_MIN_HOLD",
     "",
     {.text = &Raw::min_hold}},
    {"--supersede",
     on::take,
     Kind::flag,
     "",
     "newest wins: replace the older waiters that also gave --supersede (they exit 75)",
     "",
     "supersede",
     "RLOCK_SUPERSEDE",
     "",
     {.flag = &Raw::supersede}},
    {"--preempt",
     on::take,
     Kind::flag,
     "",
     "stop a --preemptible holder and be served next; other holders are waited for",
     "",
     "preempt",
     "RLOCK_PREEMPT",
     "",
     {.flag = &Raw::preempt}},
    // flock's -o and -F have no meaning for a lease: accepted only to be refused with a reason.
    {"-o,--close", on::take, Kind::flag, "", "", "", "", "", "", {.flag = &Raw::flock_close}, "", true},
    {"-F,--no-fork", on::take, Kind::flag, "", "", "", "", "", "", {.flag = &Raw::flock_no_fork}, "", true},

    // run.
    {"-c,--command",
     on::run,
     Kind::value,
     "S",
     "run S with /bin/sh -c instead of COMMAND",
     "",
     "",
     "",
     "",
     {.text = &Raw::command}},
    {"--signal",
     on::run,
     Kind::value,
     "SIG",
     "signal sent to the child when the lock is lost (default {})",
     "TERM",
     "signal",
     "RLOCK_SIGNAL",
     "",
     {.text = &Raw::signal}},
    {"--kill-after",
     on::run,
     Kind::value,
     "D",
     "then SIGKILL after D (default {})",
     "5s",
     "kill-after",
     "RLOCK_KILL_AFTER",
     "",
     {.text = &Raw::kill_after}},
    {"--lost-exit-code",
     on::run,
     Kind::value,
     "N",
     "exit code when the lock was lost (default {})",
     "76",
     "lost-exit-code",
     "RLOCK_LOST_EXIT_CODE",
     "",
     {.text = &Raw::lost_exit_code}},
    {"--max-hold",
     on::run,
     Kind::value,
     "D",
     "stop the child as if lost after D",
     "",
     "max-hold",
     "RLOCK_MAX_HOLD",
     "",
     {.text = &Raw::max_hold}},
    {"--preemptible",
     on::run,
     Kind::flag,
     "",
     "a --preempt request may stop the command (--signal, then SIGKILL); rlock then exits 75",
     "",
     "preemptible",
     "RLOCK_PREEMPTIBLE",
     "",
     {.flag = &Raw::preemptible}},
    {"--leftovers",
     on::run,
     Kind::value,
     "WHAT",
     "processes the command leaves running when it exits: wait (keep the lock until they end) or kill (end them); "
     "default {}",
     "wait",
     "leftovers",
     "RLOCK_LEFTOVERS",
     "",
     {.text = &Raw::leftovers}},

    // acquire.
    {"--token-file",
     on::acquire,
     Kind::value,
     "F",
     "write the token to F (mode 0600) instead of stdout",
     "",
     "",
     "",
     "",
     {.text = &Raw::token_file}},
    {"--json",
     on::acquire,
     Kind::flag,
     "",
     "print key, token, fence and TTL as JSON",
     "",
     "",
     "",
     "",
     {.flag = &Raw::json}},
    {"--keepalive",
     on::acquire,
     Kind::flag,
     "",
     "a keeper renews the lock while the calling process (or --pid) lives, and releases it then",
     "",
     "",
     "",
     "",
     {.flag = &Raw::keepalive}},
    {"--pid",
     on::acquire,
     Kind::value,
     "PID",
     "with --keepalive: the process whose life the hold follows",
     "",
     "",
     "",
     "",
     {.text = &Raw::pid}},
    {"--signal",
     on::acquire,
     Kind::value,
     "SIG",
     "with --keepalive: signal sent to that process if the lock is lost (default: {})",
     "none",
     "signal",
     "RLOCK_SIGNAL",
     "",
     {.text = &Raw::signal}},
    {"--max-hold",
     on::acquire,
     Kind::value,
     "D",
     "with --keepalive: give the lock up after D",
     "",
     "max-hold",
     "RLOCK_MAX_HOLD",
     "",
     {.text = &Raw::max_hold}},
    {"--keeper-log",
     on::acquire,
     Kind::value,
     "F",
     "with --keepalive: the keeper logs to file F, or to syslog with syslog: (default: {})",
     "no log",
     "keeper-log",
     "RLOCK_KEEPER_LOG",
     "",
     {.text = &Raw::keeper_log}},

    // release, extend.
    {"-t,--ttl",
     on::extend,
     Kind::value,
     "D",
     "new TTL (default: {})",
     "the TTL the lock was taken with",
     "ttl",
     "RLOCK_TTL",
     "",
     {.text = &Raw::ttl}},
    {"--token-file",
     on::release | on::extend,
     Kind::value,
     "F",
     "read the token from F",
     "",
     "",
     "",
     "",
     {.text = &Raw::token_file}},
    {"--token-env",
     on::release | on::extend,
     Kind::value,
     "NAME",
     "read the token from variable NAME (default {})",
     "RLOCK_TOKEN",
     "token-env",
     "RLOCK_TOKEN_ENV",
     "",
     {.text = &Raw::token_env}},
    {"--force",
     on::release,
     Kind::flag,
     "",
     "remove the lock without its token and print who held it",
     "",
     "",
     "",
     "",
     {.flag = &Raw::force}},

    // status, list, log.
    {"--json",
     on::status,
     Kind::flag,
     "",
     "print JSON (an object for one KEY, else an array)",
     "",
     "",
     "",
     "",
     {.flag = &Raw::json}},
    {"--json", on::list, Kind::flag, "", "print a JSON array", "", "", "", "", {.flag = &Raw::json}},
    {"-n,--lines",
     on::log,
     Kind::value,
     "N",
     "the last N events (default: {})",
     "all that are kept",
     "",
     "",
     "",
     {.text = &Raw::lines}},
    {"--json", on::log, Kind::flag, "", "print one JSON object a line", "", "", "", "", {.flag = &Raw::json}},
    {"-f,--follow",
     on::log,
     Kind::flag,
     "",
     "print new events as they come, until interrupted",
     "",
     "",
     "",
     "",
     {.flag = &Raw::follow}},

    // Every command, before or after its name. -h and -V are CLI11's own.
    {"-h,--help",
     on::global,
     Kind::flag,
     "",
     "Print this help message and exit",
     "",
     "",
     "",
     "",
     {},
     "",
     false,
     Builtin::help},
    {"-V,--version",
     on::global,
     Kind::flag,
     "",
     "Display program version information and exit",
     "",
     "",
     "",
     "",
     {},
     "",
     false,
     Builtin::version},
    // Repeatable: several URLs of independent masters make a Redlock quorum. The environment and
    // the config file give them as one text, space (or comma) separated.
    {"-u,--url",
     on::global,
     Kind::value,
     "URL",
     "redis://[user[:pass]@]host[:port][/db], rediss://... (TLS), unix:///path.sock[?db=N] or "
     "redis+sentinel://host:port[,host:port]/MASTER[/db] (default {}); several -u: a Redlock quorum of independent "
     "masters",
     "redis://127.0.0.1:6379",
     "url",
     "RLOCK_URL",
     "REDIS_URL",
     {.text = &Raw::url, .list = &Raw::urls}},
    {"--node-timeout",
     on::global,
     Kind::value,
     "D",
     "with several URLs: each master's timeout (default {})",
     "2% of the TTL, at least 50ms",
     "node-timeout",
     "RLOCK_NODE_TIMEOUT",
     "",
     {.text = &Raw::node_timeout}},
    {"--connect-timeout",
     on::global,
     Kind::value,
     "D",
     "connect timeout, name lookup included (default {})",
     "1s",
     "connect-timeout",
     "RLOCK_CONNECT_TIMEOUT",
     "",
     {.text = &Raw::connect_timeout}},
    {"--io-timeout",
     on::global,
     Kind::value,
     "D",
     "each Redis command's timeout (default {})",
     "2s",
     "io-timeout",
     "RLOCK_IO_TIMEOUT",
     "",
     {.text = &Raw::io_timeout}},
    {"--prefix",
     on::global,
     Kind::value,
     "P",
     "key namespace (default {})",
     "rlock:",
     "prefix",
     "RLOCK_PREFIX",
     "",
     {.text = &Raw::prefix}},
    {"--password-file",
     on::global,
     Kind::value,
     "F",
     "read the password from F (first line)",
     "",
     "password-file",
     "RLOCK_PASSWORD_FILE",
     "",
     {.text = &Raw::password_file}},
    {"--cacert",
     on::global,
     Kind::value,
     "F",
     "CA certificates for rediss:// (default: {})",
     "the system's",
     "cacert",
     "RLOCK_CACERT",
     "",
     {.text = &Raw::cacert}},
    {"--cert",
     on::global,
     Kind::value,
     "F",
     "client certificate for rediss://",
     "",
     "cert",
     "RLOCK_CERT",
     "",
     {.text = &Raw::cert}},
    // RLOCK_KEY is what run tells its child the lock's name is: the TLS key file needs another name.
    {"--key",
     on::global,
     Kind::value,
     "F",
     "client certificate's key for rediss:// (env RLOCK_TLS_KEY)",
     "",
     "key",
     "RLOCK_TLS_KEY",
     "",
     {.text = &Raw::tls_key}},
    {"--insecure",
     on::global,
     Kind::flag,
     "",
     "do not verify the server's certificate",
     "",
     "insecure",
     "RLOCK_INSECURE",
     "",
     {.flag = &Raw::insecure}},
    {"--sentinel-user",
     on::global,
     Kind::value,
     "NAME",
     "ACL user for the sentinels of a redis+sentinel:// URL",
     "",
     "sentinel-user",
     "RLOCK_SENTINEL_USER",
     "",
     {.text = &Raw::sentinel_user}},
    {"--sentinel-password-file",
     on::global,
     Kind::value,
     "F",
     "read the sentinels' password from F (env RLOCK_SENTINEL_PASSWORD)",
     "",
     "sentinel-password-file",
     "RLOCK_SENTINEL_PASSWORD_FILE",
     "",
     {.text = &Raw::sentinel_password_file}},
    {"--config",
     on::global,
     Kind::value,
     "F",
     "TOML config file (default {})",
     "$XDG_CONFIG_HOME/rlock/config.toml",
     "",
     "RLOCK_CONFIG",
     "",
     {.text = &Raw::config}},
    {"-q,--quiet",
     on::global,
     Kind::flag,
     "",
     "print nothing but errors",
     "",
     "quiet",
     "RLOCK_QUIET",
     "",
     {.flag = &Raw::quiet}},
    {"-v,--verbose",
     on::global,
     Kind::flag,
     "",
     "print a timestamped timeline on stderr",
     "",
     "verbose",
     "RLOCK_VERBOSE",
     "",
     {.flag = &Raw::verbose}},
    {"--syslog",
     on::global,
     Kind::flag,
     "",
     "also log to syslog: acquired, busy, lost, released, with key, holder and durations",
     "",
     "syslog",
     "RLOCK_SYSLOG",
     "",
     {.flag = &Raw::syslog}},
    {"--log-length",
     on::global,
     Kind::value,
     "N",
     "events of history kept per lock in Redis, for rlock log (default {}; 0: none)",
     "1000",
     "log-length",
     "RLOCK_LOG_LENGTH",
     "",
     {.text = &Raw::log_length}},
};

namespace {

// A command's arguments, registered before its options.
struct ArgumentSpec {
  const char* name;
  Commands commands;
  const char* help;
  std::string Raw::*one;
  std::vector<std::string> Raw::*many;
  bool required;
};
const std::array<ArgumentSpec, 4> k_arguments = {{
    {"KEY", on::take | on::release | on::extend, "the lock's name", &Raw::key, nullptr, true},
    {"KEY", on::status, "locks to show (default: every held lock)", nullptr, &Raw::keys, false},
    {"PATTERN", on::list, "glob on lock names (default *)", &Raw::pattern, nullptr, false},
    {"KEY", on::log, "locks to show (default: every lock with a history)", nullptr, &Raw::keys, false},
}};

// The value types, in words, for "needs a value".
struct TypeSpec {
  const char* name;
  const char* words;
};
const std::array<TypeSpec, 8> k_types = {{
    {"D", "a duration such as 30s"},
    {"N", "a number"},
    {"F", "a file name"},
    {"S", "a shell command"},
    {"SIG", "a signal name such as TERM"},
    {"URL", "a Redis URL"},
    {"PID", "a process id"},
    {"WHAT", "wait or kill"},
}};

bool belongs(const OptionSpec& o, Commands command) {
  return (o.commands & on::global) != 0 || (o.commands & command) != 0;
}

// An option that the environment and the config file may also set. A global option is registered
// twice, before the command name (on the application) and after it (on the command), as one
// setting.
void register_setting(Parsed& p, const OptionSpec& o, CLI::Option* option, Raw& raw) {
  if (Setting* s = find_setting(p, o.config)) {
    s->options.push_back(option);
    return;
  }
  p.settings.push_back({o.config,
                        {option},
                        o.target.text ? &(raw.*o.target.text) : nullptr,
                        o.target.flag ? &(raw.*o.target.flag) : nullptr,
                        Source::unset,
                        {},
                        o.env,
                        o.env_also});
}

void add_option(Parsed& p, CLI::App* app, Raw& raw, const OptionSpec& o) {
  if (o.builtin != Builtin::none) return;  // CLI11's, set up with the application
  const std::string help = help_text(o);
  CLI::Option* option = nullptr;
  if (o.target.list) {
    option = app->add_option(o.names, raw.*o.target.list, help);
    option->allow_extra_args(false);  // one value per option: the next word is not another
  } else if (o.kind == Kind::flag) {
    option = app->add_flag(o.names, raw.*o.target.flag, help);
  } else {
    option = app->add_option(o.names, raw.*o.target.text, help);
  }
  if (*o.type) option->type_name(o.type);
  if (o.hidden) option->group("");
  if (*o.excludes) option->excludes(app->get_option(o.excludes));
  if (*o.config) register_setting(p, o, option, raw);
}

// A field of --dump-options: "-" when empty.
const char* field(const char* text) { return *text ? text : "-"; }

}  // namespace

Commands command_bit(const std::string& name) {
  for (size_t i = 0; i < k_commands.size(); ++i) {
    if (name == k_commands[i].name) return 1U << i;
  }
  return 0;
}

std::string help_text(const OptionSpec& o) {
  std::string text = o.help;
  if (auto at = text.find("{}"); at != std::string::npos) text.replace(at, 2, o.fallback);
  return text;
}

std::string value_words(const std::string& type) {
  for (const TypeSpec& t : k_types) {
    if (type == t.name) return t.words;
  }
  return "a value";
}

bool is_config_key(const std::string& key) {
  return std::any_of(k_options.begin(), k_options.end(),
                     [&](const OptionSpec& o) { return *o.config && key == o.config; });
}

// `rlock --dump-options` (hidden, and only as the sole argument): the table, for tests/docs.bats
// and the shell completions. One line per option and command it belongs to, in the table's order
// (a global option once, for "global"); hidden options are left out. Seven fields, separated by a
// tab, "-" for an empty one (a shell's `read` joins tabs):
//   command  run, acquire, release, extend, status, list, log, or global
//   names    the option's names, comma-separated: -t,--ttl
//   kind     flag, or value (the option takes the next word, or the text after "=")
//   type     the value's name (D duration, N number, F file, URL, SIG, PID, S, P, NAME, WHAT)
//   env      the variables that may give it, comma-separated, first wins: RLOCK_URL,REDIS_URL
//   config   its key in the config file
//   help     its text in --help
void dump_options() {
  for (const OptionSpec& o : k_options) {
    if (o.hidden) continue;
    std::string env = o.env;
    if (*o.env_also) env += fmt::format(",{}", o.env_also);
    for (size_t i = 0; i <= k_commands.size(); ++i) {
      const bool global = i == k_commands.size();
      if (global ? (o.commands & on::global) == 0 : (o.commands & (1U << i)) == 0) continue;
      fmt::print("{}\t{}\t{}\t{}\t{}\t{}\t{}\n", global ? "global" : k_commands[i].name, o.names,
                 o.kind == Kind::flag ? "flag" : "value", field(o.type), field(env.c_str()), field(o.config),
                 help_text(o));
    }
  }
}

void add_options(Parsed& p, const std::string& name, CLI::App* app, Raw& raw) {
  const Commands command = command_bit(name);
  for (const ArgumentSpec& a : k_arguments) {
    if ((a.commands & command) == 0) continue;
    CLI::Option* option =
        a.one ? app->add_option(a.name, raw.*a.one, a.help) : app->add_option(a.name, raw.*a.many, a.help);
    if (a.required) option->required();
  }
  for (const OptionSpec& o : k_options) {
    if (command ? belongs(o, command) : (o.commands & on::global) != 0) add_option(p, app, raw, o);
  }
}

void mark_given(Parsed& p, Raw& raw) {
  for (Setting& s : p.settings) {
    for (const CLI::Option* o : s.options) {
      if (o->count() > 0) s.source = Source::argv;
    }
  }
  if (!p.command) return;
  auto given = [&](const char* name) {
    const CLI::Option* o = p.command->get_option_no_throw(name);
    return o && o->count() > 0;
  };
  raw.command_given = given("--command");
  raw.token_file_given = given("--token-file");
}

}  // namespace rlock::cli
