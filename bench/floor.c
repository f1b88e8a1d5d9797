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

/* Reads one one-line reply into buf (NUL-terminated); 0 when it came. */
static int read_reply(int fd, char *buf, size_t size) {
  size_t got = 0;
  while (got + 1 < size) {
    ssize_t r = read(fd, buf + got, size - 1 - got);
    if (r <= 0) return -1;
    got += (size_t)r;
    buf[got] = '\0';
    if (strstr(buf, "\r\n")) return 0;
  }
  return -1;
}

/* Sends the request to every master, then reads every reply; returns how many began with ok. */
static int round_trip(const int *fds, int n, const char *request, const char *ok) {
  size_t len = strlen(request);
  for (int i = 0; i < n; ++i) {
    if (write(fds[i], request, len) != (ssize_t)len) return -1;
  }
  int count = 0;
  for (int i = 0; i < n; ++i) {
    char reply[512];
    if (read_reply(fds[i], reply, sizeof reply) != 0) return -1;
    if (strncmp(reply, ok, strlen(ok)) == 0) ++count;
  }
  return count;
}

/* RESP for a command of up to 4 words into buf. */
static void resp(char *buf, size_t size, int argc, const char *const *argv) {
  size_t off = (size_t)snprintf(buf, size, "*%d\r\n", argc);
  for (int i = 0; i < argc && off < size; ++i) {
    off += (size_t)snprintf(buf + off, size - off, "$%zu\r\n%s\r\n", strlen(argv[i]), argv[i]);
  }
}

/* floor -w PORT KEY COMMAND...: see the top. */
static int wait_and_run(int fd, const char *key, char **command) {
  char request[1024], reply[512], wake[450];
  snprintf(wake, sizeof wake, "%s:wake", key);
  const char *set[] = {"SET", key, "1", "NX", "PX", "30000"};
  const char *blpop[] = {"BLPOP", wake, "1"};
  for (;;) {
    resp(request, sizeof request, 6, set);
    if (round_trip(&fd, 1, request, "+OK") == 1) break;
    /* Held: block until a release pushes a wake-up (or a second has passed). The reply is an
     * array ("*2 ...", three lines) or a null ("*-1" / "_"): read until its last line. */
    resp(request, sizeof request, 3, blpop);
    size_t len = strlen(request);
    if (write(fd, request, len) != (ssize_t)len) return 1;
    size_t got = 0;
    for (;;) {
      ssize_t r = read(fd, reply + got, sizeof reply - 1 - got);
      if (r <= 0) return 1;
      got += (size_t)r;
      reply[got] = '\0';
      if (reply[0] != '*' || reply[1] == '-') {
        if (strstr(reply, "\r\n")) break;
      } else {
        int lines = 0;
        for (const char *p = reply; (p = strstr(p, "\r\n")); p += 2) ++lines;
        if (lines >= 5) break;
      }
      if (got + 1 >= sizeof reply) return 1;
    }
  }
  pid_t child = fork();
  if (child == 0) {
    execvp(command[0], command);
    _exit(127);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return 1;
  /* DEL and the wake-up in one write, two replies. */
  const char *del[] = {"DEL", key};
  const char *push[] = {"LPUSH", wake, "1"};
  resp(request, sizeof request, 2, del);
  size_t off = strlen(request);
  resp(request + off, sizeof request - off, 3, push);
  size_t len = strlen(request);
  if (write(fd, request, len) != (ssize_t)len) return 1;
  for (int replies = 0; replies < 2;) {
    if (read_reply(fd, reply, sizeof reply) != 0) return 1;
    for (const char *p = reply; (p = strstr(p, "\r\n")); p += 2) ++replies;
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
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
  size_t key = strlen(argv[2]);
  if (key > 400) return 1;
  snprintf(request, sizeof request, "*6\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$1\r\n1\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n",
           key, argv[2]);
  int took = round_trip(fds, n, request, "+OK");
  if (took < 0) return 1;
  int status = 0;
  if (took > n / 2) {
    pid_t child = fork();
    if (child == 0) {
      execvp(argv[3], argv + 3);
      _exit(127);
    }
    if (child < 0 || waitpid(child, &status, 0) != child) return 1;
  }
  snprintf(request, sizeof request, "*2\r\n$3\r\nDEL\r\n$%zu\r\n%s\r\n", key, argv[2]);
  if (round_trip(fds, n, request, ":") < 0) return 1;
  if (took <= n / 2) return 75;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
