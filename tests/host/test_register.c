/*
 * Registered buffers end to end, public API only: ncclMemAlloc'd send and
 * receive buffers registered with ncclCommRegister or as symmetric windows
 * (ncclCommWindowRegister with NCCL_WIN_COLL_SYMMETRIC), then AllReduce,
 * AllGather, ReduceScatter, Broadcast and AlltoAll (which write registered
 * outputs in place on every rank; from 64 KiB AllReduce, ReduceScatter and
 * AllGather also read every rank's input in place, the zero-copy plans),
 * Reduce and Scatter (always staged), in place and
 * out of place, at 1, 1000 and 3 Mi+ elements (more than the output
 * staging, so the staged path would run in pieces), each result checked
 * against the CPU reference of tests/common/coll_ref.c.
 *
 * Which path ran is read from the library's REG log (NCCL_DEBUG=INFO,
 * NCCL_DEBUG_SUBSYS=REG, NCCL_DEBUG_FILE): every rank logs "written in
 * place" for each collective that wrote its registered output directly.
 * The parent runs this program again, in a fresh process, per case:
 *   threads   ranks as threads: every eligible call must be direct; also
 *             with all-reduce forced to two-shot and to tree (Simple), whose
 *             plans write the peers' registered outputs;
 *   procs     ranks as processes: direct too (host mode maps the other
 *             processes' ncclMemAlloc memfds, CUDA mode their GPU memory);
 *   percall   without BRAID_REGISTER_SYMMETRIC=1 (which the cases above
 *             set): each rank passes its buffers at an offset of its own
 *             (4 KiB + 4 bytes per rank) into its registration, and the
 *             ranks exchange where their outputs are at every call: every
 *             eligible call is still written in place, by threads and by
 *             processes, but no zero-copy plan runs (it needs the promise);
 *             symmetric windows stay direct and zero-copy;
 *   percall-mixed  as percall, as processes, but rank 1's buffers are not
 *             from ncclMemAlloc (malloc, or managed memory in CUDA mode),
 *             so rank 0 cannot map them: rank 1 is staged at every call
 *             while rank 0 is still written in place;
 *   off       NCCL_LOCAL_REGISTER=0: never direct, still correct;
 *   mismatch  only rank 0 registers (breaking NCCL's rule that every rank
 *             does): both ranks must fail within the deadlines, rank 0
 *             with a message naming the rule; with the promise (the
 *             registration exchange waits; ranks as threads, the rule
 *             read from the WARN log, since the last error is the
 *             process's) and without it, as mismatch-percall (the per-call
 *             exchange waits; processes, the rule in rank 0's
 *             ncclGetLastError).
 * The mode follows BRAID_DEVICE (tests/common/tdev.h).
 */
#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coll_ref.h"
#include "nccl.h"
#include "tdev.h"

#define DT ncclInt32
#define ESZ 4
#define BIG ((size_t)3 << 18 | 5) /* 786437 elements: 3 MiB and more */
#define SYNC_S 120.0

static const char *g_case;     /* the case this process runs */
static int g_window;           /* register as symmetric windows */

/* Elements each rank's buffers start past the start of their
 * registration: rank-dependent in the per-call cases (offsets need not
 * match without the promise), 0 otherwise. */
static size_t rank_shift(int rank) {
  if (g_window || strncmp(g_case, "percall", 7) != 0) return 0;
  return (size_t)rank * 1025;
}

/* Whether this rank's buffers are memory the peers cannot map. */
static int rank_private(int rank) {
  return strcmp(g_case, "percall-mixed") == 0 && rank == 1;
}

static int fail(char *msg, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, len, fmt, ap);
  va_end(ap);
  return 1;
}

typedef struct {
  ncclComm_t comm;
  cudaStream_t stream;
  int n, rank;
  char *send, *recv;         /* n * BIG elements each, rank_shift into */
  char *send_mem, *recv_mem; /* what was allocated (ncclMemAlloc, or
                              * tdev_alloc for rank_private) */
  void *hsend, *hrecv, *hexp; /* host copies */
  int direct_calls;          /* calls that may write in place */
  int peer_calls;            /* all-reduces that may read inputs in place */
  int peer_other;            /* reduce-scatters and all-gathers likewise */
} rank_t;

/* Runs one call after loading its input; NCCL_OK-style failure text. */
#define TRY(call)                                                              \
  do {                                                                         \
    ncclResult_t r_ = (call);                                                  \
    if (r_ != ncclSuccess)                                                     \
      return fail(msg, len, "rank %d: %s: %s (%s)", R->rank, #call,            \
                  ncclGetErrorString(r_), ncclGetLastError(R->comm));          \
  } while (0)

#define COPY(dst, src, bytes)                                                  \
  do {                                                                         \
    if (tdev_copy((dst), (src), (bytes), R->stream, SYNC_S) != 0)              \
      return fail(msg, len, "rank %d: copy: %s", R->rank, tdev_last_error());  \
  } while (0)

#define SYNC()                                                                 \
  do {                                                                         \
    if (tdev_stream_sync(R->stream, SYNC_S) != 0)                              \
      return fail(msg, len, "rank %d: sync: %s", R->rank, tdev_last_error());  \
  } while (0)

/* Poisons the receive buffer (n * count elements). */
static int poison(rank_t *R, size_t elems, char *msg, size_t len) {
  ref_poison(DT, R->hrecv, elems);
  COPY(R->recv, R->hrecv, elems * ESZ);
  return 0;
}

static int check_reduce(rank_t *R, size_t count, size_t first, const char *what,
                        char *msg, size_t len) {
  char m[256];
  ref_reduce_expect_range(DT, ncclSum, R->n, 1.0, R->hexp, first, count);
  if (ref_compare(DT, 0, R->hrecv, R->hexp, count, m, sizeof(m)) != 0)
    return fail(msg, len, "rank %d: %s count %zu: %s", R->rank, what, count, m);
  return 0;
}

static int run_colls(rank_t *R, size_t count, int inplace, char *msg, size_t len) {
  int n = R->n, me = R->rank;
  size_t bytes = count * ESZ;
  char m[256];

  /* AllReduce */
  if (poison(R, count, msg, len)) return 1;
  ref_fill_input(DT, ncclSum, me, R->hsend, count);
  COPY(inplace ? R->recv : R->send, R->hsend, bytes);
  TRY(ncclAllReduce(inplace ? R->recv : R->send, R->recv, count, DT, ncclSum, R->comm,
                    R->stream));
  SYNC();
  COPY(R->hrecv, R->recv, bytes);
  if (check_reduce(R, count, 0, inplace ? "AllReduce in place" : "AllReduce", msg, len))
    return 1;
  if (bytes >= ((size_t)64 << 10)) R->peer_calls++; /* the zero-copy plan's range */

  /* AllGather: in place, the input is segment `me` of the output. */
  if (poison(R, count * n, msg, len)) return 1;
  ref_fill_move(DT, me, 0, R->hsend, count);
  char *ag_in = inplace ? R->recv + (size_t)me * bytes : R->send;
  COPY(ag_in, R->hsend, bytes);
  TRY(ncclAllGather(ag_in, R->recv, count, DT, R->comm, R->stream));
  SYNC();
  COPY(R->hrecv, R->recv, bytes * n);
  for (int q = 0; q < n; q++)
    if (ref_check_move(DT, q, 0, (char *)R->hrecv + (size_t)q * bytes, count, m,
                       sizeof(m)) != 0)
      return fail(msg, len, "rank %d: AllGather%s count %zu segment %d: %s", me,
                  inplace ? " in place" : "", count, q, m);
  if (bytes * n >= ((size_t)64 << 10)) R->peer_other++;

  /* ReduceScatter: in place, the output is segment `me` of the input. */
  if (poison(R, count * n, msg, len)) return 1;
  ref_fill_input(DT, ncclSum, me, R->hsend, count * n);
  COPY(inplace ? R->recv : R->send, R->hsend, bytes * n);
  char *rs_out = inplace ? R->recv + (size_t)me * bytes : R->recv;
  TRY(ncclReduceScatter(inplace ? R->recv : R->send, rs_out, count, DT, ncclSum, R->comm,
                        R->stream));
  SYNC();
  COPY(R->hrecv, rs_out, bytes);
  if (check_reduce(R, count, (size_t)me * count,
                   inplace ? "ReduceScatter in place" : "ReduceScatter", msg, len))
    return 1;
  if (bytes * n >= ((size_t)64 << 10)) R->peer_other++;

  /* Broadcast from the last rank. */
  int root = n - 1;
  if (poison(R, count, msg, len)) return 1;
  if (me == root) {
    ref_fill_move(DT, root, 0, R->hsend, count);
    COPY(inplace ? R->recv : R->send, R->hsend, bytes);
  }
  TRY(ncclBroadcast(inplace ? R->recv : R->send, R->recv, count, DT, root, R->comm,
                    R->stream));
  SYNC();
  COPY(R->hrecv, R->recv, bytes);
  if (ref_check_move(DT, root, 0, R->hrecv, count, m, sizeof(m)) != 0)
    return fail(msg, len, "rank %d: Broadcast count %zu: %s", me, count, m);

  /* Reduce to rank 0: registered buffers, staged path. */
  if (poison(R, count, msg, len)) return 1;
  ref_fill_input(DT, ncclSum, me, R->hsend, count);
  COPY(inplace ? R->recv : R->send, R->hsend, bytes);
  TRY(ncclReduce(inplace ? R->recv : R->send, R->recv, count, DT, ncclSum, 0, R->comm,
                 R->stream));
  SYNC();
  if (me == 0) {
    COPY(R->hrecv, R->recv, bytes);
    if (check_reduce(R, count, 0, "Reduce", msg, len)) return 1;
  }
  R->direct_calls += 4;

  /* Scatter from the last rank (staged: a non-root cannot tell where an
   * in-place root's output is). In place, the root's output is its
   * segment `root`. */
  if (poison(R, count * n, msg, len)) return 1;
  char *sc_out = inplace && me == root ? R->recv + (size_t)root * bytes : R->recv;
  if (me == root) {
    for (int q = 0; q < n; q++)
      ref_fill_move(DT, root, q, (char *)R->hsend + (size_t)q * bytes, count);
    COPY(inplace ? R->recv : R->send, R->hsend, bytes * n);
  }
  TRY(ncclScatter(inplace ? R->recv : R->send, sc_out, count, DT, root, R->comm,
                  R->stream));
  SYNC();
  COPY(R->hrecv, sc_out, bytes);
  if (ref_check_move(DT, root, me, R->hrecv, count, m, sizeof(m)) != 0)
    return fail(msg, len, "rank %d: Scatter%s count %zu: %s", me, inplace ? " in place" : "",
                count, m);

  /* AlltoAll has no in-place form. */
  if (!inplace) {
    if (poison(R, count * n, msg, len)) return 1;
    for (int q = 0; q < n; q++)
      ref_fill_move(DT, me, q, (char *)R->hsend + (size_t)q * bytes, count);
    COPY(R->send, R->hsend, bytes * n);
    TRY(ncclAlltoAll(R->send, R->recv, count, DT, R->comm, R->stream));
    SYNC();
    COPY(R->hrecv, R->recv, bytes * n);
    for (int q = 0; q < n; q++)
      if (ref_check_move(DT, q, me, (char *)R->hrecv + (size_t)q * bytes, count, m,
                         sizeof(m)) != 0)
        return fail(msg, len, "rank %d: AlltoAll count %zu from rank %d: %s", me, count,
                    q, m);
    R->direct_calls += 1;
  }
  return 0;
}

static int rank_body(rank_t *R, char *msg, size_t len) {
  size_t shift = rank_shift(R->rank) * ESZ;
  size_t bytes = (size_t)R->n * BIG * ESZ, alloc = bytes + shift;
  void *hs = NULL, *hr = NULL;
  ncclWindow_t ws = NULL, wr = NULL;
  if (rank_private(R->rank)) {
    R->send_mem = tdev_alloc(alloc);
    R->recv_mem = tdev_alloc(alloc);
    if (R->send_mem == NULL || R->recv_mem == NULL)
      return fail(msg, len, "rank %d: tdev_alloc: %s", R->rank, tdev_last_error());
  } else {
    TRY(ncclMemAlloc((void **)&R->send_mem, alloc));
    TRY(ncclMemAlloc((void **)&R->recv_mem, alloc));
  }
  R->send = R->send_mem + shift;
  R->recv = R->recv_mem + shift;
  R->hsend = malloc(bytes);
  R->hrecv = malloc(bytes);
  R->hexp = malloc(bytes);
  if (R->hsend == NULL || R->hrecv == NULL || R->hexp == NULL)
    return fail(msg, len, "out of host memory");
  if (g_window) {
    /* In a group, as nccl-tests does: the handles are filled at its end. */
    TRY(ncclGroupStart());
    TRY(ncclCommWindowRegister(R->comm, R->send, bytes, &ws, NCCL_WIN_COLL_SYMMETRIC));
    TRY(ncclCommWindowRegister(R->comm, R->recv, bytes, &wr, NCCL_WIN_COLL_SYMMETRIC));
    if (ws != NULL || wr != NULL)
      return fail(msg, len, "rank %d: a window handle was set before ncclGroupEnd",
                  R->rank);
    TRY(ncclGroupEnd());
    if (ws == NULL || wr == NULL)
      return fail(msg, len, "rank %d: ncclGroupEnd left a window handle NULL", R->rank);
  } else {
    TRY(ncclCommRegister(R->comm, R->send_mem, alloc, &hs));
    TRY(ncclCommRegister(R->comm, R->recv_mem, alloc, &hr));
  }
  static const size_t counts[] = {1, 1000, 20000, BIG};
  int quick = tdev_quick();
  for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
    for (int inplace = 0; inplace < 2; inplace++) {
      if (quick && c == 0 && inplace) continue;
      if (run_colls(R, counts[c], inplace, msg, len)) return 1;
    }
  if (g_window) {
    TRY(ncclCommWindowDeregister(R->comm, ws));
    TRY(ncclCommWindowDeregister(R->comm, wr));
  } else {
    TRY(ncclCommDeregister(R->comm, hs));
    TRY(ncclCommDeregister(R->comm, hr));
  }
  /* Deregistered: the next calls are staged (not counted) and correct. */
  int direct = R->direct_calls, peer = R->peer_calls, other = R->peer_other;
  if (run_colls(R, 20000, 0, msg, len)) return 1;
  R->direct_calls = direct;
  R->peer_calls = peer;
  R->peer_other = other;
  return 0;
}

/* Writes how many calls per rank could be direct, for the parent. */
static void write_expect(int calls, int peer_calls, int peer_other) {
  const char *dir = getenv("REG_TEST_DIR");
  char path[512];
  if (dir == NULL) return;
  snprintf(path, sizeof(path), "%s/expect", dir);
  FILE *f = fopen(path, "w");
  if (f != NULL) {
    fprintf(f, "%d %d %d\n", calls, peer_calls, peer_other);
    fclose(f);
  }
}

/* A rank's stream and communicator. */
static int rank_open(rank_t *R, ncclUniqueId id, int n, int rank, char *msg, size_t len) {
  memset(R, 0, sizeof(*R));
  R->n = n;
  R->rank = rank;
  if (tdev_stream_create(&R->stream) != 0)
    return fail(msg, len, "rank %d: stream: %s", rank, tdev_last_error());
  TRY(ncclCommInitRank(&R->comm, n, id, rank));
  return 0;
}

static int rank_main(ncclUniqueId id, int n, int rank, char *msg, size_t len) {
  rank_t RR, *R = &RR;
  if (rank_open(R, id, n, rank, msg, len)) return 1;
  int bad = rank_body(R, msg, len);
  if (!bad && rank == 0) write_expect(R->direct_calls, R->peer_calls, R->peer_other);
  if (bad) {
    fprintf(stderr, "%s\n", msg); /* every failing rank, not only the first */
    ncclCommAbort(R->comm);
  } else if (ncclCommDestroy(R->comm) != ncclSuccess)
    bad = fail(msg, len, "rank %d: ncclCommDestroy failed", rank);
  if (rank_private(rank)) {
    tdev_free(R->send_mem);
    tdev_free(R->recv_mem);
  } else {
    ncclMemFree(R->send_mem);
    ncclMemFree(R->recv_mem);
  }
  free(R->hsend);
  free(R->hrecv);
  free(R->hexp);
  tdev_stream_destroy(R->stream);
  return bad;
}

/* The text rank 0's failure must carry in a mismatch case. */
static const char *mismatch_rule(const char *name) {
  /* The per-call exchange: the kernel (or host executor) waits for the
   * peer's word, and the message comes with the hang report. */
  if (strcmp(name, "mismatch-percall") == 0)
    return "when one rank passes registered buffers, every rank must";
  return "every rank passes registered buffers";
}

/* Only rank 0 registers: both must fail, within the deadlines. As
 * processes, rank 0's ncclGetLastError must name the rule. As threads it
 * cannot be asked to: the last error is the process's last WARN (NCCL's
 * too: one string, the comm argument ignored), and rank 1's hang report
 * may come after rank 0's; the parent then finds rank 0's WARN in the
 * log instead (only rank 0 has a registered buffer to warn about). */
static int rank_mismatch(ncclUniqueId id, int n, int rank, char *msg, size_t len) {
  rank_t RR, *R = &RR;
  void *h = NULL;
  if (rank_open(R, id, n, rank, msg, len)) return 1;
  TRY(ncclMemAlloc((void **)&R->recv, 4096 * ESZ));
  if (rank == 0) TRY(ncclCommRegister(R->comm, R->recv, 4096 * ESZ, &h));
  ncclResult_t r = ncclAllReduce(R->recv, R->recv, 4096, DT, ncclSum, R->comm, R->stream);
  char last[1024];
  snprintf(last, sizeof(last), "%s", ncclGetLastError(R->comm));
  const char *rule = mismatch_rule(g_case);
  int procs = strcmp(g_case, "mismatch-percall") == 0;
  for (int i = 0; r == ncclSuccess && i < 600; i++) {
    /* CUDA mode: a kernel waiting for the peer fails asynchronously. */
    ncclResult_t a = ncclSuccess;
    ncclCommGetAsyncError(R->comm, &a);
    if (a != ncclSuccess && a != ncclInProgress) r = a;
    struct timespec nap = {0, 100000000};
    nanosleep(&nap, NULL);
  }
  if (strstr(last, rule) == NULL) snprintf(last, sizeof(last), "%s", ncclGetLastError(R->comm));
  int bad = 0;
  if (r == ncclSuccess)
    bad = fail(msg, len, "rank %d: an all-reduce with a buffer registered on rank 0 "
               "only succeeded", rank);
  else if (procs && rank == 0 && strstr(last, rule) == NULL)
    bad = fail(msg, len, "rank 0: the error does not name the registration rule: %s",
               last);
  ncclCommAbort(R->comm);
  ncclMemFree(R->recv);
  tdev_stream_destroy(R->stream);
  return bad;
}

/* Runs n ranks as processes; returns failures. */
static int run_procs(int n, tdev_rank_fn fn, char *msg, size_t len) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return fail(msg, len, "ncclGetUniqueId failed");
  pid_t pids[8];
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] == 0) {
      char m[1024] = "";
      int bad = fn(id, n, r, m, sizeof(m));
      if (bad) fprintf(stderr, "%s\n", m);
      _exit(bad ? 1 : 0);
    }
  }
  int bad = 0;
  for (int r = 0; r < n; r++) {
    int st = 0;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      if (!bad) fail(msg, len, "rank %d (process) failed (status %d)", r, st);
      bad++;
    }
  }
  return bad;
}

static int child_main(void) {
  char msg[1024] = "";
  int bad;
  int n = 2;
  /* mismatch-percall as processes: each rank's last error is its own
   * (threads share one, and the peer's hang report may land last);
   * mismatch as threads (rank_mismatch). */
  if (strcmp(g_case, "procs") == 0 || strcmp(g_case, "percall-procs") == 0 ||
      strcmp(g_case, "percall-mixed") == 0 || strcmp(g_case, "mismatch-percall") == 0)
    bad = run_procs(n, rank_main, msg, sizeof(msg));
  else if (strncmp(g_case, "mismatch", 8) == 0)
    bad = tdev_run_threads(n, rank_mismatch, msg, sizeof(msg));
  else
    bad = tdev_run_threads(strcmp(g_case, "threads") == 0 ||
                               strcmp(g_case, "percall") == 0 ? 3 : n,
                           rank_main, msg, sizeof(msg));
  if (bad) fprintf(stderr, "FAIL %s%s: %s\n", g_case, g_window ? " (windows)" : "", msg);
  return bad ? 1 : 0;
}

/* ---- the parent ---------------------------------------------------------------- */

/* Lines of the case's logs that contain `what`. */
static long count_lines(const char *dir, const char *what) {
  long lines = 0;
  DIR *d = opendir(dir);
  if (d == NULL) return -1;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, "reg.", 4) != 0) continue;
    char path[1024], line[2048];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    while (fgets(line, sizeof(line), f) != NULL)
      if (strstr(line, what) != NULL) lines++;
    fclose(f);
  }
  closedir(d);
  return lines;
}

static int read_expect(const char *dir, int *peer_calls, int *peer_other) {
  char path[1024];
  int v = -1;
  *peer_calls = *peer_other = -1;
  snprintf(path, sizeof(path), "%s/expect", dir);
  FILE *f = fopen(path, "r");
  if (f == NULL) return -1;
  if (fscanf(f, "%d %d %d", &v, peer_calls, peer_other) != 3) v = -1;
  fclose(f);
  return v;
}

/* Runs one case in a fresh process; returns 0 when it passed: every
 * eligible call written in place on direct_ranks ranks (the lowest),
 * staged on the others, and the zero-copy plans run when zero_copy. */
static int run_case(const char *exe, const char *root, const char *name, int window,
                    int nranks, int direct_ranks, int zero_copy, const char *algo) {
  int percall = strncmp(name, "percall", 7) == 0 || strcmp(name, "mismatch-percall") == 0;
  char dir[512], logs[600];
  snprintf(dir, sizeof(dir), "%s/%s%s%s%s", root, name, window ? "-win" : "",
           algo != NULL ? "-" : "", algo != NULL ? algo : "");
  mkdir(dir, 0700);
  snprintf(logs, sizeof(logs), "%s/reg.%%p.log", dir);
  pid_t pid = fork();
  if (pid == 0) {
    setenv("REG_TEST_DIR", dir, 1);
    setenv("NCCL_DEBUG", "INFO", 1);
    setenv("NCCL_DEBUG_SUBSYS", "REG", 1);
    setenv("NCCL_DEBUG_FILE", logs, 1);
    /* A rank that fails a check leaves its peers waiting: not for long. */
    setenv("BRAID_TIMEOUT", "60", 1);
    if (algo != NULL) {
      setenv("NCCL_ALGO", algo, 1);
      setenv("NCCL_PROTO", "Simple", 1);
    }
    /* The promise of NCCL's symmetric rule: ncclCommRegister buffers are
     * exchanged once and read in place; without it, outputs per call. */
    if (!percall) setenv("BRAID_REGISTER_SYMMETRIC", "1", 1);
    if (strcmp(name, "off") == 0) setenv("NCCL_LOCAL_REGISTER", "0", 1);
    if (strncmp(name, "mismatch", 8) == 0) {
      setenv("BRAID_BOOTSTRAP_TIMEOUT", "3", 1);
      setenv("BRAID_TIMEOUT", "3", 1);
    }
    execl(exe, exe, "--case", name, window ? "win" : "reg", (char *)NULL);
    _exit(127);
  }
  int st = 0;
  time_t deadline = time(NULL) + 600;
  while (waitpid(pid, &st, WNOHANG) == 0) {
    if (time(NULL) > deadline) {
      kill(pid, SIGKILL);
      waitpid(pid, &st, 0);
      printf("FAIL %s: no result within 600 s\n", dir);
      return 1;
    }
    struct timespec nap = {0, 50000000};
    nanosleep(&nap, NULL);
  }
  if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
    printf("FAIL %s: exit status %d\n", dir, st);
    return 1;
  }
  if (strcmp(name, "mismatch") == 0 && count_lines(dir, mismatch_rule(name)) < 1) {
    /* Threads: rank 0's WARN, from the log (rank_mismatch says why). */
    printf("FAIL %s: no WARN names the registration rule (\"%s\")\n", dir,
           mismatch_rule(name));
    return 1;
  }
  if (strncmp(name, "mismatch", 8) != 0) {
    int peer_calls, peer_other;
    int calls = read_expect(dir, &peer_calls, &peer_other);
    long got = count_lines(dir, "written in place");
    long want = (long)calls * direct_ranks;
    if (calls <= 0 || got != want) {
      printf("FAIL %s: %ld calls wrote their registered output in place, expected %ld "
             "(%d eligible calls per rank, %d ranks)\n", dir, got, want, calls,
             direct_ranks);
      return 1;
    }
    /* A rank whose buffers the others cannot map says so at every call. */
    got = count_lines(dir, "staged (registered");
    want = percall && !window ? (long)calls * (nranks - direct_ranks) : 0;
    if (got != want) {
      printf("FAIL %s: %ld calls staged a registered output, expected %ld\n", dir, got,
             want);
      return 1;
    }
    /* Zero-copy plans: all-reduce unless NCCL_ALGO leaves two-shot out
     * (the forced algorithms name all-reduce only). */
    int ar_ok = algo == NULL || strstr(algo, "twoshot") != NULL;
    got = count_lines(dir, "read in place by every rank");
    want = zero_copy ? (long)((ar_ok ? peer_calls : 0) + peer_other) * nranks : 0;
    if (peer_calls <= 0 || peer_other <= 0 || got != want) {
      printf("FAIL %s: %ld calls read their registered inputs in place, expected %ld "
             "(%d all-reduces and %d others eligible per rank, %d ranks)\n", dir, got,
             want, peer_calls, peer_other, nranks);
      return 1;
    }
  }
  printf("ok %s\n", dir);
  return 0;
}

int main(int argc, char **argv) {
  if (argc >= 4 && strcmp(argv[1], "--case") == 0) {
    g_case = argv[2];
    g_window = strcmp(argv[3], "win") == 0;
    return child_main();
  }
  char why[256];
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: %s\n", why);
    return TDEV_EXIT_SKIP;
  }
  char root[] = "/tmp/braid-test-register.XXXXXX";
  if (mkdtemp(root) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  int bad = 0;
  const char *me = "/proc/self/exe";
  for (int window = 0; window < 2; window++) {
    bad += run_case(me, root, "threads", window, 3, 3, 1, NULL);
    bad += run_case(me, root, "procs", window, 2, 2, 1, NULL);
  }
  /* Plans that write peers' outputs (two-shot's all-gather half, the
   * tree's broadcast) reach the other ranks' registered buffers. */
  bad += run_case(me, root, "threads", 0, 3, 3, 1, "allreduce:twoshot");
  bad += run_case(me, root, "threads", 1, 3, 3, 1, "allreduce:tree");
  bad += run_case(me, root, "procs", 0, 2, 2, 1, "allreduce:twoshot");
  /* Without the promise: outputs exchanged at every call. */
  bad += run_case(me, root, "percall", 0, 3, 3, 0, NULL);
  bad += run_case(me, root, "percall", 0, 3, 3, 0, "allreduce:tree");
  bad += run_case(me, root, "percall-procs", 0, 2, 2, 0, NULL);
  bad += run_case(me, root, "percall-mixed", 0, 2, 1, 0, NULL);
  bad += run_case(me, root, "percall", 1, 3, 3, 1, NULL);
  bad += run_case(me, root, "off", 0, 2, 0, 0, NULL);
  bad += run_case(me, root, "mismatch", 0, 2, 0, 0, NULL);
  bad += run_case(me, root, "mismatch-percall", 0, 2, 0, 0, NULL);
  if (!bad) {
    char cmd[600];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", root);
  }
  printf("%s: %d case(s) failed\n", bad ? "FAIL" : "PASS", bad);
  return bad ? 1 : 0;
}
