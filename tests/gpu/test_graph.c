/*
 * Collectives captured in a CUDA graph and replayed, public API only.
 *
 * Ranks are threads of this process sharing device 0 (2 and 4 ranks), one
 * communicator each (ncclCommInitRank), each on its own non-blocking
 * stream. Every rank first runs the five calls once outside any capture
 * (warm-up: the library connects and uploads its plans; results checked),
 * then captures them into one graph (cudaStreamCaptureModeGlobal, as
 * PyTorch does):
 *   ncclAllReduce out of place (float sum), ncclAllReduce in place (int32
 *   sum), ncclAllGather (int32), ncclReduceScatter (float sum),
 *   ncclBroadcast from the last rank (int32), a ring of ncclSend /
 *   ncclRecv in a group (int32, each rank to the next), and the same ring
 *   in place (one buffer sent and received into, as nccl-tests'
 *   sendrecv_perf -G does: the send must carry what the buffer held when
 *   the replay started),
 * and replays the graph BRAID_TEST_GRAPH_REPLAYS times (100). Before each
 * replay, outside the graph, the inputs are rewritten from the host with
 * values that depend on the replay number and the outputs are filled with
 * 0xff bytes (NaN, -1), so a replay that skipped a call, reused an old
 * sequence number or staging half, or read stale inputs shows. After each
 * replay every output is copied back and compared, element by element,
 * with a CPU reference computed from the same value formula (integer
 * values, exact in float in any summation order).
 *
 * Skips (exit 77, "SKIP: ...") without CUDA in the build, with
 * BRAID_DEVICE=host, or when no CUDA device is visible.
 * BRAID_TEST_QUICK=1: 10 replays and smaller counts.
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

#include "gpuranks.h"
#include "nccl.h"
#include "tdev.h"

#if BRAID_CUDA
#include <cuda_runtime.h>

/* A stream's work must finish within this (BRAID_TIMEOUT is 30 s here). */
#define SYNC_TIMEOUT_S 120.0

enum { C_AR, C_ARIP, C_AG, C_RS, C_BC, C_SR, C_SRIP, NCALLS };
static const char *call_names[NCALLS] = {"allreduce out-of-place", "allreduce in-place",
                                         "allgather", "reducescatter", "broadcast",
                                         "send/recv ring", "send/recv ring in place"};

/* Calls whose output is their input buffer. */
static int in_place(int c) { return c == C_ARIP || c == C_SRIP; }

/* Per-call element counts (per rank for all-gather and reduce-scatter):
 * odd, and large enough in full mode for several blocks and pieces. */
static size_t counts[NCALLS];

static void counts_init(void) {
  int quick = tdev_quick();
  counts[C_AR] = quick ? 1031 : 300007;
  counts[C_ARIP] = quick ? 77 : 4099;
  counts[C_AG] = quick ? 513 : 65537;
  counts[C_RS] = quick ? 257 : 100003;
  counts[C_BC] = quick ? 1001 : 262147;
  counts[C_SR] = quick ? 3001 : 200003;
  counts[C_SRIP] = quick ? 2049 : 150001;
}

static int replays(void) {
  const char *v = getenv("BRAID_TEST_GRAPH_REPLAYS");
  if (v != NULL && atoi(v) > 0) return atoi(v);
  return tdev_quick() ? 10 : 100;
}

/* Input element i of rank r at replay t (t = -1: the warm-up). Integers
 * small enough that every float sum of up to 4 ranks is exact; different
 * for neighbouring ranks, elements and replays. */
static int32_t fval(int r, size_t i, int t) {
  return (int32_t)(((uint64_t)r * 37u + i * 11u + (uint64_t)(t + 1) * 101u) % 2003u) - 1001;
}

static int32_t ival(int r, size_t i, int t) {
  return (int32_t)(r * 1000003 + (int32_t)(i % 100000) * 7 + (t + 1) * 131 - 400000);
}

typedef struct {
  void *dev_in[NCALLS], *dev_out[NCALLS];
  size_t in_bytes[NCALLS], out_bytes[NCALLS];
  void *host_in[NCALLS], *host_out[NCALLS];
} rank_bufs_t;

#define CU GPURANKS_CU
#define NC GPURANKS_NC

/* Writes this rank's inputs for replay t into the host staging buffers. */
static void fill_inputs(rank_bufs_t *b, int n, int r, int t) {
  float *f;
  int32_t *x;
  f = b->host_in[C_AR];
  for (size_t i = 0; i < counts[C_AR]; i++) f[i] = (float)fval(r, i, t);
  x = b->host_in[C_ARIP];
  for (size_t i = 0; i < counts[C_ARIP]; i++) x[i] = ival(r, i, t);
  x = b->host_in[C_AG];
  for (size_t i = 0; i < counts[C_AG]; i++) x[i] = ival(r, i + 17, t);
  f = b->host_in[C_RS];
  for (size_t i = 0; i < (size_t)n * counts[C_RS]; i++) f[i] = (float)fval(r, i + 5, t);
  x = b->host_in[C_BC];
  for (size_t i = 0; i < counts[C_BC]; i++) x[i] = ival(r, i + 3, t);
  x = b->host_in[C_SR];
  for (size_t i = 0; i < counts[C_SR]; i++) x[i] = ival(r, i + 29, t);
  x = b->host_in[C_SRIP];
  for (size_t i = 0; i < counts[C_SRIP]; i++) x[i] = ival(r, i + 41, t);
}

/* Compares this rank's outputs (copied to host_out) with the CPU
 * reference for replay t; reports the first wrong element. */
static int check_outputs(gpuranks_arg_t *a, rank_bufs_t *b, int t) {
  int n = a->n, r = a->rank, root = n - 1;
  const float *f;
  const int32_t *x;
  f = b->host_out[C_AR];
  for (size_t i = 0; i < counts[C_AR]; i++) {
    int64_t want = 0;
    for (int q = 0; q < n; q++) want += fval(q, i, t);
    if (f[i] != (float)want)
      return gpuranks_fail(a, "replay %d rank %d %s element %zu: %g, expected %lld", t, r,
                           call_names[C_AR], i, (double)f[i], (long long)want);
  }
  x = b->host_out[C_ARIP];
  for (size_t i = 0; i < counts[C_ARIP]; i++) {
    int64_t want = 0;
    for (int q = 0; q < n; q++) want += ival(q, i, t);
    if (x[i] != (int32_t)want)
      return gpuranks_fail(a, "replay %d rank %d %s element %zu: %d, expected %lld", t, r,
                           call_names[C_ARIP], i, x[i], (long long)want);
  }
  x = b->host_out[C_AG];
  for (int q = 0; q < n; q++)
    for (size_t i = 0; i < counts[C_AG]; i++)
      if (x[(size_t)q * counts[C_AG] + i] != ival(q, i + 17, t))
        return gpuranks_fail(a, "replay %d rank %d %s segment %d element %zu: %d, expected %d", t,
                             r, call_names[C_AG], q, i, x[(size_t)q * counts[C_AG] + i],
                             ival(q, i + 17, t));
  f = b->host_out[C_RS];
  for (size_t i = 0; i < counts[C_RS]; i++) {
    int64_t want = 0;
    for (int q = 0; q < n; q++) want += fval(q, (size_t)r * counts[C_RS] + i + 5, t);
    if (f[i] != (float)want)
      return gpuranks_fail(a, "replay %d rank %d %s element %zu: %g, expected %lld", t, r,
                           call_names[C_RS], i, (double)f[i], (long long)want);
  }
  x = b->host_out[C_BC];
  for (size_t i = 0; i < counts[C_BC]; i++)
    if (x[i] != ival(root, i + 3, t))
      return gpuranks_fail(a, "replay %d rank %d %s element %zu: %d, expected %d", t, r,
                           call_names[C_BC], i, x[i], ival(root, i + 3, t));
  int prev = (r + n - 1) % n;
  x = b->host_out[C_SR];
  for (size_t i = 0; i < counts[C_SR]; i++)
    if (x[i] != ival(prev, i + 29, t))
      return gpuranks_fail(a, "replay %d rank %d %s element %zu: %d, expected %d", t, r,
                           call_names[C_SR], i, x[i], ival(prev, i + 29, t));
  x = b->host_out[C_SRIP];
  for (size_t i = 0; i < counts[C_SRIP]; i++)
    if (x[i] != ival(prev, i + 41, t))
      return gpuranks_fail(a, "replay %d rank %d %s element %zu: %d, expected %d", t, r,
                           call_names[C_SRIP], i, x[i], ival(prev, i + 41, t));
  return 0;
}

/* The five calls, on stream s (inside a capture or not). */
static int enqueue_calls(gpuranks_arg_t *a, rank_bufs_t *b, ncclComm_t comm, cudaStream_t s) {
  NC(a, ncclAllReduce(b->dev_in[C_AR], b->dev_out[C_AR], counts[C_AR], ncclFloat32,
                      ncclSum, comm, s));
  NC(a, ncclAllReduce(b->dev_in[C_ARIP], b->dev_in[C_ARIP], counts[C_ARIP], ncclInt32,
                      ncclSum, comm, s));
  NC(a, ncclAllGather(b->dev_in[C_AG], b->dev_out[C_AG], counts[C_AG], ncclInt32, comm, s));
  NC(a, ncclReduceScatter(b->dev_in[C_RS], b->dev_out[C_RS], counts[C_RS], ncclFloat32,
                          ncclSum, comm, s));
  NC(a, ncclBroadcast(b->dev_in[C_BC], b->dev_out[C_BC], counts[C_BC], ncclInt32,
                      a->n - 1, comm, s));
  /* Point-to-point: each pair counts its own sequence numbers, kept on
   * the device, so replays get fresh ones. */
  NC(a, ncclGroupStart());
  NC(a, ncclSend(b->dev_in[C_SR], counts[C_SR], ncclInt32, (a->rank + 1) % a->n, comm, s));
  NC(a, ncclRecv(b->dev_out[C_SR], counts[C_SR], ncclInt32, (a->rank + a->n - 1) % a->n,
                 comm, s));
  NC(a, ncclGroupEnd());
  /* In place: the send reads the buffer the receive writes. */
  NC(a, ncclGroupStart());
  NC(a, ncclSend(b->dev_in[C_SRIP], counts[C_SRIP], ncclInt32, (a->rank + 1) % a->n, comm, s));
  NC(a, ncclRecv(b->dev_in[C_SRIP], counts[C_SRIP], ncclInt32, (a->rank + a->n - 1) % a->n,
                 comm, s));
  NC(a, ncclGroupEnd());
  return 0;
}

/* Before a run: new inputs from the host, outputs poisoned; after it, the
 * outputs back to the host. All on the rank's stream, outside the graph. */
static int upload(gpuranks_arg_t *a, rank_bufs_t *b, cudaStream_t s, int t) {
  fill_inputs(b, a->n, a->rank, t);
  for (int c = 0; c < NCALLS; c++) {
    CU(a, cudaMemcpyAsync(b->dev_in[c], b->host_in[c], b->in_bytes[c],
                          cudaMemcpyHostToDevice, s));
    if (!in_place(c)) CU(a, cudaMemsetAsync(b->dev_out[c], 0xff, b->out_bytes[c], s));
  }
  return 0;
}

static int download(gpuranks_arg_t *a, rank_bufs_t *b, cudaStream_t s) {
  for (int c = 0; c < NCALLS; c++) {
    void *src = in_place(c) ? b->dev_in[c] : b->dev_out[c];
    CU(a, cudaMemcpyAsync(b->host_out[c], src, b->out_bytes[c], cudaMemcpyDeviceToHost, s));
  }
  if (tdev_stream_sync(s, SYNC_TIMEOUT_S) != 0)
    return gpuranks_fail(a, "rank %d: %s (%s)", a->rank, tdev_last_error(), ncclGetLastError(NULL));
  return 0;
}

/* Setup and the warm-up run, outside any capture. */
static int setup_rank(gpuranks_arg_t *a, rank_bufs_t *b, ncclComm_t *comm, cudaStream_t *s) {
  int n = a->n;
  CU(a, cudaSetDevice(0));
  CU(a, cudaStreamCreateWithFlags(s, cudaStreamNonBlocking));
  for (int c = 0; c < NCALLS; c++) {
    size_t in = counts[c] * 4, out = counts[c] * 4;
    if (c == C_AG) out *= (size_t)n;
    if (c == C_RS) in *= (size_t)n;
    b->in_bytes[c] = in;
    b->out_bytes[c] = out;
    CU(a, cudaMalloc(&b->dev_in[c], in));
    if (!in_place(c)) CU(a, cudaMalloc(&b->dev_out[c], out));
    /* Pinned: a copy from the device to pageable memory holds the
     * context until it is done, so a rank's download, waiting for its
     * kernel, would hold the launch the kernel waits for on a peer sharing
     * the GPU (seen on an H200; the simulator models it). */
    CU(a, cudaMallocHost(&b->host_in[c], in));
    CU(a, cudaMallocHost(&b->host_out[c], out));
  }
  NC(a, ncclCommInitRank(comm, n, a->id, a->rank));

  if (upload(a, b, *s, -1) || enqueue_calls(a, b, *comm, *s) || download(a, b, *s) ||
      check_outputs(a, b, -1))
    return -1;
  return 0;
}

/* The capture. Every rank captures between two barriers: in global mode a
 * potentially unsafe CUDA call (an allocation, a synchronous copy, an
 * instantiation) of another thread would invalidate the capture. */
static int capture_rank(gpuranks_arg_t *a, rank_bufs_t *b, ncclComm_t comm, cudaStream_t s,
                            cudaGraph_t *graph) {
  CU(a, cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  int enq = enqueue_calls(a, b, comm, s);
  cudaError_t end = cudaStreamEndCapture(s, graph);
  if (enq) return -1;
  if (end != cudaSuccess)
    return gpuranks_fail(a, "rank %d: cudaStreamEndCapture failed: %s", a->rank,
                         cudaGetErrorString(end));
  return 0;
}

/* Instantiates the graph and replays it, new inputs before every replay,
 * every output checked after it. */
static int replay_rank(gpuranks_arg_t *a, rank_bufs_t *b, ncclComm_t comm, cudaStream_t s,
                           cudaGraph_t graph, cudaGraphExec_t *exec) {
  CU(a, cudaGraphInstantiate(exec, graph, 0));
  int nrep = replays();
  for (int t = 0; t < nrep; t++) {
    if (upload(a, b, s, t)) return -1;
    CU(a, cudaGraphLaunch(*exec, s));
    if (download(a, b, s)) return -1;
    /* A wrong result does not stop the replays: the peers would hang. */
    (void)check_outputs(a, b, t);
  }
  ncclResult_t async = ncclSuccess;
  NC(a, ncclCommGetAsyncError(comm, &async));
  if (async != ncclSuccess)
    return gpuranks_fail(a, "rank %d: ncclCommGetAsyncError after the replays: %s (%s)", a->rank,
                         ncclGetErrorString(async), ncclGetLastError(NULL));
  return a->failed ? -1 : 0;
}

static void *rank_main(void *p) {
  gpuranks_arg_t *a = p;
  rank_bufs_t b;
  memset(&b, 0, sizeof(b));
  ncclComm_t comm = NULL;
  cudaStream_t s = NULL;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  /* Every rank reaches both barriers, whatever failed before them. */
  int ok = setup_rank(a, &b, &comm, &s) == 0;
  ok = gpuranks_meet(a) == 0 && ok;
  ok = ok && capture_rank(a, &b, comm, s, &graph) == 0;
  ok = gpuranks_meet(a) == 0 && ok;
  if (ok) (void)replay_rank(a, &b, comm, s, graph, &exec);
  if (exec != NULL) (void)cudaGraphExecDestroy(exec);
  if (graph != NULL) (void)cudaGraphDestroy(graph);
  if (comm != NULL) {
    /* After a failure anywhere a peer may be gone: abort, do not destroy. */
    if (gpuranks_any_failed(a)) (void)ncclCommAbort(comm);
    else if (ncclCommDestroy(comm) != ncclSuccess)
      gpuranks_fail(a, "rank %d: ncclCommDestroy: %s", a->rank, ncclGetLastError(NULL));
  }
  if (s != NULL) (void)cudaStreamDestroy(s);
  for (int c = 0; c < NCALLS; c++) {
    if (b.dev_in[c] != NULL) (void)cudaFree(b.dev_in[c]);
    if (b.dev_out[c] != NULL) (void)cudaFree(b.dev_out[c]);
    if (b.host_in[c] != NULL) (void)cudaFreeHost(b.host_in[c]);
    if (b.host_out[c] != NULL) (void)cudaFreeHost(b.host_out[c]);
  }
  return NULL;
}

static void run_graph(int n) {
  char msg[512];
  if (gpuranks_run(n, rank_main, msg, sizeof(msg)) != 0) fail_msg("%d ranks: %s", n, msg);
  printf("  %d ranks: warm-up and %d replays of %d captured calls correct on every rank\n",
         n, replays(), NCALLS);
}

static void test_graph_2ranks(void **state) {
  (void)state;
  run_graph(2);
}

static void test_graph_4ranks(void **state) {
  (void)state;
  run_graph(4);
}
#endif /* BRAID_CUDA */

int main(void) {
#if !BRAID_CUDA
  printf("SKIP: test_graph: this build has no CUDA (CUDA=0)\n");
  return TDEV_EXIT_SKIP;
#else
  int skip = gpuranks_cuda_ready("test_graph", "CUDA graphs");
  if (skip != 0) return skip;
  counts_init();
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_graph_2ranks),
      cmocka_unit_test(test_graph_4ranks),
  };
  return cmocka_run_group_tests_name("graph capture and replay", tests, NULL, NULL);
#endif
}
