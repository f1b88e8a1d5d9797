// The option table: what each command accepts, in the order and words of the man page's OPTIONS.
// Every option that the environment (RLOCK_NAME) or the config file (name = value) may also give
// is a setting; cli/settings.cpp layers them, cli/convert.cpp checks and converts them.
#include "cli/options.hpp"

#include <CLI/CLI.hpp>

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

namespace {

// Registers an option that the environment and the config file may also set. A global option is
// registered twice, before the command name (on the application) and after it (on the command),
// as one setting.
void register_setting(Parsed& p, const std::string& name, CLI::Option* o, std::string* text, bool* flag) {
  if (Setting* s = find_setting(p, name)) {
    s->options.push_back(o);
    return;
  }
  p.settings.push_back({name, {o}, text, flag, Source::unset, {}});
}

CLI::Option* setting(Parsed& p, CLI::App* app, const std::string& flags, const std::string& name, std::string& target,
                     const std::string& help) {
  CLI::Option* o = app->add_option(flags, target, help);
  register_setting(p, name, o, &target, nullptr);
  return o;
}

CLI::Option* flag_setting(Parsed& p, CLI::App* app, const std::string& flags, const std::string& name, bool& target,
                          const std::string& help) {
  CLI::Option* o = app->add_flag(flags, target, help);
  register_setting(p, name, o, nullptr, &target);
  return o;
}

// run and acquire: how to take the lock.
void add_take(Parsed& p, CLI::App* app, Raw& raw) {
  app->add_option("KEY", raw.key, "the lock's name")->required();
  setting(p, app, "-t,--ttl", "ttl", raw.ttl, "lease length (default 30s)")->type_name("D");
  CLI::Option* wait =
      setting(p, app, "-w,--wait,--timeout", "wait", raw.wait, "wait at most D, in FIFO order (default: forever)");
  wait->type_name("D");
  app->add_flag("-n,--no-wait,--nb,--nonblock", raw.no_wait, "fail at once if the lock is held (same as -w 0)")
      ->excludes(wait);
  setting(p, app, "-E,--conflict-exit-code", "conflict-exit-code", raw.conflict_exit_code,
          "exit code when the lock is busy (default 75)")
      ->type_name("N");
  CLI::Option* shared =
      app->add_flag("-s,--shared", raw.shared, "a shared hold: many shared holders, or one exclusive");
  app->add_flag("-x,--exclusive", raw.exclusive, "an exclusive hold (the default)")->excludes(shared);
  setting(p, app, "--limit", "limit", raw.limit, "a semaphore: up to N holders at once; all must agree on N")
      ->type_name("N");
  setting(p, app, "--wait-replicas", "wait-replicas", raw.wait_replicas,
          "after acquiring, wait for N replicas to acknowledge (best effort)")
      ->type_name("N");
  setting(p, app, "--wait-timeout", "wait-timeout", raw.wait_timeout, "how long --wait-replicas waits (default 1s)")
      ->type_name("D");
  flag_setting(p, app, "--strict", "strict", raw.strict,
               "refuse a server whose maxmemory-policy can evict locks (default: warn)");
  setting(p, app, "--min-hold", "min-hold", raw.min_hold,
          "keep the lock until D after it was taken, even if the command ends sooner (once per cron tick)")
      ->type_name("D");
  flag_setting(p, app, "--supersede", "supersede", raw.supersede,
               "newest wins: replace the older waiters that also gave --supersede (they exit 75)");
  flag_setting(p, app, "--preempt", "preempt", raw.preempt,
               "stop a --preemptible holder and be served next; other holders are waited for");
  // flock's -o and -F have no meaning for a lease: accepted here only to be refused with a reason.
  app->add_flag("-o,--close", raw.flock_close)->group("");
  app->add_flag("-F,--no-fork", raw.flock_no_fork)->group("");
}

void add_token_source(Parsed& p, CLI::App* app, Raw& raw) {
  app->add_option("--token-file", raw.token_file, "read the token from F")->type_name("F");
  setting(p, app, "--token-env", "token-env", raw.token_env, "read the token from variable NAME (default RLOCK_TOKEN)")
      ->type_name("NAME");
}

void add_run(Parsed& p, CLI::App* run, Raw& raw) {
  add_take(p, run, raw);
  run->add_option("-c,--command", raw.command, "run S with /bin/sh -c instead of COMMAND")->type_name("S");
  setting(p, run, "--signal", "signal", raw.signal, "signal sent to the child when the lock is lost (default TERM)")
      ->type_name("SIG");
  setting(p, run, "--kill-after", "kill-after", raw.kill_after, "then SIGKILL after D (default 5s)")->type_name("D");
  setting(p, run, "--lost-exit-code", "lost-exit-code", raw.lost_exit_code,
          "exit code when the lock was lost (default 76)")
      ->type_name("N");
  setting(p, run, "--max-hold", "max-hold", raw.max_hold, "stop the child as if lost after D")->type_name("D");
  flag_setting(p, run, "--preemptible", "preemptible", raw.preemptible,
               "a --preempt request may stop the command (--signal, then SIGKILL); rlock then exits 75");
  setting(p, run, "--leftovers", "leftovers", raw.leftovers,
          "processes the command leaves running when it exits: wait (keep the lock until they end) or kill "
          "(end them); default wait")
      ->type_name("WHAT");
}

void add_acquire(Parsed& p, CLI::App* acquire, Raw& raw) {
  add_take(p, acquire, raw);
  acquire->add_option("--token-file", raw.token_file, "write the token to F (mode 0600) instead of stdout")
      ->type_name("F");
  acquire->add_flag("--json", raw.json, "print key, token, fence and TTL as JSON");
  acquire->add_flag("--keepalive", raw.keepalive,
                    "a keeper renews the lock while the calling process (or --pid) lives, and releases it then");
  acquire->add_option("--pid", raw.pid, "with --keepalive: the process whose life the hold follows")->type_name("PID");
  setting(p, acquire, "--signal", "signal", raw.signal,
          "with --keepalive: signal sent to that process if the lock is lost (default: none)")
      ->type_name("SIG");
  setting(p, acquire, "--max-hold", "max-hold", raw.max_hold, "with --keepalive: give the lock up after D")
      ->type_name("D");
  setting(p, acquire, "--keeper-log", "keeper-log", raw.keeper_log,
          "with --keepalive: the keeper logs to file F, or to syslog with syslog: (default: no log)")
      ->type_name("F");
}

}  // namespace

void add_common(Parsed& p, CLI::App* app, Raw& raw) {
  {
    // Repeatable: several URLs of independent masters make a Redlock quorum. The environment and
    // the config file give them as one text, space (or comma) separated.
    CLI::Option* o =
        app->add_option("-u,--url", raw.urls,
                        "redis://[user[:pass]@]host[:port][/db], rediss://... (TLS), unix:///path.sock[?db=N] "
                        "or redis+sentinel://host:port[,host:port]/MASTER[/db] (default "
                        "redis://127.0.0.1:6379); several -u: a Redlock quorum of independent masters");
    o->type_name("URL")->allow_extra_args(false);  // one URL per -u: the next word is not another
    register_setting(p, "url", o, &raw.url, nullptr);
  }
  setting(p, app, "--node-timeout", "node-timeout", raw.node_timeout,
          "with several URLs: each master's timeout (default 2% of the TTL, at least 50ms)")
      ->type_name("D");
  setting(p, app, "--connect-timeout", "connect-timeout", raw.connect_timeout,
          "connect timeout, name lookup included (default 1s)")
      ->type_name("D");
  setting(p, app, "--io-timeout", "io-timeout", raw.io_timeout, "each Redis command's timeout (default 2s)")
      ->type_name("D");
  setting(p, app, "--prefix", "prefix", raw.prefix, "key namespace (default rlock:)")->type_name("P");
  setting(p, app, "--password-file", "password-file", raw.password_file, "read the password from F (first line)")
      ->type_name("F");
  setting(p, app, "--cacert", "cacert", raw.cacert, "CA certificates for rediss:// (default: the system's)")
      ->type_name("F");
  setting(p, app, "--cert", "cert", raw.cert, "client certificate for rediss://")->type_name("F");
  setting(p, app, "--key", "key", raw.tls_key, "client certificate's key for rediss:// (env RLOCK_TLS_KEY)")
      ->type_name("F");
  flag_setting(p, app, "--insecure", "insecure", raw.insecure, "do not verify the server's certificate");
  setting(p, app, "--sentinel-user", "sentinel-user", raw.sentinel_user,
          "ACL user for the sentinels of a redis+sentinel:// URL")
      ->type_name("NAME");
  setting(p, app, "--sentinel-password-file", "sentinel-password-file", raw.sentinel_password_file,
          "read the sentinels' password from F (env RLOCK_SENTINEL_PASSWORD)")
      ->type_name("F");
  app->add_option("--config", raw.config, "TOML config file (default $XDG_CONFIG_HOME/rlock/config.toml)")
      ->type_name("F");
  flag_setting(p, app, "-q,--quiet", "quiet", raw.quiet, "print nothing but errors");
  flag_setting(p, app, "-v,--verbose", "verbose", raw.verbose, "print a timestamped timeline on stderr");
  flag_setting(p, app, "--syslog", "syslog", raw.syslog,
               "also log to syslog: acquired, busy, lost, released, with key, holder and durations");
  setting(p, app, "--log-length", "log-length", raw.log_length,
          "events of history kept per lock in Redis, for rlock log (default 1000; 0: none)")
      ->type_name("N");
}

void add_command_options(Parsed& p, const std::string& name, CLI::App* command, Raw& raw) {
  if (name == "run") {
    add_run(p, command, raw);
  } else if (name == "acquire") {
    add_acquire(p, command, raw);
  } else if (name == "release") {
    command->add_option("KEY", raw.key, "the lock's name")->required();
    add_token_source(p, command, raw);
    command->add_flag("--force", raw.force, "remove the lock without its token and print who held it");
  } else if (name == "extend") {
    command->add_option("KEY", raw.key, "the lock's name")->required();
    setting(p, command, "-t,--ttl", "ttl", raw.ttl, "new TTL (default: the TTL the lock was taken with)")
        ->type_name("D");
    add_token_source(p, command, raw);
  } else if (name == "status") {
    command->add_option("KEY", raw.keys, "locks to show (default: every held lock)");
    command->add_flag("--json", raw.json, "print JSON (an object for one KEY, else an array)");
  } else if (name == "list") {
    command->add_option("PATTERN", raw.pattern, "glob on lock names (default *)");
    command->add_flag("--json", raw.json, "print a JSON array");
  } else if (name == "log") {
    command->add_option("KEY", raw.keys, "locks to show (default: every lock with a history)");
    command->add_option("-n,--lines", raw.lines, "the last N events (default: all that are kept)")->type_name("N");
    command->add_flag("--json", raw.json, "print one JSON object a line");
    command->add_flag("-f,--follow", raw.follow, "print new events as they come, until interrupted");
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
