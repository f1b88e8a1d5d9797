#pragma once

namespace rlock::cli {

// Parses the command line, the environment and the config file, runs the command, and maps every
// failure to an exit code of rlock(1), EXIT STATUS. Never throws.
int main(int argc, char** argv);

}  // namespace rlock::cli
