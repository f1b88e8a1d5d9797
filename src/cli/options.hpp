#pragma once

#include "cli/settings.hpp"

#include <array>

namespace rlock::cli {

// The commands, in the order `rlock --help` lists them.
struct Command {
  const char* name;
  const char* summary;
};
extern const std::array<Command, 7> k_commands;

// The options every command takes, before or after its name: registered on the application and
// again on the command, as one setting.
void add_common(Parsed& p, CLI::App* app, Raw& raw);

// The options of the command named name (one of k_commands).
void add_command_options(Parsed& p, const std::string& name, CLI::App* command, Raw& raw);

// After parsing: the settings the command line gave become Source::argv, and the flags whose
// mere presence counts (-c '', --token-file '') are noted in raw.
void mark_given(Parsed& p, Raw& raw);

}  // namespace rlock::cli
