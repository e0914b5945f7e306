/*
 * The plan library (BRAID_PLAN_DIR, docs/plans.md), end to end on 3 ranks:
 *
 *   - braid-plan -J exports built-in all-reduce plans with the library's
 *     fields added: a ring for 4096..65536 bytes and a one-shot LL plan for
 *     up to 256 bytes, in place and float32 only. All-reduces on both sides
 *     of every boundary (and of in place, and of the type) are checked
 *     against the CPU reference, and the INFO lines name the file that ran
 *     exactly for the calls inside its range (three ranks, one line each;
 *     pricing each call with ncclGroupSimulateEnd as well adds none).
 *   - A plan with a planted missing signal is refused with a WARN naming
 *     the file and the verifier's rank, block and op; calls it would have
 *     matched run on the built-ins, exactly.
 *   - A file with an unknown op name gives a WARN naming the file and the
 *     JSON path; one cut short, the file and line; a plan of 4 ranks is
 *     skipped with an INFO.
 *   - NCCL_ALGO set: the built-ins run, whatever the library holds.
 *   - Ranks (processes) given different libraries: every rank WARNs and
 *     ignores the library; results stay exact.
 *   - MSCCL++ execution plans (../shared/mscclpp-plans, and Braid's own
 *     tests/data/mscclpp/oop_scratch.json) on 2 ranks: the LL
 *     packet all-reduce (its max_message_size set to 4096 in the copy),
 *     the switch-channel one (NCCL_NVLS_ENABLE=1; 8192..65536 bytes in its
 *     copy), a switch-channel pipeline in the shape of MSCCL++'s
 *     allreduce_pipeline.json (tests/data/mscclpp/ar_nvls_pipeline_sem.json:
 *     3 thread blocks handing each iteration on with sem_acquire/
 *     sem_release; 200000..262144 bytes) and the Simple one run, in
 *     place, for the calls in their
 *     ranges, exactly, with INFO naming the file; out-of-place calls from
 *     64 bytes to 1 MiB run a hand-written out-of-place plan through
 *     scratch (oop_scratch.json), others the built-ins. Small buffers
 *     (NCCL_BUFFSIZE 64 KiB, NCCL_LL_BUFFSIZE 4 KiB) make the larger calls
 *     run several windows (the slot-reuse credits). In CUDA mode each
 *     rank gets a device of its own where there are enough (the
 *     simulator makes two, with cuMem windows) and NVLS is asked for, so
 *     the switch plan runs on the simulator's multicast; where NVLS stays
 *     off (one GPU) it is skipped with an INFO and the Simple one runs.
 *     Plans with an unknown op or a gstorepkt are refused with a WARN
 *     naming the file, GPU, thread block, op index and op name.
 *   - Braid's own MSCCL++ plans (tests/data/mscclpp, no samples needed) on
 *     3 ranks (configuration mscclpp-own): a pipelined all-reduce, one in
 *     MSCCL++'s pipeline shape (3 thread blocks handing each iteration on
 *     with sem_acquire/sem_release; folded onto 2 blocks in host mode),
 *     all-gathers (LL and Simple out of place; over port channels with a
 *     flush; in place, up to 4096
 *     bytes per rank with puts split over a thread-block group, above
 *     with gets), reduce-scatters
 *     (out of place, in place) and an all-to-all, each exact against the
 *     CPU reference for the calls in its range and of its kind, with INFO
 *     naming the file once per rank, the others on the built-ins; the
 *     semaphore plan with a sem_release missing refused with a WARN
 *     naming the acquire left without one.
 *
 * Each configuration runs in a child (this program again, with its
 * environment and NCCL_DEBUG_FILE), so parameters are read afresh.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "coll_ref.h"
#include "nccl.h"
#include "tdev.h"

#define NRANKS 3
#define SYNC_TIMEOUT_S 120.0

/* ---- the child: ranks running calls ----------------------------------------- */

/* The collective of a call: REF_AR, REF_AG, REF_RS (coll_ref.h) or
 * CALL_A2A. */
#define CALL_A2A 3

typedef struct call {
  ncclDataType_t dt;
  ncclRedOp_t op;
  size_t count; /* per rank: NCCL's count (recvcount, sendcount) */
  int inplace;
  int kind;     /* 0 (REF_AR): all-reduce */
} call_t;

/* Bytes per rank: float32/int32, so count x 4. */
static const call_t calls[] = {
    {ncclFloat32, ncclSum, 1023, 0, REF_AR},  /* 4092: below the ring's range */
    {ncclFloat32, ncclSum, 1024, 0, REF_AR},  /* 4096: the ring */
    {ncclFloat32, ncclSum, 1024, 1, REF_AR},  /* 4096 in place: the ring */
    {ncclInt32, ncclMax, 2048, 0, REF_AR},    /* 8192: the ring */
    {ncclFloat32, ncclAvg, 3000, 1, REF_AR},  /* 12000 in place: the ring */
    {ncclFloat32, ncclSum, 16384, 0, REF_AR}, /* 65536: the ring */
    {ncclFloat32, ncclSum, 16385, 0, REF_AR}, /* 65540: above it */
    {ncclFloat32, ncclSum, 25, 1, REF_AR},    /* 100 in place: the LL plan */
    {ncclFloat32, ncclSum, 25, 0, REF_AR},    /* 100 out of place: built-in */
    {ncclInt32, ncclSum, 25, 1, REF_AR},      /* 100 in place, int32: built-in */
    {ncclFloat32, ncclMin, 64, 1, REF_AR},    /* 256 in place: the LL plan */
    {ncclFloat32, ncclSum, 65, 1, REF_AR},    /* 260 in place: built-in */
    {ncclFloat32, ncclSum, 70001, 0, REF_AR}, /* 280004: built-in */
};
#define NCALLS (sizeof(calls) / sizeof(calls[0]))

/* The MSCCL++ configuration: 2 ranks, in-place plans; the packet plan up
 * to 4096 bytes, the Simple plan above. */
/* MSCCL++'s sample plans (BRAID_MSCCLPP_PLANS, else ../shared/mscclpp-plans
 * from the repository root); Braid's own in tests/data/mscclpp. */
#define OWN_MSCCLPP_DIR "tests/data/mscclpp"
static const char *mscclpp_dir(const char *file) {
  const char *d = getenv("BRAID_MSCCLPP_PLANS");
  if (strcmp(file, "allreduce.json") != 0 && strcmp(file, "allreduce_packet.json") != 0 &&
      strcmp(file, "reduce_nvls.json") != 0)
    return OWN_MSCCLPP_DIR;
  return d != NULL && *d ? d : "../shared/mscclpp-plans";
}
static const call_t mcalls[] = {
    {ncclFloat32, ncclSum, 1, 1, REF_AR},       /* 4: the packet plan */
    {ncclFloat32, ncclSum, 1023, 1, REF_AR},    /* 4092: the packet plan */
    {ncclInt32, ncclMax, 1024, 1, REF_AR},      /* 4096: the packet plan */
    {ncclFloat32, ncclSum, 1023, 0, REF_AR},    /* 4092 out of place: oop_scratch */
    {ncclFloat32, ncclSum, 15, 0, REF_AR},      /* 60 out of place: built-in */
    {ncclFloat32, ncclSum, 262145, 0, REF_AR},  /* 1048580 out of place: built-in */
    {ncclInt32, ncclMin, 262144, 0, REF_AR},    /* 1048576 out of place: oop_scratch */
    {ncclFloat32, ncclSum, 1025, 1, REF_AR},    /* 4100: the Simple plan */
    {ncclFloat32, ncclAvg, 33333, 1, REF_AR},   /* 133332: the Simple plan */
    {ncclFloat64, ncclSum, 700001, 1, REF_AR},  /* 5600008: the Simple plan */
    {ncclFloat32, ncclAvg, 33333, 0, REF_AR},   /* 133332 out of place: oop_scratch */
    {ncclFloat32, ncclSum, 3001, 1, REF_AR},    /* 12004: the switch plan */
    {ncclFloat32, ncclSum, 16384, 1, REF_AR},   /* 65536: the switch plan */
    {ncclFloat32, ncclSum, 16385, 1, REF_AR},   /* 65540: the Simple plan */
    {ncclFloat32, ncclSum, 50001, 1, REF_AR},   /* 200004: the switch pipeline */
    {ncclInt32, ncclMax, 65536, 1, REF_AR},     /* 262144: the switch pipeline */
    {ncclFloat32, ncclSum, 7, 1, REF_AR},       /* 28: the packet plan again */
};
#define NMCALLS (sizeof(mcalls) / sizeof(mcalls[0]))

/* The MSCCL++ plans of tests/data/mscclpp on 3 ranks: the pipelined
 * all-reduce (out of place, up to 393216 bytes), the one with device
 * semaphores (out of place, 393220 to 786432 bytes), the all-gathers (out
 * of place in LL up to 65536 bytes per rank, in Simple above, over port
 * channels from 300000 to 400000; in place, a thread-block group up to
 * 4096 bytes per rank, gets above), the reduce-scatters (out of place and
 * in place) and the all-to-all. */
static const call_t ocalls[] = {
    {ncclFloat32, ncclSum, 1001, 0, REF_AR},    /* 4004: the pipeline */
    {ncclInt32, ncclMax, 33333, 0, REF_AR},     /* 133332: the pipeline */
    {ncclFloat32, ncclAvg, 98304, 0, REF_AR},   /* 393216: the pipeline */
    {ncclFloat32, ncclSum, 98305, 0, REF_AR},   /* 393220: ar_pipeline_sem */
    {ncclInt32, ncclMax, 150001, 0, REF_AR},    /* 600004: ar_pipeline_sem */
    {ncclFloat32, ncclAvg, 196608, 0, REF_AR},  /* 786432: ar_pipeline_sem */
    {ncclFloat32, ncclSum, 196609, 0, REF_AR},  /* 786436: built-in */
    {ncclFloat32, ncclSum, 1001, 1, REF_AR},    /* 4004 in place: built-in */
    {ncclFloat32, ncclSum, 1023, 0, REF_AG},    /* 4092: ag_packet */
    {ncclFloat32, ncclSum, 16384, 0, REF_AG},   /* 65536: ag_packet */
    {ncclFloat32, ncclSum, 16385, 0, REF_AG},   /* 65540: ag_put */
    {ncclInt32, ncclSum, 50001, 0, REF_AG},     /* 200004: ag_put */
    {ncclInt32, ncclSum, 80001, 0, REF_AG},     /* 320004: ag_port_flush */
    {ncclFloat32, ncclSum, 777, 1, REF_AG},     /* 3108 in place: ag_tbg_inplace */
    {ncclInt32, ncclSum, 1024, 1, REF_AG},      /* 4096 in place: ag_tbg_inplace */
    {ncclFloat32, ncclSum, 1025, 1, REF_AG},    /* 4100 in place: ag_get_inplace */
    {ncclFloat64, ncclSum, 50001, 1, REF_AG},   /* 400008 in place: ag_get_inplace */
    {ncclFloat32, ncclSum, 1001, 0, REF_RS},    /* 12012: rs_scratch */
    {ncclInt32, ncclMin, 40000, 0, REF_RS},     /* 480000: rs_scratch */
    {ncclFloat32, ncclAvg, 3333, 0, REF_RS},    /* 39996: rs_scratch */
    {ncclFloat32, ncclSum, 1001, 1, REF_RS},    /* 12012 in place: rs_inplace */
    {ncclInt32, ncclMax, 40001, 1, REF_RS},     /* 480012 in place: rs_inplace */
    {ncclFloat32, ncclSum, 999, 0, CALL_A2A},   /* 11988: a2a_put */
    {ncclInt32, ncclSum, 30001, 0, CALL_A2A},   /* 360012: a2a_put */
};
#define NOCALLS (sizeof(ocalls) / sizeof(ocalls[0]))

static const call_t *cur_calls = calls;
static size_t cur_ncalls = NCALLS;

static int run_calls(ncclComm_t comm, cudaStream_t stream, int n, int rank, char *msg,
                     size_t msglen) {
  for (size_t i = 0; i < cur_ncalls; i++) {
    const call_t *c = &cur_calls[i];
    size_t es = ref_dtype_size(c->dt), nc = (size_t)n * c->count;
    char *mem = tdev_alloc(nc * es), *other = tdev_alloc(nc * es);
    void *expect = malloc(nc * es);
    const void *send = NULL;
    void *recv = NULL;
    int bad = 0;
    if (mem == NULL || other == NULL || expect == NULL) {
      snprintf(msg, msglen, "rank %d: %s", rank, tdev_last_error());
      bad = 1;
      goto next;
    }
    if (c->kind == CALL_A2A) {
      /* Block q of the input goes to rank q, which keeps it as block
       * `rank` of its output. */
      for (int q = 0; q < n; q++) ref_fill_move(c->dt, rank, q, mem + (size_t)q * c->count * es,
                                                c->count);
      ref_poison(c->dt, other, nc);
      send = mem;
      recv = other;
    } else {
      ref_case_fill((ref_kind_t)c->kind, c->dt, c->op, rank, n, c->count, c->inplace, mem,
                    other, &send, &recv);
    }
    /* The library configuration also prices each call first (from the
     * second on the runtime is connected, so the estimate picks the plan
     * the launch will): ncclGroupSimulateEnd runs nothing, so it must not
     * log a "runs" line (the parent counts exactly one per rank and call).
     * Before the call, as a peer may destroy its communicator after it. */
    if (strcmp(getenv("PLANDIR_TEST_CHILD"), "library") == 0) {
      ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
      ncclResult_t r = ncclGroupStart();
      if (r == ncclSuccess) {
        switch (c->kind) {
        case REF_AG: r = ncclAllGather(send, recv, c->count, c->dt, comm, stream); break;
        case REF_RS: r = ncclReduceScatter(send, recv, c->count, c->dt, c->op, comm, stream); break;
        case CALL_A2A: r = ncclAlltoAll(send, recv, c->count, c->dt, comm, stream); break;
        default: r = ncclAllReduce(send, recv, c->count, c->dt, c->op, comm, stream); break;
        }
        ncclResult_t e = ncclGroupSimulateEnd(&sim);
        if (r == ncclSuccess) r = e;
      }
      if (r != ncclSuccess || !(sim.estimatedTime > 0)) {
        snprintf(msg, msglen, "rank %d call %zu: simulating it: %d, %g us: %s", rank, i, (int)r,
                 (double)sim.estimatedTime, ncclGetLastError(NULL));
        bad = 1;
        goto next;
      }
    }
    ncclResult_t r;
    switch (c->kind) {
    case REF_AG: r = ncclAllGather(send, recv, c->count, c->dt, comm, stream); break;
    case REF_RS: r = ncclReduceScatter(send, recv, c->count, c->dt, c->op, comm, stream); break;
    case CALL_A2A: r = ncclAlltoAll(send, recv, c->count, c->dt, comm, stream); break;
    default: r = ncclAllReduce(send, recv, c->count, c->dt, c->op, comm, stream); break;
    }
    static const char *const kinds[] = {"all-reduce", "all-gather", "reduce-scatter",
                                        "all-to-all"};
    char m[160] = "";
    size_t wrong = 0;
    if (r != ncclSuccess) {
      snprintf(msg, msglen, "rank %d call %zu: %s", rank, i, ncclGetLastError(NULL));
      bad = 1;
    } else if (tdev_stream_sync(stream, SYNC_TIMEOUT_S) != 0) {
      snprintf(msg, msglen, "rank %d call %zu: %s", rank, i, tdev_last_error());
      bad = 1;
    } else {
      if (c->kind == CALL_A2A)
        for (int q = 0; q < n && wrong == 0; q++)
          wrong = ref_check_move(c->dt, q, rank, (char *)recv + (size_t)q * c->count * es,
                                 c->count, m, sizeof(m));
      else
        wrong = ref_case_check((ref_kind_t)c->kind, c->dt, c->op, rank, n, c->count, recv,
                               expect, m, sizeof(m));
    }
    if (wrong != 0) {
      snprintf(msg, msglen, "rank %d call %zu (%s %s %s count %zu %s): %s", rank, i,
               kinds[c->kind], ref_dtype_name(c->dt), ref_op_name(c->op), c->count,
               c->inplace ? "in place" : "out of place", m);
      bad = 1;
    }
  next:
    tdev_free(other);
    tdev_free(mem);
    free(expect);
    if (bad) return 1;
  }
  return 0;
}

static int rank_fn(ncclUniqueId id, int n, int rank, char *msg, size_t msglen) {
  /* The MSCCL++ switch plan in CUDA mode: NVLS needs a GPU per rank. */
  if (getenv("PLANDIR_DEVICE_PER_RANK") != NULL) (void)tdev_device_per_rank(rank);
  ncclComm_t comm;
  cudaStream_t stream;
  if (tdev_stream_create(&stream) != 0) {
    snprintf(msg, msglen, "rank %d: %s", rank, tdev_last_error());
    return 1;
  }
  if (ncclCommInitRank(&comm, n, id, rank) != ncclSuccess) {
    snprintf(msg, msglen, "rank %d init: %s", rank, ncclGetLastError(NULL));
    tdev_stream_destroy(stream);
    return 1;
  }
  int f = run_calls(comm, stream, n, rank, msg, msglen);
  ncclCommDestroy(comm);
  tdev_stream_destroy(stream);
  return f;
}

/* Ranks as processes, rank r reading BRAID_PLAN_DIR from PLANDIR_RANK<r>. */
static int child_processes(int n) {
  tdev_id_pipes_t idp;
  pid_t pids[NRANKS];
  if (tdev_id_pipes_open(&idp, n) != 0) return 1;
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    pids[r] = fork();
    if (pids[r] < 0) return 1;
    if (pids[r] == 0) {
      char var[32], msg[300] = "";
      snprintf(var, sizeof(var), "PLANDIR_RANK%d", r);
      const char *dir = getenv(var);
      if (dir != NULL) setenv("BRAID_PLAN_DIR", dir, 1);
      ncclUniqueId id;
      if (tdev_id_pipes_share(&idp, r, &id) != 0) _exit(1);
      int f = rank_fn(id, n, r, msg, sizeof(msg));
      if (f) printf("FAIL: %s\n", msg);
      fflush(NULL);
      _exit(f ? 1 : 0);
    }
  }
  tdev_id_pipes_close(&idp);
  int failed = 0;
  for (int r = 0; r < n; r++) {
    int st;
    waitpid(pids[r], &st, 0);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) failed = 1;
  }
  return failed;
}

static int child(const char *what) {
  if (strcmp(what, "processes") == 0) return child_processes(NRANKS);
  char msg[300] = "";
  int n = NRANKS;
  if (strcmp(what, "mscclpp-own") == 0) {
    cur_calls = ocalls;
    cur_ncalls = NOCALLS;
  }
  if (strcmp(what, "mscclpp") == 0) {
    cur_calls = mcalls;
    cur_ncalls = NMCALLS;
    n = 2;
    /* A device per rank (the simulator's two): NVLS, which the CUDA
     * backend turns on only when asked, is asked for; with fewer devices
     * it stays off and the switch plan is skipped. */
    if (getenv("PLANDIR_DEVICE_PER_RANK") != NULL && tdev_device_count() >= n)
      setenv("NCCL_NVLS_ENABLE", "1", 1);
  }
  if (tdev_run_threads(n, rank_fn, msg, sizeof(msg)) != 0) {
    printf("FAIL %s: %s\n", what, msg);
    return 1;
  }
  return 0;
}

/* ---- the parent: files, configurations, logs --------------------------------- */

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  size_t cap = 1 << 16, n = 0;
  char *s = malloc(cap);
  for (size_t k; s != NULL && (k = fread(s + n, 1, cap - n - 1, f)) > 0;) {
    n += k;
    if (n + 1 == cap) {
      char *g = realloc(s, cap *= 2);
      if (g == NULL) {
        free(s);
        s = NULL;
      }
      s = g;
    }
  }
  fclose(f);
  if (s != NULL) s[n] = '\0';
  return s;
}

static int spit(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  if (f == NULL) return -1;
  size_t n = strlen(text);
  int ok = fwrite(text, 1, n, f) == n;
  return fclose(f) == 0 && ok ? 0 : -1;
}

/* Runs the tool with args, its standard output into path. */
static int export_plan(const char *tool, const char *args, const char *path) {
  char cmd[1024];
  snprintf(cmd, sizeof(cmd), "%s %s -J > %s", tool, args, path);
  int st = system(cmd);
  if (st != 0) printf("FAIL: %s exited with %d\n", cmd, st);
  return st == 0 ? 0 : -1;
}

/* Every log file of configuration `what` in dir, concatenated. */
static char *logs_of(const char *dir, const char *what) {
  size_t total = 1, wl = strlen(what);
  char *all = calloc(1, 1);
  DIR *d = opendir(dir);
  if (d == NULL || all == NULL) {
    if (d) closedir(d);
    free(all);
    return NULL;
  }
  for (struct dirent *e; (e = readdir(d)) != NULL;) {
    if (strncmp(e->d_name, what, wl) != 0 || e->d_name[wl] != '.') continue;
    char p[1024];
    snprintf(p, sizeof(p), "%.600s/%.300s", dir, e->d_name);
    char *t = slurp(p);
    if (t == NULL) continue;
    size_t tl = strlen(t);
    char *g = realloc(all, total + tl);
    if (g != NULL) {
      all = g;
      memcpy(all + total - 1, t, tl + 1);
      total += tl;
    }
    free(t);
  }
  closedir(d);
  return all;
}

static int count_of(const char *text, const char *frag) {
  int k = 0;
  for (const char *p = text; (p = strstr(p, frag)) != NULL; p += strlen(frag)) k++;
  return k;
}

static int failures;

__attribute__((format(printf, 2, 3))) static void check(int ok, const char *fmt, ...) {
  if (ok) return;
  va_list ap;
  va_start(ap, fmt);
  printf("FAIL: ");
  vprintf(fmt, ap);
  printf("\n");
  va_end(ap);
  failures++;
}

/* The line of text holding frag, or NULL; copied into line. */
static const char *line_with(const char *text, const char *frag, const char *also,
                             char *line, size_t n) {
  for (const char *p = text; (p = strstr(p, frag)) != NULL; p++) {
    const char *a = p, *b = p;
    while (a > text && a[-1] != '\n') a--;
    while (*b && *b != '\n') b++;
    size_t len = (size_t)(b - a) < n - 1 ? (size_t)(b - a) : n - 1;
    memcpy(line, a, len);
    line[len] = '\0';
    if (also == NULL || strstr(line, also) != NULL) return line;
  }
  return NULL;
}

/* Whether the log has a "runs" line of file naming `bytes` and `how`, and
 * how many. */
static int runs(const char *log, const char *file, unsigned bytes, const char *how) {
  char frag[256];
  snprintf(frag, sizeof(frag), "%s runs (%u bytes per rank, %s)", file, bytes, how);
  return count_of(log, frag);
}

static int any_runs(const char *log, unsigned bytes) {
  char frag[64];
  snprintf(frag, sizeof(frag), "runs (%u bytes per rank", bytes);
  return count_of(log, frag);
}

static void check_library_log(const char *log) {
  char line[1024];
  /* Loaded, refused, skipped. */
  check(count_of(log, "loaded ") >= NRANKS && strstr(log, "a_ring3.json (allreduce") != NULL &&
            strstr(log, "b_oneshot3_ll.json (allreduce") != NULL,
        "the two good plans were not loaded on every rank");
  check(line_with(log, "c_ring4.json: a plan of 4 ranks, the communicator has 3", "INFO",
                  line, sizeof(line)) != NULL,
        "no INFO skipping the 4-rank plan");
  const char *w = line_with(log, "d_bad.json", "WARN", line, sizeof(line));
  check(w != NULL && strstr(line, "verifier") != NULL && strstr(line, " block ") != NULL &&
            strstr(line, " op ") != NULL && strstr(line, "rank ") != NULL,
        "no WARN naming d_bad.json with the verifier's rank, block and op: %s",
        w ? line : "(none)");
  w = line_with(log, "e_schema.json: ranks[", "WARN", line, sizeof(line));
  check(w != NULL && strstr(line, ".op: unknown name \"putt\"") != NULL,
        "no WARN naming e_schema.json and the op's JSON path: %s", w ? line : "(none)");
  w = line_with(log, "f_syntax.json: line ", "WARN", line, sizeof(line));
  check(w != NULL && strstr(line, "malformed JSON") != NULL,
        "no WARN naming f_syntax.json's line: %s", w ? line : "(none)");
  check(strstr(log, "notes.txt") == NULL, "a file not named *.json was read");
  /* Inside the ring's range, once per rank and call; outside, never. */
  check(runs(log, "a_ring3.json", 4096, "out of place") == NRANKS &&
            runs(log, "a_ring3.json", 4096, "in place") == NRANKS &&
            runs(log, "a_ring3.json", 8192, "out of place") == NRANKS &&
            runs(log, "a_ring3.json", 12000, "in place") == NRANKS &&
            runs(log, "a_ring3.json", 65536, "out of place") == NRANKS,
        "the ring did not run (once per rank) for a call inside 4096..65536");
  check(any_runs(log, 4092) == 0 && any_runs(log, 65540) == 0 && any_runs(log, 280004) == 0,
        "a library plan ran for a call outside every declared range (the refused d_bad.json "
        "declares none)");
  /* The LL plan: in place, float32, up to 256 bytes. */
  check(runs(log, "b_oneshot3_ll.json", 100, "in place") == NRANKS,
        "the LL plan ran %d times for 100 bytes in place (float32 once per rank, not int32)",
        runs(log, "b_oneshot3_ll.json", 100, "in place"));
  check(runs(log, "b_oneshot3_ll.json", 256, "in place") == NRANKS,
        "the LL plan did not run at its max_bytes");
  check(any_runs(log, 260) == 0 && runs(log, "b_oneshot3_ll.json", 100, "out of place") == 0,
        "the LL plan ran above its range or out of place");
  check(strstr(log, "d_bad.json runs") == NULL && strstr(log, "c_ring4.json runs") == NULL,
        "a refused or skipped plan ran");
}

static void check_mscclpp_log(const char *log) {
  char line[1024];
  check(count_of(log, "a_packet.json (MSCCL++ plan, allreduce") == 2 &&
            count_of(log, "b_allreduce.json (MSCCL++ plan, allreduce") == 2,
        "the two MSCCL++ plans were not loaded on both ranks");
  check(runs(log, "a_packet.json", 4, "in place") == 2 &&
            runs(log, "a_packet.json", 4092, "in place") == 2 &&
            runs(log, "a_packet.json", 4096, "in place") == 2 &&
            runs(log, "a_packet.json", 28, "in place") == 2,
        "the packet plan did not run (once per rank) for the in-place calls up to 4096 bytes");
  check(runs(log, "b_allreduce.json", 4100, "in place") == 2 &&
            runs(log, "b_allreduce.json", 133332, "in place") == 2 &&
            runs(log, "b_allreduce.json", 5600008, "in place") == 2 &&
            runs(log, "b_allreduce.json", 65540, "in place") == 2,
        "the Simple plan did not run (once per rank) for the in-place calls above 4096 bytes");
  check(runs(log, "e_oop.json", 4092, "out of place") == 2 &&
            runs(log, "e_oop.json", 133332, "out of place") == 2 &&
            runs(log, "e_oop.json", 1048576, "out of place") == 2,
        "the out-of-place plan did not run (once per rank) for 4092, 133332, 1048576 bytes");
  check(runs(log, "a_packet.json", 4100, "in place") == 0 && any_runs(log, 4092) == 4 &&
            any_runs(log, 60) == 0 && any_runs(log, 1048580) == 0 &&
            count_of(log, "out of place)") == 6,
        "an MSCCL++ plan ran outside its range, or in place or out of place where it is not "
        "declared so");
  const char *dev = getenv("BRAID_DEVICE");
  int host = dev != NULL && strcmp(dev, "host") == 0;
  int nvls_off = count_of(log, "a0_nvls.json: it has switch channels and NVLS is off");
  check(count_of(log, "a0_nvls.json (MSCCL++ plan, allreduce") == 2 &&
            count_of(log, "a1_nvls_sem.json (MSCCL++ plan, allreduce") == 2,
        "the switch-channel MSCCL++ plans were not loaded on both ranks");
  printf("mscclpp: the switch-channel plan %s\n",
         host || nvls_off == 0 ? "ran (NVLS on)" : "was skipped (NVLS off in CUDA mode here)");
  if (host || nvls_off == 0) {
    check(runs(log, "a0_nvls.json", 12004, "in place") == 2 &&
              runs(log, "a0_nvls.json", 65536, "in place") == 2,
          "the switch-channel plan did not run (once per rank) for 12004 and 65536 bytes");
    check(runs(log, "a1_nvls_sem.json", 200004, "in place") == 2 &&
              runs(log, "a1_nvls_sem.json", 262144, "in place") == 2,
          "the switch-channel pipeline with semaphores did not run (once per rank) for 200004 "
          "and 262144 bytes");
  } else {
    check(nvls_off == 2 && runs(log, "b_allreduce.json", 12004, "in place") == 2 &&
              runs(log, "b_allreduce.json", 200004, "in place") == 2,
          "NVLS off: the switch-channel plan was not skipped on both ranks, or the Simple "
          "plan did not run in its place");
  }
  check(runs(log, "a0_nvls.json", 65540, "in place") == 0,
        "the switch-channel plan ran above its max_message_size");
  const char *w = line_with(log, "c_gstorepkt.json", "WARN", line, sizeof(line));
  check(w != NULL &&
            strstr(line, "gpu 0, thread block 1, op 1 (gstorepkt): a switch-channel store of LL "
                         "packets") != NULL,
        "no WARN refusing c_gstorepkt.json's gstorepkt with its gpu, thread block and op: %s",
        w ? line : "(none)");
  w = line_with(log, "d_unknown.json", "WARN", line, sizeof(line));
  check(w != NULL &&
            strstr(line, "gpu 0, thread block 0, op 1 (frobnicate): unknown op name") != NULL,
        "no WARN refusing d_unknown.json's unknown op: %s", w ? line : "(none)");
  check(strstr(log, "c_gstorepkt.json runs") == NULL && strstr(log, "d_unknown.json runs") == NULL,
        "a refused MSCCL++ plan ran");
}

/* The plans of tests/data/mscclpp: each ran, once per rank, for the calls
 * in its range and of its kind (in place or not), and for no other. */
static void check_own_log(const char *log) {
  char line[1024];
  static const struct {
    const char *file, *coll;
  } loaded[] = {{"a_ar_pipeline.json", "allreduce"}, {"a1_ar_pipeline_sem.json", "allreduce"},
                {"b0_ag_packet.json", "allgather"}, {"b1_ag_port_flush.json", "allgather"},
                {"b_ag_put.json", "allgather"},
                {"c0_ag_tbg_inplace.json", "allgather"}, {"c_ag_get_inplace.json", "allgather"},
                {"d_rs_scratch.json", "reducescatter"},
                {"e_rs_inplace.json", "reducescatter"}, {"f_a2a_put.json", "alltoall"}};
  for (size_t i = 0; i < sizeof(loaded) / sizeof(loaded[0]); i++) {
    char frag[128];
    snprintf(frag, sizeof(frag), "%s (MSCCL++ plan, %s", loaded[i].file, loaded[i].coll);
    check(count_of(log, frag) == NRANKS, "%s was not loaded on every rank", loaded[i].file);
  }
  static const struct {
    const char *file;
    unsigned bytes;
    const char *how;
  } ran[] = {
      {"a_ar_pipeline.json", 4004, "out of place"},
      {"a_ar_pipeline.json", 133332, "out of place"},
      {"a_ar_pipeline.json", 393216, "out of place"},
      {"a1_ar_pipeline_sem.json", 393220, "out of place"},
      {"a1_ar_pipeline_sem.json", 600004, "out of place"},
      {"a1_ar_pipeline_sem.json", 786432, "out of place"},
      {"b0_ag_packet.json", 4092, "out of place"},
      {"b0_ag_packet.json", 65536, "out of place"},
      {"b_ag_put.json", 65540, "out of place"},
      {"b_ag_put.json", 200004, "out of place"},
      {"b1_ag_port_flush.json", 320004, "out of place"},
      {"c0_ag_tbg_inplace.json", 3108, "in place"},
      {"c0_ag_tbg_inplace.json", 4096, "in place"},
      {"c_ag_get_inplace.json", 4100, "in place"},
      {"c_ag_get_inplace.json", 400008, "in place"},
      {"d_rs_scratch.json", 12012, "out of place"},
      {"d_rs_scratch.json", 480000, "out of place"},
      {"d_rs_scratch.json", 39996, "out of place"},
      {"e_rs_inplace.json", 12012, "in place"},
      {"e_rs_inplace.json", 480012, "in place"},
      {"f_a2a_put.json", 11988, "out of place"},
      {"f_a2a_put.json", 360012, "out of place"},
  };
  for (size_t i = 0; i < sizeof(ran) / sizeof(ran[0]); i++)
    check(runs(log, ran[i].file, ran[i].bytes, ran[i].how) == NRANKS,
          "%s did not run once per rank for %u bytes %s", ran[i].file, ran[i].bytes,
          ran[i].how);
  /* Outside: above the pipelines' max, in place for an out-of-place plan. */
  check(any_runs(log, 786436) == 0 && runs(log, "a_ar_pipeline.json", 4004, "in place") == 0,
        "an MSCCL++ plan ran outside its range or kind");
  check(count_of(log, ".json runs (") == NRANKS * (int)(sizeof(ran) / sizeof(ran[0])),
        "MSCCL++ plans ran %d times, expected %d", count_of(log, ".json runs ("),
        NRANKS * (int)(sizeof(ran) / sizeof(ran[0])));
  const char *w = line_with(log, "y_sem.json", "WARN", line, sizeof(line));
  check(w != NULL && strstr(line, "gpu 0, thread block 2, op 0 (pipeline), inner op 0 "
                                  "(sem_acquire): semaphore 1 is released 0 and acquired 2 "
                                  "times per iteration: acquire 1 has no release") != NULL,
        "no WARN refusing y_sem.json's sem_acquire with its gpu, thread block and op: %s",
        w ? line : "(none)");
  check(strstr(log, "y_sem.json runs") == NULL, "a refused MSCCL++ plan ran");
}

/* Copies MSCCL++ plan `from` into dir/to, replacing the first `a` by `b`
 * (a may be NULL). */
static int copy_plan(const char *from, const char *dir, const char *to, const char *a,
                     const char *b) {
  char p[800];
  snprintf(p, sizeof(p), "%s/%s", mscclpp_dir(from), from);
  char *t = slurp(p);
  if (t == NULL) {
    printf("FAIL: cannot read %s\n", p);
    return -1;
  }
  char *q = a ? strstr(t, a) : NULL;
  if (a != NULL && q == NULL) {
    printf("FAIL: %s holds no %s\n", p, a);
    free(t);
    return -1;
  }
  char *u = malloc(strlen(t) + (b ? strlen(b) : 0) + 1);
  if (q != NULL) {
    memcpy(u, t, (size_t)(q - t));
    strcpy(u + (q - t), b);
    strcat(u, q + strlen(a));
  } else {
    strcpy(u, t);
  }
  snprintf(p, sizeof(p), "%s/%s", dir, to);
  int r = spit(p, u);
  free(u);
  free(t);
  return r;
}

int main(int argc, char **argv) {
  (void)argc;
  const char *role = getenv("PLANDIR_TEST_CHILD");
  if (role != NULL) return child(role);
  char why[256];
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: %s\n", why);
    return TDEV_EXIT_SKIP;
  }
  const char *build = getenv("BUILD") ? getenv("BUILD") : "build";
  char tool[512];
  snprintf(tool, sizeof(tool), "%s/bin/braid-plan", build);
  if (access(tool, X_OK) != 0) {
    printf("SKIP: %s is not built (make tools); the test exports plans with it\n", tool);
    return TDEV_EXIT_SKIP;
  }
  char dir[] = "/tmp/braid-plandir-XXXXXX";
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  char lib[600], other[600], logs[600], mlib[600], olib[600], p[700];
  snprintf(lib, sizeof(lib), "%s/lib", dir);
  snprintf(other, sizeof(other), "%s/other", dir);
  snprintf(logs, sizeof(logs), "%s/logs", dir);
  snprintf(mlib, sizeof(mlib), "%s/mscclpp", dir);
  snprintf(olib, sizeof(olib), "%s/mscclpp-own", dir);
  if (mkdir(lib, 0700) || mkdir(other, 0700) || mkdir(logs, 0700) || mkdir(mlib, 0700) ||
      mkdir(olib, 0700)) {
    perror("mkdir");
    return 1;
  }
  /* The library. */
  int bad = 0;
  snprintf(p, sizeof(p), "%s/a_ring3.json", lib);
  bad |= export_plan(tool, "-c allreduce -a ring -p Simple -n 3 -m 4096 -M 65536", p);
  snprintf(p, sizeof(p), "%s/b_oneshot3_ll.json", lib);
  bad |= export_plan(tool, "-c allreduce -a oneshot -p LL -n 3 -M 256 -i yes", p);
  char *t = bad ? NULL : slurp(p);
  char *at = t ? strstr(t, "  \"ranks\": [") : NULL;
  if (at == NULL) {
    printf("FAIL: the exported LL plan has no ranks field\n");
    return 1;
  }
  {
    /* Float32 only: a field the tool has no option for, added by hand. */
    size_t pre = (size_t)(at - t);
    char *u = malloc(strlen(t) + 64);
    memcpy(u, t, pre);
    strcpy(u + pre, "  \"dtypes\": [\"float32\"],\n");
    strcat(u, at);
    bad |= spit(p, u);
    free(u);
    free(t);
  }
  snprintf(p, sizeof(p), "%s/c_ring4.json", lib);
  bad |= export_plan(tool, "-c allreduce -a ring -p Simple -n 4", p);
  snprintf(p, sizeof(p), "%s/ring3.tmp", dir);
  bad |= export_plan(tool, "-c allreduce -a ring -p Simple -n 3", p);
  char *ring3 = bad ? NULL : slurp(p);
  if (ring3 == NULL) {
    printf("FAIL: exporting the plans failed\n");
    return 1;
  }
  /* d_bad: rank 0's seventh SIGNAL dropped (rank 1 then waits forever). */
  {
    char *s = strdup(ring3), *q = s;
    for (int k = 0; k < 7 && q != NULL; k++) {
      q = strstr(q, "{\"op\": \"signal\"");
      if (q != NULL && k < 6) q++;
    }
    if (q == NULL) {
      printf("FAIL: the ring has fewer than 7 signals\n");
      return 1;
    }
    char *ls = q, *le = strchr(q, '\n');
    while (ls > s && ls[-1] != '\n') ls--;
    /* The op is not its block's last: its line ends in a comma. */
    memmove(ls, le + 1, strlen(le + 1) + 1);
    snprintf(p, sizeof(p), "%s/d_bad.json", lib);
    bad |= spit(p, s);
    free(s);
  }
  {
    char *s = strdup(ring3), *q = strstr(s, "\"op\": \"put\"");
    char *u = malloc(strlen(s) + 2);
    memcpy(u, s, (size_t)(q - s));
    strcpy(u + (q - s), "\"op\": \"putt\"");
    strcat(u, q + strlen("\"op\": \"put\""));
    snprintf(p, sizeof(p), "%s/e_schema.json", lib);
    bad |= spit(p, u);
    free(u);
    s[strlen(s) / 2] = '\0';
    snprintf(p, sizeof(p), "%s/f_syntax.json", lib);
    bad |= spit(p, s);
    free(s);
  }
  snprintf(p, sizeof(p), "%s/notes.txt", lib);
  bad |= spit(p, "not a plan\n");
  /* Another library: the ring alone, for the disagreement. */
  snprintf(p, sizeof(p), "%s/a_ring3.json", other);
  bad |= export_plan(tool, "-c allreduce -a ring -p Simple -n 3 -m 4096 -M 65536", p);
  free(ring3);
  /* The MSCCL++ library, where MSCCL++'s samples are to be found. */
  char samples_at[700];
  snprintf(samples_at, sizeof(samples_at), "%s/allreduce.json", mscclpp_dir("allreduce.json"));
  int samples = access(samples_at, R_OK) == 0;
  if (!samples)
    printf("SKIP: configuration mscclpp: MSCCL++'s sample plans are not at %s (set "
           "BRAID_MSCCLPP_PLANS to their directory)\n", samples_at);
  if (samples) {
    bad |= copy_plan("allreduce_packet.json", mlib, "a_packet.json",
                     "\"max_message_size\": 18446744073709551615", "\"max_message_size\": 4096");
    bad |= copy_plan("allreduce.json", mlib, "b_allreduce.json", NULL, NULL);
    snprintf(p, sizeof(p), "%s/nvls.tmp", mlib);
    bad |= copy_plan("reduce_nvls.json", mlib, "nvls.tmp", "\"min_message_size\": 0",
                     "\"min_message_size\": 8192");
    {
      char *nt = slurp(p);
      char *q = nt ? strstr(nt, "\"max_message_size\": 18446744073709551615") : NULL;
      if (q != NULL) memcpy(q, "\"max_message_size\": 65536               ", 40);
      bad |= q == NULL;
      if (q != NULL) unlink(p);
      snprintf(p, sizeof(p), "%s/a0_nvls.json", mlib);
      if (q != NULL) bad |= spit(p, nt);
      free(nt);
    }
    bad |= copy_plan("ar_nvls_pipeline_sem.json", mlib, "a1_nvls_sem.json", NULL, NULL);
    bad |= copy_plan("allreduce_packet.json", mlib, "c_gstorepkt.json", "\"name\": \"upkt\"",
                     "\"name\": \"gstorepkt\"");
    bad |= copy_plan("oop_scratch.json", mlib, "e_oop.json", NULL, NULL);
    bad |= copy_plan("allreduce_packet.json", mlib, "d_unknown.json", "\"name\": \"respkt\"",
                     "\"name\": \"frobnicate\"");
  }
  /* Braid's own MSCCL++ plans (tests/data/mscclpp), and one refused. */
  bad |= copy_plan("ar_pipeline.json", olib, "a_ar_pipeline.json", NULL, NULL);
  bad |= copy_plan("ar_pipeline_sem.json", olib, "a1_ar_pipeline_sem.json", NULL, NULL);
  bad |= copy_plan("ag_port_flush.json", olib, "b1_ag_port_flush.json", NULL, NULL);
  bad |= copy_plan("ag_packet.json", olib, "b0_ag_packet.json", NULL, NULL);
  bad |= copy_plan("ag_put.json", olib, "b_ag_put.json", NULL, NULL);
  bad |= copy_plan("ag_tbg_inplace.json", olib, "c0_ag_tbg_inplace.json", NULL, NULL);
  bad |= copy_plan("ag_get_inplace.json", olib, "c_ag_get_inplace.json", NULL, NULL);
  bad |= copy_plan("rs_scratch.json", olib, "d_rs_scratch.json", NULL, NULL);
  bad |= copy_plan("rs_inplace.json", olib, "e_rs_inplace.json", NULL, NULL);
  bad |= copy_plan("a2a_put.json", olib, "f_a2a_put.json", NULL, NULL);
  /* gpu 0's thread block 1 without its sem_release of semaphore 1. */
  bad |= copy_plan("ar_pipeline_sem.json", olib, "y_sem.json",
                   "\"name\": \"sem_release\",\n         \"semaphore_ids\": [\n          1",
                   "\"name\": \"nop\",\n         \"semaphore_ids\": [\n          1");
  if (bad) {
    printf("FAIL: writing the plan files failed\n");
    return 1;
  }

  static const struct {
    const char *what;
    int algo;     /* NCCL_ALGO=Ring */
    int per_rank; /* ranks as processes, rank 2 given `other` */
  } configs[] = {{"library", 0, 0},   {"algo", 1, 0},        {"processes", 0, 1},
                 {"mscclpp", 0, 0},   {"mscclpp-own", 0, 0}};
  for (size_t i = 0; i < sizeof(configs) / sizeof(configs[0]); i++) {
    if (!samples && strcmp(configs[i].what, "mscclpp") == 0) continue;
    char logpat[700];
    snprintf(logpat, sizeof(logpat), "%s/%s.%%p.log", logs, configs[i].what);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      setenv("PLANDIR_TEST_CHILD", configs[i].what, 1);
      unsetenv("NCCL_ALGO");
      unsetenv("NCCL_PROTO");
      unsetenv("BRAID_DETERMINISTIC");
      setenv("NCCL_DEBUG", "INFO", 1);
      setenv("NCCL_DEBUG_SUBSYS", "INIT,TUNING,COLL", 1);
      setenv("NCCL_DEBUG_FILE", logpat, 1);
      setenv("BRAID_PLAN_DIR", strcmp(configs[i].what, "mscclpp") == 0       ? mlib
                               : strcmp(configs[i].what, "mscclpp-own") == 0 ? olib
                                                                             : lib, 1);
      if (configs[i].algo) setenv("NCCL_ALGO", "Ring", 1);
      unsetenv("NCCL_NVLS_ENABLE");
      /* Host mode emulates the switch; CUDA mode needs cuMem windows for
       * it (NVLS stays off there and the switch plan is skipped). */
      const char *dev = getenv("BRAID_DEVICE");
      if (strcmp(configs[i].what, "mscclpp") == 0 && dev != NULL && strcmp(dev, "host") == 0)
        setenv("NCCL_NVLS_ENABLE", "1", 1);
      if (strcmp(configs[i].what, "mscclpp") == 0 && dev != NULL && strcmp(dev, "cuda") == 0) {
        /* A device per rank (the simulator makes two, cuMem windows) so
         * that NVLS can bind the switch plan's window; a machine with one
         * GPU keeps it off and the plan is skipped (child()). */
        setenv("BRAID_CUDASIM_DEVICES", "2", 1);
        setenv("BRAID_CUDASIM_CUMEM", "1", 1);
        setenv("PLANDIR_DEVICE_PER_RANK", "1", 1);
      }
      if (strncmp(configs[i].what, "mscclpp", 7) == 0) {
        setenv("NCCL_BUFFSIZE", "65536", 1);
        setenv("NCCL_LL_BUFFSIZE", "4096", 1);
      }
      if (configs[i].per_rank) setenv("PLANDIR_RANK2", other, 1);
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    char *log = logs_of(logs, configs[i].what);
    int before = failures;
    check(WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "configuration %s: a rank's results were wrong or a call failed (status %d)",
          configs[i].what, st);
    if (log == NULL) {
      check(0, "configuration %s: no log", configs[i].what);
    } else if (i == 0) {
      check_library_log(log);
    } else if (strcmp(configs[i].what, "mscclpp") == 0) {
      check_mscclpp_log(log);
    } else if (strcmp(configs[i].what, "mscclpp-own") == 0) {
      check_own_log(log);
    } else if (configs[i].algo) {
      check(strstr(log, "loaded ") != NULL, "NCCL_ALGO: the library was not loaded");
      check(strstr(log, ".json runs") == NULL, "NCCL_ALGO=Ring: a library plan ran");
    } else {
      char line[1024];
      check(count_of(log, "every rank ignores the library") >= NRANKS,
            "ranks with different libraries did not all WARN (%d)",
            count_of(log, "every rank ignores the library"));
      check(line_with(log, "ignores the library", "WARN", line, sizeof(line)) != NULL,
            "the disagreement is not a WARN");
      check(strstr(log, ".json runs") == NULL, "a library plan ran though the ranks disagree");
    }
    printf("%s: configuration %s\n", failures == before ? "ok" : "FAIL", configs[i].what);
    free(log);
  }
  if (failures == 0) {
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    (void)!system(cmd);
  } else {
    printf("files and logs kept in %s\n", dir);
  }
  printf("%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
