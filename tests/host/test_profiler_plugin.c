/*
 * Profiler plugins (core/profiler.c) end to end in host mode, public API
 * only, with the test profilers of tests/plugins/profiler_test.c (one per
 * ABI version, each recording every call and checking the ABI's rules as
 * events arrive: profiler_test.h).
 *
 * Each scenario runs in a child process (the plugin load is remembered per
 * process, as in NCCL): 4 ranks driven by one thread (ncclCommInitAll) run
 * a fixed workload (3 all-reduces of 1023, 7 and 1 floats, a broadcast of
 * 5 ints from rank 2, a ring of sends and receives of 11 floats, a group of
 * two all-reduces of 3 and 4 floats: 6 launches, 6 collectives and 2
 * point-to-point calls per rank), checks the results against values
 * computed here, destroys the communicators, then reads the plugin's
 * record and compares its counts with the calls made.
 *
 * Scenarios: every version 1 .. 6 by the suffix rule; a library exporting
 * v1, v4 and v6 (v6 must win); a bare lib*.so name and an absolute path;
 * the plugin's mask (Coll only), NCCL_PROFILE_EVENT_MASK passed to init
 * and kept, the default mask 0; an init that fails (WARN, no events, the
 * collectives still right); none and a name that does not exist (no
 * plugin, no hang); and two processes on two hosts whose channels cross
 * the socket net, for the proxy's events (every ProxyOp under a live
 * Coll/P2p of its rank, those of the send/receive pair under P2p). Under
 * BRAID_DEVICE=cuda (a GPU, or the simulator's build of this program) two
 * more scenarios run: 2 ranks in CUDA mode, where Coll/P2p events last
 * from the launch until the stream is past its works and each block is a
 * KernelCh, and the two-host proxy scenario in CUDA mode, whose messages
 * come after the launch returned; elsewhere they are skipped.
 */
#include <dlfcn.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl.h"
#include "../plugins/profiler_test.h"
#include "tdev.h"
#include "testenv.h"

#define NRANKS 4
#define NLAUNCH 6 /* launches per rank in the workload */
#define NCOLL 6   /* collectives per rank */
#define NP2P 2    /* sends and receives per rank */
#define COLL_COUNT_SUM (1023 + 7 + 1 + 5 + 3 + 4)
#define P2P_COUNT_SUM (2 * 11)

static char plugin_dir[PATH_MAX];

/* Child-side check: prints and counts a failure. */
static int nfail;
#define EXPECT(cond, ...)                                         \
  do {                                                            \
    if (!(cond)) {                                                \
      fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                               \
      fprintf(stderr, "\n");                                      \
      nfail++;                                                    \
    }                                                             \
  } while (0)

#define NCCL_EXPECT(call)                                                         \
  do {                                                                            \
    ncclResult_t r_ = (call);                                                     \
    EXPECT(r_ == ncclSuccess, "%s (%s)", ncclGetErrorString(r_), ncclGetLastError(NULL)); \
  } while (0)

static float in_val(int rank, size_t i) { return (float)(rank + 1) + (float)(i % 5) * 0.25f; }

/* The workload of the file comment on comms[NRANKS]; checks every result. */
static void workload(ncclComm_t *comms) {
  static const size_t ar_counts[3] = {1023, 7, 1};
  float *send[NRANKS], *recv[NRANKS];
  for (int r = 0; r < NRANKS; r++) {
    send[r] = malloc(1024 * sizeof(float));
    recv[r] = malloc(1024 * sizeof(float));
  }
  for (int k = 0; k < 3; k++) {
    size_t n = ar_counts[k];
    for (int r = 0; r < NRANKS; r++)
      for (size_t i = 0; i < n; i++) send[r][i] = in_val(r, i), recv[r][i] = -1.0f;
    NCCL_EXPECT(ncclGroupStart());
    for (int r = 0; r < NRANKS; r++)
      NCCL_EXPECT(ncclAllReduce(send[r], recv[r], n, ncclFloat32, ncclSum, comms[r], NULL));
    NCCL_EXPECT(ncclGroupEnd());
    for (int r = 0; r < NRANKS; r++)
      for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int q = 0; q < NRANKS; q++) want += in_val(q, i);
        if (recv[r][i] != want) {
          EXPECT(0, "all-reduce %zu: rank %d [%zu] = %g, want %g", n, r, i, recv[r][i], want);
          break;
        }
      }
  }
  /* Broadcast of 5 ints from rank 2. */
  int32_t *bsend = malloc(5 * sizeof(int32_t)), *brecv[NRANKS];
  for (int i = 0; i < 5; i++) bsend[i] = 1000 + 7 * i;
  NCCL_EXPECT(ncclGroupStart());
  for (int r = 0; r < NRANKS; r++) {
    brecv[r] = calloc(5, sizeof(int32_t));
    NCCL_EXPECT(ncclBroadcast(bsend, brecv[r], 5, ncclInt32, 2, comms[r], NULL));
  }
  NCCL_EXPECT(ncclGroupEnd());
  for (int r = 0; r < NRANKS; r++) {
    for (int i = 0; i < 5; i++) EXPECT(brecv[r][i] == 1000 + 7 * i, "broadcast rank %d [%d]", r, i);
    free(brecv[r]);
  }
  free(bsend);
  /* A ring of sends and receives of 11 floats. */
  for (int r = 0; r < NRANKS; r++)
    for (int i = 0; i < 11; i++) send[r][i] = in_val(r, (size_t)i) * 3.0f, recv[r][i] = -1.0f;
  NCCL_EXPECT(ncclGroupStart());
  for (int r = 0; r < NRANKS; r++) {
    NCCL_EXPECT(ncclSend(send[r], 11, ncclFloat32, (r + 1) % NRANKS, comms[r], NULL));
    NCCL_EXPECT(ncclRecv(recv[r], 11, ncclFloat32, (r + NRANKS - 1) % NRANKS, comms[r], NULL));
  }
  NCCL_EXPECT(ncclGroupEnd());
  for (int r = 0; r < NRANKS; r++) {
    int from = (r + NRANKS - 1) % NRANKS;
    for (int i = 0; i < 11; i++)
      EXPECT(recv[r][i] == in_val(from, (size_t)i) * 3.0f, "recv rank %d [%d]", r, i);
  }
  /* Two all-reduces in one group: one launch, two collectives. */
  for (int r = 0; r < NRANKS; r++)
    for (int i = 0; i < 8; i++) send[r][i] = in_val(r, (size_t)i);
  NCCL_EXPECT(ncclGroupStart());
  for (int r = 0; r < NRANKS; r++) {
    NCCL_EXPECT(ncclAllReduce(send[r], recv[r], 3, ncclFloat32, ncclSum, comms[r], NULL));
    NCCL_EXPECT(ncclAllReduce(send[r] + 3, recv[r] + 3, 4, ncclFloat32, ncclSum, comms[r], NULL));
  }
  NCCL_EXPECT(ncclGroupEnd());
  for (int r = 0; r < NRANKS; r++)
    for (int i = 0; i < 7; i++) {
      float want = 0;
      for (int q = 0; q < NRANKS; q++) want += in_val(q, (size_t)i);
      EXPECT(recv[r][i] == want, "grouped all-reduce rank %d [%d]", r, i);
    }
  for (int r = 0; r < NRANKS; r++) free(send[r]), free(recv[r]);
}

typedef struct scen {
  const char *spec;      /* NCCL_PROFILER_PLUGIN; "@file" for <plugin_dir>/file */
  const char *file;      /* the library the record is read from, NULL: none loads */
  int version;           /* whose record (proftest_state_vN) */
  const char *mask;      /* PROFTEST_MASK, NULL: unset */
  const char *fault;     /* PROFTEST_FAULT */
  const char *event_mask;/* NCCL_PROFILE_EVENT_MASK */
} scen_t;

/* Sets the environment of a scenario. */
static void scen_env(const scen_t *s) {
  char path[PATH_MAX + 64];
  setenv("BRAID_DEVICE", "host", 1);
  setenv("BRAID_TIMEOUT", "60", 1);
  if (s->spec[0] == '@') {
    snprintf(path, sizeof(path), "%s/%s", plugin_dir, s->spec + 1);
    setenv("NCCL_PROFILER_PLUGIN", path, 1);
  } else {
    setenv("NCCL_PROFILER_PLUGIN", s->spec, 1);
  }
  if (s->mask) setenv("PROFTEST_MASK", s->mask, 1);
  if (s->fault) setenv("PROFTEST_FAULT", s->fault, 1);
  if (s->event_mask) setenv("NCCL_PROFILE_EVENT_MASK", s->event_mask, 1);
}

/* The record of version v in file (kept loaded: the handle is leaked on
 * purpose so the record outlives the library's last communicator). */
static proftest_state_t *record(const char *file, int v) {
  char path[PATH_MAX + 64], sym[32];
  snprintf(path, sizeof(path), "%s/%s", plugin_dir, file);
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  if (h == NULL) return NULL;
  snprintf(sym, sizeof(sym), "proftest_state_v%d", v);
  return dlsym(h, sym);
}

/* The child of one scenario: 0 when every check passed. */
static int scen_child(const scen_t *s) {
  scen_env(s);
  if (s->file != NULL) {
    /* Loaded here first, the record outlives Braid's dlclose (an init
     * that fails everywhere closes the library at once). The counts say
     * whether Braid used it. */
    char path[PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", plugin_dir, s->file);
    EXPECT(dlopen(path, RTLD_NOW | RTLD_LOCAL) != NULL, "%s: %s", path, dlerror());
  }
  ncclComm_t comms[NRANKS];
  NCCL_EXPECT(ncclCommInitAll(comms, NRANKS, NULL));
  if (nfail) return 1;
  if (s->file == NULL && strcmp(s->spec, "none") != 0) {
    /* A named library that does not load: one WARN naming it. */
    const char *last = ncclGetLastError(NULL);
    EXPECT(last != NULL && strstr(last, "NCCL_PROFILER_PLUGIN=") != NULL &&
               strstr(last, s->spec) != NULL,
           "last error: %s", last ? last : "(null)");
  }
  if (s->fault != NULL) {
    const char *last = ncclGetLastError(NULL);
    EXPECT(last != NULL && strstr(last, "Profiler init failed") != NULL &&
               strstr(last, "Continue without profiler") != NULL,
           "last error: %s", last ? last : "(null)");
  }
  proftest_state_t *st = s->file != NULL ? record(s->file, s->version) : NULL;
  if (s->file != NULL) EXPECT(st != NULL, "%s not loaded after init", s->file);
  workload(comms);
  for (int r = 0; r < NRANKS; r++) NCCL_EXPECT(ncclCommDestroy(comms[r]));
  if (s->file == NULL) {
    /* No plugin: none of the test libraries is loaded. */
    EXPECT(record("libnccl-profiler-testv5.so", 5) == NULL, "a profiler was loaded");
    return nfail != 0;
  }
  if (st == NULL) return 1;
  int v = s->version;
  EXPECT(st->violations == 0, "%ld violations, first: %s", st->violations, st->first_violation);
  EXPECT(st->inits == NRANKS, "inits %d", st->inits);
  if (s->fault != NULL) {
    EXPECT(st->init_fails == NRANKS, "init_fails %d", st->init_fails);
    EXPECT(st->finalizes == 0, "finalize after a failed init");
    for (int b = 0; b < PROFTEST_NTYPES; b++) EXPECT(st->starts[b] == 0, "type %d started", b);
    return nfail != 0;
  }
  EXPECT(st->finalizes == NRANKS, "finalizes %d", st->finalizes);
  EXPECT(st->open == 0, "%ld events still open", st->open);
  for (int b = 0; b < PROFTEST_NTYPES; b++)
    EXPECT(st->starts[b] == st->stops[b], "type %d: %ld starts, %ld stops", b, st->starts[b],
           st->stops[b]);
  int mask = 0x7fff;
  if (s->mask != NULL) mask = strcmp(s->mask, "keep") == 0 ? (s->event_mask ? (int)strtol(s->event_mask, NULL, 0) : 0)
                                                           : (int)strtol(s->mask, NULL, 0);
  if (s->event_mask != NULL)
    EXPECT(st->mask_in == (int)strtol(s->event_mask, NULL, 0), "init saw mask %#x", st->mask_in);
  else
    EXPECT(st->mask_in == 0, "init saw mask %#x, not NCCL's 0", st->mask_in);
  long want_coll = (mask & 2) ? NRANKS * NCOLL : 0;
  long want_p2p = (mask & 4) ? NRANKS * NP2P : 0;
  long want_group = (mask & 1) ? NRANKS * NLAUNCH : 0;
  EXPECT(st->starts[1] == want_coll, "Coll %ld, want %ld", st->starts[1], want_coll);
  EXPECT(st->starts[2] == want_p2p, "P2p %ld, want %ld", st->starts[2], want_p2p);
  EXPECT(st->starts[0] == want_group, "Group %ld, want %ld", st->starts[0], want_group);
  if (mask & 2) {
    EXPECT(st->coll_count_sum == (size_t)NRANKS * COLL_COUNT_SUM, "Coll counts sum %zu",
           st->coll_count_sum);
    EXPECT(st->coll_names_bad == 0, "%ld Coll descriptors with bad names", st->coll_names_bad);
    EXPECT(st->coll_nch_zero == 0, "%ld Coll descriptors with 0 channels", st->coll_nch_zero);
    EXPECT(st->coll_bytes_bad == 0, "%ld Coll trafficBytes wrong", st->coll_bytes_bad);
    if (v >= 2) {
      EXPECT(strcmp(st->last_func, "AllReduce") == 0, "last func %s", st->last_func);
      EXPECT(strcmp(st->last_dtype, "ncclFloat32") == 0, "last datatype %s", st->last_dtype);
    } else {
      EXPECT(strcmp(st->last_func, "4") == 0, "last func %s", st->last_func);
      EXPECT(strcmp(st->last_dtype, "7") == 0, "last datatype %s", st->last_dtype);
    }
  }
  if (mask & 4) {
    EXPECT(st->p2p_count_sum == (size_t)NRANKS * P2P_COUNT_SUM, "P2p counts sum %zu",
           st->p2p_count_sum);
    EXPECT(st->p2p_peer_bad == 0, "%ld P2p peers out of range", st->p2p_peer_bad);
  }
  long kch = st->starts[6];
  if (v >= 3 && (mask & 0x40))
    EXPECT(kch >= NRANKS * (NCOLL + 1), "KernelCh %ld: fewer than one per work", kch);
  else
    EXPECT(kch == 0, "KernelCh %ld for v%d / mask %#x", kch, v, mask);
  if (v >= 4 && (mask & 0x40)) EXPECT(st->states[6] == kch, "KernelCh states %ld", st->states[6]);
  if (v >= 4) {
    EXPECT(st->nranks == NRANKS, "init nranks %d", st->nranks);
    EXPECT(st->rank_mask == (1 << NRANKS) - 1, "init ranks %#x", st->rank_mask);
    EXPECT(st->nnodes == 1, "init nNodes %d", st->nnodes);
    EXPECT(st->comm_id != 0, "init commId 0");
  }
  long want_api = (v >= 5 && (mask & 0x100)) ? NRANKS * NLAUNCH : 0;
  EXPECT(st->starts[8] == want_api, "GroupApi %ld, want %ld", st->starts[8], want_api);
  want_api = (v >= 5 && (mask & 0x200)) ? NRANKS * NCOLL : 0;
  EXPECT(st->starts[9] == want_api, "CollApi %ld, want %ld", st->starts[9], want_api);
  want_api = (v >= 5 && (mask & 0x400)) ? NRANKS * NP2P : 0;
  EXPECT(st->starts[10] == want_api, "P2pApi %ld, want %ld", st->starts[10], want_api);
  want_api = (v >= 5 && (mask & 0x800)) ? NRANKS * NLAUNCH : 0;
  EXPECT(st->starts[11] == want_api, "KernelLaunch %ld, want %ld", st->starts[11], want_api);
  return nfail != 0;
}

/* Runs fn(arg) in a child with a deadline; its exit status. */
static int in_child(int (*fn)(const void *), const void *arg) {
  fflush(NULL);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(240);
    _exit(fn(arg));
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  if (WIFSIGNALED(status)) {
    fprintf(stderr, "scenario child died of signal %d\n", WTERMSIG(status));
    return -1;
  }
  return WEXITSTATUS(status);
}

static int scen_fn(const void *arg) { return scen_child(arg); }

static void run_scen(const scen_t *s) { assert_int_equal(in_child(scen_fn, s), 0); }

static void test_versions(void **state) {
  (void)state;
  static const char *const specs[7] = {NULL, "testv1", "testv2", "testv3", "testv4", "testv5", "testv6"};
  for (int v = 1; v <= 6; v++) {
    char file[64];
    snprintf(file, sizeof(file), "libnccl-profiler-testv%d.so", v);
    scen_t s = {specs[v], file, v, NULL, NULL, NULL};
    run_scen(&s);
  }
}

static void test_newest_wins(void **state) {
  (void)state;
  scen_t s = {"testmulti", "libnccl-profiler-testmulti.so", 6, NULL, NULL, NULL};
  run_scen(&s);
}

static int multi_older_untouched(const void *arg) {
  (void)arg;
  scen_t s = {"testmulti", "libnccl-profiler-testmulti.so", 6, NULL, NULL, NULL};
  scen_env(&s);
  ncclComm_t comms[NRANKS];
  NCCL_EXPECT(ncclCommInitAll(comms, NRANKS, NULL));
  proftest_state_t *v1 = record(s.file, 1), *v4 = record(s.file, 4), *v6 = record(s.file, 6);
  EXPECT(v1 != NULL && v4 != NULL && v6 != NULL, "records");
  if (v1 && v4 && v6) {
    EXPECT(v6->inits == NRANKS, "v6 inits %d", v6->inits);
    EXPECT(v1->inits == 0 && v4->inits == 0, "older versions initialised (%d, %d)", v1->inits,
           v4->inits);
  }
  for (int r = 0; r < NRANKS; r++) NCCL_EXPECT(ncclCommDestroy(comms[r]));
  return nfail != 0;
}

static void test_newest_only(void **state) {
  (void)state;
  assert_int_equal(in_child(multi_older_untouched, NULL), 0);
}

static void test_names(void **state) {
  (void)state;
  scen_t bare = {"libnccl-profiler-testv3.so", "libnccl-profiler-testv3.so", 3, NULL, NULL, NULL};
  run_scen(&bare);
  scen_t path = {"@libnccl-profiler-testv4.so", "libnccl-profiler-testv4.so", 4, NULL, NULL, NULL};
  run_scen(&path);
}

static void test_masks(void **state) {
  (void)state;
  scen_t coll_only = {"testv5", "libnccl-profiler-testv5.so", 5, "0x2", NULL, NULL};
  run_scen(&coll_only);
  scen_t kept = {"testv4", "libnccl-profiler-testv4.so", 4, "keep", NULL, "0x42"};
  run_scen(&kept);
  scen_t dflt = {"testv6", "libnccl-profiler-testv6.so", 6, "keep", NULL, NULL};
  run_scen(&dflt);
}

static void test_init_fails(void **state) {
  (void)state;
  scen_t s = {"testv5", "libnccl-profiler-testv5.so", 5, NULL, "init", NULL};
  run_scen(&s);
}

static void test_no_plugin(void **state) {
  (void)state;
  scen_t none = {"none", NULL, 0, NULL, NULL, NULL};
  run_scen(&none);
  scen_t missing = {"nosuchprofiler", NULL, 0, NULL, NULL, NULL};
  run_scen(&missing);
}

/* ---- the proxy: two processes on two hosts ---- */

#define PX_COUNT 4099

/* One rank of two on two hosts: 3 all-reduces and a send/receive pair
 * over the proxy, in host mode or (cuda) CUDA mode, where the proxy's
 * messages come while the kernel runs, after the launch returned. */
static int proxy_rank(int rank, const ncclUniqueId *id, int cuda) {
  setenv("BRAID_HOSTID", rank == 0 ? "node-a" : "node-b", 1);
  ncclComm_t comm;
  NCCL_EXPECT(ncclCommInitRank(&comm, 2, *id, rank));
  if (nfail) return 1;
  proftest_state_t *st = record("libnccl-profiler-testv5.so", 5);
  EXPECT(st != NULL, "plugin not loaded");
  cudaStream_t stream = NULL;
  EXPECT(tdev_stream_create(&stream) == 0, "%s", tdev_last_error());
  float *buf = tdev_alloc(PX_COUNT * sizeof(float));
  float *sb = tdev_alloc(PX_COUNT * sizeof(float)), *rb = tdev_alloc(PX_COUNT * sizeof(float));
  EXPECT(buf != NULL && sb != NULL && rb != NULL, "%s", tdev_last_error());
  if (nfail) return 1;
  for (int k = 0; k < 3; k++) {
    for (int i = 0; i < PX_COUNT; i++) buf[i] = (float)(rank + 1 + i % 3);
    NCCL_EXPECT(ncclAllReduce(buf, buf, PX_COUNT, ncclFloat32, ncclSum, comm, stream));
    EXPECT(tdev_stream_sync(stream, 120) == 0, "%s", tdev_last_error());
    for (int i = 0; i < PX_COUNT; i++)
      if (buf[i] != (float)(3 + 2 * (i % 3))) {
        EXPECT(0, "rank %d [%d] = %g", rank, i, buf[i]);
        break;
      }
  }
  /* A send and a receive with the other host: their messages' ProxyOps
   * belong to the P2p events. */
  for (int i = 0; i < PX_COUNT; i++) sb[i] = (float)(rank * 10 + i % 7), rb[i] = 0;
  NCCL_EXPECT(ncclGroupStart());
  NCCL_EXPECT(ncclSend(sb, PX_COUNT, ncclFloat32, 1 - rank, comm, stream));
  NCCL_EXPECT(ncclRecv(rb, PX_COUNT, ncclFloat32, 1 - rank, comm, stream));
  NCCL_EXPECT(ncclGroupEnd());
  EXPECT(tdev_stream_sync(stream, 120) == 0, "%s", tdev_last_error());
  for (int i = 0; i < PX_COUNT; i++)
    if (rb[i] != (float)((1 - rank) * 10 + i % 7)) {
      EXPECT(0, "rank %d recv [%d] = %g", rank, i, rb[i]);
      break;
    }
  tdev_free(sb);
  tdev_free(rb);
  tdev_free(buf);
  NCCL_EXPECT(ncclCommDestroy(comm));
  tdev_stream_destroy(stream);
  if (st != NULL) {
    /* Every ProxyOp was under a live Coll/P2p of this rank and every
     * ProxyStep under a live ProxyOp (the plugin's rules: violations),
     * none without a parent (orphans). */
    EXPECT(st->violations == 0, "%ld violations, first: %s", st->violations, st->first_violation);
    EXPECT(st->open == 0, "%ld events open", st->open);
    EXPECT(st->starts[3] > 0, "no ProxyOp event");
    EXPECT(st->orphans[3] == 0 && st->orphans[4] == 0, "ProxyOp orphans %ld, ProxyStep %ld",
           st->orphans[3], st->orphans[4]);
    EXPECT(st->starts[4] == st->starts[3], "ProxyStep %ld, ProxyOp %ld", st->starts[4],
           st->starts[3]);
    EXPECT(st->proxy_desc_bad == 0, "%ld ProxyOp descriptors out of range", st->proxy_desc_bad);
    /* The messages carried at least this rank's share of the data. */
    EXPECT(st->proxy_bytes >= (long)(4 * PX_COUNT * sizeof(float)), "proxy bytes %ld",
           st->proxy_bytes);
    EXPECT(st->starts[1] == 3, "Coll %ld", st->starts[1]);
    if (cuda)
      EXPECT(st->starts[6] >= 4 && st->orphans[6] == 0, "KernelCh %ld, orphans %ld",
             st->starts[6], st->orphans[6]);
    EXPECT(st->starts[2] == 2, "P2p %ld", st->starts[2]);
    EXPECT(st->proxy_under_p2p > 0, "no ProxyOp under a P2p event");
    for (int b = 0; b < PROFTEST_NTYPES; b++)
      EXPECT(st->starts[b] == st->stops[b], "type %d: %ld starts, %ld stops", b, st->starts[b],
             st->stops[b]);
  }
  return nfail != 0;
}

static int proxy_scen(const void *arg) {
  int cuda = arg != NULL;
  scen_t s = {"testv5", NULL, 5, NULL, NULL, NULL};
  scen_env(&s);
  if (cuda) setenv("BRAID_DEVICE", "cuda", 1);
  setenv("BRAID_BOOTSTRAP_TIMEOUT", "30", 1);
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return 1;
  pid_t pids[2];
  for (int r = 0; r < 2; r++) {
    pids[r] = fork();
    if (pids[r] == 0) _exit(proxy_rank(r, &id, cuda));
  }
  int bad = 0;
  for (int r = 0; r < 2; r++) {
    int status = 0;
    if (pids[r] < 0 || waitpid(pids[r], &status, 0) != pids[r] || !WIFEXITED(status) ||
        WEXITSTATUS(status) != 0)
      bad = 1;
  }
  return bad;
}

static void test_proxy_events(void **state) {
  (void)state;
  assert_int_equal(in_child(proxy_scen, NULL), 0);
}

/* The same in CUDA mode (a GPU, or the simulator's build). */
static void test_proxy_events_cuda(void **state) {
  (void)state;
  char why[256];
  if (tdev_kind() != TDEV_CUDA) {
    printf("SKIP: CUDA mode only (BRAID_DEVICE=cuda on a GPU, or the simulator's build)\n");
    skip();
  }
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: %s\n", why);
    skip();
  }
  assert_int_equal(in_child(proxy_scen, "cuda"), 0);
}

/* ---- CUDA mode (a GPU or the simulator): no per-work hooks ---- */

#define CU_RANKS 2

static int cuda_child(const void *arg) {
  (void)arg;
  char path[PATH_MAX + 64];
  snprintf(path, sizeof(path), "%s/libnccl-profiler-testv5.so", plugin_dir);
  EXPECT(dlopen(path, RTLD_NOW | RTLD_LOCAL) != NULL, "%s: %s", path, dlerror());
  setenv("NCCL_PROFILER_PLUGIN", path, 1);
  setenv("BRAID_TIMEOUT", "120", 1);
  ncclComm_t comms[CU_RANKS];
  cudaStream_t streams[CU_RANKS];
  float *buf[CU_RANKS];
  ncclUniqueId id;
  NCCL_EXPECT(ncclGetUniqueId(&id));
  NCCL_EXPECT(ncclGroupStart());
  for (int r = 0; r < CU_RANKS; r++) NCCL_EXPECT(ncclCommInitRank(&comms[r], CU_RANKS, id, r));
  NCCL_EXPECT(ncclGroupEnd());
  if (nfail) return 1;
  for (int r = 0; r < CU_RANKS; r++) {
    EXPECT(tdev_stream_create(&streams[r]) == 0, "%s", tdev_last_error());
    buf[r] = tdev_alloc(64 * sizeof(float));
    EXPECT(buf[r] != NULL, "%s", tdev_last_error());
  }
  if (nfail) return 1;
  for (int k = 0; k < 2; k++) {
    for (int r = 0; r < CU_RANKS; r++)
      for (int i = 0; i < 7; i++) buf[r][i] = in_val(r, (size_t)i);
    NCCL_EXPECT(ncclGroupStart());
    for (int r = 0; r < CU_RANKS; r++)
      NCCL_EXPECT(ncclAllReduce(buf[r], buf[r] + 8, 7, ncclFloat32, ncclSum, comms[r], streams[r]));
    NCCL_EXPECT(ncclGroupEnd());
    for (int r = 0; r < CU_RANKS; r++) EXPECT(tdev_stream_sync(streams[r], 120) == 0, "sync");
    for (int r = 0; r < CU_RANKS; r++)
      for (int i = 0; i < 7; i++)
        EXPECT(buf[r][8 + i] == in_val(0, (size_t)i) + in_val(1, (size_t)i), "rank %d [%d]", r, i);
  }
  NCCL_EXPECT(ncclGroupStart());
  for (int r = 0; r < CU_RANKS; r++) {
    NCCL_EXPECT(ncclSend(buf[r], 5, ncclFloat32, 1 - r, comms[r], streams[r]));
    NCCL_EXPECT(ncclRecv(buf[r] + 32, 5, ncclFloat32, 1 - r, comms[r], streams[r]));
  }
  NCCL_EXPECT(ncclGroupEnd());
  for (int r = 0; r < CU_RANKS; r++) EXPECT(tdev_stream_sync(streams[r], 120) == 0, "sync");
  for (int r = 0; r < CU_RANKS; r++)
    for (int i = 0; i < 5; i++) EXPECT(buf[r][32 + i] == in_val(1 - r, (size_t)i), "recv %d", r);
  proftest_state_t *st = record("libnccl-profiler-testv5.so", 5);
  for (int r = 0; r < CU_RANKS; r++) NCCL_EXPECT(ncclCommDestroy(comms[r]));
  EXPECT(st != NULL, "no record");
  if (st == NULL) return 1;
  EXPECT(st->violations == 0, "%ld violations, first: %s", st->violations, st->first_violation);
  EXPECT(st->inits == CU_RANKS && st->finalizes == CU_RANKS, "inits %d finalizes %d", st->inits,
         st->finalizes);
  EXPECT(st->open == 0, "%ld open", st->open);
  EXPECT(st->starts[0] == 3 * CU_RANKS, "Group %ld", st->starts[0]);
  EXPECT(st->starts[1] == 2 * CU_RANKS, "Coll %ld", st->starts[1]);
  EXPECT(st->starts[2] == 2 * CU_RANKS, "P2p %ld", st->starts[2]);
  EXPECT(st->starts[9] == 2 * CU_RANKS && st->starts[10] == 2 * CU_RANKS, "API events");
  EXPECT(st->coll_count_sum == (size_t)2 * CU_RANKS * 7, "Coll counts %zu", st->coll_count_sum);
  EXPECT(st->coll_names_bad == 0 && st->coll_nch_zero == 0, "Coll descriptors");
  /* KernelCh: at least one channel per launch and rank, each under its
   * call's Coll/P2p (the plugin's rules) and given KernelChStop before its
   * stop, stopped once the stream got past the works. */
  EXPECT(st->starts[6] >= 3 * CU_RANKS, "KernelCh %ld", st->starts[6]);
  EXPECT(st->orphans[6] == 0, "KernelCh orphans %ld", st->orphans[6]);
  for (int b = 0; b < PROFTEST_NTYPES; b++)
    EXPECT(st->starts[b] == st->stops[b], "type %d: %ld starts, %ld stops", b, st->starts[b],
           st->stops[b]);
  return nfail != 0;
}

static void test_cuda_mode(void **state) {
  (void)state;
  char why[256];
  if (tdev_kind() != TDEV_CUDA) {
    printf("SKIP: CUDA mode only (BRAID_DEVICE=cuda on a GPU, or the simulator's build)\n");
    skip();
  }
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: %s\n", why);
    skip();
  }
  assert_int_equal(in_child(cuda_child, NULL), 0);
}

/* ---- the timeline plugin (plugins/profiler-timeline) ---- */

/* Checks the rank files of the workload: valid JSON, one Coll event per
 * rank per call in call order with its function and bytes, the two
 * point-to-point calls with their peers. */
static const char timeline_check[] =
    "import json, glob, sys\n"
    "files = sorted(glob.glob(sys.argv[1] + '/t-*.json'))\n"
    "assert len(files) == 4, files\n"
    "want = [('AllReduce', 4092), ('AllReduce', 28), ('AllReduce', 4), ('Broadcast', 20),\n"
    "        ('AllReduce', 12), ('AllReduce', 16)]\n"
    "ranks = set()\n"
    "for f in files:\n"
    "    doc = json.load(open(f))\n"
    "    r = doc['otherData']['rank']; ranks.add(r)\n"
    "    ev = doc['traceEvents']\n"
    "    coll = sorted((e['args']['seq'], e['name'], e['args']['bytes'], e['args']['algo'])\n"
    "                  for e in ev if e.get('cat') == 'coll')\n"
    "    assert [c[0] for c in coll] == list(range(6)), (f, coll)\n"
    "    assert [(c[1], c[2]) for c in coll] == want, (f, coll)\n"
    "    assert all(c[3] not in ('', 'Unknown') for c in coll), coll\n"
    "    p2p = sorted((e['name'], e['args']['bytes']) for e in ev if e.get('cat') == 'p2p')\n"
    "    assert p2p == [('Recv from %d' % ((r + 3) % 4), 44), ('Send to %d' % ((r + 1) % 4), 44)], p2p\n"
    "    assert sum(1 for e in ev if e.get('cat') == 'group') == 6\n"
    "    assert all(e['dur'] >= 0 and e['pid'] == r for e in ev if e.get('ph') == 'X')\n"
    "assert ranks == {0, 1, 2, 3}, ranks\n";

static int timeline_child(const void *arg) {
  const char *dir = arg;
  char plugin[PATH_MAX + 64], prefix[PATH_MAX + 16];
  snprintf(plugin, sizeof(plugin), "%s/../../plugins/libnccl-profiler-timeline.so", plugin_dir);
  snprintf(prefix, sizeof(prefix), "%s/t", dir);
  setenv("BRAID_DEVICE", "host", 1);
  setenv("NCCL_PROFILER_PLUGIN", plugin, 1);
  setenv("NCCL_PROFILE_DUMP_FILE", prefix, 1);
  setenv("NCCL_PROFILE_EVENT_MASK", "0x4f", 1); /* the default and groups */
  ncclComm_t comms[NRANKS];
  NCCL_EXPECT(ncclCommInitAll(comms, NRANKS, NULL));
  if (nfail) return 1;
  workload(comms);
  for (int r = 0; r < NRANKS; r++) NCCL_EXPECT(ncclCommDestroy(comms[r]));
  return nfail != 0;
}

static void test_timeline(void **state) {
  (void)state;
  char plugin[PATH_MAX + 64];
  snprintf(plugin, sizeof(plugin), "%s/../../plugins/libnccl-profiler-timeline.so", plugin_dir);
  if (access(plugin, R_OK) != 0) fail_msg("%s not built (make lib)", plugin);
  char dir[] = "/tmp/braid-timeline-test-XXXXXX";
  assert_non_null(mkdtemp(dir));
  assert_int_equal(in_child(timeline_child, dir), 0);
  char script[PATH_MAX + 32], cmd[2 * PATH_MAX + 64];
  snprintf(script, sizeof(script), "%s/check.py", dir);
  FILE *f = fopen(script, "w");
  assert_non_null(f);
  fputs(timeline_check, f);
  fclose(f);
  if (system("python3 -c 'import json' >/dev/null 2>&1") != 0) {
    fprintf(stderr, "SKIP part: python3 not found; the trace files were not parsed\n");
  } else {
    snprintf(cmd, sizeof(cmd), "python3 %s %s", script, dir);
    assert_int_equal(system(cmd), 0);
  }
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  assert_int_equal(system(cmd), 0);
}

/* The simulator's builds of this program live in <build>/cudasim/tests and
 * <build>/cudasim-dev/tests:
 * their plugins are <build>/tests/plugins. Same protocol as
 * brd_test_plugin_dir: 0 to go on, 77 when not built, else re-runs this
 * program with the folder on LD_LIBRARY_PATH. */
static int sim_plugin_dir(char **argv, const char *mark, const char *probe) {
  char exe[PATH_MAX], file[PATH_MAX + 64];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) return 77;
  exe[len] = '\0';
  *strrchr(exe, '/') = '\0';
  snprintf(file, sizeof(file), "%s/../plugins/%s", exe, probe);
  if (access(file, R_OK) == 0) return 77; /* the usual layout: brd_test_plugin_dir's */
  if (strlen(exe) + 32 > sizeof(plugin_dir)) return 77;
  memcpy(plugin_dir, exe, strlen(exe));
  strcpy(plugin_dir + strlen(exe), "/../../tests/plugins");
  snprintf(file, sizeof(file), "%s/%s", plugin_dir, probe);
  if (access(file, R_OK) != 0) return 77;
  if (getenv(mark) != NULL) return 0;
  const char *old = getenv("LD_LIBRARY_PATH");
  static char path[2 * PATH_MAX];
  snprintf(path, sizeof(path), "%s%s%s", plugin_dir, old && old[0] ? ":" : "", old ? old : "");
  setenv("LD_LIBRARY_PATH", path, 1);
  setenv(mark, "1", 1);
  execv("/proc/self/exe", argv);
  return 1;
}

int main(int argc, char **argv) {
  (void)argc;
  int rc = sim_plugin_dir(argv, "PROFTEST_REEXEC", "libnccl-profiler-testv5.so");
  if (rc == 77)
    rc = brd_test_plugin_dir(argv, "PROFTEST_REEXEC", "libnccl-profiler-testv5.so", plugin_dir,
                             sizeof(plugin_dir));
  if (rc != 0) return rc;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_versions),     cmocka_unit_test(test_newest_wins),
      cmocka_unit_test(test_newest_only),  cmocka_unit_test(test_names),
      cmocka_unit_test(test_masks),        cmocka_unit_test(test_init_fails),
      cmocka_unit_test(test_no_plugin),    cmocka_unit_test(test_proxy_events),
      cmocka_unit_test(test_timeline),     cmocka_unit_test(test_cuda_mode),
      cmocka_unit_test(test_proxy_events_cuda),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
