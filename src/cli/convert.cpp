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

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <system_error>
#include <type_traits>

#include <sys/stat.h>
#include <unistd.h>

namespace rlock::cli {

using util::Millis;

namespace {

using commands::Check;
using commands::Converted;
using commands::Type;

// An option given no value on the command line took the next word, an option or "--" (the end
// of the options, before run's command): said as such, rather than as a value that is wrong.
void check_not_option(const Setting& s, const char* what, const char* examples) {
  const std::string& t = s.text;
  if (s.source != Source::argv || t.size() < 2 || t[0] != '-' || (t[1] >= '0' && t[1] <= '9') || t[1] == '.') return;
  bad_setting(s, fmt::format("'{}' is {}, not {}: give one before it{}", util::printable(t),
                             t == "--" ? "the end of the options" : "an option", what, examples));
}

// A duration's text, checked: more than zero unless zero_ok, at least min ms.
Millis duration_value(const Setting& s, const Check& check) {
  check_not_option(s, "a duration", " (500ms, 30s, 1h30m)");
  std::string why;
  auto d = util::parse_duration(s.text, &why);
  if (!d && why.rfind("too long", 0) == 0) bad_setting(s, fmt::format("'{}' is {}", util::printable(s.text), why));
  if (!d) {
    bad_setting(s, fmt::format("'{}' is not a duration: {} (a number and a unit of ms, s, m, h or d: 500ms, 30s, "
                               "1h30m)",
                               util::printable(s.text), why));
  }
  if (check.unit && s.text.find_first_not_of("0123456789.") == std::string::npos) {
    bad_setting(s, fmt::format("'{}' needs a unit: {}s, {}m, {}h or {}d", util::printable(s.text), s.text, s.text,
                               s.text, s.text));
  }
  if (!check.zero_ok && d->count() <= 0) bad_setting(s, "must be more than zero");
  if (d->count() < check.min)
    bad_setting(s, fmt::format("must be at least {}", util::format_duration(Millis(check.min))));
  return *d;
}

// A setting's value, converted for its field's type and checked against its row's limits.
Converted converted(const Setting& s) {
  const commands::OptionSpec& o = *s.spec;
  switch (o.to.type) {
    case Type::flag: return s.flag;
    case Type::text: return s.text;
    case Type::duration: return duration_value(s, o.check);
    case Type::number: break;
  }
  long long n = 0;
  check_not_option(s, o.check.words, "");
  if (!util::parse_int(s.text, o.check.min, o.check.max, n)) {
    bad_setting(
        s, fmt::format("'{}' is not {} in {}-{}", util::printable(s.text), o.check.words, o.check.min, o.check.max));
  }
  return n;
}

// Fills the fields of options (a struct S) from the given options whose rows name a field of S,
// but for the fields in later (member_of<M>), which fill_field fills when their turn comes.
template <class S>
void fill(Parsed& p, S& options, std::initializer_list<const void*> later = {}) {
  for (const Setting& s : p.settings) {
    if (s.spec->to.owner != commands::owner_of<S>() || s.source == Source::unset) continue;
    if (std::find(later.begin(), later.end(), s.spec->to.member) != later.end()) continue;
    s.spec->to.set(&options, converted(s));
  }
}

// Fills the field M of options when it is given; returns its setting then, else nullptr.
template <auto M, class S>
const Setting* fill_field(Parsed& p, S& options) {
  for (const Setting& s : p.settings) {
    if (s.spec->to.member != commands::member_of<M>() || s.source == Source::unset) continue;
    s.spec->to.set(&options, converted(s));
    return &s;
  }
  return nullptr;
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

// The first line of the password file a setting names.
std::string read_password_file(const Setting& file) {
  const std::string& path = file.text;
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

// The password when the URL has none: --password-file, RLOCK_PASSWORD, then REDISCLI_AUTH; from:
// which one gave it, for messages.
std::string password_from_elsewhere(Parsed& p, std::string& from) {
  Setting& file = get(p, "password-file");
  if (file.source != Source::unset) {
    from = fmt::format("{} {}", origin(file), util::printable(file.text));
    return read_password_file(file);
  }
  for (const char* name : {"RLOCK_PASSWORD", "REDISCLI_AUTH"}) {
    const char* pw = std::getenv(name);
    if (pw && *pw) {
      from = name;
      return pw;
    }
  }
  return {};
}

// The sentinels' own password: --sentinel-password-file, then RLOCK_SENTINEL_PASSWORD.
std::string sentinel_password(Parsed& p) {
  Setting& file = get(p, "sentinel-password-file");
  if (file.source != Source::unset) return read_password_file(file);
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

commands::TakeOptions take_options(Parsed& p) {
  commands::TakeOptions t;
  if (get(p, "close").flag) {
    usage(
        "-o is flock's option to close the lock's file descriptor: an rlock lock is a lease, not a descriptor, "
        "and rlock run holds it until the command and the processes it leaves running end (see --leftovers)");
  }
  if (get(p, "no-fork").flag) {
    usage(
        "-F/--no-fork cannot work with rlock: a lease must be renewed, and the command stopped if it is lost, by "
        "an rlock process that stays its parent");
  }
  check_key(p.args.key);
  t.key = p.args.key;
  fill(p, t);
  if (get(p, "no-wait").flag) t.wait = Millis(0);
  if (t.shared && t.limit > 1) usage("--shared and --limit exclude each other: a lock is shared, or a semaphore");
  if (get(p, "exclusive").flag && t.limit > 1) {
    usage("--exclusive and --limit exclude each other: a semaphore has N holders");
  }
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

commands::TokenSource token_source(Parsed& p) {
  commands::TokenSource t;
  if (fill_field<&commands::TokenSource::file>(p, t) && t.file.empty()) {
    usage(
        "--token-file is empty (an unset variable?): give the file rlock acquire wrote the token to, or leave "
        "the option out to read $RLOCK_TOKEN");
  }
  const Setting* env = fill_field<&commands::TokenSource::env>(p, t);
  if (!env) return t;
  // An empty RLOCK_TOKEN_ENV is refused too (layer_settings keeps it): it is an unset variable's mistake.
  if (t.env.empty()) bad_setting(*env, "empty: give the name of the variable that holds the token");
  bool name = t.env.front() < '0' || t.env.front() > '9';
  for (char c : t.env) {
    name = name && ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_');
  }
  if (!name) {
    bad_setting(*env, fmt::format("'{}' is not a variable name (letters, digits and _; e.g. RLOCK_TOKEN)",
                                  util::printable(t.env)));
  }
  return t;
}

}  // namespace

commands::OutputOptions output_options(Parsed& p) {
  commands::OutputOptions o;
  fill(p, o);
  return o;
}

commands::ConnectOptions connect_options(Parsed& p) {
  commands::ConnectOptions c;
  Setting& url = get(p, "url");
  std::vector<std::string> texts;
  if (url.source == Source::unset) {
    texts = {commands::k_default_url};
  } else if (url.source == Source::argv) {
    for (const std::string& u : url.list) {
      for (const std::string& piece : split_urls(u)) texts.push_back(piece);
    }
  } else {
    texts = split_urls(url.text);
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
      parsed.endpoint.password = password_from_elsewhere(p, parsed.endpoint.password_from);
    } else if (url.source == Source::argv) {
      log::warning(
          "a password in a --url on the command line is visible to every user in ps; use "
          "--password-file, REDISCLI_AUTH or RLOCK_PASSWORD");
    }
    if (parsed.kind == redis::Url::Kind::sentinel) {
      parsed.sentinel_user = get(p, "sentinel-user").text;
      parsed.sentinel_password = sentinel_password(p);
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
  fill(p, c);
  fill(p, c.timeouts);
  if (c.prefix.find_first_of("{}") != std::string::npos) {
    bad_setting(get(p, "prefix"), "must not contain { or } (rlock adds the Cluster hash tag itself)");
  }
  fill(p, c.tls);
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

commands::RunOptions run_options(Parsed& p) {
  commands::RunOptions r;
  r.take = take_options(p);
  r.connect = connect_options(p);
  fill(p, r, {commands::member_of<&commands::RunOptions::kill_after>()});
  const std::vector<std::string>& child = p.args.child;
  const Setting& command = get(p, "command");
  const bool command_given = command.source != Source::unset;
  if (command_given && !child.empty()) usage("give the command either after -- or with -c, not both");
  if (command_given) {
    if (command.text.empty()) usage("-c needs a shell command: rlock run KEY -c 'COMMAND'");
    // "--": a command that starts with '-' is the command, not an option of sh.
    r.argv = {"/bin/sh", "-c", "--", command.text};
    r.display_command = command.text;
  } else {
    if (child.empty()) usage("missing command: rlock run KEY -- COMMAND [ARG...] or rlock run KEY -c 'COMMAND'");
    r.argv = child;
    r.display_command = join_command(child);
  }
  if (Setting& s = get(p, "signal"); s.source != Source::unset) {
    auto sig = proc::parse_signal(s.text);
    if (!sig) bad_setting(s, fmt::format("'{}' is not a signal name or number", s.text));
    r.stop_signal = *sig;
  }
  if (Setting& s = get(p, "leftovers"); s.source != Source::unset) {
    std::string value = s.text;
    for (char& c : value) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (value == "wait")
      r.leftovers = commands::Leftovers::wait;
    else if (value == "kill")
      r.leftovers = commands::Leftovers::kill;
    else
      bad_setting(s, fmt::format("'{}' is neither wait nor kill", util::printable(s.text)));
  }
  if (r.cancel_in_progress) {
    // GitHub's cancel-in-progress: the newest waiter replaces the older ones, and stops a holder
    // that gave it too.
    if (r.take.wait && r.take.wait->count() == 0) {
      usage(
          "--cancel-in-progress replaces older waiting requests, and with -n (or -w 0) this one never waits: "
          "leave one out");
    }
    if (r.take.shared || r.take.limit > 1) {
      usage("--cancel-in-progress is for an exclusive hold: it does not go with --shared or --limit");
    }
    if (r.connect.urls.size() >= 2) {
      usage("--cancel-in-progress needs a queue, which a Redlock quorum (several URLs) does not have");
    }
    r.take.supersede = r.take.preempt = r.preemptible = true;
  }
  if (r.preemptible && (r.take.shared || r.take.limit > 1)) {
    usage("--preemptible is for an exclusive hold: it does not go with --shared or --limit");
  }
  if (r.once_per && (r.take.shared || r.take.limit > 1)) {
    usage("--once-per runs the command once per tick on one host: it does not go with --shared or --limit");
  }
  check_quorum(r.connect, r.take, r.preemptible);
  // The child must be gone before the lease can expire: --kill-after must fit in the TTL.
  Millis limit = lock::validity::max_kill_after(r.take.ttl);
  const Setting* kill_after = fill_field<&commands::RunOptions::kill_after>(p, r);
  if (!kill_after) {
    r.kill_after = std::min(r.kill_after, limit);
  } else if (r.kill_after > limit) {
    bad_setting(*kill_after,
                fmt::format("{} is too long for a TTL of {}: the child could outlive the lock; use at most {} or a "
                            "longer --ttl",
                            util::format_duration(r.kill_after), util::format_duration(r.take.ttl),
                            util::format_duration(limit)));
  }
  return r;
}

commands::AcquireOptions acquire_options(Parsed& p, bool stdout_closed) {
  using commands::AcquireOptions;
  AcquireOptions o;
  if (fill_field<&AcquireOptions::token_file>(p, o) && o.token_file.empty()) {
    usage(
        "--token-file is empty (an unset variable?): give the file to write the token to, or leave the option "
        "out to print the token");
  }
  // The keeper's options count with --keepalive only.
  fill(p, o,
       {commands::member_of<&AcquireOptions::token_file>(), commands::member_of<&AcquireOptions::max_hold>(),
        commands::member_of<&AcquireOptions::keeper_log>()});
  if (!o.token_file.empty() && o.json) usage("--token-file and --json exclude each other");
  o.take = take_options(p);
  o.connect = connect_options(p);
  check_quorum(o.connect, o.take, false);
  o.stdout_closed = stdout_closed;
  const std::string& pid_text = get(p, "pid").text;
  bool keeper_options = !pid_text.empty() || get(p, "signal").source == Source::argv ||
                        get(p, "max-hold").source == Source::argv || get(p, "keeper-log").source == Source::argv;
  if (keeper_options && !o.keepalive) usage("--pid, --signal, --max-hold and --keeper-log go with --keepalive");
  if (!pid_text.empty()) {
    long long pid = 0;
    if (!util::parse_int(pid_text, 2, INT32_MAX, pid)) {
      usage(fmt::format("--pid: '{}' is not a process id", util::printable(pid_text)));
    }
    o.watch_pid = static_cast<pid_t>(pid);
  }
  if (o.keepalive) {
    if (Setting& sig = get(p, "signal"); sig.source != Source::unset) {
      auto n = proc::parse_signal(sig.text);
      if (!n) bad_setting(sig, fmt::format("'{}' is not a signal name or number", util::printable(sig.text)));
      o.signal = *n;
    }
    fill_field<&AcquireOptions::max_hold>(p, o);
    fill_field<&AcquireOptions::keeper_log>(p, o);
  }
  return o;
}

commands::ReleaseOptions release_options(Parsed& p) {
  commands::ReleaseOptions o;
  check_key(p.args.key);
  o.token = token_source(p);
  o.connect = connect_options(p);
  o.key = p.args.key;
  fill(p, o);
  return o;
}

commands::ExtendOptions extend_options(Parsed& p) {
  commands::ExtendOptions o;
  check_key(p.args.key);
  o.token = token_source(p);
  o.connect = connect_options(p);
  o.key = p.args.key;
  fill(p, o);
  return o;
}

commands::StatusOptions status_options(Parsed& p) {
  commands::StatusOptions o;
  for (const std::string& k : p.args.keys) check_key(k);
  o.connect = connect_options(p);
  o.keys = p.args.keys;
  fill(p, o);
  return o;
}

commands::LogOptions log_options(Parsed& p) {
  commands::LogOptions o;
  for (const std::string& k : p.args.keys) check_key(k);
  fill(p, o);
  o.connect = connect_options(p);
  o.keys = p.args.keys;
  return o;
}

namespace {

// A limit of check: one value (CRITICAL over it) or two, WARN,CRIT (WARN at most CRIT), each
// converted as a value of the row's type.
// One value of a limit of check, as the row's type says.
template <class T>
T limit_value(const Setting& s, const std::string& text) {
  if constexpr (std::is_same_v<T, Millis>) {
    Setting one = s;
    one.text = text;
    return duration_value(one, {.zero_ok = true});
  } else {
    long long n = 0;
    if (!util::parse_int(text, 0, 1'000'000'000, n)) {
      bad_setting(s, fmt::format("'{}' is not a number in 0-1000000000 (N, or WARN,CRIT)", util::printable(text)));
    }
    return n;
  }
}

template <class T>
commands::Threshold<T> threshold(Parsed& p, const std::string& name) {
  commands::Threshold<T> out;
  const Setting& s = get(p, name);
  if (s.source == Source::unset) return out;
  const size_t comma = s.text.find(',');
  T first = limit_value<T>(s, s.text.substr(0, comma));
  if (comma == std::string::npos) {
    out.crit = first;
    return out;
  }
  T second = limit_value<T>(s, s.text.substr(comma + 1));
  if (first > second) bad_setting(s, "the WARNING limit (first) must not be above the CRITICAL one");
  out.warn = first;
  out.crit = second;
  return out;
}

}  // namespace

commands::CheckOptions check_options(Parsed& p) {
  commands::CheckOptions o;
  for (const std::string& k : p.args.keys) check_key(k);
  fill(p, o);
  o.succeeded_within = threshold<Millis>(p, "succeeded-within");
  o.max_held = threshold<Millis>(p, "max-held");
  o.max_waiting = threshold<long long>(p, "max-waiting");
  o.max_lost = threshold<long long>(p, "max-lost");
  o.max_failures = threshold<long long>(p, "max-failures");
  o.connect = connect_options(p);
  o.keys = p.args.keys;
  return o;
}

commands::MetricsOptions metrics_options(Parsed& p) {
  commands::MetricsOptions o;
  for (const std::string& k : p.args.keys) check_key(k);
  fill(p, o);
  if (!o.textfile.empty()) {
    // node_exporter's textfile collector reads the *.prom files of its directory: a directory
    // here is a file name left out.
    struct stat st {};
    if (o.textfile.back() == '/' || (::stat(o.textfile.c_str(), &st) == 0 && S_ISDIR(st.st_mode))) {
      std::string dir = o.textfile.back() == '/' ? o.textfile : o.textfile + "/";
      bad_setting(get(p, "textfile"),
                  fmt::format("{} is a directory: give the file to write in it, such as {}rlock.prom (node_exporter's "
                              "textfile collector reads its *.prom files)",
                              util::printable(o.textfile), util::printable(dir)));
    }
  }
  // --expect KEY (repeated), or one text of keys from the environment or the config file.
  const Setting& expect = get(p, "expect");
  if (expect.source == Source::argv) {
    o.expect = expect.list;
  } else if (expect.source != Source::unset) {
    for (const std::string& k : util::split(expect.text, " ")) {
      if (!k.empty()) o.expect.push_back(k);
    }
  }
  for (const std::string& k : o.expect) {
    check_key(k);
    if (k.find_first_of("*?[") != std::string::npos) {
      bad_setting(expect, fmt::format("'{}' is a pattern: a job to expect is named, as it runs", util::printable(k)));
    }
  }
  o.connect = connect_options(p);
  o.keys = p.args.keys;
  return o;
}

commands::ListOptions list_options(Parsed& p) {
  commands::ListOptions o;
  o.connect = connect_options(p);
  o.pattern = p.args.pattern.empty() ? "*" : p.args.pattern;
  fill(p, o);
  return o;
}

}  // namespace rlock::cli
