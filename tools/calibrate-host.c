/*
 * calibrate-host: the cost model's predictions for AllReduce in host mode,
 * as the runtime itself makes them (ncclGroupSimulateEnd), for
 * tools/calibrate-host.sh to set beside measurements.
 *
 *   BRAID_DEVICE=host [NCCL_ALGO=A] [NCCL_PROTO=P] calibrate-host -n RANKS
 *       [-b MIN] [-e MAX] [-f FACTOR] [-x EXTRA]
 *
 * Builds RANKS host-mode ranks in this process (ncclCommInitAll) and, for
 * each size from MIN to MAX (x FACTOR; 8 B to 64 MiB by x8 by default)
 * and EXTRA if given, prints one line
 *
 *   SIZE FORMULA_US PLAN_US
 *
 * FORMULA_US is ncclGroupSimulateEnd's answer before the first launch:
 * the tuner's own formula (src/plan/tune.c) for the pair it chooses under
 * NCCL_ALGO / NCCL_PROTO, the figure that picks the plan. PLAN_US is the
 * answer once one AllReduce has run (the windows are connected): the
 * chosen plan priced from its own ops (src/plan/plan_cost.c). Float sum,
 * out-of-place. Public API only.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl.h"
#include "size.h"

/* ncclGroupSimulateEnd's estimate for one AllReduce of `bytes` on every
 * rank, or -1. */
static double simulate(ncclComm_t *comms, char **send, char **recv, int n, size_t bytes) {
  ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
  size_t count = bytes / sizeof(float);
  ncclGroupStart();
  for (int r = 0; r < n; r++)
    ncclAllReduce(send[r], recv[r], count, ncclFloat32, ncclSum, comms[r], NULL);
  if (ncclGroupSimulateEnd(&sim) != ncclSuccess) {
    fprintf(stderr, "calibrate-host: ncclGroupSimulateEnd (%zu B): %s\n", bytes,
            ncclGetLastError(NULL));
    return -1.0;
  }
  return (double)sim.estimatedTime;
}

int main(int argc, char **argv) {
  int n = 4;
  double factor = 8.0;
  size_t min = 8, max = (size_t)64 << 20, extra = 0;
  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = v != NULL;
    if (ok && strcmp(o, "-n") == 0) n = atoi(v), ok = n >= 2;
    else if (ok && strcmp(o, "-b") == 0) ok = brd_tool_size_parse(v, &min);
    else if (ok && strcmp(o, "-e") == 0) ok = brd_tool_size_parse(v, &max);
    else if (ok && strcmp(o, "-x") == 0) ok = brd_tool_size_parse(v, &extra);
    else if (ok && strcmp(o, "-f") == 0) factor = atof(v), ok = factor > 1.0;
    else ok = 0;
    if (!ok) {
      fprintf(stderr, "usage: calibrate-host -n RANKS [-b MIN] [-e MAX] [-f FACTOR] "
              "[-x EXTRA]   (RANKS >= 2, sizes like 8, 64K, 64M)\n");
      return 2;
    }
    i++;
  }
  setenv("BRAID_DEVICE", "host", 0);
  size_t cap = max > extra ? max : extra;
  size_t sizes[64];
  int nsizes = 0;
  for (double b = (double)min; b <= (double)max && nsizes < 63; b *= factor)
    if ((size_t)b >= sizeof(float)) sizes[nsizes++] = (size_t)b;
  if (extra > 0 && (nsizes == 0 || sizes[nsizes - 1] < extra)) sizes[nsizes++] = extra;

  int rc = 1;
  ncclComm_t *comms = calloc((size_t)n, sizeof(*comms));
  int *devs = calloc((size_t)n, sizeof(*devs));
  char **send = calloc((size_t)n, sizeof(*send));
  char **recv = calloc((size_t)n, sizeof(*recv));
  double *formula = calloc((size_t)nsizes + 1, sizeof(*formula));
  if (comms == NULL || devs == NULL || send == NULL || recv == NULL || formula == NULL) {
    fprintf(stderr, "calibrate-host: out of memory\n");
    goto out;
  }
  /* Never touched beyond the first call's few bytes: address space only. */
  for (int r = 0; r < n; r++) {
    send[r] = calloc(1, cap);
    recv[r] = calloc(1, cap);
    devs[r] = r;
    if (send[r] == NULL || recv[r] == NULL) {
      fprintf(stderr, "calibrate-host: out of memory for %d x 2 x %zu B\n", n, cap);
      goto out;
    }
  }
  if (ncclCommInitAll(comms, n, devs) != ncclSuccess) {
    fprintf(stderr, "calibrate-host: ncclCommInitAll(%d): %s\n", n, ncclGetLastError(NULL));
    goto out;
  }
  for (int i = 0; i < nsizes; i++)
    if ((formula[i] = simulate(comms, send, recv, n, sizes[i])) < 0.0) goto out_destroy;
  /* One launch connects the windows; then the estimate prices the plan. */
  ncclGroupStart();
  for (int r = 0; r < n; r++)
    ncclAllReduce(send[r], recv[r], 1, ncclFloat32, ncclSum, comms[r], NULL);
  if (ncclGroupEnd() != ncclSuccess) {
    fprintf(stderr, "calibrate-host: the first AllReduce failed: %s\n", ncclGetLastError(NULL));
    goto out_destroy;
  }
  for (int i = 0; i < nsizes; i++) {
    double plan = simulate(comms, send, recv, n, sizes[i]);
    if (plan < 0.0) goto out_destroy;
    printf("%zu %.2f %.2f\n", sizes[i], formula[i], plan);
  }
  rc = 0;
out_destroy:
  for (int r = 0; r < n; r++) ncclCommDestroy(comms[r]);
out:
  for (int r = 0; n > 0 && send != NULL && recv != NULL && r < n; r++) {
    free(send[r]);
    free(recv[r]);
  }
  free(formula);
  free(send);
  free(recv);
  free(devs);
  free(comms);
  return rc;
}
