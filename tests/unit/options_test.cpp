// The option table (commands/options.hpp) and the command line parsed through it (cli/parse.hpp).
#include "cli/config_file.hpp"
#include "cli/options.hpp"
#include "cli/parse.hpp"

#include "error.hpp"
#include "proc/signals.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

using rlock::commands::Builtin;
using rlock::commands::Commands;
using rlock::commands::k_commands;
using rlock::commands::k_options;
using rlock::commands::Kind;
using rlock::commands::OptionSpec;
using rlock::commands::owner_of;
using rlock::commands::Type;
namespace on = rlock::commands::on;
namespace commands = rlock::commands;

namespace {

std::vector<std::string> split(const std::string& text, char by) {
  std::vector<std::string> parts;
  std::stringstream in(text);
  for (std::string part; std::getline(in, part, by);) parts.push_back(part);
  return parts;
}

// The long name of a row, without "--": "ttl" for "-t,--ttl".
std::string long_name(const OptionSpec& o) {
  for (const std::string& n : split(o.names, ',')) {
    if (n.rfind("--", 0) == 0) return n.substr(2);
  }
  return "";
}

// The rows a command registers (0: the application, before any command name).
std::vector<const OptionSpec*> rows_of(Commands command) {
  std::vector<const OptionSpec*> rows;
  for (const OptionSpec& o : k_options) {
    if ((o.commands & on::global) != 0 || (o.commands & command) != 0) rows.push_back(&o);
  }
  return rows;
}

std::vector<Commands> every_command() {
  std::vector<Commands> all{0};
  for (const auto& c : k_commands) all.push_back(rlock::cli::command_bit(c.name));
  return all;
}

}  // namespace

TEST(OptionTable, EveryRowHasHelpAndATypeThatFitsItsKind) {
  for (const OptionSpec& o : k_options) {
    EXPECT_NE(o.commands, 0u) << o.names;
    if (o.hidden) continue;
    EXPECT_FALSE(rlock::cli::help_text(o).empty()) << o.names;
    EXPECT_EQ(rlock::cli::help_text(o).find("{}"), std::string::npos) << o.names;
    // A default in the help: the row's words, or its field's initializer.
    const bool initial = o.to.initial && !o.to.initial().empty();
    if (std::string(o.help).find("{}") != std::string::npos) {
      EXPECT_TRUE(*o.fallback != '\0' || initial) << o.names;
    } else {
      EXPECT_STREQ(o.fallback, "") << o.names;
    }
    if (o.builtin != Builtin::none) continue;
    EXPECT_EQ(*o.type == '\0', o.kind == Kind::flag) << o.names;
    if (o.to.set) {
      EXPECT_EQ(o.to.type == Type::flag, o.kind == Kind::flag) << o.names;
      EXPECT_FALSE(o.repeated) << o.names << ": a list fills no field";
    }
    if (o.to.set && o.to.type == Type::number) {
      EXPECT_LT(o.check.min, o.check.max) << o.names;
      EXPECT_STRNE(o.check.words, "") << o.names;
    }
  }
}

// A row's field is in the options struct of the commands it belongs to: a row whose field no
// command fills would be accepted and ignored.
TEST(OptionTable, FieldsAreInTheirCommandsOptions) {
  const std::vector<std::pair<const void*, Commands>> owners = {
      {owner_of<commands::TakeOptions>(), on::take},
      {owner_of<commands::RunOptions>(), on::run},
      {owner_of<commands::AcquireOptions>(), on::acquire},
      {owner_of<commands::ReleaseOptions>(), on::release},
      {owner_of<commands::ExtendOptions>(), on::extend},
      {owner_of<commands::StatusOptions>(), on::status},
      {owner_of<commands::ListOptions>(), on::list},
      {owner_of<commands::LogOptions>(), on::log},
      {owner_of<commands::CheckOptions>(), on::check},
      {owner_of<commands::MetricsOptions>(), on::metrics},
      {owner_of<commands::ConnectOptions>(), on::global},
      {owner_of<commands::TokenSource>(), on::release | on::extend},
      {owner_of<rlock::redis::Timeouts>(), on::global},
      {owner_of<rlock::redis::TlsOptions>(), on::global},
      {owner_of<commands::OutputOptions>(), on::global}};
  int fields = 0;
  for (const OptionSpec& o : k_options) {
    if (!o.to.set) continue;
    ++fields;
    auto owner = std::find_if(owners.begin(), owners.end(), [&](const auto& e) { return e.first == o.to.owner; });
    ASSERT_NE(owner, owners.end()) << o.names << ": a field of a struct no command fills";
    EXPECT_EQ(owner->second, o.commands) << o.names;
  }
  EXPECT_GE(fields, 40);
}

// A default that is a value is its field's initializer, shown as the value's type is written: the
// row words only a default that is no value of the field ("forever", "warn"), so that --help
// cannot say one default while the code applies another.
TEST(OptionTable, DefaultsShownAreTheFieldsInitializers) {
  int derived = 0;
  for (const OptionSpec& o : k_options) {
    if (!o.to.set) continue;
    ASSERT_NE(o.to.initial, nullptr) << o.names;
    const std::string initial = o.to.initial();
    if (std::string(o.help).find("{}") == std::string::npos) continue;
    if (initial.empty()) {
      EXPECT_STRNE(o.fallback, "") << o.names << ": a default with no value needs its words";
      continue;
    }
    EXPECT_STREQ(o.fallback, "") << o.names << ": the default is the initializer " << initial;
    std::string help = o.help;
    EXPECT_EQ(rlock::cli::help_text(o), help.replace(help.find("{}"), 2, initial)) << o.names;
    ++derived;
  }
  EXPECT_GE(derived, 9);
  for (const OptionSpec& o : k_options) {
    if (o.to.member == commands::member_of<&commands::TakeOptions::ttl>()) {
      EXPECT_EQ(rlock::cli::help_text(o), "lease length (default 30s)");
    }
    if (o.to.member == commands::member_of<&commands::RunOptions::kill_after>()) {
      EXPECT_EQ(rlock::cli::help_text(o), "then SIGKILL after D (default 5s)");
    }
    if (o.to.member == commands::member_of<&commands::TokenSource::env>()) {
      EXPECT_EQ(rlock::cli::help_text(o), "read the token from variable NAME (default RLOCK_TOKEN)");
    }
  }
  EXPECT_EQ(commands::TakeOptions{}.ttl, rlock::lock::k_default_ttl);
  EXPECT_EQ(rlock::lock::Contender{}.ttl, rlock::lock::k_default_ttl);
}

// The defaults of the rows read by hand, in words, agree with what the code applies.
TEST(OptionTable, DefaultsInWordsOfRowsReadByHand) {
  for (const OptionSpec& o : k_options) {
    if (std::string(o.names) == "--signal" && o.commands == on::run) {
      EXPECT_EQ(rlock::proc::parse_signal(o.fallback), commands::RunOptions{}.stop_signal);
    }
    if (std::string(o.names) == "--signal" && o.commands == on::acquire) {
      EXPECT_STREQ(o.fallback, "none");
      EXPECT_EQ(commands::AcquireOptions{}.signal, 0);
    }
    if (std::string(o.names) == "--leftovers") {
      EXPECT_STREQ(o.fallback, "wait");
      EXPECT_EQ(commands::RunOptions{}.leftovers, commands::Leftovers::wait);
    }
  }
}

TEST(OptionTable, NamesAreUniquePerCommand) {
  for (Commands command : every_command()) {
    std::set<std::string> seen;
    for (const OptionSpec* o : rows_of(command)) {
      for (const std::string& name : split(o->names, ',')) {
        EXPECT_TRUE(seen.insert(name).second) << name << " twice for command bit " << command;
      }
    }
  }
}

TEST(OptionTable, VariablesFollowTheRlockNaming) {
  // RLOCK_KEY is run's lock name for its child: the TLS key file is RLOCK_TLS_KEY.
  const std::set<std::string> exceptions = {"RLOCK_TLS_KEY"};
  for (const OptionSpec& o : k_options) {
    if (*o.config) {
      EXPECT_STRNE(o.env, "") << o.names << ": a setting without a variable";
    }
    if (!*o.env) continue;
    const std::string env = o.env;
    EXPECT_EQ(env.rfind("RLOCK_", 0), 0u) << env;
    for (char c : env) EXPECT_TRUE(std::isupper(static_cast<unsigned char>(c)) || std::isdigit(c) || c == '_') << env;
    std::string expected = "RLOCK_";
    for (char c : long_name(o)) expected += c == '-' ? '_' : static_cast<char>(std::toupper(c));
    if (!exceptions.count(env)) {
      EXPECT_EQ(env, expected) << o.names;
    }
  }
}

TEST(OptionTable, ConfigKeysAreLongNamesThatTheConfigFileAccepts) {
  int keys = 0;
  for (const OptionSpec& o : k_options) {
    if (!*o.config) continue;
    ++keys;
    const std::string key = o.config;
    EXPECT_EQ(key, long_name(o)) << o.names;
    EXPECT_TRUE(rlock::cli::is_config_key(key));
    auto values = rlock::cli::parse_config(key + " = 'v'\n", "c.toml");
    ASSERT_EQ(values.count(key), 1u) << key;
    EXPECT_EQ(values.at(key), "v");
  }
  EXPECT_GE(keys, 30);
  EXPECT_FALSE(rlock::cli::is_config_key("timeout"));
  EXPECT_FALSE(rlock::cli::is_config_key("command"));
}

TEST(OptionTable, DumpHasSevenFieldsALine) {
  testing::internal::CaptureStdout();
  rlock::cli::dump_options();
  const std::string out = testing::internal::GetCapturedStdout();
  std::set<std::string> commands = {"global"};
  for (const auto& c : k_commands) commands.insert(c.name);
  int lines = 0;
  for (const std::string& line : split(out, '\n')) {
    auto fields = split(line, '\t');
    ASSERT_EQ(fields.size(), 7u) << line;
    for (const std::string& f : fields) EXPECT_FALSE(f.empty()) << line;
    EXPECT_TRUE(commands.count(fields[0])) << line;
    EXPECT_TRUE(fields[2] == "flag" || fields[2] == "value") << line;
    EXPECT_EQ(fields[1].find("--no-fork"), std::string::npos) << "a hidden option: " << line;
    ++lines;
  }
  EXPECT_GT(lines, 40);
}

// The command line, parsed as rlock parses it, with no config file but an empty one.
class ParseCommandLine : public testing::Test {
protected:
  void SetUp() override {
    char path[] = "/tmp/rlock-options-test-XXXXXX";
    int fd = ::mkstemp(path);
    ASSERT_GE(fd, 0);
    ::close(fd);
    m_config = path;
    ::setenv("RLOCK_CONFIG", m_config.c_str(), 1);
    for (const char* v : k_variables) ::unsetenv(v);
  }
  void TearDown() override {
    ::unsetenv("RLOCK_CONFIG");
    for (const char* v : k_variables) ::unsetenv(v);
    std::remove(m_config.c_str());
  }
  static constexpr const char* k_variables[] = {
      "RLOCK_TTL",        "RLOCK_URL",        "REDIS_URL",          "RLOCK_WAIT",       "RLOCK_SUPERSEDE",
      "RLOCK_LOG_LENGTH", "RLOCK_MAX_HOLD",   "RLOCK_NODE_TIMEOUT", "RLOCK_KILL_AFTER", "RLOCK_TOKEN_ENV",
      "RLOCK_IO_TIMEOUT", "RLOCK_KEEPER_LOG", "RLOCK_PREFIX"};

  static rlock::cli::CommandOptions parse(std::vector<std::string> args) {
    args.insert(args.begin(), "rlock");
    auto options = rlock::cli::parse_command_line(args);
    if (!options) throw std::logic_error("nothing to run");
    return *options;
  }

  // The exit code and message of the error that parsing args throws.
  static std::pair<int, std::string> error_of(const std::vector<std::string>& args) {
    try {
      parse(args);
    } catch (const rlock::Error& e) {
      return {e.exit_code(), e.what()};
    }
    return {0, ""};
  }

  std::string m_config;
};

TEST_F(ParseCommandLine, RunTtlAndCommand) {
  auto options = parse({"run", "k", "-t", "5s", "--", "true"});
  auto* run = std::get_if<rlock::commands::RunOptions>(&options);
  ASSERT_NE(run, nullptr);
  EXPECT_EQ(run->take.key, "k");
  EXPECT_EQ(run->take.ttl.count(), 5000);
  EXPECT_EQ(run->argv, std::vector<std::string>{"true"});
  EXPECT_FALSE(run->take.wait.has_value());
}

TEST_F(ParseCommandLine, OptionsAfterTheCommandNameAndLongForms) {
  auto options = parse({"-q", "acquire", "--ttl=1m", "k", "--wait", "2s", "--limit", "3"});
  auto* acquire = std::get_if<rlock::commands::AcquireOptions>(&options);
  ASSERT_NE(acquire, nullptr);
  EXPECT_EQ(acquire->take.ttl.count(), 60'000);
  ASSERT_TRUE(acquire->take.wait.has_value());
  EXPECT_EQ(acquire->take.wait->count(), 2000);
  EXPECT_EQ(acquire->take.limit, 3);
}

TEST_F(ParseCommandLine, TheEnvironmentGivesASettingTheLineDoesNot) {
  ::setenv("RLOCK_TTL", "7s", 1);
  auto options = parse({"run", "k", "true"});
  EXPECT_EQ(std::get<rlock::commands::RunOptions>(options).take.ttl.count(), 7000);
  options = parse({"run", "k", "--ttl", "9s", "true"});
  EXPECT_EQ(std::get<rlock::commands::RunOptions>(options).take.ttl.count(), 9000);
}

TEST_F(ParseCommandLine, UsageErrorsExit64) {
  auto [code, message] = error_of({"run", "k", "--supersede", "-n", "--", "true"});
  EXPECT_EQ(code, 64);
  EXPECT_NE(message.find("--supersede replaces older waiting requests"), std::string::npos) << message;

  std::tie(code, message) = error_of({"run", "k", "-n", "-w", "1s", "true"});
  EXPECT_EQ(code, 64);
  EXPECT_NE(message.find("exclude each other"), std::string::npos) << message;

  std::tie(code, message) = error_of({"status", "--bogus"});
  EXPECT_EQ(code, 64);
  EXPECT_EQ(message, "rlock status has no option --bogus (see rlock status --help)");

  std::tie(code, message) = error_of({"run", "k", "-t"});
  EXPECT_EQ(code, 64);
  EXPECT_EQ(message, "-t needs a value: a duration such as 30s (see rlock run --help)");

  std::tie(code, message) = error_of({"run", "k", "--once-per", "5m", "--limit", "2", "true"});
  EXPECT_EQ(code, 64);
  EXPECT_NE(message.find("--once-per runs the command once per tick"), std::string::npos) << message;
  std::tie(code, message) = error_of({"run", "k", "--once-per", "5m", "-s", "true"});
  EXPECT_EQ(code, 64);
  std::tie(code, message) = error_of({"run", "k", "--once-per", "0", "true"});
  EXPECT_EQ(code, 64) << "a period of zero";

  std::tie(code, message) = error_of({"run", "k", "-t", "soon", "true"});
  EXPECT_EQ(code, 64);
  EXPECT_EQ(message.rfind("--ttl: 'soon' is not a duration", 0), 0u) << message;
}

TEST_F(ParseCommandLine, ABadConfigFileValueExits78) {
  FILE* f = std::fopen(m_config.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("ttl = 'soon'\n", f);
  std::fclose(f);
  auto [code, message] = error_of({"run", "k", "true"});
  EXPECT_EQ(code, 78);
  EXPECT_EQ(message.rfind("ttl (config file ", 0), 0u) << message;
}

TEST_F(ParseCommandLine, DumpOptionsRunsNothing) {
  testing::internal::CaptureStdout();
  auto options = rlock::cli::parse_command_line({"rlock", "--dump-options"});
  std::string out = testing::internal::GetCapturedStdout();
  EXPECT_FALSE(options.has_value());
  EXPECT_NE(out.find("run\t-t,--ttl\tvalue\tD\tRLOCK_TTL\tttl\tlease length (default 30s)\n"), std::string::npos);
  EXPECT_NE(out.find("global\t-u,--url\tvalue\tURL\tRLOCK_URL,REDIS_URL\turl\t"), std::string::npos);
}

// The rows with a field fill it, converted by the field's type, from the line, the environment
// or the config file; what is not given keeps the struct's default.
TEST_F(ParseCommandLine, FieldsAreFilledByTheirType) {
  auto options = parse({"run", "k", "--lost-exit-code", "3", "--max-hold", "2m", "--preemptible", "--min-hold", "1s",
                        "-E", "9", "-w", "0", "true"});
  const auto& run = std::get<commands::RunOptions>(options);
  EXPECT_EQ(run.lost_exit_code, 3);
  ASSERT_TRUE(run.max_hold.has_value());
  EXPECT_EQ(run.max_hold->count(), 120'000);
  EXPECT_TRUE(run.preemptible);
  EXPECT_EQ(run.take.min_hold.count(), 1000);
  EXPECT_FALSE(run.once_per.has_value());
  auto once = parse({"run", "k", "--once-per", "5m", "true"});
  ASSERT_TRUE(std::get<commands::RunOptions>(once).once_per.has_value());
  EXPECT_EQ(std::get<commands::RunOptions>(once).once_per->count(), 300'000);
  EXPECT_EQ(run.take.conflict_exit_code, 9);
  ASSERT_TRUE(run.take.wait.has_value());
  EXPECT_EQ(run.take.wait->count(), 0);
  EXPECT_FALSE(run.take.supersede);
  EXPECT_EQ(run.connect.log_length, 1000);
  EXPECT_FALSE(run.connect.node_timeout.has_value());

  ::setenv("RLOCK_SUPERSEDE", "yes", 1);
  ::setenv("RLOCK_LOG_LENGTH", "0", 1);
  ::setenv("RLOCK_NODE_TIMEOUT", "80ms", 1);
  options = parse({"acquire", "k", "--json"});
  const auto& acquire = std::get<commands::AcquireOptions>(options);
  EXPECT_TRUE(acquire.take.supersede);
  EXPECT_TRUE(acquire.json);
  EXPECT_EQ(acquire.connect.log_length, 0);
  ASSERT_TRUE(acquire.connect.node_timeout.has_value());
  EXPECT_EQ(acquire.connect.node_timeout->count(), 80);
  ::setenv("RLOCK_SUPERSEDE", "off", 1);
  EXPECT_FALSE(std::get<commands::RunOptions>(parse({"run", "k", "true"})).take.supersede);

  options = parse({"log", "-n", "5", "--json", "-f", "k"});
  const auto& log = std::get<commands::LogOptions>(options);
  EXPECT_EQ(log.count, 5u);
  EXPECT_TRUE(log.json && log.follow);
  EXPECT_EQ(log.keys, std::vector<std::string>{"k"});
}

// The rows that also have a rule or a check by hand fill their fields too.
TEST_F(ParseCommandLine, FieldsWithRulesAreFilled) {
  auto options = parse({"run", "k", "--kill-after", "2s", "--prefix", "p:", "--io-timeout", "3s", "--connect-timeout",
                        "400ms", "--insecure", "true"});
  const auto& run = std::get<commands::RunOptions>(options);
  EXPECT_EQ(run.kill_after.count(), 2000);
  EXPECT_EQ(run.connect.prefix, "p:");
  EXPECT_EQ(run.connect.timeouts.command.count(), 3000);
  EXPECT_EQ(run.connect.timeouts.connect.count(), 400);
  EXPECT_TRUE(run.connect.tls.insecure);
  // Not given, --kill-after is its default cut to what the TTL allows.
  options = parse({"run", "k", "-t", "1s", "true"});
  EXPECT_EQ(std::get<commands::RunOptions>(options).kill_after,
            rlock::lock::validity::max_kill_after(rlock::util::Millis(1000)));
  EXPECT_EQ(std::get<commands::RunOptions>(options).connect.prefix, "rlock:");

  ::setenv("RLOCK_TOKEN_ENV", "MY_TOKEN", 1);
  options = parse({"release", "k", "--token-file", "t.txt"});
  const auto& release = std::get<commands::ReleaseOptions>(options);
  EXPECT_EQ(release.token.file, "t.txt");
  EXPECT_EQ(release.token.env, "MY_TOKEN");
  ::unsetenv("RLOCK_TOKEN_ENV");
  EXPECT_EQ(std::get<commands::ExtendOptions>(parse({"extend", "k"})).token.env, "RLOCK_TOKEN");

  // The keeper's options count with --keepalive only.
  ::setenv("RLOCK_MAX_HOLD", "1m", 1);
  ::setenv("RLOCK_KEEPER_LOG", "syslog:", 1);
  options = parse({"acquire", "k"});
  EXPECT_FALSE(std::get<commands::AcquireOptions>(options).max_hold.has_value());
  EXPECT_EQ(std::get<commands::AcquireOptions>(options).keeper_log, "");
  options = parse({"acquire", "k", "--keepalive"});
  ASSERT_TRUE(std::get<commands::AcquireOptions>(options).max_hold.has_value());
  EXPECT_EQ(std::get<commands::AcquireOptions>(options).max_hold->count(), 60'000);
  EXPECT_EQ(std::get<commands::AcquireOptions>(options).keeper_log, "syslog:");
}

// check's limits: one value is the CRITICAL one; two are WARN,CRIT, in that order.
TEST_F(ParseCommandLine, CheckLimitsAreCriticalOrWarningThenCritical) {
  auto options = parse({"check", "a", "b", "--succeeded-within", "25h", "--max-held", "1h,2h", "--max-waiting", "3",
                        "--max-lost", "0,1", "--json"});
  const auto& check = std::get<commands::CheckOptions>(options);
  EXPECT_EQ(check.keys, (std::vector<std::string>{"a", "b"}));
  EXPECT_FALSE(check.succeeded_within.warn.has_value());
  ASSERT_TRUE(check.succeeded_within.crit.has_value());
  EXPECT_EQ(check.succeeded_within.crit->count(), 25 * 3'600'000);
  ASSERT_TRUE(check.max_held.warn && check.max_held.crit);
  EXPECT_EQ(check.max_held.warn->count(), 3'600'000);
  EXPECT_EQ(check.max_held.crit->count(), 7'200'000);
  EXPECT_EQ(check.max_waiting.crit, 3);
  EXPECT_EQ(check.max_lost.warn, 0);
  EXPECT_EQ(check.max_lost.crit, 1);
  EXPECT_TRUE(check.json);
  EXPECT_FALSE(std::get<commands::CheckOptions>(parse({"check", "a"})).max_held.given());

  auto [code, message] = error_of({"check", "a", "--max-held", "2h,1h"});
  EXPECT_EQ(code, 64);
  EXPECT_EQ(message, "--max-held: the WARNING limit (first) must not be above the CRITICAL one");
  std::tie(code, message) = error_of({"check", "a", "--max-waiting", "many"});
  EXPECT_EQ(message, "--max-waiting: 'many' is not a number in 0-1000000000 (N, or WARN,CRIT)");

  options = parse({"metrics", "--textfile", "/tmp/x.prom"});
  EXPECT_EQ(std::get<commands::MetricsOptions>(options).textfile, "/tmp/x.prom");
  EXPECT_TRUE(std::get<commands::MetricsOptions>(options).keys.empty());
}

TEST_F(ParseCommandLine, ValuesOutsideTheirLimitsSayTheLimits) {
  auto [code, message] = error_of({"run", "k", "--limit", "0", "true"});
  EXPECT_EQ(code, 64);
  EXPECT_EQ(message, "--limit: '0' is not a number of holders in 1-1000000");
  std::tie(code, message) = error_of({"run", "k", "-t", "50ms", "true"});
  EXPECT_EQ(message, "--ttl: must be at least 100ms");
  std::tie(code, message) = error_of({"run", "k", "--wait-timeout", "0", "true"});
  EXPECT_EQ(message, "--wait-timeout: must be more than zero");
  ::setenv("RLOCK_LOG_LENGTH", "-1", 1);
  std::tie(code, message) = error_of({"status"});
  EXPECT_EQ(code, 64);
  EXPECT_EQ(message, "RLOCK_LOG_LENGTH: '-1' is not a number of events in 0-100000");
  ::unsetenv("RLOCK_LOG_LENGTH");
  ::setenv("RLOCK_MAX_HOLD", "0", 1);
  std::tie(code, message) = error_of({"run", "k", "true"});
  EXPECT_EQ(message, "RLOCK_MAX_HOLD: must be more than zero");
}
