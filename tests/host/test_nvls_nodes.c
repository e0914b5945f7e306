/*
 * NVLS inside each node, a ring across the nodes (NCCL_ALGO=NVLSTree;
 * algos/nvls_hier.c) end to end, host mode, public API only: ranks are
 * processes staged on 2 and 3 "hosts" of this machine (BRAID_HOSTID per
 * process, as tests/host/test_multinode.c), with the switch emulation on
 * (NCCL_NVLS_ENABLE=1): each host's ranks form a switch group of their
 * own, the hosts talk over the socket net.
 *
 * For 2 hosts x 2, 2 hosts x 3 and 3 hosts x 2 (the last with the hosts'
 * ranks interleaved), with NCCL_ALGO=allreduce:NVLSTree (only NVLSTree
 * may run the all-reduce, so a success is NVLSTree's), every rank checks
 * against an independent CPU reference (tests/common/coll_ref.c), outputs
 * poisoned first: float sum, int32 max and bf16 sum, in place and out of
 * place, counts 7 and 50001 (the latter many windows: NCCL_BUFFSIZE is
 * 64 KiB here); a float prod, which multimem cannot reduce, is refused
 * with ncclInvalidUsage naming NCCL_ALGO and the communicator goes on.
 *
 * Fail together: on 2 hosts x 2 with NCCL_ALGO=allreduce:NVLSTree,Ring,
 * host 1's ranks set NCCL_NVLS_ENABLE=0. Every rank must then turn NVLS
 * off (its INFO log says "NVLS off"), run the ring and get the right sum;
 * a rank that kept NVLS on would wait for the others at a switch barrier
 * until BRAID_TIMEOUT (set short here) and fail.
 *
 * In CUDA mode (BRAID_DEVICE=cuda, the simulator's builds) the backend
 * maps one multicast object over every rank and has no switch groups per
 * node, so NVLS stays off across nodes: there only the 2 hosts x 2 layout
 * runs, with NCCL_ALGO=allreduce:NVLSTree,Ring and NVLS asked for on every
 * rank; every rank must say "NVLS off" and get the ring's right sum.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "coll_ref.h"
#include "nccl.h"
#include "tdev.h"
#include "trank.h"

#define MAXR 8

typedef struct {
  const char *name;
  int n;
  int host[MAXR]; /* node of each rank */
  int refuse_host; /* >= 0: a fall-back case; that host's ranks (if any) set
                    * NCCL_NVLS_ENABLE=0 */
} layout_t;

static const layout_t layouts[] = {
    {"2 hosts x 2", 4, {0, 0, 1, 1}, -1},
    {"2 hosts x 3", 6, {0, 0, 0, 1, 1, 1}, -1},
    {"3 hosts x 2, interleaved", 6, {0, 1, 2, 0, 1, 2}, -1},
    {"2 hosts x 2, NVLS off on host 1", 4, {0, 0, 1, 1}, 1},
};
/* CUDA mode: NVLS asked for everywhere, refused by the backend. */
static const layout_t cuda_layout = {"2 hosts x 2, CUDA backend (no switch groups per node)",
                                     4, {0, 0, 1, 1}, 2};

/* A stream's work must finish within this. */
#define SYNC_TIMEOUT_S 120.0

static void matrix(trank_t *c, ncclComm_t comm) {
  static const struct {
    ncclDataType_t dt;
    ncclRedOp_t op;
  } cases[] = {{ncclFloat32, ncclSum}, {ncclInt32, ncclMax}, {ncclBfloat16, ncclSum}};
  static const size_t counts[] = {7, 50001};
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]) && !c->failures; i++)
    for (int ip = 0; ip < 2 && !c->failures; ip++)
      for (size_t k = 0; k < 2 && !c->failures; k++) {
        ncclResult_t res =
            trank_allreduce_check(c, comm, cases[i].dt, cases[i].op, ip, counts[k]);
        if (res != ncclSuccess)
          trank_fail(c, "all-reduce %s %s count %zu: %s (%s)", ref_dtype_name(cases[i].dt),
                     ref_op_name(cases[i].op), counts[k], ncclGetErrorString(res),
                     ncclGetLastError(comm));
      }
}

/* Whether file holds text. */
static int file_has(const char *path, const char *text) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  char line[1024];
  int found = 0;
  while (!found && fgets(line, sizeof(line), f) != NULL) found = strstr(line, text) != NULL;
  fclose(f);
  return found;
}

/* Rank `rank`'s INFO log file (a fall-back case only). */
static void log_path(int rank, char *path, size_t len) {
  snprintf(path, len, "/tmp/braid_nvls_nodes.%d.%d.log", (int)getppid(), rank);
}

static void rank_env(const void *ctx, int rank) {
  const layout_t *l = ctx;
  char hostid[32], log[128];
  snprintf(hostid, sizeof(hostid), "nvlsnodes-%d", l->host[rank]);
  setenv("BRAID_HOSTID", hostid, 1);
  setenv("NCCL_NVLS_ENABLE", l->host[rank] == l->refuse_host ? "0" : "1", 1);
  setenv("NCCL_ALGO", l->refuse_host >= 0 ? "allreduce:NVLSTree,Ring" : "allreduce:NVLSTree", 1);
  if (l->refuse_host >= 0) {
    log_path(rank, log, sizeof(log));
    unlink(log);
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "NVLS", 1);
    setenv("NCCL_DEBUG_FILE", log, 1);
  }
}

static void rank_log_remove(const void *ctx, int rank) {
  const layout_t *l = ctx;
  char log[128];
  if (l->refuse_host < 0) return;
  log_path(rank, log, sizeof(log));
  unlink(log);
}

static int run_rank(const void *ctx, ncclUniqueId id, int n, int rank, char *msg, size_t msglen) {
  const layout_t *l = ctx;
  char log[128];
  log_path(rank, log, sizeof(log));
  trank_t c = {rank, n, 0, msg, msglen, NULL, SYNC_TIMEOUT_S};
  ncclComm_t comm;
  if (trank_init(&c, id, &comm) != 0) return c.failures;
  ncclResult_t res;
  if (l->refuse_host >= 0) {
    /* Everyone falls back to the ring together, and says so. */
    for (int ip = 0; ip < 2 && !c.failures; ip++) {
      res = trank_allreduce_check(&c, comm, ncclFloat32, ncclSum, ip, 50001);
      if (res != ncclSuccess)
        trank_fail(&c, "all-reduce (%s): %s (%s)", l->name, ncclGetErrorString(res),
                   ncclGetLastError(comm));
    }
  } else {
    matrix(&c, comm);
    /* What multimem cannot reduce: refused, naming the override. */
    if (!c.failures) {
      res = trank_allreduce_check(&c, comm, ncclFloat32, ncclProd, 0, 7);
      if (res != ncclInvalidUsage || strstr(ncclGetLastError(comm), "NCCL_ALGO") == NULL)
        trank_fail(&c, "forced NVLSTree on a float prod gave %s (%s), not ncclInvalidUsage "
                   "naming NCCL_ALGO", ncclGetErrorString(res), ncclGetLastError(comm));
    }
    if (!c.failures) {
      res = trank_allreduce_check(&c, comm, ncclInt32, ncclSum, 1, 1023);
      if (res != ncclSuccess)
        trank_fail(&c, "all-reduce after the refusal: %s", ncclGetErrorString(res));
    }
  }
  trank_fini(&c, comm);
  if (l->refuse_host >= 0 && !c.failures && !file_has(log, "NVLS off"))
    trank_fail(&c, "NVLS was refused (%s), but this rank's log (%s) has no \"NVLS off\"",
               l->name, log);
  return c.failures;
}

static void test_layout(void **state) {
  const layout_t *l = *state;
  if (tdev_kind() == TDEV_CUDA && tdev_cuda_touched())
    fail_msg("this process used CUDA before forking ranks that use it");
  const tdev_proc_ops_t ops = {rank_env, run_rank, rank_log_remove};
  char first[512];
  int failed = tdev_run_procs(l->n, &ops, l, first, sizeof(first));
  if (failed) fail_msg("%s: %d rank(s) failed; first %s", l->name, failed, first);
}

int main(void) {
  setenv("BRAID_DEVICE", "host", 0);
  char why[256];
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: staged hosts with BRAID_DEVICE=%s: %s\n", getenv("BRAID_DEVICE"), why);
    return TDEV_EXIT_SKIP;
  }
  /* A rank left waiting at a switch barrier fails in seconds, not minutes. */
  setenv("BRAID_TIMEOUT", "20", 0);
  /* Small slots: the larger counts take many windows. */
  setenv("NCCL_BUFFSIZE", "65536", 1);
  unsetenv("BRAID_TEST_HOSTS");
  setenv("BRAID_VERIFY_PLANS", "1", 0);
  enum { NL = sizeof(layouts) / sizeof(layouts[0]) };
  struct CMUnitTest tests[NL];
  if (tdev_kind() == TDEV_CUDA) {
    tests[0] = (struct CMUnitTest){cuda_layout.name, test_layout, NULL, NULL,
                                   (void *)&cuda_layout};
    return _cmocka_run_group_tests("NVLSTree across staged hosts (CUDA)", tests, 1, NULL,
                                   NULL);
  }
  for (int i = 0; i < NL; i++)
    tests[i] = (struct CMUnitTest){layouts[i].name, test_layout, NULL, NULL,
                                   (void *)&layouts[i]};
  return _cmocka_run_group_tests("NVLSTree across staged hosts", tests, NL, NULL, NULL);
}
