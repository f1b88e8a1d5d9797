#pragma once

#include <optional>
#include <string>
#include <sys/types.h>

namespace rlock::util {

// Writes content to path atomically (temporary file in the same folder, fsync, rename) with the given mode.
// Refuses when path is a symbolic link. Throws std::system_error on failure.
void write_file_atomic(const std::string& path, const std::string& content, mode_t mode);

// The target of a symbolic link. Throws std::system_error on failure.
std::string read_link(const std::string& path);

// Reads a small file (at most max_size bytes). Throws std::system_error on failure,
// std::length_error when the file is larger.
std::string read_small_file(const std::string& path, size_t max_size);
// The same, or nullopt when there is no such file (ENOENT): no exception for the usual case of a
// config file that is not there, which would cost start-up the unwinder's work.
std::optional<std::string> read_small_file_if_any(const std::string& path, size_t max_size);
// At most the first max_size bytes of a file (one read), e.g. a script's #! line.
std::string read_small_prefix(const std::string& path, size_t max_size);

}  // namespace rlock::util
