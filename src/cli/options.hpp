#pragma once

#include "cli/settings.hpp"

#include <array>
#include <string>
#include <vector>

namespace rlock::cli {

// The commands, in the order `rlock --help` lists them.
struct Command {
  const char* name;
  const char* summary;
};
extern const std::array<Command, 7> k_commands;

// The commands an option belongs to: one bit per command of k_commands, in their order, or
// global (every command, before or after its name).
using Commands = unsigned;
namespace on {
inline constexpr Commands run = 1U << 0U, acquire = 1U << 1U, release = 1U << 2U, extend = 1U << 3U, status = 1U << 4U,
                          list = 1U << 5U, log = 1U << 6U;
inline constexpr Commands take = run | acquire;  // how to take a lock
inline constexpr Commands global = 1U << 7U;
}  // namespace on
// The bit of the command named name, 0 for none.
Commands command_bit(const std::string& name);

enum class Kind { flag, value };

// What CLI11's help and version flags are; rlock registers the others.
enum class Builtin { none, help, version };

// Where an option's text goes in Raw. A repeatable option (-u) fills list from the command line,
// and text from the environment or the config file.
struct Target {
  std::string Raw::*text = nullptr;
  bool Raw::*flag = nullptr;
  std::vector<std::string> Raw::*list = nullptr;
};

// One row of the option table: everything rlock knows about an option, from which CLI11
// registration, the settings (environment and config file), `--dump-options` and, through it,
// docs.bats and the shell completions all follow. An option whose help or meaning differs between
// commands (--signal, --token-file, --json...) has a row per meaning: its names are unique per
// command.
struct OptionSpec {
  const char* names;  // CLI11's form: "-t,--ttl" (short, long, aliases)
  Commands commands;
  Kind kind;
  const char* type;    // the value's name (D, N, F, URL...); "" for a flag
  const char* config;  // a setting: its config file key (its long name); "" for the command line only
  const char* env;     // the variable that gives it; "" for none
  Target target;
  const char* help;           // --help's text, where "{}" stands for fallback
  const char* fallback;       // the default, as --help words it; "" when help gives none
  const char* env_also = "";  // a variable read when env is unset: REDIS_URL after RLOCK_URL
  const char* excludes = "";  // an option of the same command that this one excludes ("--wait")
  bool hidden = false;        // accepted but not shown in --help, the dump or the completions
  Builtin builtin = Builtin::none;
};
extern const std::vector<OptionSpec> k_options;

// The help text of a row, its default in place.
std::string help_text(const OptionSpec& o);

// The words for a value of type (for "needs a value"), "a value" for an unknown one.
std::string value_words(const std::string& type);

// Every key a config file may set: the config keys of the table, for every command.
bool is_config_key(const std::string& key);

// Prints the table for --dump-options (the format is described in options.cpp).
void dump_options();

// The options of the command named name ("" for the application, before any command name): the
// rows of that command, then the global ones, registered on app; those with a config key become
// settings of p. The command's arguments (KEY, PATTERN) too.
void add_options(Parsed& p, const std::string& name, CLI::App* app, Raw& raw);

// After parsing: the settings the command line gave become Source::argv, and the flags whose
// mere presence counts (-c '', --token-file '') are noted in raw.
void mark_given(Parsed& p, Raw& raw);

}  // namespace rlock::cli
