/* The benches' timer (bench/overhead, bench/redlock): runs the commands of a file (one a line,
 * its words separated by tabs, the first word a name) in rounds, each command once per round, in
 * a new random order each round, so that every command sees the same machine: a build or a test
 * starting next door slows all of them alike, and no command always runs right after the same
 * one. `timer ROUNDS WARMUP FILE [stderr]` prints "NAME NS MAXRSS_KIB EXIT" per timed run: fork
 * to wait4 on CLOCK_MONOTONIC, and the kernel's peak RSS of the process and of the children it
 * waited for. The commands' stdin and stdout are /dev/null, and so is stderr unless "stderr" is
 * given. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
enum { max_cmds = 16, max_words = 64 };
static char *words[max_cmds][max_words + 1];
static long long now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}
int main(int argc, char **argv) {
  if (argc != 4 && argc != 5) return 64;
  int keep_stderr = argc == 5 && strcmp(argv[4], "stderr") == 0;
  int rounds = atoi(argv[1]), warmup = atoi(argv[2]), n = 0;
  FILE *f = fopen(argv[3], "r");
  if (!f) return 66;
  static char line[max_cmds][4096];
  while (n < max_cmds && fgets(line[n], sizeof line[n], f)) {
    int w = 0;
    for (char *save = NULL, *t = strtok_r(line[n], "\t\n", &save); t && w < max_words; t = strtok_r(NULL, "\t\n", &save))
      words[n][w++] = t;
    if (w >= 2) words[n++][w] = NULL;
  }
  int devnull = open("/dev/null", O_RDWR);
  int order[max_cmds];
  for (int k = 0; k < n; k++) order[k] = k;
  srand(1);
  for (int r = -warmup; r < rounds; r++) {
    for (int k = n - 1; k > 0; k--) {  /* a new order each round, so that no command always follows the same one */
      int j = rand() % (k + 1), t = order[k];
      order[k] = order[j], order[j] = t;
    }
    for (int k = 0; k < n; k++) {
      int i = order[k];
      long long t0 = now();
      pid_t pid = fork();
      if (pid < 0) return 71;
      if (pid == 0) {
        dup2(devnull, 0), dup2(devnull, 1);
        if (!keep_stderr) dup2(devnull, 2);
        execv(words[i][1], words[i] + 1);
        _exit(127);
      }
      int status;
      struct rusage ru;
      if (wait4(pid, &status, 0, &ru) != pid) return 71;
      long long t1 = now();
      int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      if (r >= 0) printf("%s %lld %ld %d\n", words[i][0], t1 - t0, ru.ru_maxrss, code);
    }
  }
  return 0;
}
