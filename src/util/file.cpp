#include "file.hpp"

#include "fd.hpp"
#include "random.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <stdexcept>
#include <system_error>

namespace rlock::util {

namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::system_error(errno, std::generic_category(), what);
}

void write_all(int fd, const std::string& content, const std::string& path) {
  const char* data = content.data();
  size_t left = content.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(path);
    }
    data += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

void write_file_atomic(const std::string& path, const std::string& content, mode_t mode) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // ELOOP, as O_NOFOLLOW would say; the caller words it (no strerror after a sentence).
    errno = ELOOP;
    throw_errno(path);
  }
  std::string tmp = path + ".tmp." + random_token().substr(0, 12);
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!fd.valid()) throw_errno(tmp);
  try {
    if (::fchmod(fd.get(), mode) != 0) throw_errno(tmp);
    write_all(fd.get(), content, tmp);
    if (::fsync(fd.get()) != 0) throw_errno(tmp);
    fd.reset();
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw_errno(path);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

std::string read_link(const std::string& path) {
  char buffer[4096];
  ssize_t n = ::readlink(path.c_str(), buffer, sizeof buffer);
  if (n < 0) throw_errno(path);
  return std::string(buffer, static_cast<size_t>(n));
}

std::string read_small_prefix(const std::string& path, size_t max_size) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!fd.valid()) throw_errno(path);
  std::string out(max_size, '\0');
  ssize_t n;
  do {
    n = ::read(fd.get(), out.data(), max_size);
  } while (n < 0 && errno == EINTR);
  if (n < 0) throw_errno(path);
  out.resize(static_cast<size_t>(n));
  return out;
}

namespace {

std::string read_all(const Fd& fd, const std::string& path, size_t max_size) {
  std::string out;
  char buffer[4096];
  for (;;) {
    ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno(path);
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
    if (out.size() > max_size) throw std::length_error(path + " is too large");
  }
  return out;
}

}  // namespace

std::string read_small_file(const std::string& path, size_t max_size) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) throw_errno(path);
  return read_all(fd, path, max_size);
}

std::optional<std::string> read_small_file_if_any(const std::string& path, size_t max_size) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    if (errno == ENOENT) return std::nullopt;
    throw_errno(path);
  }
  return read_all(fd, path, max_size);
}

}  // namespace rlock::util
