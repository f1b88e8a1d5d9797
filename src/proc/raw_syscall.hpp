#pragma once

// System calls without libc: no errno (a thread-local variable), no cancellation, no locks.
// The guard process shares rlock's memory, thread-local storage included, while both run; it
// must not write errno behind rlock's back, so it calls the kernel directly. Returns the
// kernel's result: -errno on failure.
//
// The rules of the code that runs in the guard (and in the child before it execs), marked
// RLOCK_GUARD_CODE: raw system calls only; no errno, no other thread-local or locked state of
// libc; no allocation (the stack and static buffers only); no sanitizer instrumentation (its
// runtime keeps per-thread state); nothing that can block but ppoll and wait4.
#define RLOCK_GUARD_CODE __attribute__((no_sanitize("address", "undefined"), noinline))

#include <sys/syscall.h>

namespace rlock::proc::sys {

#if defined(__x86_64__)
#define RLOCK_RAW_SYSCALLS 1
[[gnu::always_inline]] inline long call(long n, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0,
                                        long a6 = 0) {
  long ret;
  register long r10 __asm__("r10") = a4;
  register long r8 __asm__("r8") = a5;
  register long r9 __asm__("r9") = a6;
  __asm__ volatile("syscall"
                   : "=a"(ret)
                   : "a"(n), "D"(a1), "S"(a2), "d"(a3), "r"(r10), "r"(r8), "r"(r9)
                   : "rcx", "r11", "memory");
  return ret;
}
#elif defined(__aarch64__)
#define RLOCK_RAW_SYSCALLS 1
[[gnu::always_inline]] inline long call(long n, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0,
                                        long a6 = 0) {
  register long x8 __asm__("x8") = n;
  register long x0 __asm__("x0") = a1;
  register long x1 __asm__("x1") = a2;
  register long x2 __asm__("x2") = a3;
  register long x3 __asm__("x3") = a4;
  register long x4 __asm__("x4") = a5;
  register long x5 __asm__("x5") = a6;
  __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5) : "memory");
  return x0;
}
#else
// Elsewhere the guard is a fork (memory of its own, errno of its own) and libc's syscall(2) does.
#define RLOCK_RAW_SYSCALLS 0
}  // namespace rlock::proc::sys
#include <unistd.h>

#include <cerrno>
namespace rlock::proc::sys {
inline long call(long n, long a1 = 0, long a2 = 0, long a3 = 0, long a4 = 0, long a5 = 0, long a6 = 0) {
  long r = ::syscall(n, a1, a2, a3, a4, a5, a6);
  return r == -1 ? -errno : r;
}
#endif

}  // namespace rlock::proc::sys

namespace rlock::proc::sys {

// Text building for paths in guard code (no snprintf, no allocation): each appends to out,
// stops at end, and returns where it stopped; the caller writes the terminating '\0'.
RLOCK_GUARD_CODE inline char* put_text(char* out, const char* end, const char* text) {
  while (*text && out < end) *out++ = *text++;
  return out;
}

RLOCK_GUARD_CODE inline char* put_number(char* out, const char* end, long value) {
  char digits[24];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value > 0);
  while (n > 0 && out < end) *out++ = digits[--n];
  return out;
}

}  // namespace rlock::proc::sys
