#pragma once

#include "commands/options.hpp"

#include <optional>
#include <string>
#include <variant>
#include <vector>

namespace rlock::cli {

// A command with its options, checked and converted: what rlock runs.
using CommandOptions = std::variant<commands::RunOptions, commands::AcquireOptions, commands::ReleaseOptions,
                                    commands::ExtendOptions, commands::StatusOptions, commands::ListOptions,
                                    commands::LogOptions, commands::CheckOptions, commands::MetricsOptions>;

// Parses a command line (args[0] is the program's name) as rlock does before it runs anything:
// CLI11 with the option table, then the environment and the config file, then the command's
// checks and conversions (cli/convert). Sets the log level (-q, -v, --syslog) on the way, as the
// conversions may warn. Returns nothing when the line asked for --help, --version or
// --dump-options, which it printed on stdout (exit 0). Throws rlock::Error (64 for a usage error,
// 78 for a bad config file...). stdout_closed: the caller closed stdout (acquire's token).
std::optional<CommandOptions> parse_command_line(const std::vector<std::string>& args, bool stdout_closed = false);

// Runs a parsed command; returns its exit code.
int run_command(const CommandOptions& options);

}  // namespace rlock::cli
