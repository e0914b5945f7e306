/*
 * NVLS (switch channels) end to end in host mode, public API only: host
 * mode has no switch, so NCCL_NVLS_ENABLE=1 or NCCL_ALGO naming NVLS turns
 * on its emulation over shared memory. The parent runs this program once
 * per configuration, each with its INFO log in a file it reads afterwards:
 *
 *   forced    NCCL_ALGO=allreduce:nvls;allgather:nvls;reducescatter:nvls:
 *             every eligible dtype x op (NCCL's NVLS rule, written out
 *             here) of all-reduce, all-gather and reduce-scatter on 2, 4
 *             and 8 ranks, in and out of place, counts 1, 1023 and 70001
 *             (the low-latency and the pipelined all-reduce both run),
 *             checked exactly against tests/common/coll_ref.c; the log
 *             says NVLS is on, every such call chose NVLS and the
 *             low-latency plan ran. Then an ineligible all-reduce (prod)
 *             fails with ncclInvalidUsage, as NCCL fails a call NCCL_ALGO
 *             leaves no algorithm for.
 *   pieces    the same with NCCL_BUFFSIZE and BRAID_HOST_STAGING of 4 KiB,
 *             so calls run many iterations and pieces (fewer cases).
 *   processes 4 ranks in 4 processes (windows and switch semaphores in
 *             POSIX shared memory), each kind in and out of place.
 *   enabled   NCCL_NVLS_ENABLE=1, tuner's choice: ineligible calls (prod,
 *             avg, int8 sum, f32 max) fall back to the other plans, give
 *             exact results, and the log names their datatype and op.
 *   auto      no setting: host mode keeps NVLS off (the log says nothing
 *             of it) and the tuner never chooses it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "coll_ref.h"
#include "nccl.h"

#define NCCL_OK(call)                                                         \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess)                                                    \
      fail_msg("%s failed: %s (%s)", #call, ncclGetErrorString(r_),          \
               ncclGetLastError(NULL));                                       \
  } while (0)

static const char *const kind_names[] = {"allreduce", "allgather", "reducescatter"};

/* NCCL's NVLS rule (nvls-ib.md 1.3), independent of the library's. */
static int eligible(ref_kind_t k, ncclDataType_t dt, ncclRedOp_t op) {
  if (k == REF_AG) return 1;
  int ints = dt == ncclInt32 || dt == ncclUint32 || dt == ncclInt64 || dt == ncclUint64;
  int half = dt == ncclFloat16 || dt == ncclBfloat16;
  if (op == ncclSum) return ints || half || dt == ncclFloat32 || dt == ncclFloat64;
  if (op == ncclMin || op == ncclMax) return ints || half;
  return 0;
}

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  assert_non_null(p);
  return p;
}

/* One call of kind k on every rank of comms in one group, in or out of
 * place, checked against the reference. Returns the group's result. */
static ncclResult_t run_call(ncclComm_t *comms, int n, ref_kind_t k, ncclDataType_t dt,
                             ncclRedOp_t op, size_t c, int inplace) {
  size_t es = ref_dtype_size(dt), nc = (size_t)n * c;
  char *mem[8], *other[8];
  const void *send[8];
  void *recv[8];
  for (int r = 0; r < n; r++) {
    mem[r] = xmalloc(nc * es);
    other[r] = xmalloc(nc * es);
    ref_case_fill(k, dt, op, r, n, c, inplace, mem[r], other[r], &send[r], &recv[r]);
  }
  ncclResult_t res = ncclGroupStart();
  for (int r = 0; r < n && res == ncclSuccess; r++) {
    switch (k) {
    case REF_AR: res = ncclAllReduce(send[r], recv[r], c, dt, op, comms[r], NULL); break;
    case REF_AG: res = ncclAllGather(send[r], recv[r], c, dt, comms[r], NULL); break;
    case REF_RS: res = ncclReduceScatter(send[r], recv[r], c, dt, op, comms[r], NULL); break;
    }
  }
  ncclResult_t end = ncclGroupEnd();
  if (res == ncclSuccess) res = end;
  char *expect = xmalloc(c * es);
  for (int r = 0; r < n && res == ncclSuccess; r++) {
    char msg[256] = "";
    size_t wrong = ref_case_check(k, dt, op, r, n, c, recv[r], expect, msg, sizeof(msg));
    if (wrong)
      fail_msg("%s %s %s n=%d count=%zu %s: rank %d has %zu wrong elements: %s",
               kind_names[k], ref_dtype_name(dt), ref_op_name(op), n, c,
               inplace ? "in place" : "out of place", r, wrong, msg);
  }
  free(expect);
  for (int r = 0; r < n; r++) {
    free(mem[r]);
    free(other[r]);
  }
  return res;
}

static const ncclDataType_t dtypes[] = {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,
                                        ncclInt64,   ncclUint64,  ncclFloat16, ncclFloat32,
                                        ncclFloat64, ncclBfloat16};
static const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* The eligible matrix (forced / pieces). */
static void child_forced(int pieces) {
  static const int ranks[] = {2, 4, 8};
  static const size_t counts[] = {1, 1023, 70001};
  int calls = 0;
  for (size_t ni = 0; ni < NELEM(ranks); ni++) {
    int n = ranks[ni];
    ncclComm_t comms[8];
    NCCL_OK(ncclCommInitAll(comms, n, NULL));
    for (int k = REF_AR; k <= REF_RS; k++) {
      for (size_t d = 0; d < NELEM(dtypes); d++) {
        for (size_t o = 0; o < NELEM(ops); o++) {
          if (!eligible((ref_kind_t)k, dtypes[d], ops[o])) continue;
          if (k == REF_AG && ops[o] != ncclSum) continue; /* no op to vary */
          for (size_t ci = 0; ci < NELEM(counts); ci++) {
            /* The large count once per (kind, n) in most types. */
            if (ci == 2 && (pieces || (dtypes[d] != ncclFloat32 && dtypes[d] != ncclBfloat16)))
              continue;
            if (pieces && ci == 0) continue;
            for (int ip = 0; ip < 2; ip++) {
              NCCL_OK(run_call(comms, n, (ref_kind_t)k, dtypes[d], ops[o], counts[ci], ip));
              calls++;
            }
          }
        }
      }
    }
    if (!pieces && n == 4) {
      /* NCCL_ALGO leaves no algorithm for an ineligible reduction. */
      ncclResult_t res = run_call(comms, n, REF_AR, ncclFloat32, ncclProd, 64, 0);
      if (res != ncclInvalidUsage)
        fail_msg("an ineligible all-reduce with only NVLS allowed returned %s, want "
                 "ncclInvalidUsage", ncclGetErrorString(res));
      const char *err = ncclGetLastError(NULL);
      if (strstr(err, "ncclFloat32 with ncclProd") == NULL)
        fail_msg("the error does not name the datatype and op: %s", err);
      for (int r = 0; r < n; r++) ncclCommAbort(comms[r]);
      continue;
    }
    for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
  }
  printf("%d NVLS calls checked\n", calls);
}

/* One rank of a process-per-rank communicator: each kind once per size,
 * in and out of place, checking its own output. 0 when all were right;
 * msg says what was not. */
static int process_rank(ncclUniqueId id, int n, int r, char *msg, size_t msglen) {
  static const struct {
    ref_kind_t k;
    ncclDataType_t dt;
    ncclRedOp_t op;
  } cases[] = {{REF_AR, ncclFloat32, ncclSum}, {REF_AR, ncclBfloat16, ncclMax},
               {REF_AG, ncclUint8, ncclSum},   {REF_RS, ncclInt64, ncclMin}};
  static const size_t counts[] = {3, 100003};
  ncclComm_t comm;
  if (ncclCommInitRank(&comm, n, id, r) != ncclSuccess) {
    snprintf(msg, msglen, "init: %s", ncclGetLastError(NULL));
    return 1;
  }
  int bad = 0;
  for (size_t i = 0; i < NELEM(cases) && !bad; i++) {
    for (size_t ci = 0; ci < NELEM(counts) && !bad; ci++) {
      for (int ip = 0; ip < 2 && !bad; ip++) {
        ncclDataType_t dt = cases[i].dt;
        size_t c = counts[ci], es = ref_dtype_size(dt), nc = (size_t)n * c;
        char *mem = malloc(nc * es), *other = malloc(nc * es), *expect = malloc(c * es);
        const void *send = mem;
        void *recv = mem;
        ncclResult_t res;
        if (cases[i].k == REF_AR) {
          ref_fill_input(dt, cases[i].op, r, mem, c);
          if (!ip) recv = other;
          res = ncclAllReduce(send, recv, c, dt, cases[i].op, comm, NULL);
        } else if (cases[i].k == REF_AG) {
          ref_poison(dt, mem, nc);
          send = ip ? mem + (size_t)r * c * es : other;
          ref_fill_move(dt, r, 0, (void *)send, c);
          res = ncclAllGather(send, recv, c, dt, comm, NULL);
        } else {
          ref_fill_input(dt, cases[i].op, r, mem, nc);
          recv = ip ? mem + (size_t)r * c * es : other;
          res = ncclReduceScatter(send, recv, c, dt, cases[i].op, comm, NULL);
        }
        size_t wrong = 0;
        if (res != ncclSuccess) {
          snprintf(msg, msglen, "%s: %s", kind_names[cases[i].k], ncclGetLastError(comm));
          bad = 1;
        } else if (cases[i].k == REF_AG) {
          for (int q = 0; q < n && !wrong; q++)
            wrong = ref_check_move(dt, q, 0, (const char *)recv + (size_t)q * c * es, c, msg,
                                   msglen);
        } else {
          if (cases[i].k == REF_AR) ref_reduce_expect(dt, cases[i].op, n, 1.0, expect, c);
          else ref_reduce_expect_range(dt, cases[i].op, n, 1.0, expect, (size_t)r * c, c);
          wrong = ref_compare(dt, 0, recv, expect, c, msg, msglen);
        }
        if (wrong) bad = 1;
        free(mem);
        free(other);
        free(expect);
      }
    }
  }
  ncclCommDestroy(comm);
  return bad;
}

/* The same plans with every rank in its own process (windows in POSIX
 * shared memory, switch semaphores shared across processes). */
static void child_processes(void) {
  int n = 4;
  ncclUniqueId id;
  NCCL_OK(ncclGetUniqueId(&id));
  int pipes[8][2];
  pid_t pids[8];
  fflush(NULL);
  for (int r = 0; r < n; r++) {
    assert_int_equal(pipe(pipes[r]), 0);
    pids[r] = fork();
    assert_true(pids[r] >= 0);
    if (pids[r] == 0) {
      char msg[256] = "";
      int f = process_rank(id, n, r, msg, sizeof(msg));
      (void)!write(pipes[r][1], msg, strlen(msg) + 1);
      _exit(f ? 1 : 0);
    }
    close(pipes[r][1]);
  }
  for (int r = 0; r < n; r++) {
    int st;
    char msg[256] = "";
    (void)!read(pipes[r][0], msg, sizeof(msg) - 1);
    close(pipes[r][0]);
    assert_int_equal(waitpid(pids[r], &st, 0), pids[r]);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
      fail_msg("process rank %d of %d failed (status %d): %s", r, n, st, msg);
  }
}

/* Ineligible calls with NVLS on fall back (enabled), and the default
 * (auto) keeps NVLS off in host mode. */
static void child_fallback(void) {
  int n = 3;
  ncclComm_t comms[8];
  NCCL_OK(ncclCommInitAll(comms, n, NULL));
  NCCL_OK(run_call(comms, n, REF_AR, ncclFloat32, ncclProd, 999, 0));
  NCCL_OK(run_call(comms, n, REF_AR, ncclFloat32, ncclAvg, 999, 1));
  NCCL_OK(run_call(comms, n, REF_AR, ncclInt8, ncclSum, 999, 0));
  NCCL_OK(run_call(comms, n, REF_RS, ncclFloat32, ncclMax, 999, 0));
  /* And eligible ones, large enough that the tuner takes NVLS. */
  NCCL_OK(run_call(comms, n, REF_AR, ncclFloat32, ncclSum, 1 << 20, 0));
  NCCL_OK(run_call(comms, n, REF_AG, ncclInt8, ncclSum, 1 << 20, 1));
  for (int r = 0; r < n; r++) NCCL_OK(ncclCommDestroy(comms[r]));
}

static void test_child(void **state) {
  const char *what = *state;
  if (strcmp(what, "forced") == 0) child_forced(0);
  else if (strcmp(what, "processes") == 0) child_processes();
  else if (strcmp(what, "pieces") == 0) child_forced(1);
  else child_fallback();
}

static int run_child(const char *what) {
  const struct CMUnitTest tests[] = {cmocka_unit_test_prestate(test_child, (void *)what)};
  return cmocka_run_group_tests_name(what, tests, NULL, NULL);
}

/* The logs of one run (every process's file "<what>.<pid>.log" in dir),
 * read whole and removed; NULL when there is none. */
static char *slurp_logs(const char *dir, const char *what) {
  DIR *d = opendir(dir);
  if (d == NULL) return NULL;
  char *all = NULL;
  size_t len = 0, wl = strlen(what);
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (strncmp(e->d_name, what, wl) != 0 || e->d_name[wl] != '.') continue;
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *grown = realloc(all, len + (size_t)n + 1);
    if (grown != NULL) {
      all = grown;
      len += fread(all + len, 1, (size_t)n, f);
      all[len] = '\0';
    }
    fclose(f);
    unlink(path);
  }
  closedir(d);
  return all;
}

static int count_lines(const char *log, const char *a, const char *b) {
  int n = 0;
  for (const char *p = log; (p = strstr(p, a)) != NULL; p++) {
    const char *eol = strchr(p, '\n');
    const char *hit = strstr(p, b);
    if (hit != NULL && (eol == NULL || hit < eol)) n++;
  }
  return n;
}

/* Checks what the log of configuration `what` must say; 0 when it does. */
static int check_log(const char *what, const char *log) {
  int bad = 0;
#define EXPECT(cond, ...)                                                     \
  do {                                                                        \
    if (!(cond)) {                                                            \
      printf("FAIL %s: ", what);                                              \
      printf(__VA_ARGS__);                                                    \
      printf("\n");                                                           \
      bad = 1;                                                                \
    }                                                                         \
  } while (0)
  int on = count_lines(log, "NVLS on", "emulated in shared memory");
  if (strcmp(what, "auto") == 0) {
    EXPECT(on == 0 && strstr(log, "NVLS off") == NULL, "NVLS mentioned in host mode's default");
    EXPECT(count_lines(log, "Algo NVLS", "") == 0, "the tuner chose NVLS with NVLS off");
    return bad;
  }
  EXPECT(on > 0, "the log does not say NVLS is on");
  int nvls = 0, other = 0;
  static const char *const colls[] = {"AllReduce:", "AllGather:", "ReduceScatter:"};
  for (size_t i = 0; i < NELEM(colls); i++) {
    nvls += count_lines(log, colls[i], "-> Algo NVLS ");
    other += count_lines(log, colls[i], "-> Algo ") - count_lines(log, colls[i], "-> Algo NVLS ");
  }
  if (strcmp(what, "enabled") == 0) {
    static const char *const why[] = {"ncclFloat32 with ncclProd", "ncclFloat32 with ncclAvg",
                                      "ncclInt8 with ncclSum", "ncclFloat32 with ncclMax"};
    for (size_t i = 0; i < NELEM(why); i++)
      EXPECT(count_lines(log, "NVLS cannot reduce", why[i]) > 0,
             "no INFO line names the ineligible %s", why[i]);
    EXPECT(nvls > 0, "no eligible call chose NVLS");
    EXPECT(other > 0, "no ineligible call fell back");
    return bad;
  }
  int want = strcmp(what, "processes") == 0 ? 40 : 100;
  EXPECT(nvls >= want, "only %d calls chose NVLS", nvls);
  EXPECT(other == 0, "%d calls chose another algorithm with only NVLS allowed", other);
  EXPECT(count_lines(log, "low-latency NVLS all-reduce", "") > 0,
         "the low-latency NVLS all-reduce never ran");
  return bad;
}

typedef struct {
  const char *what;
  const char *env[4];
} config_t;

int main(int argc, char **argv) {
  (void)argc;
  setenv("BRAID_DEVICE", "host", 1);
  setenv("BRAID_TIMEOUT", "60", 0);
  if (getenv("NVLS_TEST_CHILD")) return run_child(getenv("NVLS_TEST_CHILD"));

#define FORCED "NCCL_ALGO=allreduce:nvls;allgather:nvls;reducescatter:nvls"
  static const config_t configs[] = {
      {"forced", {FORCED, NULL}},
      {"pieces", {FORCED, "NCCL_BUFFSIZE=4096", "BRAID_HOST_STAGING=4096", NULL}},
      {"processes", {FORCED, NULL}},
      {"enabled", {"NCCL_NVLS_ENABLE=1", NULL}},
      {"auto", {NULL}},
  };
  char dir[] = "/tmp/braid-nvls-XXXXXX";
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  int failed = 0;
  for (size_t i = 0; i < NELEM(configs); i++) {
    char log[600];
    snprintf(log, sizeof(log), "%s/%s.%%p.log", dir, configs[i].what);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
      setenv("NVLS_TEST_CHILD", configs[i].what, 1);
      unsetenv("NCCL_ALGO");
      unsetenv("NCCL_PROTO");
      unsetenv("NCCL_NVLS_ENABLE");
      setenv("NCCL_DEBUG", "INFO", 1);
      setenv("NCCL_DEBUG_SUBSYS", "INIT,NVLS,TUNING,COLL", 1);
      setenv("NCCL_DEBUG_FILE", log, 1);
      for (int e = 0; configs[i].env[e] != NULL; e++) putenv((char *)configs[i].env[e]);
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    char *text = slurp_logs(dir, configs[i].what);
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      printf("FAIL: configuration %s (exit status %d)\n", configs[i].what, st);
      failed++;
    } else if (text == NULL || check_log(configs[i].what, text) != 0) {
      if (text == NULL) printf("FAIL %s: no log at %s\n", configs[i].what, log);
      failed++;
    } else {
      printf("ok: configuration %s\n", configs[i].what);
    }
    free(text);
  }
  rmdir(dir);
  printf("%s: %d configuration(s) failed\n", failed ? "FAIL" : "PASS", failed);
  return failed ? 1 : 0;
}
