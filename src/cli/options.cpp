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
const std::vector<OptionSpec> k_options = [] {
  using enum Kind;  // flag, value: here only
  return std::vector<OptionSpec>{
      // clang-format off
      // names                        on           kind   type   config                    env
      //   target, help ({} stands for the default), default[, env_also, excludes, hidden, builtin]
      // How to take the lock: run and acquire.
      {"-t,--ttl",                    on::take,    value, "D",   "ttl",                    "RLOCK_TTL",
       {.text = &Raw::ttl}, "lease length (default {})", "30s"},
      {"-w,--wait,--timeout",         on::take,    value, "D",   "wait",                   "RLOCK_WAIT",
       {.text = &Raw::wait}, "wait at most D, in FIFO order (default: {})", "forever"},
      {"-n,--no-wait,--nb,--nonblock", on::take,   flag,  "",    "",                       "",
       {.flag = &Raw::no_wait}, "fail at once if the lock is held (same as -w 0)", "", "", "--wait"},
      {"-E,--conflict-exit-code",     on::take,    value, "N",   "conflict-exit-code",     "RLOCK_CONFLICT_EXIT_CODE",
       {.text = &Raw::conflict_exit_code}, "exit code when the lock is busy (default {})", "75"},
      {"-s,--shared",                 on::take,    flag,  "",    "",                       "",
       {.flag = &Raw::shared}, "a shared hold: many shared holders, or one exclusive", ""},
      {"-x,--exclusive",              on::take,    flag,  "",    "",                       "",
       {.flag = &Raw::exclusive}, "an exclusive hold (the default)", "", "", "--shared"},
      {"--limit",                     on::take,    value, "N",   "limit",                  "RLOCK_LIMIT",
       {.text = &Raw::limit}, "a semaphore: up to N holders at once; all must agree on N", ""},
      {"--wait-replicas",             on::take,    value, "N",   "wait-replicas",          "RLOCK_WAIT_REPLICAS",
       {.text = &Raw::wait_replicas}, "after acquiring, wait for N replicas to acknowledge (best effort)", ""},
      {"--wait-timeout",              on::take,    value, "D",   "wait-timeout",           "RLOCK_WAIT_TIMEOUT",
       {.text = &Raw::wait_timeout}, "how long --wait-replicas waits (default {})", "1s"},
      {"--strict",                    on::take,    flag,  "",    "strict",                 "RLOCK_STRICT",
       {.flag = &Raw::strict}, "refuse a server whose maxmemory-policy can evict locks (default: {})", "warn"},
      {"--min-hold",                  on::take,    value, "D",   "min-hold",               "RLOCK_MIN_HOLD",
       {.text = &Raw::min_hold}, "keep the lock until D after it was taken, even if the command ends sooner (once per "
       "cron tick)", ""},
      {"--supersede",                 on::take,    flag,  "",    "supersede",              "RLOCK_SUPERSEDE",
       {.flag = &Raw::supersede}, "newest wins: replace the older waiters that also gave --supersede (they exit 75)",
       ""},
      {"--preempt",                   on::take,    flag,  "",    "preempt",                "RLOCK_PREEMPT",
       {.flag = &Raw::preempt}, "stop a --preemptible holder and be served next; other holders are waited for", ""},
      // flock's -o and -F have no meaning for a lease: accepted only to be refused with a reason.
      {"-o,--close",                  on::take,    flag,  "",    "",                       "",
       {.flag = &Raw::flock_close}, "", "", "", "", true},
      {"-F,--no-fork",                on::take,    flag,  "",    "",                       "",
       {.flag = &Raw::flock_no_fork}, "", "", "", "", true},
      // run.
      {"-c,--command",                on::run,     value, "S",   "",                       "",
       {.text = &Raw::command}, "run S with /bin/sh -c instead of COMMAND", ""},
      {"--signal",                    on::run,     value, "SIG", "signal",                 "RLOCK_SIGNAL",
       {.text = &Raw::signal}, "signal sent to the child when the lock is lost (default {})", "TERM"},
      {"--kill-after",                on::run,     value, "D",   "kill-after",             "RLOCK_KILL_AFTER",
       {.text = &Raw::kill_after}, "then SIGKILL after D (default {})", "5s"},
      {"--lost-exit-code",            on::run,     value, "N",   "lost-exit-code",         "RLOCK_LOST_EXIT_CODE",
       {.text = &Raw::lost_exit_code}, "exit code when the lock was lost (default {})", "76"},
      {"--max-hold",                  on::run,     value, "D",   "max-hold",               "RLOCK_MAX_HOLD",
       {.text = &Raw::max_hold}, "stop the child as if lost after D", ""},
      {"--preemptible",               on::run,     flag,  "",    "preemptible",            "RLOCK_PREEMPTIBLE",
       {.flag = &Raw::preemptible}, "a --preempt request may stop the command (--signal, then SIGKILL); rlock then "
       "exits 75", ""},
      {"--leftovers",                 on::run,     value, "WHAT","leftovers",              "RLOCK_LEFTOVERS",
       {.text = &Raw::leftovers}, "processes the command leaves running when it exits: wait (keep the lock until they "
       "end) or kill (end them); default {}", "wait"},
      // acquire.
      {"--token-file",                on::acquire, value, "F",   "",                       "",
       {.text = &Raw::token_file}, "write the token to F (mode 0600) instead of stdout", ""},
      {"--json",                      on::acquire, flag,  "",    "",                       "",
       {.flag = &Raw::json}, "print key, token, fence and TTL as JSON", ""},
      {"--keepalive",                 on::acquire, flag,  "",    "",                       "",
       {.flag = &Raw::keepalive}, "a keeper renews the lock while the calling process (or --pid) lives, and releases "
       "it then", ""},
      {"--pid",                       on::acquire, value, "PID", "",                       "",
       {.text = &Raw::pid}, "with --keepalive: the process whose life the hold follows", ""},
      {"--signal",                    on::acquire, value, "SIG", "signal",                 "RLOCK_SIGNAL",
       {.text = &Raw::signal}, "with --keepalive: signal sent to that process if the lock is lost (default: {})",
       "none"},
      {"--max-hold",                  on::acquire, value, "D",   "max-hold",               "RLOCK_MAX_HOLD",
       {.text = &Raw::max_hold}, "with --keepalive: give the lock up after D", ""},
      {"--keeper-log",                on::acquire, value, "F",   "keeper-log",             "RLOCK_KEEPER_LOG",
       {.text = &Raw::keeper_log}, "with --keepalive: the keeper logs to file F, or to syslog with syslog: (default: "
       "{})", "no log"},
      // release, extend.
      {"-t,--ttl",                    on::extend,  value, "D",   "ttl",                    "RLOCK_TTL",
       {.text = &Raw::ttl}, "new TTL (default: {})", "the TTL the lock was taken with"},
      {"--token-file",                on::release | on::extend,value, "F",   "",                       "",
       {.text = &Raw::token_file}, "read the token from F", ""},
      {"--token-env",                 on::release | on::extend, value, "NAME", "token-env",           "RLOCK_TOKEN_ENV",
       {.text = &Raw::token_env}, "read the token from variable NAME (default {})", "RLOCK_TOKEN"},
      {"--force",                     on::release, flag,  "",    "",                       "",
       {.flag = &Raw::force}, "remove the lock without its token and print who held it", ""},
      // status, list, log.
      {"--json",                      on::status,  flag,  "",    "",                       "",
       {.flag = &Raw::json}, "print JSON (an object for one KEY, else an array)", ""},
      {"--json",                      on::list,    flag,  "",    "",                       "",
       {.flag = &Raw::json}, "print a JSON array", ""},
      {"-n,--lines",                  on::log,     value, "N",   "",                       "",
       {.text = &Raw::lines}, "the last N events (default: {})", "all that are kept"},
      {"--json",                      on::log,     flag,  "",    "",                       "",
       {.flag = &Raw::json}, "print one JSON object a line", ""},
      {"-f,--follow",                 on::log,     flag,  "",    "",                       "",
       {.flag = &Raw::follow}, "print new events as they come, until interrupted", ""},
      // Every command, before or after its name. -h and -V are CLI11's own.
      {"-h,--help",                   on::global,  flag,  "",    "",                       "",
       {}, "Print this help message and exit", "", "", "", false, Builtin::help},
      {"-V,--version",                on::global,  flag,  "",    "",                       "",
       {}, "Display program version information and exit", "", "", "", false, Builtin::version},
      // Repeatable: several URLs of independent masters make a Redlock quorum. The environment and
      // the config file give them as one text, space (or comma) separated.
      {"-u,--url",                    on::global,  value, "URL", "url",                    "RLOCK_URL",
       {.text = &Raw::url, .list = &Raw::urls}, "redis://[user[:pass]@]host[:port][/db], rediss://... (TLS), "
       "unix:///path.sock[?db=N] or redis+sentinel://host:port[,host:port]/MASTER[/db] (default {}); several -u: a "
       "Redlock quorum of independent masters", "redis://127.0.0.1:6379", "REDIS_URL"},
      {"--node-timeout",              on::global,  value, "D",   "node-timeout",           "RLOCK_NODE_TIMEOUT",
       {.text = &Raw::node_timeout}, "with several URLs: each master's timeout (default {})",
       "2% of the TTL, at least 50ms"},
      {"--connect-timeout",           on::global,  value, "D",   "connect-timeout",        "RLOCK_CONNECT_TIMEOUT",
       {.text = &Raw::connect_timeout}, "connect timeout, name lookup included (default {})", "1s"},
      {"--io-timeout",                on::global,  value, "D",   "io-timeout",             "RLOCK_IO_TIMEOUT",
       {.text = &Raw::io_timeout}, "each Redis command's timeout (default {})", "2s"},
      {"--prefix",                    on::global,  value, "P",   "prefix",                 "RLOCK_PREFIX",
       {.text = &Raw::prefix}, "key namespace (default {})", "rlock:"},
      {"--password-file",             on::global,  value, "F",   "password-file",          "RLOCK_PASSWORD_FILE",
       {.text = &Raw::password_file}, "read the password from F (first line)", ""},
      {"--cacert",                    on::global,  value, "F",   "cacert",                 "RLOCK_CACERT",
       {.text = &Raw::cacert}, "CA certificates for rediss:// (default: {})", "the system's"},
      {"--cert",                      on::global,  value, "F",   "cert",                   "RLOCK_CERT",
       {.text = &Raw::cert}, "client certificate for rediss://", ""},
      // RLOCK_KEY is what run tells its child the lock's name is: the TLS key file needs another name.
      {"--key",                       on::global,  value, "F",   "key",                    "RLOCK_TLS_KEY",
       {.text = &Raw::tls_key}, "client certificate's key for rediss:// (env RLOCK_TLS_KEY)", ""},
      {"--insecure",                  on::global,  flag,  "",    "insecure",               "RLOCK_INSECURE",
       {.flag = &Raw::insecure}, "do not verify the server's certificate", ""},
      {"--sentinel-user",             on::global,  value, "NAME", "sentinel-user",         "RLOCK_SENTINEL_USER",
       {.text = &Raw::sentinel_user}, "ACL user for the sentinels of a redis+sentinel:// URL", ""},
      {"--sentinel-password-file",    on::global,  value, "F",   "sentinel-password-file",
       "RLOCK_SENTINEL_PASSWORD_FILE",
       {.text = &Raw::sentinel_password_file}, "read the sentinels' password from F (env RLOCK_SENTINEL_PASSWORD)", ""},
      // Not a setting: config_path (cli/settings.cpp) reads RLOCK_CONFIG before the file is read.
      {"--config",                    on::global,  value, "F",   "",                       "RLOCK_CONFIG",
       {.text = &Raw::config}, "TOML config file (default {})", "$XDG_CONFIG_HOME/rlock/config.toml"},
      {"-q,--quiet",                  on::global,  flag,  "",    "quiet",                  "RLOCK_QUIET",
       {.flag = &Raw::quiet}, "print nothing but errors", ""},
      {"-v,--verbose",                on::global,  flag,  "",    "verbose",                "RLOCK_VERBOSE",
       {.flag = &Raw::verbose}, "print a timestamped timeline on stderr", ""},
      {"--syslog",                    on::global,  flag,  "",    "syslog",                 "RLOCK_SYSLOG",
       {.flag = &Raw::syslog}, "also log to syslog: acquired, busy, lost, released, with key, holder and durations",
       ""},
      {"--log-length",                on::global,  value, "N",   "log-length",             "RLOCK_LOG_LENGTH",
       {.text = &Raw::log_length}, "events of history kept per lock in Redis, for rlock log (default {}; 0: none)",
       "1000"},
      // clang-format on
  };
}();

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
