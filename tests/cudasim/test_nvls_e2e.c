/*
 * NVLS end to end in CUDA mode on the CUDA simulator, public API only:
 * ncclCommInitAll over 2 and 4 simulated devices (one rank each), P2P
 * windows in cuMem memory (BRAID_CUDASIM_CUMEM=1), NVLS asked for
 * (NCCL_NVLS_ENABLE=1, or NCCL_ALGO naming NVLS), so each communicator's
 * window is bound to a simulated multicast object through
 * transport/nvls.c and the NVLS plans run as multimem operations.
 *
 *   forced    NCCL_ALGO allows only NVLS for all-reduce, all-gather and
 *             reduce-scatter: every call below either runs an NVLS plan or
 *             fails (ncclInvalidUsage), so success proves NVLS ran. Every
 *             datatype the rule allows with sum (f32, f16, bf16, f64,
 *             int32, uint64) and min/max on int32/f16, counts 1, 1023 and
 *             70001 (the low-latency and the pipelined all-reduce), in and
 *             out of place, checked exactly against tests/common/coll_ref.c.
 *   failbind  the simulator refuses cuMulticastBindAddr on device 1
 *             (BRAID_CUDASIM_MC_FAIL=bind:1), NCCL_ALGO allows NVLS then
 *             ring: every rank turns NVLS off together (nobody hangs in
 *             the bind) and the calls run on the ring, exact.
 *   required  the same refusal with NCCL_NVLS_ENABLE=1: the first call
 *             fails on every rank (the setup is required), none hangs.
 *   windows   ncclCommWindowRegister of ncclMemAlloc buffers (2 ranks,
 *             NVLS automatic): each window is bound to a multicast object,
 *             and ncclGetLsaMultimemDevicePointer gives an address that the
 *             simulator's own table (brd_cudasim_mc_find) confirms is a
 *             multicast mapping whose members are the ranks' buffers, in
 *             rank order, offsets included; past the window the getter
 *             refuses. A cudaMalloc window is not bound and the getter says
 *             why; with NCCL_NVLS_ENABLE=0 (nowin) neither is bound.
 *
 *   zerocopy  ncclMemAlloc windows bound to multicast hold every rank's
 *             send and receive buffers at the same offsets, NCCL_ALGO
 *             allows only NVLS: all-reduce, all-gather and reduce-scatter
 *             on 2 and 4 ranks, in and out of place, run the zero-copy NVLS
 *             plan (INFO counted per rank and call), exactly; the library's
 *             device memory grows by no more than the plans' blobs; a
 *             count of no whole 16-byte packs falls back and says why.
 *   zcauto    the same windows with NVLS on and NCCL_ALGO unset: the
 *             tuner's model takes the zero-copy NVLS all-reduce at 1 MiB
 *             and the one-shot LL plan at 1 KiB.
 *
 * Each configuration runs in a child process (the simulator and Braid
 * read their environment once per process) under an alarm.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include <cuda_runtime_api.h>

#include "coll_ref.h"
#include "cudasim.h"
#include "nccl.h"
#include "core/devapi.h" /* the device API's host declarations (NCCL's nccl_device.h) */

#define MAXR 4

static const char *const kind_names[] = {"allreduce", "allgather", "reducescatter"};

/* A failure in a child: print and exit non-zero. */
#define DIE(...)                                                              \
  do {                                                                        \
    fprintf(stderr, __VA_ARGS__);                                             \
    fprintf(stderr, "\n");                                                    \
    _exit(1);                                                                 \
  } while (0)

static void *managed(size_t bytes) {
  void *p = NULL;
  if (cudaMallocManaged(&p, bytes ? bytes : 1, cudaMemAttachGlobal) != cudaSuccess)
    DIE("cudaMallocManaged of %zu bytes failed", bytes);
  return p;
}

/* One call of kind k on every rank in one group, checked. Returns the
 * group's result (the data is checked only on success). */
static ncclResult_t run_call_in(ncclComm_t *comms, cudaStream_t *st, int n, ref_kind_t k,
                                ncclDataType_t dt, ncclRedOp_t op, size_t c, int inplace,
                                char *const *mem_in, char *const *other_in) {
  size_t es = ref_dtype_size(dt), nc = (size_t)n * c;
  char *mem[MAXR], *other[MAXR];
  const void *send[MAXR];
  void *recv[MAXR];
  for (int r = 0; r < n; r++) {
    mem[r] = mem_in != NULL ? mem_in[r] : managed(nc * es);
    other[r] = other_in != NULL ? other_in[r] : managed(nc * es);
    ref_case_fill(k, dt, op, r, n, c, inplace, mem[r], other[r], &send[r], &recv[r]);
  }
  ncclResult_t res = ncclGroupStart();
  for (int r = 0; r < n && res == ncclSuccess; r++) {
    switch (k) {
    case REF_AR: res = ncclAllReduce(send[r], recv[r], c, dt, op, comms[r], st[r]); break;
    case REF_AG: res = ncclAllGather(send[r], recv[r], c, dt, comms[r], st[r]); break;
    case REF_RS: res = ncclReduceScatter(send[r], recv[r], c, dt, op, comms[r], st[r]); break;
    }
  }
  ncclResult_t end = ncclGroupEnd();
  if (res == ncclSuccess) res = end;
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    if (cudaStreamSynchronize(st[r]) != cudaSuccess) DIE("stream %d failed", r);
  }
  for (int r = 0; r < n && res == ncclSuccess; r++) {
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comms[r], &async) != ncclSuccess || async != ncclSuccess)
      DIE("%s: rank %d async error %d: %s", kind_names[k], r, async, ncclGetLastError(NULL));
  }
  char *expect = malloc(c * es + 1);
  if (expect == NULL) DIE("out of memory");
  for (int r = 0; r < n && res == ncclSuccess; r++) {
    char msg[256] = "";
    size_t wrong = ref_case_check(k, dt, op, r, n, c, recv[r], expect, msg, sizeof(msg));
    if (wrong)
      DIE("%s %s %s n=%d count=%zu %s: rank %d has %zu wrong elements: %s", kind_names[k],
          ref_dtype_name(dt), ref_op_name(op), n, c, inplace ? "in place" : "out of place",
          r, wrong, msg);
  }
  free(expect);
  for (int r = 0; r < n && mem_in == NULL; r++) {
    cudaFree(mem[r]);
    cudaFree(other[r]);
  }
  return res;
}

static ncclResult_t run_call(ncclComm_t *comms, cudaStream_t *st, int n, ref_kind_t k,
                             ncclDataType_t dt, ncclRedOp_t op, size_t c, int inplace) {
  return run_call_in(comms, st, n, k, dt, op, c, inplace, NULL, NULL);
}

static void comms_make(int n, ncclComm_t *comms, cudaStream_t *st) {
  int devs[MAXR] = {0, 1, 2, 3};
  if (ncclCommInitAll(comms, n, devs) != ncclSuccess)
    DIE("ncclCommInitAll(%d): %s", n, ncclGetLastError(NULL));
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    if (cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking) != cudaSuccess)
      DIE("stream %d", r);
  }
}

static void comms_free(int n, ncclComm_t *comms, cudaStream_t *st, int abort) {
  for (int r = 0; r < n; r++) {
    if (abort) ncclCommAbort(comms[r]);
    else if (ncclCommDestroy(comms[r]) != ncclSuccess)
      DIE("ncclCommDestroy(rank %d): %s", r, ncclGetLastError(NULL));
    cudaSetDevice(r);
    cudaStreamDestroy(st[r]);
  }
}

/* forced: every eligible call runs an NVLS plan, exactly. */
static void child_forced(void) {
  static const struct {
    ncclDataType_t dt;
    ncclRedOp_t op;
  } cases[] = {{ncclFloat32, ncclSum}, {ncclFloat16, ncclSum}, {ncclBfloat16, ncclSum},
               {ncclFloat64, ncclSum}, {ncclInt32, ncclSum},   {ncclUint64, ncclSum},
               {ncclInt32, ncclMax},   {ncclFloat16, ncclMin}};
  static const size_t counts[] = {1, 1023, 70001};
  static const int sizes[] = {2, 4};
  for (int si = 0; si < 2; si++) {
    int n = sizes[si];
    ncclComm_t comms[MAXR];
    cudaStream_t st[MAXR];
    comms_make(n, comms, st);
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++)
      for (size_t k = 0; k < 3; k++)
        for (size_t c = 0; c < 3; c++)
          for (int inplace = 0; inplace < 2; inplace++) {
            if (k == REF_AG && (cases[ci].op != ncclSum || ci > 3)) continue; /* no op */
            if (n == 4 && c == 0 && inplace) continue;
            ncclResult_t res = run_call(comms, st, n, (ref_kind_t)k, cases[ci].dt, cases[ci].op,
                                        counts[c], inplace);
            if (res != ncclSuccess)
              DIE("%s %s %s n=%d count=%zu: %s (%s): NVLS did not run", kind_names[k],
                  ref_dtype_name(cases[ci].dt), ref_op_name(cases[ci].op), n, counts[c],
                  ncclGetErrorString(res), ncclGetLastError(NULL));
          }
    /* Not eligible (prod): NCCL_ALGO leaves it no algorithm, as NCCL says. */
    ncclResult_t bad = run_call(comms, st, n, REF_AR, ncclFloat32, ncclProd, 100, 0);
    if (bad != ncclInvalidUsage) DIE("a prod all-reduce with only NVLS allowed returned %d", bad);
    comms_free(n, comms, st, 0);
  }
  _exit(0);
}

/* failbind: the bind fails on device 1; NVLS off everywhere, ring runs. */
static void child_failbind(void) {
  ncclComm_t comms[MAXR];
  cudaStream_t st[MAXR];
  comms_make(4, comms, st);
  for (size_t c = 1; c < 100000; c *= 37)
    if (run_call(comms, st, 4, REF_AR, ncclFloat32, ncclSum, c, 0) != ncclSuccess)
      DIE("all-reduce with NVLS turned off: %s", ncclGetLastError(NULL));
  comms_free(4, comms, st, 0);
  _exit(0);
}

/* required: NCCL_NVLS_ENABLE=1 and the bind fails: every rank's call
 * fails, none hangs. */
static void child_required(void) {
  ncclComm_t comms[MAXR];
  cudaStream_t st[MAXR];
  comms_make(2, comms, st);
  ncclResult_t res = run_call(comms, st, 2, REF_AR, ncclFloat32, ncclSum, 1000, 0);
  if (res == ncclSuccess) DIE("the call succeeded although the required NVLS setup failed");
  fprintf(stderr, "observed: required NVLS, failed bind: %s (%s)\n", ncclGetErrorString(res),
          ncclGetLastError(NULL));
  comms_free(2, comms, st, 1);
  _exit(0);
}

/* Registers one window per rank in a group (a collective call). */
static void windows_register(ncclComm_t *comms, int n, void **buf, size_t bytes,
                             ncclWindow_t *win) {
  if (ncclGroupStart() != ncclSuccess) DIE("ncclGroupStart");
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    if (ncclCommWindowRegister(comms[r], buf[r], bytes, &win[r], NCCL_WIN_COLL_SYMMETRIC) !=
        ncclSuccess)
      DIE("ncclCommWindowRegister(rank %d): %s", r, ncclGetLastError(NULL));
  }
  if (ncclGroupEnd() != ncclSuccess) DIE("window registration: %s", ncclGetLastError(NULL));
}

static void windows_free(ncclComm_t *comms, int n, ncclWindow_t *win) {
  for (int r = 0; r < n; r++)
    if (ncclCommWindowDeregister(comms[r], win[r]) != ncclSuccess)
      DIE("ncclCommWindowDeregister(rank %d): %s", r, ncclGetLastError(NULL));
}

/* The multimem getter refuses window w with code want, its last error
 * naming `because`. */
static void expect_unbound(ncclWindow_t w, size_t offset, ncclResult_t want,
                           const char *because) {
  void *p = (void *)1;
  ncclResult_t res = ncclGetLsaMultimemDevicePointer(w, offset, &p);
  if (res != want || strstr(ncclGetLastError(NULL), because) == NULL)
    DIE("ncclGetLsaMultimemDevicePointer(offset %zu) returned %d (%s), want %d naming "
        "\"%s\"", offset, res, ncclGetLastError(NULL), want, because);
}

/* windows: ncclMemAlloc windows are bound to multicast, and the getter's
 * address is the simulator's multicast mapping of the ranks' buffers. */
static void child_windows(void) {
  const int n = 2;
  const size_t bytes = 1 << 20;
  ncclComm_t comms[MAXR];
  cudaStream_t st[MAXR];
  void *buf[MAXR], *plain[MAXR];
  ncclWindow_t win[MAXR], pwin[MAXR];
  comms_make(n, comms, st);
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    if (ncclMemAlloc(&buf[r], bytes) != ncclSuccess) DIE("ncclMemAlloc(rank %d)", r);
    if (cudaMalloc(&plain[r], bytes) != cudaSuccess) DIE("cudaMalloc(rank %d)", r);
  }
  windows_register(comms, n, buf, bytes, win);
  const int nvls = getenv("NCCL_NVLS_ENABLE") == NULL;
  for (int r = 0; r < n; r++) {
    if (!nvls) {
      expect_unbound(win[r], 0, ncclInvalidUsage, "NCCL_NVLS_ENABLE=0");
      continue;
    }
    void *mc = NULL, *mc2 = NULL;
    if (ncclGetLsaMultimemDevicePointer(win[r], 0, &mc) != ncclSuccess || mc == NULL)
      DIE("rank %d: no multicast address for an ncclMemAlloc window: %s", r,
          ncclGetLastError(NULL));
    brd_cudasim_mc_t m;
    if (!brd_cudasim_mc_find(mc, bytes, &m))
      DIE("rank %d: %p is not a bound multicast mapping of %zu bytes", r, mc, bytes);
    if (m.n != n) DIE("rank %d: the multicast object has %d members, want %d", r, m.n, n);
    for (int q = 0; q < n; q++) {
      size_t off = (size_t)((const char *)mc - m.base);
      if (m.uc[q] + off != (char *)buf[q])
        DIE("rank %d: member %d's copy of the window is %p, rank %d's buffer is %p", r, q,
            (void *)(m.uc[q] + off), q, buf[q]);
    }
    if (ncclGetLsaMultimemDevicePointer(win[r], 4096, &mc2) != ncclSuccess ||
        (char *)mc2 != (char *)mc + 4096)
      DIE("rank %d: offset 4096 gives %p, want %p", r, mc2, (void *)((char *)mc + 4096));
    expect_unbound(win[r], bytes + 16, ncclInvalidArgument, "outside");
  }
  windows_register(comms, n, plain, bytes, pwin);
  for (int r = 0; r < n; r++)
    expect_unbound(pwin[r], 0, ncclInvalidUsage,
                   nvls ? "not ncclMemAlloc (cuMem) memory" : "NCCL_NVLS_ENABLE=0");
  windows_free(comms, n, pwin);
  windows_free(comms, n, win);
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    ncclMemFree(buf[r]);
    cudaFree(plain[r]);
  }
  comms_free(n, comms, st, 0);
  _exit(0);
}

/* Lines of the INFO log at path (NCCL_DEBUG_FILE) that contain what. */
static int log_count(const char *path, const char *what) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  char line[1024];
  int hits = 0;
  while (fgets(line, sizeof(line), f) != NULL) hits += strstr(line, what) != NULL;
  fclose(f);
  return hits;
}

/* zerocopy: every rank's send and receive buffers lie in one ncclMemAlloc
 * window bound to multicast, at the same offsets; NCCL_ALGO allows only
 * NVLS. All-reduce, all-gather and reduce-scatter on 2 and 4 ranks, in and
 * out of place, must run the zero-copy NVLS plan (one INFO per rank and
 * call says so), exactly; a count whose bytes are no multiple of 16 falls
 * back to the staged NVLS plan and says why. The device memory the
 * library holds (ncclStatGpuMemTotal) grows by at most the plans' own
 * blobs across the zero-copy calls: no scratch, no staging. */
static void child_zerocopy(void) {
  static const struct {
    ncclDataType_t dt;
    ncclRedOp_t op;
  } cases[] = {{ncclFloat32, ncclSum}, {ncclBfloat16, ncclSum}, {ncclInt32, ncclMax},
               {ncclFloat16, ncclMin}, {ncclUint64, ncclSum}};
  static const size_t counts[] = {1000, 40000};
  const char *log = getenv("NCCL_DEBUG_FILE");
  const size_t half = (size_t)2 << 20;
  for (int n = 2; n <= 4; n += 2) {
    ncclComm_t comms[MAXR];
    cudaStream_t st[MAXR];
    void *buf[MAXR];
    char *mem[MAXR], *other[MAXR];
    ncclWindow_t win[MAXR];
    comms_make(n, comms, st);
    for (int r = 0; r < n; r++) {
      cudaSetDevice(r);
      if (ncclMemAlloc(&buf[r], 2 * half) != ncclSuccess) DIE("ncclMemAlloc(rank %d)", r);
      mem[r] = buf[r];
      other[r] = (char *)buf[r] + half;
    }
    windows_register(comms, n, buf, 2 * half, win);
    uint64_t before[MAXR], after;
    for (int r = 0; r < n; r++)
      if (ncclCommMemStats(comms[r], ncclStatGpuMemTotal, &before[r]) != ncclSuccess)
        DIE("ncclCommMemStats(rank %d)", r);
    int calls = 0;
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++)
      for (int k = 0; k < 3; k++)
        for (size_t c = 0; c < 2; c++)
          for (int inplace = 0; inplace < 2; inplace++) {
            if (k == REF_AG && cases[ci].op != ncclSum) continue;
            int was = log_count(log, "zero-copy NVLS plan over");
            ncclResult_t res = run_call_in(comms, st, n, (ref_kind_t)k, cases[ci].dt,
                                           cases[ci].op, counts[c], inplace, mem, other);
            if (res != ncclSuccess)
              DIE("%s %s %s n=%d count=%zu: %s (%s)", kind_names[k],
                  ref_dtype_name(cases[ci].dt), ref_op_name(cases[ci].op), n, counts[c],
                  ncclGetErrorString(res), ncclGetLastError(NULL));
            int now = log_count(log, "zero-copy NVLS plan over");
            if (now - was != n)
              DIE("%s %s %s n=%d count=%zu %s: %d ranks ran the zero-copy NVLS plan, "
                  "want %d", kind_names[k], ref_dtype_name(cases[ci].dt),
                  ref_op_name(cases[ci].op), n, counts[c], inplace ? "in place" : "out of "
                  "place", now - was, n);
            calls++;
          }
    for (int r = 0; r < n; r++) {
      if (ncclCommMemStats(comms[r], ncclStatGpuMemTotal, &after) != ncclSuccess)
        DIE("ncclCommMemStats(rank %d)", r);
      /* Only the plans' blobs (a few hundred bytes each) may appear. */
      if (after - before[r] > 16384)
        DIE("rank %d: the zero-copy calls grew the library's device memory by %llu "
            "bytes", r, (unsigned long long)(after - before[r]));
      fprintf(stderr, "observed: %d ranks, rank %d: %d zero-copy NVLS calls, library device "
             "memory %llu -> %llu bytes (+%llu: plan blobs)\n", n, r, calls,
             (unsigned long long)before[r], (unsigned long long)after,
             (unsigned long long)(after - before[r]));
    }
    /* 1001 floats: 4004 bytes, no whole 16-byte packs: the staged plan. */
    int fb = log_count(log, "no zero-copy NVLS plan (multimem moves 16-byte packs");
    if (run_call_in(comms, st, n, REF_AR, ncclFloat32, ncclSum, 1001, 0, mem, other) !=
        ncclSuccess)
      DIE("the fallback all-reduce failed: %s", ncclGetLastError(NULL));
    if (log_count(log, "no zero-copy NVLS plan (multimem moves 16-byte packs") - fb != n)
      DIE("an all-reduce of 1001 floats did not say why it is not zero-copy");
    windows_free(comms, n, win);
    for (int r = 0; r < n; r++) {
      cudaSetDevice(r);
      ncclMemFree(buf[r]);
    }
    comms_free(n, comms, st, 0);
  }
  _exit(0);
}

/* zcauto: NVLS on (NCCL_NVLS_ENABLE=1), NCCL_ALGO unset, buffers in bound
 * windows: the tuner's model decides. At 1 KiB the one-shot LL plan's
 * estimate (about 6 us here) beats the zero-copy NVLS plan's (launch + two
 * switch barriers, 7 us), so the zero-copy plan does not run; at 1 MiB it
 * does. Exact either way. */
static void child_zcauto(void) {
  const int n = 2;
  const size_t half = (size_t)2 << 20;
  const char *log = getenv("NCCL_DEBUG_FILE");
  ncclComm_t comms[MAXR];
  cudaStream_t st[MAXR];
  void *buf[MAXR];
  char *mem[MAXR], *other[MAXR];
  ncclWindow_t win[MAXR];
  comms_make(n, comms, st);
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    if (ncclMemAlloc(&buf[r], 2 * half) != ncclSuccess) DIE("ncclMemAlloc(rank %d)", r);
    mem[r] = buf[r];
    other[r] = (char *)buf[r] + half;
  }
  windows_register(comms, n, buf, 2 * half, win);
  static const struct {
    size_t count;
    int zc;
  } cases[] = {{256, 0}, {262144, 1}};
  for (int i = 0; i < 2; i++) {
    int was = log_count(log, "zero-copy NVLS plan over");
    if (run_call_in(comms, st, n, REF_AR, ncclFloat32, ncclSum, cases[i].count, 0, mem,
                    other) != ncclSuccess)
      DIE("all-reduce of %zu floats: %s", cases[i].count, ncclGetLastError(NULL));
    int ran = log_count(log, "zero-copy NVLS plan over") - was;
    if (ran != (cases[i].zc ? n : 0))
      DIE("all-reduce of %zu floats: %d ranks ran the zero-copy NVLS plan, want %d",
          cases[i].count, ran, cases[i].zc ? n : 0);
  }
  windows_free(comms, n, win);
  for (int r = 0; r < n; r++) {
    cudaSetDevice(r);
    ncclMemFree(buf[r]);
  }
  comms_free(n, comms, st, 0);
  _exit(0);
}

/* Runs fn in a child with the given environment (NULL-terminated
 * NAME=VALUE list) under a deadline. */
static void in_child(void (*fn)(void), const char *const *env, unsigned deadline_s) {
  fflush(NULL);
  pid_t pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    for (const char *const *e = env; *e != NULL; e++) putenv((char *)*e);
    alarm(deadline_s);
    fn();
    _exit(0);
  }
  int status = 0;
  assert_int_equal(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    fail_msg("child ended with status %d (a signal %d means its deadline passed or it "
             "crashed)", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
             WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

static int cuda_mode(void) {
  const char *d = getenv("BRAID_DEVICE");
  return d != NULL && strcmp(d, "cuda") == 0;
}

static void test_forced(void **state) {
  static const char *const env[] = {
      "BRAID_CUDASIM_CUMEM=1", "BRAID_CUDASIM_DEVICES=4", "NCCL_NVLS_ENABLE=1",
      "NCCL_ALGO=allreduce:nvls;allgather:nvls;reducescatter:nvls", NULL};
  (void)state;
  if (!cuda_mode()) skip();
  in_child(child_forced, env, 600);
}

static void test_failbind(void **state) {
  static const char *const env[] = {"BRAID_CUDASIM_CUMEM=1", "BRAID_CUDASIM_DEVICES=4",
                                    "BRAID_CUDASIM_MC_FAIL=bind:1",
                                    "NCCL_ALGO=allreduce:nvls,ring", NULL};
  (void)state;
  if (!cuda_mode()) skip();
  in_child(child_failbind, env, 300);
}

static void test_required(void **state) {
  static const char *const env[] = {"BRAID_CUDASIM_CUMEM=1", "BRAID_CUDASIM_DEVICES=4",
                                    "BRAID_CUDASIM_MC_FAIL=bind:1", "NCCL_NVLS_ENABLE=1",
                                    "BRAID_TIMEOUT=20", NULL};
  (void)state;
  if (!cuda_mode()) skip();
  in_child(child_required, env, 300);
}

static void test_windows(void **state) {
  static const char *const env[] = {"BRAID_CUDASIM_CUMEM=1", "BRAID_CUDASIM_DEVICES=2",
                                    NULL};
  (void)state;
  if (!cuda_mode()) skip();
  in_child(child_windows, env, 300);
}

static void test_nowin(void **state) {
  static const char *const env[] = {"BRAID_CUDASIM_CUMEM=1", "BRAID_CUDASIM_DEVICES=2",
                                    "NCCL_NVLS_ENABLE=0", NULL};
  (void)state;
  if (!cuda_mode()) skip();
  in_child(child_windows, env, 300);
}

static void test_zerocopy(void **state) {
  static char file[64];
  snprintf(file, sizeof(file), "NCCL_DEBUG_FILE=/tmp/braid_nvls_zc.%d.log", (int)getpid());
  const char *const env[] = {"BRAID_CUDASIM_CUMEM=1", "BRAID_CUDASIM_DEVICES=4",
                             "NCCL_ALGO=allreduce:nvls;allgather:nvls;reducescatter:nvls",
                             "NCCL_DEBUG=INFO", "NCCL_DEBUG_SUBSYS=NVLS", file, NULL};
  (void)state;
  if (!cuda_mode()) skip();
  unlink(file + strlen("NCCL_DEBUG_FILE="));
  in_child(child_zerocopy, env, 300);
  if (getenv("BRAID_TEST_KEEP_LOG") == NULL) unlink(file + strlen("NCCL_DEBUG_FILE="));
}

static void test_zcauto(void **state) {
  static char file[64];
  snprintf(file, sizeof(file), "NCCL_DEBUG_FILE=/tmp/braid_nvls_zca.%d.log", (int)getpid());
  const char *const env[] = {"BRAID_CUDASIM_CUMEM=1", "BRAID_CUDASIM_DEVICES=2",
                             "NCCL_NVLS_ENABLE=1", "NCCL_DEBUG=INFO",
                             "NCCL_DEBUG_SUBSYS=NVLS", file, NULL};
  (void)state;
  if (!cuda_mode()) skip();
  unlink(file + strlen("NCCL_DEBUG_FILE="));
  in_child(child_zcauto, env, 120);
  unlink(file + strlen("NCCL_DEBUG_FILE="));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_forced),
      cmocka_unit_test(test_failbind),
      cmocka_unit_test(test_required),
      cmocka_unit_test(test_windows),
      cmocka_unit_test(test_nowin),
      cmocka_unit_test(test_zerocopy),
      cmocka_unit_test(test_zcauto),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
