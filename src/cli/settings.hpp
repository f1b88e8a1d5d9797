#pragma once

#include "commands/option_table.hpp"

#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace rlock::cli {

// Where a value came from, for error messages and exit codes.
enum class Source { unset, argv, env, config };

// One option of the command named on the line (a row of commands::k_options), as CLI11, the
// environment (RLOCK_NAME) or the config file (name = value) gave it: argv beats the environment,
// which beats the config file. Only the rows with a config key are settings that the environment
// and the config file may give.
struct Setting {
  const commands::OptionSpec* spec = nullptr;
  std::string name;                   // long option name ("ttl"), also the config file's key
  std::vector<CLI::Option*> options;  // global options are defined before and after the command name
  std::string text;                   // a value's text
  bool flag = false;                  // a flag's value
  std::vector<std::string> list;      // a repeated option's values, from the command line
  Source source = Source::unset;
  std::string variable;  // Source::env: the variable that gave the value
};

// The command's arguments.
struct Arguments {
  std::string key;
  std::vector<std::string> keys;
  std::string pattern = "*";
  std::vector<std::string> child;  // run: the command after --, or after KEY
};

struct Parsed {
  CLI::App* command = nullptr;  // the command named on the line
  std::string command_name;
  std::deque<Setting> settings;  // CLI11 holds their addresses: a deque never moves them
  Arguments args;
};

// Throws the usage error (64).
[[noreturn]] void usage(const std::string& message);

// The option of the command named on the line by its long name ("ttl"), nullptr when it has none.
Setting* find_setting(Parsed& p, const std::string& name);
// The option that the command surely registered.
Setting& get(Parsed& p, const std::string& name);
// Whether it was given, anywhere.
bool given(Parsed& p, const std::string& name);
// The text that names a setting in an error: the option, the variable, or the config file.
std::string origin(const Setting& s);
// Throws 64 for a bad option or variable, 78 for a bad config file value.
[[noreturn]] void bad_setting(const Setting& s, const std::string& why);

// The config file to read: --config, RLOCK_CONFIG, then the default paths; true when it must exist.
std::pair<std::string, bool> config_path(Parsed& p);

// Fills the settings argv left unset (those given on the command line are Source::argv already):
// the environment first, then the config file.
void layer_settings(Parsed& p, const std::string& config_path, bool config_required);

}  // namespace rlock::cli
