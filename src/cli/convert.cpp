#include "cli/convert.hpp"

#include "error.hpp"
#include "exit_code.hpp"
#include "lock/validity.hpp"
#include "log.hpp"
#include "proc/signals.hpp"
#include "redis/tls.hpp"
#include "redis/url.hpp"
#include "util/file.hpp"
#include "util/text.hpp"

#include <fmt/core.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <system_error>

#include <sys/stat.h>
#include <unistd.h>

namespace rlock::cli {

using util::Millis;

namespace {

Millis duration_of(Parsed& p, const std::string& name, const std::string& text, Millis fallback, bool allow_zero) {
  Setting* s = find_setting(p, name);
  if (!s || s->source == Source::unset) return fallback;
  std::string why;
  auto d = util::parse_duration(text, &why);
  if (!d && why.rfind("too long", 0) == 0) bad_setting(*s, fmt::format("'{}' is {}", util::printable(text), why));
  if (!d) {
    bad_setting(*s, fmt::format("'{}' is not a duration: {} (a number and a unit of ms, s, m, h or d: 500ms, 30s, "
                                "1h30m)",
                                util::printable(text), why));
  }
  if (!allow_zero && d->count() <= 0) bad_setting(*s, "must be more than zero");
  return *d;
}

int exit_code_setting(Parsed& p, const std::string& name, const std::string& text, int fallback) {
  Setting* s = find_setting(p, name);
  if (!s || s->source == Source::unset) return fallback;
  long long v = 0;
  if (!util::parse_int(text, 0, 255, v)) {
    bad_setting(*s, fmt::format("'{}' is not an exit code in 0-255", util::printable(text)));
  }
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
  // Only spaces separate (and are dropped around the URLs): a tab or a line break is a control
  // character in a URL, and refused.
  for (const std::string& word : util::split(text, " ")) {
    size_t start = 0;
    for (size_t i = 0; i < word.size(); ++i) {
      if (word[i] != ',') continue;
      size_t scheme = word.find("://", i + 1);
      bool next_url =
          scheme != std::string::npos && word.find_first_not_of("abcdefghijklmnopqrstuvwxyz+", i + 1) == scheme;
      if (next_url) {
        out.push_back(word.substr(start, i - start));
        start = i + 1;
      }
    }
    out.push_back(word.substr(start));
  }
  return out;
}

commands::TakeOptions take_options(Parsed& p, const Raw& raw) {
  commands::TakeOptions t;
  if (raw.flock_close) {
    usage(
        "-o is flock's option to close the lock's file descriptor: an rlock lock is a lease, not a descriptor, "
        "and rlock run holds it until the command and the processes it leaves running end (see --leftovers)");
  }
  if (raw.flock_no_fork) {
    usage(
        "-F/--no-fork cannot work with rlock: a lease must be renewed, and the command stopped if it is lost, by "
        "an rlock process that stays its parent");
  }
  check_key(raw.key);
  t.key = raw.key;
  t.ttl = duration_of(p, "ttl", raw.ttl, t.ttl, false);
  if (t.ttl < lock::validity::k_min_ttl) {
    bad_setting(get(p, "ttl"), fmt::format("must be at least {}", util::format_duration(lock::validity::k_min_ttl)));
  }
  if (raw.no_wait) {
    t.wait = Millis(0);
  } else if (get(p, "wait").source != Source::unset) {
    t.wait = duration_of(p, "wait", raw.wait, Millis(0), true);
  }
  t.conflict_exit_code = exit_code_setting(p, "conflict-exit-code", raw.conflict_exit_code, t.conflict_exit_code);
  if (Setting& s = get(p, "wait-replicas"); s.source != Source::unset) {
    long long n = 0;
    if (!util::parse_int(raw.wait_replicas, 0, 1000, n))
      bad_setting(s, fmt::format("'{}' is not a number of replicas", raw.wait_replicas));
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
  t.min_hold = duration_of(p, "min-hold", raw.min_hold, Millis(0), true);
  t.supersede = raw.supersede;
  t.preempt = raw.preempt;
  if (t.supersede && t.wait && t.wait->count() == 0) {
    usage("--supersede replaces older waiting requests, and with -n (or -w 0) this one never waits: leave one out");
  }
  if (t.preempt && (t.shared || t.limit > 1)) {
    usage("--preempt stops an exclusive holder: it does not go with --shared or --limit");
  }
  return t;
}

// The options a Redlock quorum (several URLs) cannot serve: it has no queue, and each master
// holds only exclusive locks.
void check_quorum(const commands::ConnectOptions& c, const commands::TakeOptions& t, bool preemptible) {
  if (c.urls.size() < 2) return;
  if (t.shared || t.limit > 1) usage("--shared and --limit are not available with several URLs (a Redlock quorum)");
  if (t.supersede || t.preempt || preemptible) {
    usage(
        "--supersede, --preempt and --preemptible need a queue, which a Redlock quorum (several URLs) does not "
        "have");
  }
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

commands::TokenSource token_source(Parsed& p, const Raw& raw) {
  commands::TokenSource t;
  if (raw.token_file_given && raw.token_file.empty()) {
    usage(
        "--token-file is empty (an unset variable?): give the file rlock acquire wrote the token to, or leave "
        "the option out to read $RLOCK_TOKEN");
  }
  t.file = raw.token_file;
  if (Setting& s = get(p, "token-env"); s.source != Source::unset) {
    // An empty RLOCK_TOKEN_ENV is refused too (layer_settings keeps it): it is an unset variable's mistake.
    if (raw.token_env.empty()) bad_setting(s, "empty: give the name of the variable that holds the token");
    bool name = raw.token_env.front() < '0' || raw.token_env.front() > '9';
    for (char c : raw.token_env) {
      name = name && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
    }
    if (!name) {
      bad_setting(s, fmt::format("'{}' is not a variable name (letters, digits and _; e.g. RLOCK_TOKEN)",
                                 util::printable(raw.token_env)));
    }
    t.env = raw.token_env;
  }
  return t;
}

}  // namespace

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
  for (size_t i = 0; i < texts.size(); ++i) {
    redis::Url parsed;
    try {
      parsed = redis::parse_url(texts[i]);
    } catch (const Error& e) {
      // Say how the text was read: several URLs make a Redlock quorum, and a stray space makes several.
      std::string which =
          texts.size() > 1 ? fmt::format(" (read as {} URLs of a Redlock quorum; this is URL {})", texts.size(), i + 1)
                           : "";
      if (url.source == Source::unset || url.source == Source::argv) {
        throw Error(e.exit_code(), fmt::format("{}{}", e.what(), which));
      }
      throw Error(e.exit_code(), fmt::format("{}: {}{}", origin(url), e.what(), which));
    }
    if (parsed.endpoint.password.empty()) {
      parsed.endpoint.password = password_from_elsewhere(p, raw);
    } else if (url.source == Source::argv) {
      log::warning(
          "a password in a --url on the command line is visible to every user in ps; use "
          "--password-file, REDISCLI_AUTH or RLOCK_PASSWORD");
    }
    if (parsed.kind == redis::Url::Kind::sentinel) {
      parsed.sentinel_user = setting_text(p, "sentinel-user", raw.sentinel_user);
      parsed.sentinel_password = sentinel_password(p, raw);
      if (!parsed.sentinel_user.empty() && parsed.sentinel_password.empty()) {
        log::warning(
            "--sentinel-user is used only with a sentinel password (--sentinel-password-file or "
            "RLOCK_SENTINEL_PASSWORD)");
      }
    }
    c.urls.push_back(std::move(parsed));
  }
  if (c.urls.size() > 1 && log::verbose_enabled()) {
    std::string list;
    for (const redis::Url& u : c.urls) list += (list.empty() ? "" : ", ") + u.display();
    log::verbose("a Redlock quorum of {} masters: {}", c.urls.size(), list);
  }
  if (c.urls.size() == 2) {
    log::warning("two masters make a majority only when both answer: a Redlock quorum is safer with 3 or 5");
  }
  if (get(p, "node-timeout").source != Source::unset) {
    c.node_timeout = duration_of(p, "node-timeout", raw.node_timeout, Millis(0), false);
  }
  if (Setting* s = find_setting(p, "log-length"); s && s->source != Source::unset) {
    long long n = 0;
    if (!util::parse_int(raw.log_length, 0, 100'000, n)) {
      bad_setting(*s, fmt::format("'{}' is not a number of events in 0-100000", util::printable(raw.log_length)));
    }
    c.log_length = static_cast<int>(n);
  }
  c.timeouts.connect = duration_of(p, "connect-timeout", raw.connect_timeout, c.timeouts.connect, false);
  c.timeouts.command = duration_of(p, "io-timeout", raw.io_timeout, c.timeouts.command, false);
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

commands::RunOptions run_options(Parsed& p, const Raw& raw) {
  commands::RunOptions r;
  r.take = take_options(p, raw);
  r.connect = connect_options(p, raw);
  if (raw.command_given && !raw.child.empty()) usage("give the command either after -- or with -c, not both");
  if (raw.command_given) {
    if (raw.command.empty()) usage("-c needs a shell command: rlock run KEY -c 'COMMAND'");
    // "--": a command that starts with '-' is the command, not an option of sh.
    r.argv = {"/bin/sh", "-c", "--", raw.command};
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
    if (value == "wait")
      r.leftovers = commands::Leftovers::wait;
    else if (value == "kill")
      r.leftovers = commands::Leftovers::kill;
    else
      bad_setting(s, fmt::format("'{}' is neither wait nor kill", util::printable(raw.leftovers)));
  }
  r.preemptible = raw.preemptible;
  if (r.preemptible && (r.take.shared || r.take.limit > 1)) {
    usage("--preemptible is for an exclusive hold: it does not go with --shared or --limit");
  }
  check_quorum(r.connect, r.take, r.preemptible);
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

commands::AcquireOptions acquire_options(Parsed& p, const Raw& raw, bool stdout_closed) {
  commands::AcquireOptions o;
  if (raw.token_file_given && raw.token_file.empty()) {
    usage(
        "--token-file is empty (an unset variable?): give the file to write the token to, or leave the option "
        "out to print the token");
  }
  if (!raw.token_file.empty() && raw.json) usage("--token-file and --json exclude each other");
  o.take = take_options(p, raw);
  o.connect = connect_options(p, raw);
  check_quorum(o.connect, o.take, false);
  o.token_file = raw.token_file;
  o.json = raw.json;
  o.stdout_closed = stdout_closed;
  o.keepalive = raw.keepalive;
  bool keeper_options = !raw.pid.empty() || get(p, "signal").source == Source::argv ||
                        get(p, "max-hold").source == Source::argv || get(p, "keeper-log").source == Source::argv;
  if (keeper_options && !o.keepalive) usage("--pid, --signal, --max-hold and --keeper-log go with --keepalive");
  if (!raw.pid.empty()) {
    long long pid = 0;
    if (!util::parse_int(raw.pid, 2, INT32_MAX, pid)) {
      usage(fmt::format("--pid: '{}' is not a process id", util::printable(raw.pid)));
    }
    o.watch_pid = static_cast<pid_t>(pid);
  }
  if (o.keepalive) {
    if (Setting& sig = get(p, "signal"); sig.source != Source::unset) {
      auto n = proc::parse_signal(raw.signal);
      if (!n) bad_setting(sig, fmt::format("'{}' is not a signal name or number", util::printable(raw.signal)));
      o.signal = *n;
    }
    if (get(p, "max-hold").source != Source::unset)
      o.max_hold = duration_of(p, "max-hold", raw.max_hold, Millis(0), false);
    o.keeper_log = setting_text(p, "keeper-log", raw.keeper_log);
  }
  return o;
}

commands::ReleaseOptions release_options(Parsed& p, const Raw& raw) {
  commands::ReleaseOptions o;
  check_key(raw.key);
  o.token = token_source(p, raw);
  o.connect = connect_options(p, raw);
  o.key = raw.key;
  o.force = raw.force;
  return o;
}

commands::ExtendOptions extend_options(Parsed& p, const Raw& raw) {
  commands::ExtendOptions o;
  check_key(raw.key);
  o.token = token_source(p, raw);
  o.connect = connect_options(p, raw);
  o.key = raw.key;
  if (get(p, "ttl").source != Source::unset) {
    o.ttl = duration_of(p, "ttl", raw.ttl, util::Millis(0), false);
    if (*o.ttl < lock::validity::k_min_ttl) {
      bad_setting(get(p, "ttl"), fmt::format("must be at least {}", util::format_duration(lock::validity::k_min_ttl)));
    }
  }
  return o;
}

commands::StatusOptions status_options(Parsed& p, const Raw& raw) {
  commands::StatusOptions o;
  for (const std::string& k : raw.keys) check_key(k);
  o.connect = connect_options(p, raw);
  o.keys = raw.keys;
  o.json = raw.json;
  return o;
}

commands::LogOptions log_options(Parsed& p, const Raw& raw) {
  commands::LogOptions o;
  for (const std::string& k : raw.keys) check_key(k);
  if (!raw.lines.empty()) {
    long long n = 0;
    if (!util::parse_int(raw.lines, 1, 100'000, n)) {
      usage(fmt::format("-n: '{}' is not a number of events in 1-100000", util::printable(raw.lines)));
    }
    o.count = static_cast<size_t>(n);
  }
  o.connect = connect_options(p, raw);
  o.keys = raw.keys;
  o.json = raw.json;
  o.follow = raw.follow;
  return o;
}

commands::ListOptions list_options(Parsed& p, const Raw& raw) {
  commands::ListOptions o;
  o.connect = connect_options(p, raw);
  o.pattern = raw.pattern.empty() ? "*" : raw.pattern;
  o.json = raw.json;
  return o;
}

}  // namespace rlock::cli
