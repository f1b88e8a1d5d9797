// The protocol suite's main. The whole suite runs in shards at once: each a process of this binary
// (GoogleTest's sharding, GTEST_TOTAL_SHARDS and GTEST_SHARD_INDEX) with its own redis-server, so
// that the tests' waits for a lease, a linger or a claim window to lapse overlap (they sleep: in
// one process, the suite's CPU time is a twentieth of its wall time). The shards' output comes
// in their order, the first unfinished one's as it comes (a test that hangs shows where); the
// run passes when every shard does.
// In this process, as GoogleTest's own main would: a run of some tests (--gtest_filter), a list
// (--gtest_list_tests), a shard of a sharded run, a run writing a report (--gtest_output), or
// RLOCK_TEST_SHARDS=1 (the number of shards; default 8).

#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

int shard_count() {
  if (std::getenv("GTEST_TOTAL_SHARDS") || GTEST_FLAG_GET(list_tests) || GTEST_FLAG_GET(filter) != "*" ||
      !GTEST_FLAG_GET(output).empty())
    return 1;
  const char* wanted = std::getenv("RLOCK_TEST_SHARDS");
  return wanted && *wanted ? std::atoi(wanted) : 8;
}

struct Shard {
  pid_t pid = -1;
  int out = -1;  // the read end of its stdout and stderr; -1 once it ended
  std::string text;
  size_t shown = 0;  // the part of text written out
  int status = 0;
};

// Starts shard `index` of `count`: this binary (self) again, with the same arguments.
Shard start(const std::string& self, char** argv, int index, int count, bool color) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    std::perror("pipe");
    std::exit(1);
  }
  const pid_t parent = getpid();
  Shard shard;
  shard.pid = fork();
  if (shard.pid < 0) {
    std::perror("fork");
    std::exit(1);
  }
  if (shard.pid == 0) {
    // Dies with the run, however it ends (and its redis-server with it).
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    setenv("GTEST_TOTAL_SHARDS", std::to_string(count).c_str(), 1);
    setenv("GTEST_SHARD_INDEX", std::to_string(index).c_str(), 1);
    if (color) setenv("GTEST_COLOR", "yes", 1);
    execv(self.c_str(), argv);
    std::perror(("execv " + self).c_str());
    _exit(127);
  }
  close(fds[1]);
  shard.out = fds[0];
  return shard;
}

// Writes out what the shards said so far, in their order: the first unfinished shard's output
// as it comes, the others' once the ones before them ended. Returns the first unfinished shard.
size_t show(std::vector<Shard>& shards, size_t first) {
  for (; first < shards.size(); ++first) {
    Shard& s = shards[first];
    std::fwrite(s.text.data() + s.shown, 1, s.text.size() - s.shown, stdout);
    s.shown = s.text.size();
    if (s.out >= 0) break;
  }
  std::fflush(stdout);
  return first;
}

// Runs the suite in `count` shards; 0 when every shard passed.
int run_shards(char** argv, int count) {
  const bool color = GTEST_FLAG_GET(color) == "yes" || (GTEST_FLAG_GET(color) == "auto" && isatty(STDOUT_FILENO));
  std::error_code error;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    std::fprintf(stderr, "/proc/self/exe: %s\n", error.message().c_str());
    return 1;
  }
  std::vector<Shard> shards;
  for (int i = 0; i < count; ++i) shards.push_back(start(self, argv, i, count, color));
  size_t first = 0;
  while (first < shards.size()) {
    std::vector<pollfd> fds;
    std::vector<Shard*> of;
    for (Shard& s : shards) {
      if (s.out < 0) continue;
      fds.push_back({s.out, POLLIN, 0});
      of.push_back(&s);
    }
    if (poll(fds.data(), fds.size(), -1) < 0) {
      if (errno == EINTR) continue;
      std::perror("poll");
      return 1;
    }
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Shard& s = *of[i];
      char buffer[16384];
      ssize_t n = read(s.out, buffer, sizeof buffer);
      if (n > 0) {
        s.text.append(buffer, static_cast<size_t>(n));
      } else if (n == 0 || errno != EINTR) {
        close(s.out);
        s.out = -1;
        while (waitpid(s.pid, &s.status, 0) < 0 && errno == EINTR) {
        }
      }
    }
    first = show(shards, first);
  }
  int failed = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    const int status = shards[i].status;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    ++failed;
    if (WIFSIGNALED(status)) {
      std::printf("[  SHARDS  ] shard %zu of %d was killed by signal %d\n", i + 1, count, WTERMSIG(status));
    } else {
      std::printf("[  SHARDS  ] shard %zu of %d failed (exit status %d): see its output above\n", i + 1, count,
                  WEXITSTATUS(status));
    }
  }
  if (failed == 0) std::printf("[  SHARDS  ] all %d shards passed (RLOCK_TEST_SHARDS=1: in one process)\n", count);
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> original(argv, argv + argc);
  original.push_back(nullptr);
  testing::InitGoogleTest(&argc, argv);
  const int count = shard_count();
  if (count > 1) return run_shards(original.data(), count);
  return RUN_ALL_TESTS();
}
