#pragma once

#include "cli/settings.hpp"
#include "commands/options.hpp"

#include <string>
#include <vector>

namespace rlock::cli {

// The help text of a row, its default in place.
std::string help_text(const commands::OptionSpec& o);

// The words for a value of type (for "needs a value"), "a value" for an unknown one.
std::string value_words(const std::string& type);

// Every key a config file may set: the config keys of the table, for every command.
bool is_config_key(const std::string& key);

// Prints the table for --dump-options (the format is described in options.cpp).
void dump_options();

// The option of command ("" before the command name: the global ones) closest to a mistyped
// word such as "--tll" (a few letters off), as "--ttl"; "" when none is close.
std::string closest_option(const std::string& command, const std::string& word);

// The bit of the command named name, 0 for none.
commands::Commands command_bit(const std::string& name);

// The options of the command named name ("" for the application, before any command name): the
// rows of that command, then the global ones, registered on app as settings of p. The command's
// arguments (KEY, PATTERN) too. Only the options that a word of words (the command line) may
// name are registered with CLI11, all of them when one may be -h or --help; every row gets its
// setting.
void add_options(Parsed& p, const std::string& name, CLI::App* app, const std::vector<std::string>& words);

// After parsing: the options the command line gave become Source::argv.
void mark_given(Parsed& p);

}  // namespace rlock::cli
