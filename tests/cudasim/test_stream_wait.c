/*
 * Host waits on streams that share the GPU's hardware queues, on the
 * simulator with one queue per device (BRAID_CUDASIM_CONNECTIONS=1): every
 * stream's work goes through the same queue, in the order it was enqueued.
 *
 * Each test first holds the queue as a peer rank sharing the GPU would: on
 * a stream of the "peer", a host function that stands for its executor
 * kernel (waiting for this rank) and, behind it, a memset that stands for
 * its copy-out. The memset cannot start before the host function ends, and
 * nothing enqueued after it on any stream can start either. The gate opens
 * only after the call under test has returned, or after GATE_S seconds
 * (then `gate_timed_out`): a call that waits for the device would have
 * waited for the gate, which in the real case never opens.
 *
 *   - a plan's upload inside a capture (brd_exec_cuda_plan_create_on,
 *     capturing) returns at once; the graph's replay leaves the plan's
 *     bytes on the device;
 *   - a capture using a plan whose upload outside the capture is still
 *     queued (brd_exec_cuda_plan_use) returns at once, and the replay
 *     leaves the plan's bytes on the device;
 *   - a status reset (brd_exec_cuda_status_reset) returns at once and the
 *     status polls clean;
 *   - a P2P segment's zeroing, which must finish before the segment is
 *     published, gives up at BRAID_TIMEOUT with an error instead of hanging
 *     (the gate outlasts it), and succeeds when the queue is free;
 *   - the executor's creation-time copies (a status block, its trigger
 *     FIFO, a channel table, a plan) give up at BRAID_TIMEOUT with
 *     ncclSystemError and a WARN naming the shared hardware queues, and
 *     return then: they leak the memory the queued copy still targets
 *     instead of freeing it, since cudaFree waits for the whole device
 *     (here, for the gate). Destroying a status block while that work is
 *     queued returns at once too; once it has run, creation succeeds;
 *   - a communicator's connect (its CUDA backend) gives up the same way,
 *     and aborting the communicator then returns at once;
 *   - the same waits stop as soon as the abort flag is set (a status
 *     block's zeroing given a flag; a communicator's connect when another
 *     thread calls ncclCommAbort), well before BRAID_TIMEOUT.
 *
 * Simulator only: on a GPU the queue cannot be held this way.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include <cuda_runtime.h>

#include "nccl.h"
#include "algos/algos.h"
#include "base/cuda_wait.h"
#include "base/debug.h"
#include "device/exec_cuda.h"
#include "core/launch.h"
#include "plan/plan.h"
#include "transport/transport.h"

#define GATE_S 8.0

#define CU(x) assert_int_equal((int)(x), (int)cudaSuccess)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static volatile int gate, gate_timed_out;

/* The peer's kernel: holds its stream until the gate opens (at most
 * GATE_S seconds). */
static void CUDART_CB peer_kernel(void *arg) {
  (void)arg;
  double t0 = now_s();
  while (!__atomic_load_n(&gate, __ATOMIC_ACQUIRE)) {
    if (now_s() - t0 > GATE_S) {
      gate_timed_out = 1;
      return;
    }
    struct timespec d = {0, 1000000};
    nanosleep(&d, NULL);
  }
}

typedef struct {
  cudaStream_t peer;
  void *peer_buf;
} held_t;

/* Holds the device's one hardware queue, as described at the top. */
static void hold_queue(held_t *h) {
  gate = 0;
  gate_timed_out = 0;
  CU(cudaStreamCreateWithFlags(&h->peer, cudaStreamNonBlocking));
  CU(cudaMalloc(&h->peer_buf, 4096));
  CU(cudaLaunchHostFunc(h->peer, peer_kernel, NULL));
  CU(cudaMemsetAsync(h->peer_buf, 0x5a, 4096, h->peer)); /* the copy-out */
}

static void release_queue(held_t *h) {
  __atomic_store_n(&gate, 1, __ATOMIC_RELEASE);
  CU(cudaStreamSynchronize(h->peer));
  CU(cudaStreamDestroy(h->peer));
  CU(cudaFree(h->peer_buf));
}

/* A small real plan: the ring all-reduce of 3 ranks, 2 blocks. */
static brd_ir_plan_t *make_plan(void) {
  int order[3] = {0, 1, 2};
  brd_algos_args_t args = {3, order, 2, BRD_IR_PROTO_SIMPLE};
  brd_ir_plan_t *plan = NULL;
  assert_int_equal(brd_algos_ring_allreduce(&args, &plan), ncclSuccess);
  return plan;
}

/* The plan's device bytes equal the host's. */
static void check_device_plan(const brd_exec_cuda_plan_t *cp, const brd_ir_plan_t *plan) {
  size_t n = plan->total_bytes;
  char *back = malloc(n);
  assert_non_null(back);
  memset(back, 0, n);
  CU(cudaMemcpy(back, brd_exec_cuda_plan_dev(cp), n, cudaMemcpyDeviceToHost));
  assert_memory_equal(back, plan, n);
  free(back);
}

/* Ends the capture of cs and instantiates its graph. */
static cudaGraphExec_t end_capture(cudaStream_t cs) {
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CU(cudaStreamEndCapture(cs, &g));
  CU(cudaGraphInstantiate(&ge, g, 0));
  CU(cudaGraphDestroy(g));
  return ge;
}

static void begin_capture(cudaStream_t cs) {
  enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  CU(cudaThreadExchangeStreamCaptureMode(&mode));
  CU(cudaStreamBeginCapture(cs, cudaStreamCaptureModeGlobal));
}

/* A plan first used inside a capture: its upload becomes a node of the
 * graph, the host waits for nothing. */
static void test_plan_create_in_capture(void **state) {
  (void)state;
  brd_ir_plan_t *plan = make_plan();
  held_t h;
  cudaStream_t cs;
  CU(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  hold_queue(&h);
  begin_capture(cs);
  brd_exec_cuda_plan_t *cp = NULL;
  double t0 = now_s();
  assert_int_equal(brd_exec_cuda_plan_create_on(plan, cs, 1, &cp), ncclSuccess);
  double took = now_s() - t0;
  cudaGraphExec_t ge = end_capture(cs);
  assert_int_equal(gate_timed_out, 0);
  assert_true(took < GATE_S / 2);
  release_queue(&h);
  CU(cudaGraphLaunch(ge, cs));
  CU(cudaStreamSynchronize(cs));
  check_device_plan(cp, plan);
  /* Used outside the graph, it is uploaded on that launch's stream. */
  CU(cudaMemsetAsync((void *)brd_exec_cuda_plan_dev(cp), 0, plan->total_bytes, cs));
  assert_int_equal(brd_exec_cuda_plan_use(cp, cs, 0), ncclSuccess);
  CU(cudaStreamSynchronize(cs));
  check_device_plan(cp, plan);
  CU(cudaGraphExecDestroy(ge));
  brd_exec_cuda_plan_destroy(cp);
  CU(cudaStreamDestroy(cs));
  brd_plan_destroy(plan);
}

/* A plan uploaded outside a capture (still queued), then used in one: the
 * graph copies it again instead of the host waiting for the first copy. */
static void test_plan_use_in_capture(void **state) {
  (void)state;
  brd_ir_plan_t *plan = make_plan();
  held_t h;
  cudaStream_t ls, cs;
  CU(cudaStreamCreateWithFlags(&ls, cudaStreamNonBlocking));
  CU(cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking));
  hold_queue(&h);
  brd_exec_cuda_plan_t *cp = NULL;
  double t0 = now_s();
  assert_int_equal(brd_exec_cuda_plan_create_on(plan, ls, 0, &cp), ncclSuccess);
  begin_capture(cs);
  assert_int_equal(brd_exec_cuda_plan_use(cp, cs, 1), ncclSuccess);
  double took = now_s() - t0;
  cudaGraphExec_t ge = end_capture(cs);
  assert_int_equal(gate_timed_out, 0);
  assert_true(took < GATE_S / 2);
  release_queue(&h);
  CU(cudaStreamSynchronize(ls));
  check_device_plan(cp, plan);
  /* The replay's copy: wipe the device bytes, replay, compare. */
  CU(cudaMemsetAsync((void *)brd_exec_cuda_plan_dev(cp), 0, plan->total_bytes, cs));
  CU(cudaGraphLaunch(ge, cs));
  CU(cudaStreamSynchronize(cs));
  check_device_plan(cp, plan);
  /* Its upload known done, a later capture adds no copy: the replay
   * leaves wiped bytes wiped. */
  cudaStream_t cs2;
  void *other = NULL;
  CU(cudaMalloc(&other, 16));
  CU(cudaStreamCreateWithFlags(&cs2, cudaStreamNonBlocking));
  begin_capture(cs2);
  assert_int_equal(brd_exec_cuda_plan_use(cp, cs2, 1), ncclSuccess);
  CU(cudaMemsetAsync(other, 0, 16, cs2)); /* a capture needs a node */
  cudaGraphExec_t ge2 = end_capture(cs2);
  CU(cudaMemsetAsync((void *)brd_exec_cuda_plan_dev(cp), 0, plan->total_bytes, cs2));
  CU(cudaGraphLaunch(ge2, cs2));
  CU(cudaStreamSynchronize(cs2));
  unsigned char first = 0xff;
  CU(cudaMemcpy(&first, brd_exec_cuda_plan_dev(cp), 1, cudaMemcpyDeviceToHost));
  assert_int_equal(first, 0);
  CU(cudaGraphExecDestroy(ge2));
  CU(cudaFree(other));
  CU(cudaGraphExecDestroy(ge));
  brd_exec_cuda_plan_destroy(cp);
  CU(cudaStreamDestroy(cs2));
  CU(cudaStreamDestroy(cs));
  CU(cudaStreamDestroy(ls));
  brd_plan_destroy(plan);
}

/* A status reset enqueues on the launch stream and returns. */
static void test_status_reset(void **state) {
  (void)state;
  brd_exec_cuda_status_t *st = NULL;
  assert_int_equal(brd_exec_cuda_status_create(NULL, &st), ncclSuccess);
  cudaStream_t ls;
  CU(cudaStreamCreateWithFlags(&ls, cudaStreamNonBlocking));
  held_t h;
  hold_queue(&h);
  brd_exec_cuda_status_abort(st);
  double t0 = now_s();
  assert_int_equal(brd_exec_cuda_status_reset(st, ls), ncclSuccess);
  double took = now_s() - t0;
  assert_int_equal(gate_timed_out, 0);
  assert_true(took < GATE_S / 2);
  assert_int_equal(brd_exec_cuda_poll(st, NULL), ncclSuccess);
  release_queue(&h);
  CU(cudaStreamSynchronize(ls));
  CU(cudaStreamDestroy(ls));
  brd_exec_cuda_status_destroy(st);
}

/* The call under test gave up after BRAID_TIMEOUT (1 s), before the gate
 * would have let a cudaFree return, with the WARN naming the cause. */
static void check_gave_up_warn(ncclResult_t r, double took, const char *what, const char *w) {
  assert_int_equal(r, ncclSystemError);
  if (!(took >= 0.95 && took < GATE_S / 2))
    fail_msg("%s gave up after %.3f s, not between 0.95 and %.1f s", what, took, GATE_S / 2);
  if (strstr(w, "BRAID_TIMEOUT") == NULL || strstr(w, "hardware queues") == NULL ||
      strstr(w, "CUDA_DEVICE_MAX_CONNECTIONS") == NULL || strstr(w, what) == NULL)
    fail_msg("the WARN does not name %s, the cause and the fix: %s", what, w);
}

static void check_gave_up(ncclResult_t r, double took, const char *what) {
  check_gave_up_warn(r, took, what, brd_log_last_error());
}

/* Opens the gate, then waits (at most GATE_S) until the work the library
 * gave up on has run. */
static void release_stuck(held_t *h) {
  int timed_out = gate_timed_out;
  release_queue(h);
  if (timed_out)
    fail_msg("the call under test waited for the held queue until the stand-in peer gave "
             "up (%.0f s): on a GPU it would hang", GATE_S);
  double t0 = now_s();
  while (brd_cuda_stuck(0)) {
    if (now_s() - t0 > GATE_S) fail_msg("the abandoned work never ran");
    struct timespec d = {0, 1000000};
    nanosleep(&d, NULL);
  }
}

/* Zeroing a new P2P segment is a bounded wait: an error at BRAID_TIMEOUT
 * (1 s here) while the queue is held, with the WARN naming the cause and
 * the work recorded as stuck; success once the queue is free. */
static void test_segment_zero_bounded(void **state) {
  (void)state;
  held_t h;
  brd_seg_t seg;
  hold_queue(&h);
  double t0 = now_s();
  ncclResult_t r = brd_transport_p2p.seg_create(1 << 16, "test", &seg);
  double took = now_s() - t0;
  int stuck = brd_cuda_stuck(0);
  release_stuck(&h);
  /* Recorded as stuck: the backend's teardown after it leaks, not frees. */
  assert_int_equal(stuck, 1);
  check_gave_up(r, took, "zeroing a 65536-byte P2P segment");
  assert_int_equal(brd_transport_p2p.seg_create(1 << 16, "test", &seg), ncclSuccess);
  unsigned char back[1 << 16];
  CU(cudaMemcpy(back, seg.ptr, sizeof(back), cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < sizeof(back); i++)
    if (back[i] != 0) fail_msg("segment byte %zu is %d, not 0", i, back[i]);
  brd_transport_p2p.seg_close(&seg);
}

/* A status block's zeroing, stuck: an error at BRAID_TIMEOUT, then
 * success once the queue is free. */
static void test_status_create_stuck(void **state) {
  (void)state;
  held_t h;
  brd_exec_cuda_status_t *st = NULL;
  assert_int_equal(brd_cuda_stuck(0), 0);
  hold_queue(&h);
  double t0 = now_s();
  ncclResult_t r = brd_exec_cuda_status_create(NULL, &st);
  double took = now_s() - t0;
  int stuck = brd_cuda_stuck(0);
  release_stuck(&h);
  check_gave_up(r, took, "zeroing the executor state");
  assert_int_equal(stuck, 1);
  assert_null(st);
  assert_int_equal(brd_exec_cuda_status_create(NULL, &st), ncclSuccess);
  assert_int_equal(brd_exec_cuda_poll(st, NULL), ncclSuccess);
  brd_exec_cuda_status_destroy(st);
}

/* Publishing the trigger FIFO, stuck: an error at BRAID_TIMEOUT; the
 * status (whose state the copy targets) is destroyed at once, leaked. */
static void test_status_ports_stuck(void **state) {
  (void)state;
  held_t h;
  brd_exec_cuda_status_t *st = NULL;
  brd_exec_fifo_t *fifo = NULL;
  uint64_t mirror[3] = {0x1000, 0x2000, 0x3000};
  assert_int_equal(brd_exec_cuda_status_create(NULL, &st), ncclSuccess);
  hold_queue(&h);
  double t0 = now_s();
  ncclResult_t r = brd_exec_cuda_status_ports(st, 3, mirror, NULL, &fifo);
  double mid = now_s();
  brd_exec_cuda_status_destroy(st);
  double t1 = now_s();
  release_stuck(&h);
  check_gave_up(r, mid - t0, "publishing the trigger FIFO");
  assert_null(fifo);
  if (t1 - mid > 0.5) fail_msg("destroying the status took %.3f s", t1 - mid);
}

/* A channel table's copy, stuck, then free; the table reaches the
 * device. */
static void test_chans_create_stuck(void **state) {
  (void)state;
  held_t h;
  brd_exec_cuda_chan_t chans[3], *dev = NULL;
  memset(chans, 0, sizeof(chans));
  for (int i = 0; i < 3; i++) chans[i].peer_sems = (uint64_t *)(uintptr_t)(0x100 * (i + 7));
  hold_queue(&h);
  double t0 = now_s();
  ncclResult_t r = brd_exec_cuda_chans_create(chans, 3, &dev);
  double took = now_s() - t0;
  release_stuck(&h);
  check_gave_up(r, took, "copying a channel table");
  assert_null(dev);
  assert_int_equal(brd_exec_cuda_chans_create(chans, 3, &dev), ncclSuccess);
  brd_exec_cuda_chan_t back[3];
  CU(cudaMemcpy(back, dev, sizeof(back), cudaMemcpyDeviceToHost));
  assert_memory_equal(back, chans, sizeof(back));
  brd_exec_cuda_chans_destroy(dev);
}

/* A plan's upload waited for (brd_exec_cuda_plan_create), stuck, then
 * free; the plan's bytes reach the device. */
static void test_plan_create_stuck(void **state) {
  (void)state;
  held_t h;
  brd_ir_plan_t *plan = make_plan();
  brd_exec_cuda_plan_t *cp = NULL;
  hold_queue(&h);
  double t0 = now_s();
  ncclResult_t r = brd_exec_cuda_plan_create(plan, &cp);
  double took = now_s() - t0;
  release_stuck(&h);
  check_gave_up(r, took, "copying a plan to the device");
  assert_null(cp);
  assert_int_equal(brd_exec_cuda_plan_create(plan, &cp), ncclSuccess);
  check_device_plan(cp, plan);
  brd_exec_cuda_plan_destroy(cp);
  brd_plan_destroy(plan);
}

/* A communicator's window (its first launch's connect: the CUDA backend's
 * status blocks, cursors and window) made while the queue is held: an
 * error after BRAID_TIMEOUT, and the backend's unwinding and the
 * communicator's destruction free nothing the held queue would make wait. */
static void test_comm_connect_stuck(void **state) {
  (void)state;
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  held_t h;
  assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
  assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  hold_queue(&h);
  double t0 = now_s();
  ncclResult_t r = brd_launch_connect(comm, "test_comm_connect_stuck");
  double mid = now_s();
  char warn[1024];
  snprintf(warn, sizeof(warn), "%s", brd_log_last_error());
  /* In error, as after any failed call: the application aborts it. */
  ncclResult_t d = ncclCommAbort(comm);
  double t1 = now_s();
  release_stuck(&h);
  check_gave_up_warn(r, mid - t0, "zeroing the executor state", warn);
  assert_int_equal(d, ncclSuccess);
  if (t1 - mid > 1.0) fail_msg("aborting the communicator took %.3f s", t1 - mid);
  /* Once the queue is free, a communicator connects. */
  assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
  assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  assert_int_equal(brd_launch_connect(comm, "test_comm_connect_stuck"), ncclSuccess);
  assert_int_equal(ncclCommDestroy(comm), ncclSuccess);
}

/* Sets *flag after `after_s` seconds (a thread). */
typedef struct {
  _Atomic int *flag;
  double after_s;
} late_set_t;

static void *late_set(void *arg) {
  late_set_t *a = arg;
  struct timespec d = {0, (long)(a->after_s * 1e9)};
  nanosleep(&d, NULL);
  atomic_store(a->flag, 1);
  return NULL;
}

/* A status block's zeroing, stuck, stops when its abort flag is set (0.2 s
 * in), not at BRAID_TIMEOUT (1 s); the work is recorded as stuck and the
 * block is not made. */
static void test_status_create_abort(void **state) {
  (void)state;
  held_t h;
  brd_exec_cuda_status_t *st = NULL;
  _Atomic int flag = 0;
  late_set_t a = {&flag, 0.2};
  pthread_t t;
  assert_int_equal(brd_cuda_stuck(0), 0);
  hold_queue(&h);
  double t0 = now_s();
  assert_int_equal(pthread_create(&t, NULL, late_set, &a), 0);
  ncclResult_t r = brd_exec_cuda_status_create(&flag, &st);
  double took = now_s() - t0;
  pthread_join(t, NULL);
  int stuck = brd_cuda_stuck(0);
  release_stuck(&h);
  assert_int_equal(r, ncclSystemError);
  assert_null(st);
  assert_int_equal(stuck, 1);
  if (!(took >= 0.19 && took < 0.8))
    fail_msg("the zeroing stopped after %.3f s, not soon after the flag (0.2 s)", took);
}

/* More abandoned waits than the stuck-work table holds (64): the ones past
 * it cannot be tracked, so their device counts as stuck for good, and
 * only that device: another device's teardown still frees. Runs last (the
 * mark on device 0 never clears). */
static void test_stuck_table_full(void **state) {
  (void)state;
  enum { N = 70 };
  held_t h;
  cudaStream_t ls;
  void *buf;
  _Atomic int flag = 1; /* every wait stops at once, as after ncclCommAbort */
  assert_int_equal(brd_cuda_stuck(0), 0);
  CU(cudaStreamCreateWithFlags(&ls, cudaStreamNonBlocking));
  CU(cudaMalloc(&buf, 4096));
  hold_queue(&h);
  for (int i = 0; i < N; i++) {
    int stuck = 0;
    CU(cudaMemsetAsync(buf, i, 4096, ls));
    assert_int_equal(brd_cuda_stream_wait(ls, "a test memset", &flag, &stuck), ncclSystemError);
    assert_int_equal(stuck, 1);
  }
  int on0 = brd_cuda_stuck(0), on1 = brd_cuda_stuck(1), on_far = brd_cuda_stuck(300);
  release_queue(&h);
  CU(cudaStreamSynchronize(ls));
  CU(cudaStreamDestroy(ls));
  CU(cudaFree(buf));
  assert_int_equal(on0, 1);
  assert_int_equal(on1, 0);
  assert_int_equal(on_far, 0);
  /* The 64 tracked are done; the 6 untracked may never be known done. */
  assert_int_equal(brd_cuda_stuck(0), 1);
  assert_int_equal(brd_cuda_stuck(1), 0);
}

typedef struct {
  ncclComm_t comm;
  ncclResult_t res;
  double took;
} connect_arg_t;

static void *connect_main(void *arg) {
  connect_arg_t *c = arg;
  double t0 = now_s();
  c->res = brd_launch_connect(c->comm, "test_comm_connect_abort");
  c->took = now_s() - t0;
  return NULL;
}

/* A communicator's connect stuck behind the held queue, and ncclCommAbort
 * from another thread 0.2 s in: the connect returns an error soon after,
 * not at BRAID_TIMEOUT, and the abort returns within its second. */
static void test_comm_connect_abort(void **state) {
  (void)state;
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  held_t h;
  pthread_t t;
  assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
  assert_int_equal(ncclCommInitRank(&comm, 1, id, 0), ncclSuccess);
  connect_arg_t c = {comm, ncclSuccess, 0};
  hold_queue(&h);
  assert_int_equal(pthread_create(&t, NULL, connect_main, &c), 0);
  struct timespec d = {0, 200000000L};
  nanosleep(&d, NULL);
  double t0 = now_s();
  ncclResult_t a = ncclCommAbort(comm);
  double abort_took = now_s() - t0;
  pthread_join(t, NULL);
  release_stuck(&h);
  assert_int_equal(a, ncclSuccess);
  assert_int_not_equal(c.res, ncclSuccess);
  if (c.took >= 0.8)
    fail_msg("the connect returned %.3f s after it began: at BRAID_TIMEOUT, not at the abort "
             "(0.2 s)", c.took);
  if (abort_took > 1.0) fail_msg("ncclCommAbort took %.3f s", abort_took);
}

/* As a communicator's creation does, before any test holds the queue:
 * loading the kernels waits for the whole device. */
static int group_setup(void **state) {
  (void)state;
  return brd_exec_cuda_load() == ncclSuccess ? 0 : -1;
}

int main(void) {
  /* Before the first CUDA call: the simulator reads these once. */
  setenv("BRAID_CUDASIM_CONNECTIONS", "1", 1);
  setenv("BRAID_TIMEOUT", "1", 1);
  setenv("BRAID_DEVICE", "cuda", 1);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_plan_create_in_capture),
      cmocka_unit_test(test_plan_use_in_capture),
      cmocka_unit_test(test_status_reset),
      cmocka_unit_test(test_segment_zero_bounded),
      cmocka_unit_test(test_status_create_stuck),
      cmocka_unit_test(test_status_ports_stuck),
      cmocka_unit_test(test_chans_create_stuck),
      cmocka_unit_test(test_plan_create_stuck),
      cmocka_unit_test(test_comm_connect_stuck),
      cmocka_unit_test(test_status_create_abort),
      cmocka_unit_test(test_comm_connect_abort),
      cmocka_unit_test(test_stuck_table_full), /* last: marks device 0 for good */
  };
  return cmocka_run_group_tests(tests, group_setup, NULL);
}
