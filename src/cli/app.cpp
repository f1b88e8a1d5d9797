#include "cli/main.hpp"

#include "cli/config_file.hpp"
#include "commands/commands.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "lock/validity.hpp"
#include "log.hpp"
#include "proc/signals.hpp"
#include "redis/tls.hpp"
#include "redis/url.hpp"
#include "util/file.hpp"
#include "util/standard_fds.hpp"
#include "util/text.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <cstdlib>
#include <exception>
#include <system_error>

#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace rlock::cli {

namespace {

using util::Millis;

// Every option as text, straight from CLI11, the environment or the config file.
struct Raw {
  std::vector<std::string> urls;
  std::string url, connect_timeout, timeout, prefix, config, node_timeout;
  std::string cacert, cert, tls_key, password_file;
  bool insecure = false;
  std::string wait_replicas, wait_timeout;
  bool quiet = false, verbose = false;
  std::string key;
  std::vector<std::string> keys;
  std::string pattern = "*";
  std::string ttl, wait, limit;
  bool no_wait = false, shared = false, exclusive = false;
  std::string conflict_exit_code;
  std::string command;
  std::vector<std::string> child;
  std::string signal, kill_after, lost_exit_code, max_hold, leftovers;
  bool strict = false;
  std::string sentinel_user, sentinel_password_file;
  std::string token_file, token_env;
  bool json = false, force = false;
  bool keepalive = false;
  std::string pid, keeper_log;
};

// The config file read, for messages.
std::string g_config_path;

// The standard descriptors the caller had closed.
util::ClosedFds g_closed;

// Where a setting's value came from, for error messages and exit codes.
enum class Source { unset, argv, env, config };

// A setting that the environment and the config file may give when argv does not.
struct Setting {
  std::string name;  // long option name
  std::vector<CLI::Option*> options;  // global options are defined before and after the command name
  std::string* text;  // one of these two
  bool* flag;
  Source source = Source::unset;
  std::string variable;  // Source::env: the variable that gave the value

  bool given() const {
    for (const CLI::Option* o : options) {
      if (o->count() > 0) return true;
    }
    return false;
  }
};

struct Parsed {
  CLI::App* command = nullptr;
  std::vector<Setting> settings;
};

[[noreturn]] void usage(const std::string& message) { throw Error(exit_code::k_usage, message); }

std::string env_name(const std::string& option) {
  // RLOCK_KEY is what run tells its child the lock's name is: the TLS key file needs another name.
  if (option == "key") return "RLOCK_TLS_KEY";
  std::string name = "RLOCK_";
  for (char c : option) name += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return name;
}

Setting* find_setting(Parsed& p, const std::string& name) {
  for (Setting& s : p.settings) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// The setting a command surely registered.
Setting& get(Parsed& p, const std::string& name) {
  if (Setting* s = find_setting(p, name)) return *s;
  throw Error(exit_code::k_internal, fmt::format("no setting {}", name));
}

// The text that names a setting in an error: the option, the variable, or the config file.
std::string origin(const Setting& s) {
  switch (s.source) {
    case Source::env: return s.variable;
    case Source::config: return fmt::format("{} (config file {})", s.name, g_config_path);
    default: return "--" + s.name;
  }
}

[[noreturn]] void bad_setting(const Setting& s, const std::string& why) {
  throw Error(s.source == Source::config ? exit_code::k_config : exit_code::k_usage,
              fmt::format("{}: {}", origin(s), why));
}

bool parse_bool(const Setting& s, const std::string& text) {
  std::string v = text;
  for (char& c : v) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  bad_setting(s, fmt::format("'{}' is not true or false", text));
}

void assign(Setting& s, const std::string& value, Source source) {
  s.source = source;
  if (s.flag) {
    *s.flag = parse_bool(s, value);
  } else {
    *s.text = value;
  }
}

// Fills the settings argv left unset: the environment first, then the config file.
void layer_settings(Parsed& p, const std::string& config_path, bool config_required) {
  for (Setting& s : p.settings) {
    if (s.given()) s.source = Source::argv;
  }
  for (Setting& s : p.settings) {
    if (s.source != Source::unset) continue;
    // Older or shared names come second: REDIS_URL, and RLOCK_TIMEOUT from --timeout's name.
    std::string fallback = s.name == "url" ? "REDIS_URL" : s.name == "io-timeout" ? "RLOCK_TIMEOUT" : "";
    for (const std::string& variable : {env_name(s.name), fallback}) {
      if (variable.empty()) continue;
      const char* value = std::getenv(variable.c_str());
      if (!value || !*value) continue;  // an empty variable counts as unset
      s.variable = variable;
      assign(s, value, Source::env);
      break;
    }
  }
  if (config_path.empty()) return;
  g_config_path = config_path;
  std::string text;
  try {
    text = util::read_small_file(config_path, 1 << 20);
  } catch (const std::system_error& e) {
    if (!config_required && e.code() == std::errc::no_such_file_or_directory) return;
    throw Error(exit_code::k_config, fmt::format("cannot read config file {}: {}", config_path, e.code().message()));
  } catch (const std::length_error&) {
    throw Error(exit_code::k_config, fmt::format("config file {} is too large", config_path));
  }
  static const std::vector<std::string> k_known = {
      "url",    "connect-timeout", "io-timeout",  "prefix",       "quiet",         "verbose",
      "ttl",    "wait",            "conflict-exit-code", "signal", "kill-after", "lost-exit-code",
      "max-hold", "leftovers",     "strict",   "limit",  "token-env",    "cacert",        "cert",
      "key",    "insecure",        "password-file", "wait-replicas", "wait-timeout", "sentinel-user",
      "sentinel-password-file", "keeper-log", "node-timeout"};
  for (const auto& [key, value] : parse_config(text, config_path)) {
    std::string name = key == "timeout" ? "io-timeout" : key;  // --timeout's name
    if (std::find(k_known.begin(), k_known.end(), name) == k_known.end()) {
      throw Error(exit_code::k_config, fmt::format("{}: unknown setting '{}'", config_path, name));
    }
    Setting* s = find_setting(p, name);
    if (s && s->source == Source::unset) assign(*s, value, Source::config);
  }
}

// The config file to read: --config, RLOCK_CONFIG, then the default paths (which may be absent).
std::pair<std::string, bool> config_path(const Raw& raw) {
  if (!raw.config.empty()) return {raw.config, true};
  if (const char* env = std::getenv("RLOCK_CONFIG"); env && *env) return {env, true};
  const char* xdg = std::getenv("XDG_CONFIG_HOME");
  const char* home = std::getenv("HOME");
  std::string user_path;
  if (xdg && *xdg) user_path = std::string(xdg) + "/rlock/config.toml";
  else if (home && *home) user_path = std::string(home) + "/.config/rlock/config.toml";
  if (!user_path.empty() && ::access(user_path.c_str(), F_OK) == 0) return {user_path, false};
  return {"/etc/rlock/config.toml", false};
}

Millis duration_of(Parsed& p, const std::string& name, const std::string& text, Millis fallback, bool allow_zero) {
  Setting* s = find_setting(p, name);
  if (!s || s->source == Source::unset) return fallback;
  std::string why;
  auto d = util::parse_duration(text, &why);
  if (!d) bad_setting(*s, fmt::format("'{}' is not a duration: {} (use e.g. 500ms, 30s, 5m, 1h30m)", text, why));
  if (!allow_zero && d->count() <= 0) bad_setting(*s, "must be more than zero");
  return *d;
}

int exit_code_setting(Parsed& p, const std::string& name, const std::string& text, int fallback) {
  Setting* s = find_setting(p, name);
  if (!s || s->source == Source::unset) return fallback;
  long long v = 0;
  if (!util::parse_int(text, 0, 255, v)) bad_setting(*s, fmt::format("'{}' is not an exit code in 0-255", text));
  return static_cast<int>(v);
}

void check_key(const std::string& key) {
  if (key.empty()) usage("the lock KEY is empty");
  // PREFIX{}...: an empty hash tag would scatter the lock's keys over Cluster slots.
  if (key.front() == '}') usage("the lock KEY must not start with '}'");
  for (char c : key) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) usage("the lock KEY contains a control character");
  }
  if (!util::valid_utf8(key)) usage("the lock KEY is not valid UTF-8");
}

std::string setting_text(Parsed& p, const std::string& name, const std::string& value) {
  return get(p, name).source == Source::unset ? std::string() : value;
}

// The first line of the password file a setting names.
std::string read_password_file(const Setting& file, const std::string& path) {
  std::string text;
  try {
    text = util::read_small_file(path, 4096);
  } catch (const std::system_error& e) {
    throw Error(exit_code::k_config, fmt::format("cannot read {} {}: {}", origin(file), path, e.code().message()));
  } catch (const std::length_error&) {
    throw Error(exit_code::k_config, fmt::format("{} {} is too large for a password", origin(file), path));
  }
  std::string password(util::trim(text.substr(0, text.find('\n'))));
  if (password.empty()) throw Error(exit_code::k_config, fmt::format("{} {} is empty", origin(file), path));
  return password;
}

// The password when the URL has none: --password-file, RLOCK_PASSWORD, then REDISCLI_AUTH.
std::string password_from_elsewhere(Parsed& p, const Raw& raw) {
  Setting& file = get(p, "password-file");
  if (file.source != Source::unset) return read_password_file(file, raw.password_file);
  for (const char* name : {"RLOCK_PASSWORD", "REDISCLI_AUTH"}) {
    const char* pw = std::getenv(name);
    if (pw && *pw) return pw;
  }
  return {};
}

// The sentinels' own password: --sentinel-password-file, then RLOCK_SENTINEL_PASSWORD.
std::string sentinel_password(Parsed& p, const Raw& raw) {
  Setting& file = get(p, "sentinel-password-file");
  if (file.source != Source::unset) return read_password_file(file, raw.sentinel_password_file);
  const char* pw = std::getenv("RLOCK_SENTINEL_PASSWORD");
  return pw ? pw : "";
}

// Splits a list of URLs given as one text: at spaces, and at commas that start another URL (a
// Sentinel URL's hosts are separated by commas too).
std::vector<std::string> split_urls(const std::string& text) {
  std::vector<std::string> out;
  // Only spaces separate: a tab or a line break is a control character in a URL, and refused.
  for (const std::string& word : util::split(text, " ")) {
    size_t start = 0;
    for (size_t i = 0; i < word.size(); ++i) {
      if (word[i] != ',') continue;
      size_t scheme = word.find("://", i + 1);
      bool next_url = scheme != std::string::npos &&
                      word.find_first_not_of("abcdefghijklmnopqrstuvwxyz+", i + 1) == scheme;
      if (next_url) {
        out.push_back(word.substr(start, i - start));
        start = i + 1;
      }
    }
    out.push_back(word.substr(start));
  }
  return out;
}

commands::ConnectOptions connect_options(Parsed& p, const Raw& raw) {
  commands::ConnectOptions c;
  Setting& url = get(p, "url");
  std::vector<std::string> texts;
  if (url.source == Source::unset) {
    texts = {"redis://127.0.0.1:6379"};
  } else if (url.source == Source::argv) {
    for (const std::string& u : raw.urls) {
      for (const std::string& piece : split_urls(u)) texts.push_back(piece);
    }
  } else {
    texts = split_urls(raw.url);
  }
  if (texts.empty()) bad_setting(url, "no URL");
  if (texts.size() > 15) bad_setting(url, "more than 15 masters");
  for (const std::string& text : texts) {
    redis::Url parsed;
    try {
      parsed = redis::parse_url(text);
    } catch (const Error& e) {
      if (url.source == Source::unset || url.source == Source::argv) throw;
      throw Error(e.exit_code(), fmt::format("{}: {}", origin(url), e.what()));
    }
    if (parsed.endpoint.password.empty()) {
      parsed.endpoint.password = password_from_elsewhere(p, raw);
    } else if (url.source == Source::argv) {
      log::warning("a password in a --url on the command line is visible to every user in ps; use "
                   "--password-file, REDISCLI_AUTH or RLOCK_PASSWORD");
    }
    if (parsed.kind == redis::Url::Kind::sentinel) {
      parsed.sentinel_user = setting_text(p, "sentinel-user", raw.sentinel_user);
      parsed.sentinel_password = sentinel_password(p, raw);
      if (!parsed.sentinel_user.empty() && parsed.sentinel_password.empty()) {
        log::warning("--sentinel-user is used only with a sentinel password (--sentinel-password-file or "
                     "RLOCK_SENTINEL_PASSWORD)");
      }
    }
    c.urls.push_back(std::move(parsed));
  }
  if (c.urls.size() == 2) {
    log::warning("two masters make a majority only when both answer: a Redlock quorum is safer with 3 or 5");
  }
  if (get(p, "node-timeout").source != Source::unset) {
    c.node_timeout = duration_of(p, "node-timeout", raw.node_timeout, Millis(0), false);
  }
  c.timeouts.connect = duration_of(p, "connect-timeout", raw.connect_timeout, c.timeouts.connect, false);
  c.timeouts.command = duration_of(p, "io-timeout", raw.timeout, c.timeouts.command, false);
  if (Setting* s = find_setting(p, "prefix"); s && s->source != Source::unset) {
    if (raw.prefix.find_first_of("{}") != std::string::npos) {
      bad_setting(*s, "must not contain { or } (rlock adds the Cluster hash tag itself)");
    }
    c.prefix = raw.prefix;
  }
  c.tls.cacert = setting_text(p, "cacert", raw.cacert);
  c.tls.cert = setting_text(p, "cert", raw.cert);
  c.tls.key = setting_text(p, "key", raw.tls_key);
  c.tls.insecure = raw.insecure;
  for (auto [path, option] : {std::pair{&c.tls.cacert, "cacert"}, {&c.tls.cert, "cert"}, {&c.tls.key, "key"}}) {
    if (path->empty()) continue;
    struct stat st {};
    if (::stat(path->c_str(), &st) != 0 || !S_ISREG(st.st_mode) || ::access(path->c_str(), R_OK) != 0) {
      Setting& s = get(p, option);
      throw Error(exit_code::k_config, fmt::format("cannot read {} {}: {}", origin(s), *path,
                                                   S_ISDIR(st.st_mode) ? "is a directory" : std::strerror(errno)));
    }
  }
  bool tls = false;
  for (const redis::Url& u : c.urls) tls = tls || u.endpoint.tls;
  if (!tls && (!c.tls.cacert.empty() || !c.tls.cert.empty() || !c.tls.key.empty() || c.tls.insecure)) {
    log::warning("TLS options are ignored for a URL that is not rediss://");
  }
  if (tls) redis::prepare_tls(c.tls);
  if (tls && c.tls.insecure) {
    log::warning("--insecure: the server's certificate is not verified; anyone in between can impersonate it");
  }
  return c;
}

commands::TakeOptions take_options(Parsed& p, const Raw& raw) {
  commands::TakeOptions t;
  check_key(raw.key);
  t.key = raw.key;
  t.ttl = duration_of(p, "ttl", raw.ttl, t.ttl, false);
  if (t.ttl < lock::validity::k_min_ttl) {
    bad_setting(get(p, "ttl"),
                fmt::format("must be at least {}", util::format_duration(lock::validity::k_min_ttl)));
  }
  if (raw.no_wait) {
    t.wait = Millis(0);
  } else if (get(p, "wait").source != Source::unset) {
    t.wait = duration_of(p, "wait", raw.wait, Millis(0), true);
  }
  t.conflict_exit_code = exit_code_setting(p, "conflict-exit-code", raw.conflict_exit_code, t.conflict_exit_code);
  if (Setting& s = get(p, "wait-replicas"); s.source != Source::unset) {
    long long n = 0;
    if (!util::parse_int(raw.wait_replicas, 0, 1000, n)) bad_setting(s, fmt::format("'{}' is not a number of replicas", raw.wait_replicas));
    t.wait_replicas = static_cast<int>(n);
  }
  t.wait_timeout = duration_of(p, "wait-timeout", raw.wait_timeout, t.wait_timeout, false);
  t.strict = raw.strict;
  if (Setting& s = get(p, "limit"); s.source != Source::unset) {
    long long n = 0;
    if (!util::parse_int(raw.limit, 1, 1'000'000, n)) {
      bad_setting(s, fmt::format("'{}' is not a number of holders in 1-1000000", util::printable(raw.limit)));
    }
    t.limit = static_cast<int>(n);
  }
  t.shared = raw.shared;
  if (t.shared && t.limit > 1) usage("--shared and --limit exclude each other: a lock is shared, or a semaphore");
  if (raw.exclusive && t.limit > 1) usage("--exclusive and --limit exclude each other: a semaphore has N holders");
  return t;
}

std::string join_command(const std::vector<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    if (!out.empty()) out += ' ';
    bool plain = !a.empty() && a.find_first_of(" \t\n'\"\\$`*?;&|<>()") == std::string::npos;
    out += plain ? a : "'" + a + "'";
  }
  return out;
}

commands::RunOptions run_options(Parsed& p, const Raw& raw) {
  commands::RunOptions r;
  r.connect = connect_options(p, raw);
  r.take = take_options(p, raw);
  bool has_c = p.command->get_option("--command")->count() > 0;
  if (has_c && !raw.child.empty()) usage("give the command either after -- or with -c, not both");
  if (has_c) {
    if (raw.command.empty()) usage("-c needs a shell command");
    r.argv = {"/bin/sh", "-c", raw.command};
    r.display_command = raw.command;
  } else {
    if (raw.child.empty()) usage("missing command: rlock run KEY -- COMMAND [ARG...] or rlock run KEY -c 'COMMAND'");
    r.argv = raw.child;
    r.display_command = join_command(raw.child);
  }
  if (Setting& s = get(p, "signal"); s.source != Source::unset) {
    auto sig = proc::parse_signal(raw.signal);
    if (!sig) bad_setting(s, fmt::format("'{}' is not a signal name or number", raw.signal));
    r.stop_signal = *sig;
  }
  r.lost_exit_code = exit_code_setting(p, "lost-exit-code", raw.lost_exit_code, r.lost_exit_code);
  if (get(p, "max-hold").source != Source::unset) {
    r.max_hold = duration_of(p, "max-hold", raw.max_hold, Millis(0), false);
  }
  if (Setting& s = get(p, "leftovers"); s.source != Source::unset) {
    std::string value = raw.leftovers;
    for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (value == "wait") r.leftovers = commands::Leftovers::wait;
    else if (value == "kill") r.leftovers = commands::Leftovers::kill;
    else bad_setting(s, fmt::format("'{}' is neither wait nor kill", util::printable(raw.leftovers)));
  }
  // The child must be gone before the lease can expire: --kill-after must fit in the TTL.
  Millis limit = lock::validity::max_kill_after(r.take.ttl);
  Setting& kill = get(p, "kill-after");
  if (kill.source == Source::unset) {
    r.kill_after = std::min(r.kill_after, limit);
  } else {
    r.kill_after = duration_of(p, "kill-after", raw.kill_after, r.kill_after, true);
    if (r.kill_after > limit) {
      bad_setting(kill, fmt::format("{} is too long for a TTL of {}: the child could outlive the lock; use at most "
                                     "{} or a longer --ttl",
                                     util::format_duration(r.kill_after), util::format_duration(r.take.ttl),
                                     util::format_duration(limit)));
    }
  }
  return r;
}

commands::TokenSource token_source(Parsed& p, const Raw& raw) {
  commands::TokenSource t;
  t.file = raw.token_file;
  if (get(p, "token-env").source != Source::unset) {
    if (raw.token_env.empty()) bad_setting(get(p, "token-env"), "empty variable name");
    t.env = raw.token_env;
  }
  return t;
}

// Registers an option that the environment and the config file may also set. A global option is
// registered twice, before the command name (on the application) and after it (on the command),
// as one setting.
Setting& register_setting(Parsed& p, const std::string& name, CLI::Option* o, std::string* text, bool* flag) {
  if (Setting* s = find_setting(p, name)) {
    s->options.push_back(o);
    return *s;
  }
  p.settings.push_back({name, {o}, text, flag, Source::unset, {}});
  return p.settings.back();
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

// The options every command takes, before or after its name.
void add_common(Parsed& p, CLI::App* app, Raw& raw) {
  {
    // Repeatable: several URLs of independent masters make a Redlock quorum. The environment and
    // the config file give them as one text, space (or comma) separated.
    CLI::Option* o = app->add_option("-u,--url", raw.urls,
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
  setting(p, app, "--io-timeout,--timeout", "io-timeout", raw.timeout,
          "per-command timeout; --timeout is the same option (default 2s)")
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
}

void add_take(Parsed& p, CLI::App* app, Raw& raw) {
  app->add_option("KEY", raw.key, "the lock's name")->required();
  setting(p, app, "-t,--ttl", "ttl", raw.ttl, "lease length (default 30s)")->type_name("D");
  CLI::Option* wait = setting(p, app, "-w,--wait", "wait", raw.wait, "wait at most D (default: forever)");
  wait->type_name("D");
  app->add_flag("-n,--no-wait,--nb,--nonblock", raw.no_wait, "fail at once if the lock is held (same as -w 0)")->excludes(wait);
  setting(p, app, "-E,--conflict-exit-code", "conflict-exit-code", raw.conflict_exit_code,
          "exit code when the lock is busy (default 75)")
      ->type_name("N");
  setting(p, app, "--wait-replicas", "wait-replicas", raw.wait_replicas,
          "after acquiring, wait for N replicas to acknowledge (best effort)")
      ->type_name("N");
  setting(p, app, "--wait-timeout", "wait-timeout", raw.wait_timeout, "how long --wait-replicas waits (default 1s)")
      ->type_name("D");
  flag_setting(p, app, "--strict", "strict", raw.strict,
               "refuse a server whose maxmemory-policy can evict locks (default: warn)");
  setting(p, app, "--limit", "limit", raw.limit, "a semaphore: up to N holders at once; all must agree on N")
      ->type_name("N");
  CLI::Option* shared = app->add_flag("-s,--shared", raw.shared, "a shared hold: many shared holders, or one exclusive");
  app->add_flag("-x,--exclusive", raw.exclusive, "an exclusive hold (the default)")->excludes(shared);
}

void add_token_source(Parsed& p, CLI::App* app, Raw& raw) {
  app->add_option("--token-file", raw.token_file, "read the token from F")->type_name("F");
  setting(p, app, "--token-env", "token-env", raw.token_env, "read the token from variable NAME (default RLOCK_TOKEN)")
      ->type_name("NAME");
}

int dispatch(Parsed& p, Raw& raw) {
  auto [path, required] = config_path(raw);
  layer_settings(p, path, required);
  if (raw.verbose) log::set_level(log::Level::verbose);
  else if (raw.quiet) log::set_level(log::Level::quiet);

  const std::string name = p.command->get_name();
  if (name == "run") return commands::run(run_options(p, raw));
  if (name == "acquire") {
    commands::AcquireOptions o;
    o.connect = connect_options(p, raw);
    o.take = take_options(p, raw);
    o.token_file = raw.token_file;
    o.json = raw.json;
    o.stdout_closed = g_closed.out;
    if (!o.token_file.empty() && o.json) usage("--token-file and --json exclude each other");
    o.keepalive = raw.keepalive;
    bool keeper_options = !raw.pid.empty() || get(p, "signal").source == Source::argv ||
                          get(p, "max-hold").source == Source::argv || get(p, "keeper-log").source == Source::argv;
    if (keeper_options && !o.keepalive) usage("--pid, --signal, --max-hold and --keeper-log go with --keepalive");
    if (!raw.pid.empty()) {
      long long pid = 0;
      if (!util::parse_int(raw.pid, 2, INT32_MAX, pid)) usage(fmt::format("--pid: '{}' is not a process id", util::printable(raw.pid)));
      o.watch_pid = static_cast<pid_t>(pid);
    }
    if (o.keepalive) {
      if (Setting& sig = get(p, "signal"); sig.source != Source::unset) {
        auto n = proc::parse_signal(raw.signal);
        if (!n) bad_setting(sig, fmt::format("'{}' is not a signal name or number", util::printable(raw.signal)));
        o.signal = *n;
      }
      if (get(p, "max-hold").source != Source::unset) o.max_hold = duration_of(p, "max-hold", raw.max_hold, Millis(0), false);
      o.keeper_log = setting_text(p, "keeper-log", raw.keeper_log);
    }
    return commands::acquire(o);
  }
  if (name == "release") {
    commands::ReleaseOptions o;
    check_key(raw.key);
    o.connect = connect_options(p, raw);
    o.key = raw.key;
    o.force = raw.force;
    o.token = token_source(p, raw);
    return commands::release(o);
  }
  if (name == "extend") {
    commands::ExtendOptions o;
    check_key(raw.key);
    o.connect = connect_options(p, raw);
    o.key = raw.key;
    o.token = token_source(p, raw);
    if (get(p, "ttl").source != Source::unset) {
      o.ttl = duration_of(p, "ttl", raw.ttl, util::Millis(0), false);
      if (*o.ttl < lock::validity::k_min_ttl) {
        bad_setting(get(p, "ttl"), fmt::format("must be at least {}", util::format_duration(lock::validity::k_min_ttl)));
      }
    }
    return commands::extend(o);
  }
  if (name == "status") {
    commands::StatusOptions o;
    for (const std::string& k : raw.keys) check_key(k);
    o.connect = connect_options(p, raw);
    o.keys = raw.keys;
    o.json = raw.json;
    return commands::status(o);
  }
  commands::ListOptions o;
  o.connect = connect_options(p, raw);
  o.pattern = raw.pattern.empty() ? "*" : raw.pattern;
  o.json = raw.json;
  return commands::list(o);
}

// Whether the option word (e.g. "-t", "--ttl", "-nt", "--ttl=5", "-t5") takes the next argument
// as its value, for the options of `apps`.
bool takes_next(std::initializer_list<CLI::App*> apps, std::string_view word) {
  auto find = [&](const std::string& name) -> const CLI::Option* {
    for (CLI::App* a : apps) {
      if (const CLI::Option* o = a->get_option_no_throw(name)) return o;
    }
    return nullptr;
  };
  if (word.substr(0, 2) == "--") {
    if (word.find('=') != std::string_view::npos) return false;
    const CLI::Option* o = find(std::string(word));
    return o && o->get_items_expected_max() > 0;
  }
  // A cluster of short options: flags, then perhaps one that takes a value, attached or next.
  for (size_t i = 1; i < word.size(); ++i) {
    const CLI::Option* o = find(std::string("-") + word[i]);
    if (!o) return false;  // unknown: CLI11 reports it
    if (o->get_items_expected_max() > 0) return i + 1 == word.size();
  }
  return false;
}

bool is_option_word(const std::string& word) { return word.size() > 1 && word.front() == '-'; }

// The position of the command name in args, after the global options that may precede it; 0 when
// there is none.
size_t command_position(CLI::App* app, const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--") return 0;
    if (!is_option_word(args[i])) return i;
    if (takes_next({app}, args[i])) ++i;
  }
  return 0;
}

// Splits run's arguments where its options end: at "--", or at the first word after KEY that is
// not an option or an option's value (as flock and env do), so `rlock run k make -n` passes -n to
// make. Returns the arguments for CLI11 and sets child to the command.
std::vector<std::string> split_run_command(CLI::App* app, CLI::App* run, const std::vector<std::string>& args,
                                           size_t at, std::vector<std::string>& child) {
  std::vector<std::string> head(args.begin(), args.begin() + static_cast<std::ptrdiff_t>(at) + 1);
  bool key_seen = false;
  for (size_t i = at + 1; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") {
      if (!key_seen) usage("missing KEY before --: rlock run KEY [OPTIONS] [--] COMMAND [ARG...]");
      child.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      return head;
    }
    if (is_option_word(word)) {
      head.push_back(word);
      if (takes_next({run, app}, word) && i + 1 < args.size()) head.push_back(args[++i]);
      continue;
    }
    if (!key_seen) {
      head.push_back(word);
      key_seen = true;
      continue;
    }
    child.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
    return head;
  }
  return head;
}

int parse_and_run(int argc, char** argv) {
  Raw raw;
  Parsed p;
  CLI::App app{"rlock: a lock for shell scripts, cron jobs and CI, held in Redis.", "rlock"};
  app.set_version_flag("-V,--version", "rlock " RLOCK_VERSION);
  app.require_subcommand(1);
  app.footer("Global options may come before or after the command name.\n"
             "Run 'rlock COMMAND --help' for a command's options; 'man rlock' for the whole story.");
  add_common(p, &app, raw);

  std::vector<std::string> args(argv, argv + argc);
  size_t at = command_position(&app, args);
  // Only the command named on the line gets its options: the others are listed by name, which is
  // all `rlock --help` shows, and start-up does no work for them.
  std::string wanted = at ? args[at] : "";
  auto command = [&](const char* name, const char* description, auto&& define) {
    CLI::App* sub = app.add_subcommand(name, description);
    if (wanted == name) {
      p.command = sub;
      sub->set_version_flag("-V,--version", "rlock " RLOCK_VERSION);
      define(sub);
      add_common(p, sub, raw);
    }
  };

  command("run", "take KEY, run a command while renewing it, release it", [&](CLI::App* run) {
    add_take(p, run, raw);
    run->add_option("-c,--command", raw.command, "run S with /bin/sh -c instead of COMMAND")->type_name("S");
    setting(p, run, "--signal", "signal", raw.signal, "signal sent to the child when the lock is lost (default TERM)")
        ->type_name("SIG");
    setting(p, run, "--kill-after", "kill-after", raw.kill_after, "then SIGKILL after D (default 5s)")
        ->type_name("D");
    setting(p, run, "--lost-exit-code", "lost-exit-code", raw.lost_exit_code,
            "exit code when the lock was lost (default 76)")
        ->type_name("N");
    setting(p, run, "--max-hold", "max-hold", raw.max_hold, "stop the child as if lost after D")->type_name("D");
    setting(p, run, "--leftovers", "leftovers", raw.leftovers,
            "processes the command leaves running when it exits: wait (keep the lock until they end) or kill "
            "(end them); default wait")
        ->type_name("WHAT");
  });
  command("acquire", "take KEY and keep it after rlock exits; print the token", [&](CLI::App* acquire) {
    add_take(p, acquire, raw);
    acquire->add_option("--token-file", raw.token_file, "write the token to F (mode 0600) instead of stdout")
        ->type_name("F");
    acquire->add_flag("--json", raw.json, "print key, token, fence and TTL as JSON");
    acquire->add_flag("--keepalive", raw.keepalive,
                      "a keeper renews the lock while the calling process (or --pid) lives, and releases it then");
    acquire->add_option("--pid", raw.pid, "with --keepalive: the process whose life the hold follows")
        ->type_name("PID");
    setting(p, acquire, "--signal", "signal", raw.signal,
            "with --keepalive: signal sent to that process if the lock is lost (default: none)")
        ->type_name("SIG");
    setting(p, acquire, "--max-hold", "max-hold", raw.max_hold, "with --keepalive: give the lock up after D")
        ->type_name("D");
    setting(p, acquire, "--keeper-log", "keeper-log", raw.keeper_log,
            "with --keepalive: the keeper logs to file F, or to syslog with syslog: (default: no log)")
        ->type_name("F");
  });
  command("release", "give KEY back (token from --token-file or $RLOCK_TOKEN)", [&](CLI::App* release) {
    release->add_option("KEY", raw.key, "the lock's name")->required();
    add_token_source(p, release, raw);
    release->add_flag("--force", raw.force, "remove the lock without its token and print who held it");
  });
  command("extend", "reset KEY's TTL (token from --token-file or $RLOCK_TOKEN)", [&](CLI::App* extend) {
    extend->add_option("KEY", raw.key, "the lock's name")->required();
    setting(p, extend, "-t,--ttl", "ttl", raw.ttl, "new TTL (default: the TTL the lock was taken with)")
        ->type_name("D");
    add_token_source(p, extend, raw);
  });
  command("status", "who holds KEY: host, pid, user, command, since, TTL, fence", [&](CLI::App* status) {
    status->add_option("KEY", raw.keys, "locks to show (default: every held lock)");
    status->add_flag("--json", raw.json, "print JSON (an object for one KEY, else an array)");
  });
  command("list", "the held locks under the prefix (SCAN)", [&](CLI::App* list) {
    list->add_option("PATTERN", raw.pattern, "glob on lock names (default *)");
    list->add_flag("--json", raw.json, "print a JSON array");
  });

  if (!wanted.empty() && !p.command) {
    usage(fmt::format("unknown command '{}': use run, acquire, release, extend, status or list (see rlock --help)",
                      util::printable(wanted)));
  }
  if (wanted == "run") args = split_run_command(&app, p.command, args, at, raw.child);
  try {
    args.erase(args.begin());
    std::reverse(args.begin(), args.end());  // CLI11 takes the arguments last first
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      app.exit(e);
      return exit_code::k_ok;
    }
    std::string message = e.what();
    if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
    usage(fmt::format("{} (see rlock --help)", util::printable(message)));
  }
  if (p.command && p.command->parsed()) return dispatch(p, raw);
  usage("no command given (see rlock --help)");
}

int run_main(int argc, char** argv) {
  try {
    return parse_and_run(argc, argv);
  } catch (const Error& e) {
    log::error(e.what());
    return e.exit_code();
  } catch (const std::system_error& e) {
    log::error(e.what());
    return exit_code::k_system;
  } catch (const std::bad_alloc&) {
    log::error("out of memory");
    return exit_code::k_system;
  } catch (const std::exception& e) {
    log::error(fmt::format("internal error: {}", e.what()));
    return exit_code::k_internal;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything opens a file: a closed stdout must not become a Redis socket.
  g_closed = util::open_standard_fds();
  // Writes to a closed pipe are errors rlock reports (71), never a SIGPIPE that would replace a
  // child's exit status; the child gets the caller's disposition back (proc::Child).
  proc::ignore_sigpipe();
  int code = run_main(argc, argv);
  // Lines still queued for a slow stderr (run) get a last chance, bounded: the lock is free by now.
  log::flush(util::BootClock::now() + std::chrono::seconds(2));
  return code;
}

}  // namespace rlock::cli
