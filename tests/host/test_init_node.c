/*
 * One rank of a multi-node init, for tests/host/netns.sh, and on its own a
 * check that two hosts staged with BRAID_HOSTID on loopback get per-host
 * device numbering (host mode: a rank's device is its index on its host).
 *
 * Rank mode (BRAID_TEST_RANK set): BRAID_TEST_NRANKS ranks; the unique id
 * comes from NCCL_COMM_ID, or, with BRAID_TEST_ID_FILE, rank 0 creates it
 * and writes it there for the others. Checks count, rank and
 * BRAID_TEST_EXPECT_DEV, splits by BRAID_TEST_NODE to check the other
 * ranks agree on who shares a node, runs an all-reduce, an all-gather and
 * a ring of send/recv across the nodes (channels between nodes go over
 * the net) checked against values computed here, and exits 0 on success.
 * With BRAID_TEST_LOOP_SECONDS=s it then keeps running all-reduces for s
 * seconds and exits 3 at the first failure, printing the error (netns.sh
 * takes a link down meanwhile).
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl.h"

#define FAILX(...)                                                            \
  do {                                                                        \
    fprintf(stderr, "rank %s: ", getenv("BRAID_TEST_RANK"));                  \
    fprintf(stderr, __VA_ARGS__);                                             \
    fprintf(stderr, " (%s)\n", ncclGetLastError(NULL));                       \
    return 1;                                                                 \
  } while (0)

static int env_int(const char *name, int def) {
  const char *v = getenv(name);
  return v ? atoi(v) : def;
}

static int get_id(int rank, ncclUniqueId *id) {
  const char *file = getenv("BRAID_TEST_ID_FILE");
  if (file == NULL) return ncclGetUniqueId(id) == ncclSuccess ? 0 : 1;
  if (rank == 0) {
    char tmp[512];
    FILE *f;
    if (ncclGetUniqueId(id) != ncclSuccess) return 1;
    snprintf(tmp, sizeof(tmp), "%s.tmp", file);
    f = fopen(tmp, "wb");
    if (f == NULL || fwrite(id, sizeof(*id), 1, f) != 1) return 1;
    fclose(f);
    return rename(tmp, file) == 0 ? 0 : 1;
  }
  for (int i = 0; i < 1000; i++) {
    FILE *f = fopen(file, "rb");
    if (f != NULL) {
      size_t n = fread(id, sizeof(*id), 1, f);
      fclose(f);
      if (n == 1) return 0;
    }
    usleep(10000);
  }
  return 1;
}

/* Collectives across the nodes, checked element by element. */
static int check_data(ncclComm_t c, int rank, int nranks) {
  const size_t n = (1 << 20) + 3;
  float *a = malloc(n * sizeof(float));
  int32_t *g = malloc((size_t)nranks * 1000 * sizeof(int32_t));
  int32_t mine[1000], from[1000];
  if (a == NULL || g == NULL) return 1;
  for (size_t i = 0; i < n; i++) a[i] = (float)(rank + 1) * (float)(i % 13);
  if (ncclAllReduce(a, a, n, ncclFloat, ncclSum, c, NULL) != ncclSuccess) return 1;
  for (size_t i = 0; i < n; i++)
    if (a[i] != (float)(nranks * (nranks + 1) / 2) * (float)(i % 13)) return 1;
  for (int i = 0; i < 1000; i++) mine[i] = rank * 100000 + i;
  if (ncclAllGather(mine, g, 1000, ncclInt32, c, NULL) != ncclSuccess) return 1;
  for (int r = 0; r < nranks; r++)
    for (int i = 0; i < 1000; i++)
      if (g[r * 1000 + i] != r * 100000 + i) return 1;
  int to = (rank + 1) % nranks, fr = (rank + nranks - 1) % nranks;
  if (ncclGroupStart() != ncclSuccess ||
      ncclSend(mine, 1000, ncclInt32, to, c, NULL) != ncclSuccess ||
      ncclRecv(from, 1000, ncclInt32, fr, c, NULL) != ncclSuccess ||
      ncclGroupEnd() != ncclSuccess)
    return 1;
  for (int i = 0; i < 1000; i++)
    if (from[i] != fr * 100000 + i) return 1;
  free(a);
  free(g);
  return 0;
}

/* All-reduces for `seconds`; 0 when they all passed, 3 at a failure. */
static int loop_data(ncclComm_t c, int rank, int seconds) {
  const size_t n = 1 << 20;
  float *a = malloc(n * sizeof(float));
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int calls = 0;
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &t);
    if (t.tv_sec - t0.tv_sec >= seconds) break;
    for (size_t i = 0; i < n; i++) a[i] = 1.0f;
    ncclResult_t res = ncclAllReduce(a, a, n, ncclFloat, ncclSum, c, NULL);
    if (res != ncclSuccess) {
      clock_gettime(CLOCK_MONOTONIC, &t);
      printf("rank %d: call %d failed after %ld s: %s: %s\n", rank, calls,
             (long)(t.tv_sec - t0.tv_sec), ncclGetErrorString(res), ncclGetLastError(c));
      fflush(stdout);
      free(a);
      return 3;
    }
    calls++;
  }
  printf("rank %d: %d calls passed\n", rank, calls);
  free(a);
  return 0;
}

static int run_rank(void) {
  int rank = env_int("BRAID_TEST_RANK", -1), nranks = env_int("BRAID_TEST_NRANKS", 0);
  int want_dev = env_int("BRAID_TEST_EXPECT_DEV", -1), node = env_int("BRAID_TEST_NODE", 0);
  int want_local = env_int("BRAID_TEST_NODE_RANKS", 0);
  ncclUniqueId id;
  ncclComm_t c = NULL, s = NULL;
  int n = -1, r = -1, dev = -1;
  if (get_id(rank, &id) != 0) FAILX("no unique id");
  if (ncclCommInitRank(&c, nranks, id, rank) != ncclSuccess) FAILX("init failed");
  if (ncclCommCount(c, &n) != ncclSuccess || n != nranks) FAILX("count %d", n);
  if (ncclCommUserRank(c, &r) != ncclSuccess || r != rank) FAILX("rank %d", r);
  if (ncclCommCuDevice(c, &dev) != ncclSuccess || dev != want_dev)
    FAILX("device %d, want %d", dev, want_dev);
  if (ncclCommSplit(c, node, rank, &s, NULL) != ncclSuccess) FAILX("split by node");
  if (want_local > 0 && (ncclCommCount(s, &n) != ncclSuccess || n != want_local))
    FAILX("node has %d ranks, want %d", n, want_local);
  if (check_data(c, rank, nranks) != 0) FAILX("collectives across the nodes");
  int loop = env_int("BRAID_TEST_LOOP_SECONDS", 0);
  if (loop > 0) {
    int rc = loop_data(c, rank, loop);
    if (rc != 0) {
      ncclCommAbort(s);
      ncclCommAbort(c);
      return rc;
    }
  }
  if (ncclCommDestroy(s) != ncclSuccess || ncclCommDestroy(c) != ncclSuccess) FAILX("destroy");
  printf("rank %d of %d: device %d, node %d: ok\n", rank, nranks, dev, node);
  return 0;
}

/* Two "hosts" of two ranks each on loopback. */
static void test_two_hosts_loopback(void **state) {
  (void)state;
  struct sockaddr_in a;
  socklen_t len = sizeof(a);
  char comm_id[64];
  pid_t pid[4];
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  assert_true(fd >= 0);
  assert_int_equal(bind(fd, (struct sockaddr *)&a, len), 0);
  assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  close(fd);
  snprintf(comm_id, sizeof(comm_id), "127.0.0.1:%d", ntohs(a.sin_port));
  fflush(NULL);
  for (int r = 0; r < 4; r++) {
    pid[r] = fork();
    assert_true(pid[r] >= 0);
    if (pid[r] == 0) {
      char buf[16];
      int rc;
      setenv("BRAID_DEVICE", "host", 1);
      setenv("BRAID_BOOTSTRAP_TIMEOUT", "10", 1);
      setenv("NCCL_COMM_ID", comm_id, 1);
      setenv("BRAID_HOSTID", r < 2 ? "node-a" : "node-b", 1);
      snprintf(buf, sizeof(buf), "%d", r);
      setenv("BRAID_TEST_RANK", buf, 1);
      setenv("BRAID_TEST_NRANKS", "4", 1);
      snprintf(buf, sizeof(buf), "%d", r % 2);
      setenv("BRAID_TEST_EXPECT_DEV", buf, 1);
      setenv("BRAID_TEST_NODE", r < 2 ? "0" : "1", 1);
      setenv("BRAID_TEST_NODE_RANKS", "2", 1);
      rc = run_rank();
      fflush(NULL);
      _exit(rc);
    }
  }
  for (int r = 0; r < 4; r++) {
    int status;
    assert_int_equal(waitpid(pid[r], &status, 0), pid[r]);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) fail_msg("rank %d failed", r);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_two_hosts_loopback),
  };
  if (getenv("BRAID_TEST_RANK") != NULL) return run_rank();
  return cmocka_run_group_tests(tests, NULL, NULL);
}
