/* The floor of a lock held in Redis around a command (bench/overhead): the least any such lock
 * does, with nothing rlock adds (no guard, no scripts, no records, no options). `floor PORT KEY
 * COMMAND [ARG...]` connects to 127.0.0.1:PORT, sends SET KEY 1 NX PX 30000 (one round trip),
 * runs the command (fork, execvp, waitpid), sends DEL KEY (one round trip) and exits as the
 * command did; 75 when the key was held, 1 on any other failure. Plain sockets and hand-written RESP: no library to
 * load but libc. */
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

/* Sends a request and reads its one-line reply into buf (NUL-terminated); 0 when it came. */
static int round_trip(int fd, const char *request, char *buf, size_t size) {
  size_t n = strlen(request);
  if (write(fd, request, n) != (ssize_t)n) return -1;
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

int main(int argc, char **argv) {
  if (argc < 4) return 1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in addr;
  memset(&addr, 0, sizeof addr);
  addr.sin_family = AF_INET;
  addr.sin_port = htons((unsigned short)atoi(argv[1]));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) return 1;
  char request[512], reply[512];
  size_t key = strlen(argv[2]);
  if (key > 400) return 1;
  snprintf(request, sizeof request, "*6\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$1\r\n1\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n",
           key, argv[2]);
  if (round_trip(fd, request, reply, sizeof reply) != 0) return 1;
  if (strncmp(reply, "+OK", 3) != 0) return reply[0] == '$' ? 75 : 1;
  pid_t child = fork();
  if (child == 0) {
    execvp(argv[3], argv + 3);
    _exit(127);
  }
  int status = 0;
  if (child < 0 || waitpid(child, &status, 0) != child) return 1;
  snprintf(request, sizeof request, "*2\r\n$3\r\nDEL\r\n$%zu\r\n%s\r\n", key, argv[2]);
  if (round_trip(fd, request, reply, sizeof reply) != 0) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
