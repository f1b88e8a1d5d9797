#include "tree.hpp"

#include "proc/raw_syscall.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include <cerrno>

namespace rlock::proc {

namespace {

RLOCK_GUARD_CODE long raw_kill(long pid, long sig) { return sys::call(SYS_kill, pid, sig); }

RLOCK_GUARD_CODE long raw_reap() {
  int status = 0;
  long r = sys::call(SYS_wait4, -1, reinterpret_cast<long>(&status), WNOHANG, 0);
  return r == -ECHILD || r > 0 ? r : 0;
}

RLOCK_GUARD_CODE long raw_pgid(long pid) { return sys::call(SYS_getpgid, pid); }

RLOCK_GUARD_CODE long raw_now() {
  struct {
    long sec, nsec;
  } t{0, 0};
  sys::call(SYS_clock_gettime, CLOCK_BOOTTIME, reinterpret_cast<long>(&t));
  return t.sec * 1'000'000'000 + t.nsec;
}

const Kernel k_raw_kernel{"/proc", raw_kill, raw_reap, raw_pgid, raw_now};

// Whether until_ns is set and has passed.
RLOCK_GUARD_CODE bool past(const Kernel& kernel, long until_ns) {
  return until_ns > 0 && kernel.now && kernel.now() >= until_ns;
}

// Whether pid is in process group `signalled`, which was just signalled whole.
RLOCK_GUARD_CODE bool got_it_already(const Kernel& kernel, long pid, pid_t signalled) {
  return signalled > 0 && kernel.pgid && kernel.pgid(pid) == signalled;
}

using sys::put_number;
using sys::put_text;

// "<proc>/<pid><suffix>" into out, cut at size - 1 characters and terminated.
template <size_t size>
RLOCK_GUARD_CODE void pid_path(char (&out)[size], const char* proc, long pid, const char* suffix) {
  const char* limit = out + size - 1;
  char* end = put_text(out, limit, proc);
  end = put_text(end, limit, "/");
  end = put_number(end, limit, pid);
  end = put_text(end, limit, suffix);
  *end = '\0';
}

// Whether process pid is alive and not a zombie (a zombie can be signalled, but is dead).
RLOCK_GUARD_CODE bool alive(const char* proc, long pid) {
  char path[160] = {};
  pid_path(path, proc, pid, "/stat");
  long fd = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buffer[512];
  long n = sys::call(SYS_read, fd, reinterpret_cast<long>(buffer), sizeof buffer);
  sys::call(SYS_close, fd);
  if (n <= 0) return false;
  // "pid (comm) S ...": the state follows the last ')'; comm may hold ')' itself.
  long close = -1;
  for (long i = 0; i < n; ++i) {
    if (buffer[i] == ')') close = i;
  }
  if (close < 0 || close + 2 >= n) return false;
  char state = buffer[close + 2];
  return state != 'Z' && state != 'X' && state != 'x';
}

// Appends the live children of every thread of pid to pids (up to capacity); returns the new
// count. Zombies are left out: they have no children (theirs went to the subreaper), and they
// would only take the place of live processes.
RLOCK_GUARD_CODE long add_children(const char* proc, long pid, long* pids, long count, long capacity) {
  char path[160] = {};
  pid_path(path, proc, pid, "/task");
  long dir = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(path), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0) return count;
  char entries[1024];
  for (;;) {
    long n = sys::call(SYS_getdents64, dir, reinterpret_cast<long>(entries), sizeof entries);
    if (n <= 0) break;
    for (long at = 0; at < n;) {
      // struct linux_dirent64: u64 ino, s64 off, u16 reclen, u8 type, char name[]
      // d_reclen, little-endian on the architectures with raw system calls (a fork elsewhere).
      long reclen = static_cast<unsigned char>(entries[at + 16]) | (static_cast<unsigned char>(entries[at + 17]) << 8);
      if (reclen <= 0) break;
      const char* name = entries + at + 19;
      at += reclen;
      if (name[0] < '0' || name[0] > '9') continue;
      char file[224] = {};
      const char* file_limit = file + sizeof file - 1;
      char* f = put_text(file, file_limit, path);
      f = put_text(f, file_limit, "/");
      f = put_text(f, file_limit, name);
      f = put_text(f, file_limit, "/children");
      *f = '\0';
      long fd = sys::call(SYS_openat, AT_FDCWD, reinterpret_cast<long>(file), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      char list[4096];
      long value = -1;
      for (;;) {
        long got = sys::call(SYS_read, fd, reinterpret_cast<long>(list), sizeof list);
        if (got <= 0) break;
        for (long i = 0; i < got; ++i) {
          char c = list[i];
          if (c >= '0' && c <= '9') {
            value = (value < 0 ? 0 : value * 10) + (c - '0');
          } else if (value >= 0) {
            if (count < capacity && alive(proc, value)) pids[count++] = value;
            value = -1;
          }
        }
      }
      if (value >= 0 && count < capacity && alive(proc, value)) pids[count++] = value;
      sys::call(SYS_close, fd);
    }
  }
  sys::call(SYS_close, dir);
  return count;
}

// remove_cgroup's step: `name` under `at`, `depth` levels below the first, with `budget`
// directories left to try.
RLOCK_GUARD_CODE long remove_cgroup_at(int at, const char* name, int depth, long& budget) {
  if (budget <= 0) return -EMLINK;
  --budget;
  long r = sys::call(SYS_unlinkat, at, reinterpret_cast<long>(name), AT_REMOVEDIR);
  // Only a cgroup with cgroups under it (EBUSY; ENOTEMPTY for a plain directory) is looked into.
  if ((r != -EBUSY && r != -ENOTEMPTY) || depth >= k_cgroup_depth) return r;
  long dir = sys::call(SYS_openat, at, reinterpret_cast<long>(name), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir < 0) return r;
  char entries[1024];
  // A second pass when the first removed something: a directory read while entries go may
  // skip some.
  for (int pass = 0; pass < 2; ++pass) {
    bool removed = false;
    sys::call(SYS_lseek, dir, 0, SEEK_SET);
    for (;;) {
      long n = sys::call(SYS_getdents64, dir, reinterpret_cast<long>(entries), sizeof entries);
      if (n <= 0) break;
      for (long i = 0; i < n;) {
        long reclen = static_cast<unsigned char>(entries[i + 16]) | (static_cast<unsigned char>(entries[i + 17]) << 8);
        if (reclen <= 0) break;
        unsigned char type = static_cast<unsigned char>(entries[i + 18]);
        const char* entry = entries + i + 19;
        i += reclen;
        if (type != DT_DIR && type != DT_UNKNOWN) continue;
        if (entry[0] == '.' && (entry[1] == '\0' || (entry[1] == '.' && entry[2] == '\0'))) continue;
        if (remove_cgroup_at(static_cast<int>(dir), entry, depth + 1, budget) == 0) removed = true;
      }
    }
    if (!removed) break;
  }
  sys::call(SYS_close, dir);
  return sys::call(SYS_unlinkat, at, reinterpret_cast<long>(name), AT_REMOVEDIR);
}

RLOCK_GUARD_CODE void pause_briefly() {
  struct {
    long sec, nsec;
  } one_ms{0, 1'000'000};
  sys::call(SYS_nanosleep, reinterpret_cast<long>(&one_ms), 0);
}

}  // namespace

const Kernel& raw_kernel() { return k_raw_kernel; }

RLOCK_GUARD_CODE long signal_pass(const Kernel& kernel, pid_t root, int sig, pid_t signalled) {
  long pids[k_pass_capacity];  // on the stack: rlock and the guard share every static
  long count = add_children(kernel.proc, root, pids, 0, k_pass_capacity);
  for (long i = 0; i < count; ++i) count = add_children(kernel.proc, pids[i], pids, count, k_pass_capacity);
  long sent = 0;
  for (long i = 0; i < count; ++i) {
    if (!got_it_already(kernel, pids[i], signalled) && kernel.kill(pids[i], sig) == 0) ++sent;
  }
  return sent;
}

RLOCK_GUARD_CODE long kill_descendants(const Kernel& kernel, pid_t root, long until_ns) {
  long total = 0;
  for (long round = 0;; ++round) {
    long n = signal_pass(kernel, root, SIGKILL);
    total += n;
    // The orphans of the killed come to the subreaper: reap them, so that the next pass sees
    // only what is still alive.
    while (kernel.reap() > 0) {
    }
    if (n == 0 || past(kernel, until_ns)) break;
    // A process in uninterruptible sleep dies when it wakes: look again, without spinning.
    if (round >= 8) pause_briefly();
  }
  return total;
}

RLOCK_GUARD_CODE bool end_tree(const Kernel& kernel, pid_t root, long until_ns) {
  for (long round = 0;; ++round) {
    signal_pass(kernel, root, SIGKILL);
    long r = 0;
    while ((r = kernel.reap()) > 0) {
    }
    if (r == -ECHILD) return true;
    if (past(kernel, until_ns)) return false;
    // A child killed a moment ago may not have exited yet: look again, without spinning.
    if (round >= 8) pause_briefly();
  }
}

RLOCK_GUARD_CODE long signal_cgroup(const Kernel& kernel, int procs_fd, int sig, pid_t signalled) {
  char list[4096];
  long offset = 0;
  long value = -1;
  long sent = 0;
  for (;;) {
    long got = sys::call(SYS_pread64, procs_fd, reinterpret_cast<long>(list), sizeof list, offset);
    if (got <= 0) break;
    offset += got;
    for (long i = 0; i < got; ++i) {
      char c = list[i];
      if (c >= '0' && c <= '9') {
        value = (value < 0 ? 0 : value * 10) + (c - '0');
      } else if (value >= 0) {
        if (!got_it_already(kernel, value, signalled) && kernel.kill(value, sig) == 0) ++sent;
        value = -1;
      }
    }
  }
  if (value >= 0 && !got_it_already(kernel, value, signalled) && kernel.kill(value, sig) == 0) ++sent;
  return sent;
}

RLOCK_GUARD_CODE long remove_cgroup(int at, const char* name) {
  long budget = k_cgroup_count;
  return remove_cgroup_at(at, name, 0, budget);
}

RLOCK_GUARD_CODE bool proc_is_ours(const char* proc) {
  char path[160] = {};
  const char* limit = path + sizeof path - 1;
  char* end = put_text(path, limit, proc);
  end = put_text(end, limit, "/self");
  *end = '\0';
  char target[32];
  long n = sys::call(SYS_readlinkat, AT_FDCWD, reinterpret_cast<long>(path), reinterpret_cast<long>(target),
                     sizeof target - 1);
  if (n <= 0) return false;
  long pid = 0;
  for (long i = 0; i < n; ++i) {
    if (target[i] < '0' || target[i] > '9') return false;
    pid = pid * 10 + (target[i] - '0');
  }
  return pid == sys::call(SYS_getpid);
}

}  // namespace rlock::proc
