// The option table (commands::k_options, in commands/options.hpp) made into CLI11's options, the
// settings that the environment (RLOCK_NAME) and the config file (name = value) may also give
// (cli/settings.cpp layers them), and `rlock --dump-options` (read by tests/docs.bats and the shell
// completions). cli/convert.cpp checks and converts the values.
#include "cli/options.hpp"

#include <CLI/CLI.hpp>
#include <fmt/core.h>

#include <algorithm>
#include <string_view>
#include <vector>

namespace rlock::cli {

using commands::Builtin;
using commands::Commands;
using commands::k_commands;
using commands::k_options;
using commands::Kind;
using commands::OptionSpec;
namespace on = commands::on;

namespace {

// A command's arguments, registered before its options.
struct ArgumentSpec {
  const char* name;
  Commands commands;
  const char* help;
  std::string Arguments::*one;
  std::vector<std::string> Arguments::*many;
  bool required;
};
const std::array<ArgumentSpec, 6> k_arguments = {{
    {"KEY", on::take | on::release | on::extend, "the lock's name", &Arguments::key, nullptr, true},
    {"KEY", on::status, "locks to show (default: every held lock)", nullptr, &Arguments::keys, false},
    {"PATTERN", on::list, "glob on lock names (default *)", &Arguments::pattern, nullptr, false},
    {"KEY", on::log, "locks to show (default: every lock with a history)", nullptr, &Arguments::keys, false},
    {"KEY", on::check, "locks to check", nullptr, &Arguments::keys, true},
    {"KEY", on::metrics, "locks to show (default: every lock under the prefix)", nullptr, &Arguments::keys, false},
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

// The long name of a row, without "--": "ttl" for "-t,--ttl".
std::string long_name(const OptionSpec& o) {
  std::string_view names = o.names;
  size_t at = names.find("--");
  if (at == std::string_view::npos) return {};
  return std::string(names.substr(at + 2, names.find(',', at) - (at + 2)));
}

// The value of a row. A global option is registered twice, before the command name (on the
// application) and after it (on the command), with one value.
Setting& setting_of(Parsed& p, const OptionSpec& o) {
  for (Setting& s : p.settings) {
    if (s.spec == &o) return s;
  }
  Setting& s = p.settings.emplace_back();
  s.spec = &o;
  s.name = long_name(o);
  return s;
}

void add_option(Parsed& p, CLI::App* app, const OptionSpec& o) {
  if (o.builtin != Builtin::none) return;  // CLI11's, set up with the application
  const std::string help = help_text(o);
  Setting& s = setting_of(p, o);
  CLI::Option* option = nullptr;
  if (o.repeated) {
    option = app->add_option(o.names, s.list, help);
    option->allow_extra_args(false);  // one value per option: the next word is not another
  } else if (o.kind == Kind::flag) {
    option = app->add_flag(o.names, s.flag, help);
  } else {
    option = app->add_option(o.names, s.text, help);
  }
  if (*o.type) option->type_name(o.type);
  if (o.hidden) option->group("");
  if (*o.excludes) {
    // The other is registered only when the line may name it (add_options): when not, it is not given.
    if (CLI::Option* other = app->get_option_no_throw(o.excludes)) option->excludes(other);
  }
  s.options.push_back(option);
}

// Whether word may name one of names ("-t,--ttl"): it is "--ttl" or "--ttl=...", or a cluster of
// short options with a "t" in it (in a value too: yes when in doubt).
bool may_name(std::string_view names, std::string_view word) {
  if (word.size() < 2 || word[0] != '-') return false;
  for (size_t start = 0; start < names.size();) {
    size_t end = std::min(names.find(',', start), names.size());
    std::string_view name = names.substr(start, end - start);
    if (name.size() > 2 && name.substr(0, 2) == "--") {
      if (word.substr(0, name.size()) == name && (word.size() == name.size() || word[name.size()] == '=')) return true;
    } else if (name.size() == 2 && name[0] == '-' && word[1] != '-') {
      if (word.find(name[1], 1) != std::string_view::npos) return true;
    }
    start = end + 1;
  }
  return false;
}

bool any_may_name(std::string_view names, const std::vector<std::string>& words) {
  return std::any_of(words.begin(), words.end(), [&](const std::string& w) { return may_name(names, w); });
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
  if (auto at = text.find("{}"); at != std::string::npos) {
    // The default: the row's words, else its field's initializer.
    text.replace(at, 2, *o.fallback || !o.to.initial ? std::string(o.fallback) : o.to.initial());
  }
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
//   command  run, acquire, release, extend, status, list, log, check, metrics, or global
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

namespace {

// The edit distance between a and b (insertions, deletions, substitutions, and swaps of two
// letters next to each other), stopping at `most` + 1.
size_t edit_distance(std::string_view a, std::string_view b, size_t most) {
  if (a.size() > b.size() + most || b.size() > a.size() + most) return most + 1;
  std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
  for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
  for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  }
  return d[a.size()][b.size()];
}

}  // namespace

std::string closest_option(const std::string& command, const std::string& word) {
  if (word.size() < 3 || word.compare(0, 2, "--") != 0) return {};
  const std::string typed = word.substr(2);
  const Commands bit = command_bit(command);
  // A letter or two off, more for a longer name; never a word that is mostly wrong.
  const size_t most = typed.size() <= 4 ? 1 : 2;
  std::string best;
  size_t best_distance = most + 1;
  for (const OptionSpec& o : k_options) {
    if (o.hidden || (bit ? !belongs(o, bit) : (o.commands & on::global) == 0)) continue;
    std::string name = long_name(o);
    if (name.empty()) continue;
    size_t d = edit_distance(typed, name, most);
    // (A prefix of a longer name counts too: --verb for --verbose.)
    if (d > most && name.size() > typed.size() && typed.size() >= 4 && name.compare(0, typed.size(), typed) == 0)
      d = most;
    if (d < best_distance) {
      best_distance = d;
      best = "--" + name;
    }
  }
  return best;
}

void add_options(Parsed& p, const std::string& name, CLI::App* app, const std::vector<std::string>& words) {
  const Commands command = command_bit(name);
  // CLI11 checks each new option against all those before it, which is most of start-up's work
  // before the lock: only the options that a word of the line may name are registered (all of
  // them for --help, which lists them). The others get their setting all the same, for the
  // environment and the config file.
  const bool all = any_may_name("-h,--help", words);
  for (const ArgumentSpec& a : k_arguments) {
    if ((a.commands & command) == 0) continue;
    CLI::Option* option =
        a.one ? app->add_option(a.name, p.args.*a.one, a.help) : app->add_option(a.name, p.args.*a.many, a.help);
    if (a.required) option->required();
  }
  for (const OptionSpec& o : k_options) {
    if (command ? !belongs(o, command) : (o.commands & on::global) == 0) continue;
    if (all || any_may_name(o.names, words)) {
      add_option(p, app, o);
    } else if (o.builtin == Builtin::none) {
      setting_of(p, o);
    }
  }
}

void mark_given(Parsed& p) {
  for (Setting& s : p.settings) {
    for (const CLI::Option* o : s.options) {
      if (o->count() > 0) s.source = Source::argv;
    }
  }
}

}  // namespace rlock::cli
