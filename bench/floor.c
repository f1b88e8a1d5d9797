/* The floor of a lock held in Redis around a command (bench/overhead, bench/redlock): the least
 * any such lock does, with nothing rlock adds (no guard, no scripts, no records, no options).
 * `floor PORTS KEY COMMAND [ARG...]`, PORTS one port or several, comma-separated: connects to
 * 127.0.0.1 on each, sends SET KEY 1 NX PX 30000 to all of them at once and reads their replies
 * (one round trip), runs the command when a majority said OK (fork, execvp, waitpid), then sends
 * DEL KEY to all at once (one round trip) and exits as the command did; 75 when no majority took
 * the key, 1 on any other failure. With several ports it is the least a Redlock quorum does:
 * the same two round trips, the masters asked in parallel.
 * `floor -w PORT KEY COMMAND [ARG...]` waits instead of exiting 75 (bench/handoff): when SET NX
 * fails it blocks in BLPOP on KEY:wake (1s at most, then tries again), and its DEL comes with an
 * LPUSH to KEY:wake (one round trip), which wakes the longest-blocked waiter, who tries SET NX
 * again (a second round trip). The least a Redis lock whose waiters are woken on release does.
 * Plain sockets and hand-written RESP: no library to load but libc. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

enum { k_max_masters = 16 };

/* Reads until buf (NUL-terminated, *got bytes in it already) holds `lines` lines: a read may end
 * anywhere, even between a CR and its LF. 0 when they came. */
static int read_more(int fd, char *buf, size_t size, size_t *got, int lines) {
  for (;;) {
    int seen = 0;
    for (const char *p = buf; *got > 0 && (p = strstr(p, "\r\n")); p += 2) ++seen;
    if (seen >= lines) return 0;
    if (*got + 1 >= size) return -1;
    ssize_t r = read(fd, buf + *got, size - 1 - *got);
    if (r <= 0) return -1;
    *got += (size_t)r;
    buf[*got] = '\0';
  }
}

/* Reads `lines` one-line replies into buf; 0 when they came. */
static int read_lines(int fd, char *buf, size_t size, int lines) {
  size_t got = 0;
  buf[0] = '\0';
  return read_more(fd, buf, size, &got, lines);
}

/* Sends the request to the masters whose `which` is set (all when which is NULL), then reads
 * their replies; sets ok[i] for those that began with `want`. Returns how many did, or -1 when a
 * master failed or answered with an error (a Redis error is never a refusal). */
static int round_trip(const int *fds, int n, const int *which, const char *request, const char *want, int *ok) {
  size_t len = strlen(request);
  for (int i = 0; i < n; ++i) {
    if (which && !which[i]) continue;
    if (write(fds[i], request, len) != (ssize_t)len) return -1;
  }
  int count = 0;
  for (int i = 0; i < n; ++i) {
    if (which && !which[i]) continue;
    char reply[512];
    if (read_lines(fds[i], reply, sizeof reply, 1) != 0 || reply[0] == '-') return -1;
    ok[i] = strncmp(reply, want, strlen(want)) == 0;
    count += ok[i];
  }
  return count;
}

/* RESP for a command of up to 6 words into buf. */
static void resp(char *buf, size_t size, int argc, const char *const *argv) {
  size_t off = (size_t)snprintf(buf, size, "*%d\r\n", argc);
  for (int i = 0; i < argc && off < size; ++i) {
    off += (size_t)snprintf(buf + off, size - off, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
  }
}

/* Runs the command (fork, execvp, waitpid) and returns how it exited, as the floor exits. */
static int run_command(char **command) {
  pid_t child = fork();
  if (child == 0) {
    execvp(command[0], command);
    _exit(127);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

/* floor -w PORT KEY COMMAND...: see the top. */
static int wait_and_run(int fd, const char *key, char **command) {
  char request[1024], reply[512], wake[450];
  snprintf(wake, sizeof wake, "%s:wake", key);
  const char *set[] = {"SET", key, "1", "NX", "PX", "30000"};
  const char *blpop[] = {"BLPOP", wake, "1"};
  for (;;) {
    resp(request, sizeof request, 6, set);
    int ok = 0;
    int took = round_trip(&fd, 1, NULL, request, "+OK", &ok);
    if (took < 0) return 1;
    if (took == 1) break;
    /* Held: block until a release pushes a wake-up (or a second has passed). The reply is an
     * array ("*2 ...", three lines) or a null ("*-1" / "_"): read until its last line. */
    resp(request, sizeof request, 3, blpop);
    size_t len = strlen(request);
    if (write(fd, request, len) != (ssize_t)len) return 1;
    size_t got = 0;
    reply[0] = '\0';
    if (read_more(fd, reply, sizeof reply, &got, 1) != 0 || reply[0] == '-') return 1;
    /* A wake-up is an array of two bulk strings (5 lines); a timeout, one line. */
    if (strncmp(reply, "*2", 2) == 0 && read_more(fd, reply, sizeof reply, &got, 5) != 0) return 1;
  }
  int status = run_command(command);
  /* DEL and the wake-up in one write, two replies. */
  const char *del[] = {"DEL", key};
  const char *push[] = {"LPUSH", wake, "1"};
  resp(request, sizeof request, 2, del);
  size_t off = strlen(request);
  resp(request + off, sizeof request - off, 3, push);
  size_t len = strlen(request);
  if (write(fd, request, len) != (ssize_t)len) return 1;
  if (read_lines(fd, reply, sizeof reply, 2) != 0 || reply[0] == '-') return 1;
  return status;
}

int main(int argc, char **argv) {
  int waiting = argc > 1 && strcmp(argv[1], "-w") == 0;
  argc -= waiting;
  argv += waiting;
  if (argc < 4) return 1;
  int fds[k_max_masters], n = 0;
  for (char *port = strtok(argv[1], ","); port; port = strtok(NULL, ",")) {
    if (n == k_max_masters) return 1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    struct sockaddr_in addr;
    memset(&addr, 0, sizeof addr);
    addr.sin_family = AF_INET;
    addr.sin_port = htons((unsigned short)atoi(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) return 1;
    fds[n++] = fd;
  }
  if (n == 0 || (waiting && n != 1)) return 1;
  if (strlen(argv[2]) > 400) return 1;
  if (waiting) return wait_and_run(fds[0], argv[2], argv + 3);
  char request[512];
  const char *set[] = {"SET", argv[2], "1", "NX", "PX", "30000"};
  const char *del[] = {"DEL", argv[2]};
  resp(request, sizeof request, 6, set);
  int took_on[k_max_masters] = {0}, gone[k_max_masters] = {0};
  int took = round_trip(fds, n, NULL, request, "+OK", took_on);
  if (took < 0) return 1;
  int status = took > n / 2 ? run_command(argv + 3) : 75;
  /* DEL only where SET took it: elsewhere the key is another client's. */
  resp(request, sizeof request, 2, del);
  if (took > 0 && round_trip(fds, n, took_on, request, ":", gone) < 0) return 1;
  return status;
}
