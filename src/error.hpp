#pragma once

#include <stdexcept>
#include <string>

namespace rlock {

// A failure that ends the command: what to print after "rlock: error: " and the exit code.
// Thrown by any layer, caught once in cli::main, which prints it and exits with its code.
class Error : public std::runtime_error {
public:
  Error(int exit_code, const std::string& message) : std::runtime_error(message), m_exit_code(exit_code) {}

  // The exit code (rlock(1), EXIT STATUS) this failure maps to.
  int exit_code() const noexcept { return m_exit_code; }

private:
  int m_exit_code;
};

}  // namespace rlock
