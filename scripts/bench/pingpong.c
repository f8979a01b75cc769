/*
 * The machine's limit for a pipe round trip: a parent and a forked child
 * ping-pong a 32-byte message over two pipes. Prints one JSON line with the
 * p50, p99 and mean round trip in microseconds. Compiled by main.ts with cc.
 *
 *   cc -O2 -o pingpong pingpong.c && ./pingpong <warmup> <iterations> [split]
 *
 * With "split" the child moves itself to core 1 (start the parent on core 0:
 * taskset -c 0), so every round trip crosses cores.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MESSAGE_BYTES 32

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static int read_full(int fd, char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r <= 0) return -1;
    got += (size_t)r;
  }
  return 0;
}

static int write_full(int fd, const char *buf, size_t n) {
  size_t put = 0;
  while (put < n) {
    ssize_t w = write(fd, buf + put, n - put);
    if (w <= 0) return -1;
    put += (size_t)w;
  }
  return 0;
}

int main(int argc, char **argv) {
  int warmup = argc > 1 ? atoi(argv[1]) : 1000;
  int n = argc > 2 ? atoi(argv[2]) : 10000;
  int split = argc > 3 && strcmp(argv[3], "split") == 0;
  if (n < 1) n = 1;
  int to_child[2], to_parent[2];
  if (pipe(to_child) || pipe(to_parent)) return 1;
  pid_t pid = fork();
  if (pid < 0) return 1;
  if (pid == 0) {
    char buf[MESSAGE_BYTES];
    if (split) {
      cpu_set_t set;
      CPU_ZERO(&set);
      CPU_SET(1, &set);
      if (sched_setaffinity(0, sizeof set, &set) != 0) _exit(2);
    }
    close(to_child[1]);
    close(to_parent[0]);
    while (read_full(to_child[0], buf, MESSAGE_BYTES) == 0) {
      if (write_full(to_parent[1], buf, MESSAGE_BYTES)) break;
    }
    _exit(0);
  }
  close(to_child[0]);
  close(to_parent[1]);
  double *t = malloc(sizeof(double) * (size_t)n);
  char out[MESSAGE_BYTES], in[MESSAGE_BYTES];
  double sum = 0;
  int bad = 0;
  for (int i = -warmup; i < n; i++) {
    memset(out, 'a' + (i & 15), MESSAGE_BYTES);
    double start = now_us();
    if (write_full(to_child[1], out, MESSAGE_BYTES) ||
        read_full(to_parent[0], in, MESSAGE_BYTES)) {
      bad = 1;
      break;
    }
    double took = now_us() - start;
    if (memcmp(in, out, MESSAGE_BYTES) != 0) bad = 1;
    if (i >= 0) {
      t[i] = took;
      sum += took;
    }
  }
  close(to_child[1]);
  waitpid(pid, NULL, 0);
  if (bad) {
    fprintf(stderr, "pingpong: the echo did not match\n");
    return 1;
  }
  qsort(t, (size_t)n, sizeof(double), by_value);
  printf("{\"p50\":%.3f,\"p99\":%.3f,\"mean\":%.3f}\n", t[n / 2],
         t[(int)(n * 0.99) < n ? (int)(n * 0.99) : n - 1], sum / n);
  free(t);
  return 0;
}
