// rlock's entry point: splits the command line, parses it with the option table (cli/options),
// layers the environment and the config file over it (cli/settings), converts the result into a
// command's options (cli/convert), runs the command, and maps every failure to an exit code.
#include "cli/main.hpp"

#include "cli/convert.hpp"
#include "cli/options.hpp"
#include "cli/parse.hpp"
#include "cli/settings.hpp"
#include "commands/commands.hpp"
#include "error.hpp"
#include "exit_code.hpp"
#include "log.hpp"
#include "proc/signals.hpp"
#include "util/standard_fds.hpp"
#include "util/text.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>
#include <variant>
#include <system_error>

#include <unistd.h>

namespace rlock::cli {

namespace {

// The standard descriptors the caller had closed.
util::ClosedFds g_closed;
// The command is check: a failure is UNKNOWN (exit 3, with a status line on stdout), as a
// monitoring system expects of a Nagios plugin.
bool g_check = false;

// The command's options from the settings, once the environment and the config file are layered.
CommandOptions convert(Parsed& p, bool stdout_closed) {
  auto [path, required] = config_path(p);
  layer_settings(p, path, required);
  const commands::OutputOptions output = output_options(p);
  if (output.verbose)
    log::set_level(log::Level::verbose);
  else if (output.quiet)
    log::set_level(log::Level::quiet);
  if (output.syslog) log::enable_syslog_events();

  const std::string& name = p.command_name;
  if (name == "run") return run_options(p);
  if (name == "acquire") return acquire_options(p, stdout_closed);
  if (name == "release") return release_options(p);
  if (name == "extend") return extend_options(p);
  if (name == "status") return status_options(p);
  if (name == "log") return log_options(p);
  if (name == "check") return check_options(p);
  if (name == "metrics") return metrics_options(p);
  return list_options(p);
}

// Each command's function.
struct Dispatch {
  int operator()(const commands::RunOptions& o) const { return commands::run(o); }
  int operator()(const commands::AcquireOptions& o) const { return commands::acquire(o); }
  int operator()(const commands::ReleaseOptions& o) const { return commands::release(o); }
  int operator()(const commands::ExtendOptions& o) const { return commands::extend(o); }
  int operator()(const commands::StatusOptions& o) const { return commands::status(o); }
  int operator()(const commands::ListOptions& o) const { return commands::list(o); }
  int operator()(const commands::LogOptions& o) const { return commands::history(o); }
  int operator()(const commands::CheckOptions& o) const { return commands::check(o); }
  int operator()(const commands::MetricsOptions& o) const { return commands::metrics(o); }
};

// The option that a word names ("-t", "--ttl"), among those of apps.
const CLI::Option* find_option(std::initializer_list<CLI::App*> apps, const std::string& name) {
  for (CLI::App* a : apps) {
    if (const CLI::Option* o = a->get_option_no_throw(name)) return o;
  }
  return nullptr;
}

// Whether the option word (e.g. "-t", "--ttl", "-nt", "--ttl=5", "-t5") takes the next argument
// as its value, for the options of apps.
bool takes_next(std::initializer_list<CLI::App*> apps, std::string_view word) {
  if (word.substr(0, 2) == "--") {
    if (word.find('=') != std::string_view::npos) return false;
    const CLI::Option* o = find_option(apps, std::string(word));
    return o && o->get_items_expected_max() > 0;
  }
  // A cluster of short options: flags, then perhaps one that takes a value, attached or next.
  for (size_t i = 1; i < word.size(); ++i) {
    const CLI::Option* o = find_option(apps, std::string("-") + word[i]);
    if (!o) return false;  // unknown: reported after parsing
    if (o->get_items_expected_max() > 0) return i + 1 == word.size();
  }
  return false;
}

bool is_option_word(const std::string& word) { return word.size() > 1 && word.front() == '-'; }

std::string help_hint(const std::string& command) {
  return command.empty() ? "see rlock --help" : fmt::format("see rlock {} --help", command);
}

// The option words of args[from, to), made plain for CLI11: a short option's "-c=VALUE" becomes
// "-c" "VALUE" (getopt would pass "=VALUE"; nobody means that), and an option that needs a value
// but ends the line is a clear error rather than CLI11's.
std::vector<std::string> plain_options(std::initializer_list<CLI::App*> apps, const std::string& command,
                                       const std::vector<std::string>& args, size_t from, size_t to) {
  std::vector<std::string> out;
  for (size_t i = from; i < to; ++i) {
    const std::string& word = args[i];
    if (word == "--") {
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i),
                 args.begin() + static_cast<std::ptrdiff_t>(to));
      break;
    }
    if (!is_option_word(word)) {
      out.push_back(word);
      continue;
    }
    if (word.size() > 2 && word[1] != '-' && word[2] == '=' && takes_next(apps, word.substr(0, 2))) {
      out.push_back(word.substr(0, 2));
      out.push_back(word.substr(3));
      continue;
    }
    out.push_back(word);
    if (!takes_next(apps, word)) continue;
    if (i + 1 >= to) {
      const CLI::Option* o = find_option(apps, word.substr(0, 2) == "--" ? word : std::string("-") + word.back());
      usage(fmt::format("{} needs a value: {} ({})", util::printable(word), value_words(o ? o->get_type_name() : ""),
                        help_hint(command)));
    }
    out.push_back(args[++i]);
  }
  return out;
}

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
// make. Returns the words for CLI11 (from the command name on) and sets child to the command.
std::vector<std::string> split_run_command(CLI::App* app, CLI::App* run, const std::vector<std::string>& args,
                                           size_t at, std::vector<std::string>& child) {
  size_t end = args.size();
  bool key_seen = false;
  for (size_t i = at + 1; i < args.size(); ++i) {
    const std::string& word = args[i];
    if (word == "--") {
      if (!key_seen)
        usage("missing KEY before --: rlock run KEY [OPTIONS] [--] COMMAND [ARG...] (see rlock run --help)");
      child.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
      end = i;
      break;
    }
    if (is_option_word(word)) {
      if (takes_next({run, app}, word) && i + 1 < args.size()) ++i;
      continue;
    }
    if (!key_seen) {
      key_seen = true;
      continue;
    }
    child.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
    end = i;
    break;
  }
  return plain_options({run, app}, "run", args, at, end);
}

// run's usage line names its command too, which CLI11 does not see (the words after KEY are the
// command's, split off before CLI11 parses the rest).
class RunUsage : public CLI::Formatter {
public:
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string line = CLI::Formatter::make_usage(app, name);
    while (!line.empty() && line.back() == '\n') line.pop_back();
    return fmt::format("{} [--] COMMAND [ARG...]\n   or: {} [OPTIONS] KEY -c 'SHELL COMMAND'\n", line, name);
  }
};

constexpr const char* k_no_command =
    "no command given: use run, acquire, release, extend, status, list, log, check or metrics (see rlock --help)";

// CLI11's errors in rlock's words, naming the command's help.
[[noreturn]] void parse_error(const CLI::ParseError& e, const std::string& command) {
  std::string message = e.what();
  if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
  const std::string hint = help_hint(command);
  if (command.empty() && dynamic_cast<const CLI::RequiredError*>(&e) &&
      message.find("subcommand") != std::string::npos) {
    usage(k_no_command);
  }
  // "--ttl: At Most 1 required but received 2": an option that takes one value, given twice.
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) && message.find("At Most 1 required") != std::string::npos) {
    usage(fmt::format("{} given more than once ({})", util::printable(message.substr(0, message.find(':'))), hint));
  }
  if (dynamic_cast<const CLI::RequiredError*>(&e) && message.size() > 12 &&
      message.compare(message.size() - 12, 12, " is required") == 0) {
    usage(fmt::format("missing {} ({})", util::printable(message.substr(0, message.size() - 12)), hint));
  }
  if (dynamic_cast<const CLI::ExcludesError*>(&e)) {
    if (size_t at = message.find(" excludes "); at != std::string::npos) {
      usage(fmt::format("{} and {} exclude each other ({})", message.substr(0, at), message.substr(at + 10), hint));
    }
  }
  usage(fmt::format("{} ({})", util::printable(message), hint));
}

// The words CLI11 left over (extras are allowed, so that rlock words the error itself).
[[noreturn]] void extra_words(std::vector<std::string> extras, const std::string& command, const Arguments& args,
                              bool after_dashes) {
  if (extras.front() == "--") {
    extras.erase(extras.begin());
    after_dashes = true;
  }
  if (extras.empty()) usage(fmt::format("nothing after -- ({})", help_hint(command)));
  const std::string& first = extras.front();
  const std::string hint = help_hint(command);
  if (is_option_word(first) && !after_dashes) {
    std::string name = first.substr(0, first.find('='));
    std::string close = closest_option(command, name);
    std::string mean = close.empty() ? "" : fmt::format("; did you mean {}?", close);
    if (command.empty()) usage(fmt::format("unknown option {}{} ({})", util::printable(name), mean, hint));
    usage(fmt::format("rlock {} has no option {}{} ({})", command, util::printable(name), mean, hint));
  }
  std::string words;
  for (const std::string& w : extras) words += fmt::format("{}'{}'", words.empty() ? "" : " ", util::printable(w));
  if (command == "list") usage(fmt::format("list takes one PATTERN; unexpected {} ({})", words, hint));
  if (!args.key.empty()) {
    usage(fmt::format("rlock {} takes one KEY, '{}'; unexpected {} ({})", command, util::printable(args.key), words,
                      hint));
  }
  usage(fmt::format("unexpected {} ({})", words, hint));
}

}  // namespace

std::optional<CommandOptions> parse_command_line(const std::vector<std::string>& args, bool stdout_closed) {
  if (args.size() == 2 && args[1] == "--dump-options") {
    dump_options();
    return std::nullopt;
  }
  Parsed p;
  CLI::App app{"rlock: a lock for shell scripts, cron jobs and CI, held in Redis.", "rlock"};
  app.set_version_flag("-V,--version", "rlock " RLOCK_VERSION);
  app.require_subcommand(1);
  app.allow_extras();
  app.footer(
      "Global options may come before or after the command name.\n"
      "Run 'rlock COMMAND --help' for a command's options; 'man rlock' for the whole story.");
  // The usual line names the command first (`rlock run KEY ...`): then no word is parsed before
  // it, and the application needs no options of its own (the command has the global ones too).
  // CLI11 checks each new option against all those before it, so each one costs.
  const bool command_first = args.size() > 1 && !is_option_word(args[1]) && args[1] != "--";
  if (!command_first) add_options(p, "", &app, args);

  size_t at = command_first ? 1 : command_position(&app, args);
  // Only the command named on the line gets its options: the others are listed by name, which is
  // all `rlock --help` shows, and start-up does no work for them. After run's KEY, the words are
  // the child's and never CLI11's: the other commands, which CLI11 would look for among them, need
  // not be there at all.
  const std::string wanted = at ? args[at] : "";
  g_check = wanted == "check";
  for (const commands::Command& c : commands::k_commands) {
    if (wanted == "run" && wanted != c.name) continue;
    CLI::App* sub = app.add_subcommand(c.name, c.summary);
    if (wanted != c.name) continue;
    p.command = sub;
    p.command_name = c.name;
    sub->set_version_flag("-V,--version", "rlock " RLOCK_VERSION);
    sub->allow_extras();
    if (wanted == "run") sub->formatter(std::make_shared<RunUsage>());
    add_options(p, c.name, sub, args);
  }
  if (!wanted.empty() && !p.command) {
    usage(
        fmt::format("unknown command '{}': use run, acquire, release, extend, status, list, log, check or metrics (see "
                    "rlock --help)",
                    util::printable(wanted)));
  }
  // `rlock --help run` shows run's help, as `rlock run --help` does.
  for (size_t i = 1; i < at; ++i) {
    if (args[i] == "-h" || args[i] == "--help") {
      fmt::print("{}", p.command->help("rlock"));
      return std::nullopt;
    }
  }

  std::vector<std::string> words = plain_options({&app}, "", args, 1, at ? at : args.size());
  if (wanted == "run") {
    std::vector<std::string> rest = split_run_command(&app, p.command, args, at, p.args.child);
    words.insert(words.end(), rest.begin(), rest.end());
  } else if (at) {
    std::vector<std::string> rest = plain_options({p.command, &app}, wanted, args, at, args.size());
    words.insert(words.end(), rest.begin(), rest.end());
  }
  // The words after "--", which are never options, whatever they look like.
  auto dashes = std::find(words.begin(), words.end(), "--");
  std::vector<std::string> after_dashes(dashes == words.end() ? dashes : dashes + 1, words.end());
  try {
    std::reverse(words.begin(), words.end());  // CLI11 takes the arguments last first (and consumes them)
    app.parse(words);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {
      app.exit(e);
      return std::nullopt;
    }
    parse_error(e, p.command_name);
  }
  std::vector<std::string> extras = app.remaining();
  if (p.command) {
    std::vector<std::string> more = p.command->remaining();
    extras.insert(extras.end(), more.begin(), more.end());
  }
  if (!extras.empty()) {
    bool positional = std::find(after_dashes.begin(), after_dashes.end(), extras.front()) != after_dashes.end();
    extra_words(extras, p.command_name, p.args, positional);
  }
  if (!p.command || !p.command->parsed()) usage(k_no_command);
  mark_given(p);
  return convert(p, stdout_closed);
}

int run_command(const CommandOptions& options) { return std::visit(Dispatch{}, options); }

namespace {

int parse_and_run(int argc, char** argv) {
  std::optional<CommandOptions> options = parse_command_line(std::vector<std::string>(argv, argv + argc), g_closed.out);
  return options ? run_command(*options) : exit_code::k_ok;
}

// The exit code of a failure; check's is UNKNOWN, said on stdout alone, where a monitoring
// system reads it (Icinga shows stderr too: said on both, it would show it twice).
int failed(int code, const std::string& message) {
  if (!g_check) {
    log::error(message);
    return code;
  }
  try {
    std::string line = "RLOCK UNKNOWN - " + util::printable(message);
    std::replace(line.begin(), line.end(), '|', '/');  // perfdata would start there
    fmt::print("{}\n", line);
    if (std::fflush(stdout) != 0) log::error(message);
  } catch (...) {
    // stdout failed: stderr says it, and the exit status still says UNKNOWN.
    log::error(message);
  }
  return exit_code::k_unknown;
}

int run_main(int argc, char** argv) {
  try {
    return parse_and_run(argc, argv);
  } catch (const Error& e) {
    return failed(e.exit_code(), e.what());
  } catch (const std::system_error& e) {
    return failed(exit_code::k_system, e.what());
  } catch (const std::bad_alloc&) {
    return failed(exit_code::k_system, "out of memory");
  } catch (const std::exception& e) {
    return failed(exit_code::k_internal, fmt::format("internal error: {}", e.what()));
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
