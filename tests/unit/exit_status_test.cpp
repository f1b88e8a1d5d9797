#include "error.hpp"
#include "exit_code.hpp"
#include "proc/child.hpp"
#include "proc/signals.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

using rlock::proc::exit_code_of;

namespace {

int status_of_child(void (*body)()) {
  pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

}  // namespace

TEST(ExitStatus, PassesExitCodesThrough) {
  EXPECT_EQ(exit_code_of(status_of_child([] { _exit(0); })), 0);
  EXPECT_EQ(exit_code_of(status_of_child([] { _exit(3); })), 3);
  EXPECT_EQ(exit_code_of(status_of_child([] { _exit(255); })), 255);
}

TEST(ExitStatus, DeathBySignalIs128PlusN) {
  EXPECT_EQ(exit_code_of(status_of_child([] { raise(SIGTERM); })), 128 + SIGTERM);
  EXPECT_EQ(exit_code_of(status_of_child([] { raise(SIGKILL); })), 137);
  EXPECT_EQ(exit_code_of(status_of_child([] { raise(SIGUSR1); })), 128 + SIGUSR1);
}

TEST(ExitStatus, NamedCodesMatchTheContract) {
  namespace ec = rlock::exit_code;
  EXPECT_EQ(ec::k_usage, 64);
  EXPECT_EQ(ec::k_data, 65);
  EXPECT_EQ(ec::k_unavailable, 69);
  EXPECT_EQ(ec::k_internal, 70);
  EXPECT_EQ(ec::k_system, 71);
  EXPECT_EQ(ec::k_busy, 75);
  EXPECT_EQ(ec::k_lost, 76);
  EXPECT_EQ(ec::k_permission, 77);
  EXPECT_EQ(ec::k_config, 78);
  EXPECT_EQ(ec::k_not_executable, 126);
  EXPECT_EQ(ec::k_not_found, 127);
}

TEST(Signals, ParsesNamesAndNumbers) {
  using rlock::proc::parse_signal;
  EXPECT_EQ(parse_signal("TERM"), SIGTERM);
  EXPECT_EQ(parse_signal("SIGINT"), SIGINT);
  EXPECT_EQ(parse_signal("hup"), SIGHUP);
  EXPECT_EQ(parse_signal("9"), SIGKILL);
  EXPECT_FALSE(parse_signal("NOPE").has_value());
  EXPECT_FALSE(parse_signal("").has_value());
  EXPECT_FALSE(parse_signal("0").has_value());
  EXPECT_FALSE(parse_signal("SIG").has_value());
  EXPECT_EQ(rlock::proc::signal_name(SIGTERM), "SIGTERM");
}

TEST(Executable, ReportsLikeAShell) {
  using rlock::proc::find_executable;
  EXPECT_EQ(find_executable("sh").back(), 'h');
  EXPECT_NE(find_executable("sh").find('/'), std::string::npos);
  EXPECT_NO_THROW(find_executable("/bin/sh"));
  try {
    find_executable("surely-not-a-command-xyz");
    FAIL();
  } catch (const rlock::Error& e) {
    EXPECT_EQ(e.exit_code(), 127);
  }
  char path[] = "/tmp/rlock-unit-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  try {
    find_executable(path);
    FAIL();
  } catch (const rlock::Error& e) {
    EXPECT_EQ(e.exit_code(), 126);
  }
  unlink(path);
  try {
    find_executable("/etc");
    FAIL();
  } catch (const rlock::Error& e) {
    EXPECT_EQ(e.exit_code(), 126);
  }
}
