/*
 * Braid benchmarks: the nccl-tests-compatible harness (perf.h).
 *
 * One process per -P (or MPI rank), -t threads in each, -g ranks per thread.
 * Every thread runs the same sequence -- warm-up, then for each size an
 * out-of-place and an in-place measurement, each followed by checking runs
 * against the CPU reference -- and meets the others through the world
 * (world.h) to agree on times and error counts. The first participant
 * prints; nothing else does, except error lines.
 *
 * Host mode (no GPU, a build without CUDA, or BRAID_DEVICE=host): buffers
 * come from ncclMemAlloc in host memory, streams are NULL, and a call is
 * complete when it (or the group it sits in) returns; times are wall clock.
 * CUDA mode: cudaMalloc buffers, one stream per rank, cudaEvent timing,
 * optional CUDA graphs (-G).
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#ifndef BRAID_CUDA
#define BRAID_CUDA 0
#endif
#if BRAID_CUDA
#include <cuda_runtime.h>
#endif
#ifdef BRAID_MPI
#include <mpi.h>
#endif

#include "data.h"
#include "perf.h"
#include "report.h"
#include "world.h"

#ifdef BRAID_MPI
/* 1 when an MPI launcher (Open MPI, MPICH/Hydra, PMIx, MVAPICH) started
 * this process. */
static int launched_by_mpi(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE",
                                     "PMIX_RANK", "MV2_COMM_WORLD_SIZE",
                                     "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
    if (getenv(vars[i]) != NULL) return 1;
  return 0;
}
#endif

/* nccl-tests' exit statuses. */
#define EXIT_CUDA 2
#define EXIT_NCCL 3
#define EXIT_TIMEOUT 4
#define EXIT_WRONG 7
#define EXIT_USAGE 255

/* Deadline of every wait between participants when -T is not given. */
#define DEFAULT_WAIT_S 900

#define NCCL_TESTS_FORMAT "2.19.6"

typedef struct {
  int nthreads;
  int ngpus;
  int nprocs;
  size_t minbytes;
  size_t maxbytes;
  size_t stepbytes;
  size_t stepfactor;
  int iters;
  int warmup;
  int agg;
  int check;
  int op;       /* op index; -1: every op */
  int type;     /* type index; -1: every type */
  int root;     /* -1: every root */
  int blocking;
  int timeout;
  int graph;
  int cputime;
  int average;
  int reg;
  int mpi;
  const char *world_file; /* BRAID_PERF_WORLD, or NULL */
  int world_proc;         /* BRAID_PERF_PROC */
  const char *json;
} opts_t;

/* What the participants of one process share. Written before the threads
 * start, then read-only, except exit_code (atomic) and the results, which
 * only participant 0 touches. */
typedef struct {
  const brd_perf_coll_t *coll;
  opts_t o;
  const char *prog;
  int argc;
  char **argv;
  int host_mode;
  char mode_note[320];
  int ndev;
  int library_version;
  brd_perf_world_t *world;       /* owned by brd_perf_main */
  int proc;
  int nprocs;
  int local_proc;
  int nranks;
  char json_path[4096];          /* "" without -J */
  char tuning_dir[1024];         /* "" when the tuner log is not captured */
  char start_time[64];
  _Atomic int exit_code;
  /* Participant 0 only. */
  brd_perf_rank_info_t *ranks;   /* owned: nranks entries */
  brd_perf_row_t *rows;          /* owned */
  size_t nrows;
  size_t cap_rows;
  double bw_sum;
  long bw_count;
  long long errors;
  int min_bw_state;
} run_t;

/* One participant: a thread and the ranks it drives. */
typedef struct {
  run_t *run;
  int thread;
  int participant;
  int first_rank;
  int g;
  size_t minbytes;               /* after the device-memory limit */
  size_t maxbytes;
  size_t alloc_bytes;
  int no_fp8;                    /* some GPU predates fp8 (sm_90) */
  int *dev;                      /* owned: device of each rank */
  ncclComm_t *comm;              /* owned array; communicators made here */
  cudaStream_t *stream;          /* owned array; NULL entries in host mode */
  char **send;                   /* owned array of owned buffers */
  char **recv;
  void **send_reg;               /* registration handles or windows */
  void **recv_reg;
  unsigned char *stage;          /* owned (CUDA mode): host copy of one buffer */
#if BRAID_CUDA
  cudaEvent_t *ev;               /* owned: start/stop per rank */
#endif
  unsigned long rep;             /* checking round, seeds the inputs */
  pthread_t tid;
  ncclResult_t result;
} thr_t;

/* What one measurement varies. */
typedef struct {
  ncclDataType_t dtype;
  size_t esize;
  int op;                        /* op index, or -1 */
  int root;
  brd_perf_shape_t sh;
  size_t send_bytes;
  size_t recv_bytes;
  size_t size;                   /* max(send_bytes, recv_bytes) */
} cfg_t;

static void set_exit(run_t *r, int code) {
  int zero = 0;
  atomic_compare_exchange_strong(&r->exit_code, &zero, code);
}

static ncclResult_t nccl_failed(run_t *r, ncclResult_t res, const char *file,
                                int line) {
  char host[256];
  brd_perf_host_name(host, sizeof(host));
  printf("%s: Test NCCL failure %s:%d '%s / %s'\n", host, file, line,
         ncclGetErrorString(res), ncclGetLastError(NULL));
  set_exit(r, EXIT_NCCL);
  brd_perf_world_fail(r->world);
  return res;
}

#define NCCL_GOTO(run, call, res, label)                                      \
  do {                                                                        \
    (res) = (call);                                                           \
    if ((res) != ncclSuccess) {                                               \
      nccl_failed((run), (res), __FILE__, __LINE__);                          \
      goto label;                                                             \
    }                                                                         \
  } while (0)

/* A world failure: the participant that caused it has said why. */
#define WORLD_GOTO(run, call, res, label)                                     \
  do {                                                                        \
    (res) = (call);                                                           \
    if ((res) != ncclSuccess) {                                               \
      set_exit((run), 1);                                                     \
      goto label;                                                             \
    }                                                                         \
  } while (0)

#if BRAID_CUDA
static ncclResult_t cuda_failed(run_t *r, cudaError_t err, const char *file,
                                int line) {
  char host[256];
  brd_perf_host_name(host, sizeof(host));
  printf("%s: Test CUDA failure %s:%d '%s'\n", host, file, line,
         cudaGetErrorString(err));
  set_exit(r, EXIT_CUDA);
  brd_perf_world_fail(r->world);
  return ncclUnhandledCudaError;
}

#define CUDA_GOTO(run, call, res, label)                                      \
  do {                                                                        \
    cudaError_t cuda_err_ = (call);                                           \
    if (cuda_err_ != cudaSuccess) {                                           \
      (res) = cuda_failed((run), cuda_err_, __FILE__, __LINE__);              \
      goto label;                                                             \
    }                                                                         \
  } while (0)
#endif

static ncclResult_t out_of_memory(run_t *r, size_t bytes, const char *what) {
  printf("# out of host memory allocating %zu bytes for %s\n", bytes, what);
  set_exit(r, 1);
  brd_perf_world_fail(r->world);
  return ncclSystemError;
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* See perf.h. */
size_t brd_perf_split(size_t count, size_t esize, int nranks) {
  size_t align = 16 / esize;
  return (count / (size_t)nranks) & ~(align - 1);
}

/* ---- options -------------------------------------------------------------- */

static void usage(const char *prog) {
  printf("USAGE: %s\n"
         "\t[-t,--nthreads <num threads>]\n"
         "\t[-g,--ngpus <ranks per thread>]\n"
         "\t[-P,--nprocs <processes started by the built-in launcher>]\n"
         "\t[-b,--minbytes <min size in bytes>]\n"
         "\t[-e,--maxbytes <max size in bytes>]\n"
         "\t[-i,--stepbytes <increment size>]\n"
         "\t[-f,--stepfactor <increment factor>]\n"
         "\t[-n,--iters <iteration count>]\n"
         "\t[-m,--agg_iters <aggregated iteration count>]\n"
         "\t[-w,--warmup_iters <warmup iteration count>]\n"
         "\t[-c,--check <check iteration count>]\n"
         "\t[-o,--op <sum/prod/min/max/avg/mulsum/all>]\n"
         "\t[-d,--datatype <nccltype/all>]\n"
         "\t[-r,--root <root, -1 for every root>]\n"
         "\t[-z,--blocking <0/1/2/3> 1=barrier after each inner iter (-m), "
         "2=no barrier, 3=wait and barrier after each outer iter (-n)]\n"
         "\t[-T,--timeout <time in seconds>]\n"
         "\t[-G,--cudagraph <num graph launches>]\n"
         "\t[-C,--report_cputime <0/1>]\n"
         "\t[-J,--output_file <file.json> write the results as JSON]\n"
         "\t[-a,--average <0/1/2/3> report average iteration time "
         "<0=RANK0/1=AVG/2=MIN/3=MAX>]\n"
         "\t[-R,--local_register <0/1/2> register buffers locally (1) or as "
         "symmetric windows (2)]\n"
         "\t[-h,--help]\n"
         "Sizes take K, M, G suffixes (powers of 1024).\n"
         "Processes started one by one (e.g. one per network namespace) meet "
         "through a file\nthey all map: BRAID_PERF_WORLD=<file, absent or "
         "empty at the start>\nBRAID_PERF_NPROCS=<processes> "
         "BRAID_PERF_PROC=<this process, 0..n-1>.\n", prog);
}

/* nccl-tests' size syntax: a number and an optional K/M/G (binary). */
static int parse_size(const char *s, size_t *out) {
  double v;
  char unit[2] = "";
  int n = sscanf(s, "%lf %1s", &v, unit);
  double scale = 1;
  if (n < 1 || v < 0) return -1;
  if (n == 2) {
    switch (unit[0]) {
    case 'K': case 'k': scale = 1024.0; break;
    case 'M': case 'm': scale = 1024.0 * 1024; break;
    case 'G': case 'g': scale = 1024.0 * 1024 * 1024; break;
    default: return -1;
    }
  }
  *out = (size_t)(v * scale);
  return 0;
}

static int parse_int(const char *s) { return (int)strtol(s, NULL, 0); }

/* Returns 0 to run, 1 to exit with *status (help, bad options). */
static int parse_options(int argc, char **argv, const char *prog, opts_t *o,
                         int *status) {
  static const struct option longopts[] = {
      {"nthreads", required_argument, 0, 't'},
      {"ngpus", required_argument, 0, 'g'},
      {"nprocs", required_argument, 0, 'P'},
      {"minbytes", required_argument, 0, 'b'},
      {"maxbytes", required_argument, 0, 'e'},
      {"stepbytes", required_argument, 0, 'i'},
      {"stepfactor", required_argument, 0, 'f'},
      {"iters", required_argument, 0, 'n'},
      {"agg_iters", required_argument, 0, 'm'},
      {"warmup_iters", required_argument, 0, 'w'},
      {"check", required_argument, 0, 'c'},
      {"op", required_argument, 0, 'o'},
      {"datatype", required_argument, 0, 'd'},
      {"root", required_argument, 0, 'r'},
      {"blocking", required_argument, 0, 'z'},
      {"timeout", required_argument, 0, 'T'},
      {"cudagraph", required_argument, 0, 'G'},
      {"report_cputime", required_argument, 0, 'C'},
      {"output_file", required_argument, 0, 'J'},
      {"average", required_argument, 0, 'a'},
      {"local_register", required_argument, 0, 'R'},
      {"help", no_argument, 0, 'h'},
      {0, 0, 0, 0}};
  *o = (opts_t){.nthreads = 1, .ngpus = 1, .nprocs = 1,
                .minbytes = 32u << 20, .maxbytes = 32u << 20,
                .stepbytes = 1u << 20, .stepfactor = 1, .iters = 20,
                .warmup = 1, .agg = 1, .check = 1, .op = ncclSum,
                .type = ncclFloat32, .root = 0, .average = 1};
  opterr = 0;
  int c, idx;
  while ((c = getopt_long(argc, argv, "t:g:P:b:e:i:f:n:m:w:c:o:d:r:z:T:G:C:J:a:R:h",
                          longopts, &idx)) != -1) {
    switch (c) {
    case 't': o->nthreads = parse_int(optarg); break;
    case 'g': o->ngpus = parse_int(optarg); break;
    case 'P': o->nprocs = parse_int(optarg); break;
    case 'b':
      if (parse_size(optarg, &o->minbytes) != 0) {
        fprintf(stderr, "invalid size specified for 'minbytes'\n");
        *status = EXIT_USAGE;
        return 1;
      }
      break;
    case 'e':
      if (parse_size(optarg, &o->maxbytes) != 0) {
        fprintf(stderr, "invalid size specified for 'maxbytes'\n");
        *status = EXIT_USAGE;
        return 1;
      }
      break;
    case 'i':
      if (parse_size(optarg, &o->stepbytes) != 0) {
        fprintf(stderr, "invalid size specified for 'stepBytes'\n");
        *status = EXIT_USAGE;
        return 1;
      }
      break;
    case 'f': o->stepfactor = (size_t)strtol(optarg, NULL, 0); break;
    case 'n': o->iters = parse_int(optarg); break;
    case 'm': o->agg = parse_int(optarg); break;
    case 'w': o->warmup = parse_int(optarg); break;
    case 'c': o->check = parse_int(optarg); break;
    case 'o':
      o->op = brd_perf_op_parse(optarg);
      if (o->op == -2) {
        printf("invalid op %s, defaulting to %s .. \n", optarg, brd_perf_op_names[ncclSum]);
        o->op = ncclSum;
      }
      break;
    case 'd':
      o->type = brd_perf_type_parse(optarg);
      if (o->type == -2) {
        printf("invalid type %s, defaulting to %s .. \n", optarg,
               brd_perf_type_names[ncclFloat32]);
        o->type = ncclFloat32;
      }
      break;
    case 'r': o->root = parse_int(optarg); break;
    case 'z': o->blocking = parse_int(optarg); break;
    case 'T': o->timeout = parse_int(optarg); break;
    case 'G': o->graph = parse_int(optarg); break;
    case 'C': o->cputime = parse_int(optarg); break;
    case 'J': o->json = optarg; break;
    case 'a': o->average = parse_int(optarg); break;
    case 'R': o->reg = parse_int(optarg); break;
    case 'h':
    default:
      if (c != 'h') printf("invalid option '%c'\n", optopt ? optopt : '?');
      usage(prog);
      *status = 0;
      return 1;
    }
  }
  const char *bad = NULL;
  if (o->minbytes > o->maxbytes) {
    fprintf(stderr, "invalid sizes for 'minbytes' and 'maxbytes': %llu > %llu\n",
            (unsigned long long)o->minbytes, (unsigned long long)o->maxbytes);
    *status = EXIT_USAGE;
    return 1;
  }
  if (o->nthreads < 1) bad = "-t (threads) must be at least 1";
  else if (o->ngpus < 1) bad = "-g (ranks per thread) must be at least 1";
  else if (o->nprocs < 1) bad = "-P (processes) must be at least 1";
  else if (o->iters < 1) bad = "-n (iterations) must be at least 1";
  else if (o->agg < 1) bad = "-m (aggregated iterations) must be at least 1";
  else if (o->warmup < 0 || o->check < 0) bad = "-w and -c cannot be negative";
  else if (o->average < 0 || o->average > 3) bad = "-a takes 0, 1, 2 or 3";
  else if (o->blocking < 0 || o->blocking > 3) bad = "-z takes 0, 1, 2 or 3";
  else if (o->reg < 0 || o->reg > 2) bad = "-R takes 0, 1 or 2";
  else if (o->stepfactor <= 1 && o->stepbytes == 0 && o->minbytes < o->maxbytes)
    bad = "-i 0 with -f 1 would never reach -e";
  if (bad != NULL) {
    fprintf(stderr, "invalid options: %s\n", bad);
    *status = EXIT_USAGE;
    return 1;
  }
  const char *wf = getenv("BRAID_PERF_WORLD");
  if (wf != NULL && wf[0] != '\0') {
    const char *np = getenv("BRAID_PERF_NPROCS"), *pr = getenv("BRAID_PERF_PROC");
    char *end1 = NULL, *end2 = NULL;
    long n = np ? strtol(np, &end1, 10) : 0, p = pr ? strtol(pr, &end2, 10) : -1;
    if (o->nprocs != 1) bad = "-P cannot be combined with BRAID_PERF_WORLD";
    else if (np == NULL || *end1 != '\0' || n < 1 || n > 65536)
      bad = "BRAID_PERF_WORLD needs BRAID_PERF_NPROCS, the number of processes (1..65536)";
    else if (pr == NULL || *end2 != '\0' || p < 0 || p >= n)
      bad = "BRAID_PERF_WORLD needs BRAID_PERF_PROC, this process's index (0..BRAID_PERF_NPROCS-1)";
    if (bad != NULL) {
      fprintf(stderr, "invalid options: %s\n", bad);
      *status = EXIT_USAGE;
      return 1;
    }
    o->world_file = wf;
    o->nprocs = (int)n;
    o->world_proc = (int)p;
  }
  if (o->blocking == 3 && o->graph > 0) {
    fprintf(stderr, "blocking mode (-z 3) is incompatible with CUDA graph mode (-G). Disabling.\n");
    o->blocking = 0;
  }
  if (o->blocking != 0 && o->graph > 0) {
    fprintf(stderr, "blocking mode (-z) cannot wait inside a CUDA graph capture (-G). Disabling.\n");
    o->blocking = 0;
  }
  return 0;
}

/* ---- results (participant 0) --------------------------------------------- */

static ncclResult_t keep_row(run_t *r, const brd_perf_row_t *row) {
  if (r->nrows == r->cap_rows) {
    size_t cap = r->cap_rows ? 2 * r->cap_rows : 64;
    brd_perf_row_t *v = realloc(r->rows, cap * sizeof(*v));
    if (v == NULL) return out_of_memory(r, cap * sizeof(*v), "the result rows");
    r->rows = v;
    r->cap_rows = cap;
  }
  r->rows[r->nrows++] = *row;
  return ncclSuccess;
}

/* ---- per-participant resources ------------------------------------------ */

static int rank_device(const thr_t *t, int i) {
  run_t *r = t->run;
  int local = (r->local_proc * r->o.nthreads + t->thread) * t->g + i;
  return r->host_mode ? local : local % r->ndev;
}

static ncclResult_t thr_alloc(thr_t *t) {
  run_t *r = t->run;
  size_t g = (size_t)t->g;
  t->dev = calloc(g, sizeof(*t->dev));
  t->comm = calloc(g, sizeof(*t->comm));
  t->stream = calloc(g, sizeof(*t->stream));
  t->send = calloc(g, sizeof(*t->send));
  t->recv = calloc(g, sizeof(*t->recv));
  t->send_reg = calloc(g, sizeof(*t->send_reg));
  t->recv_reg = calloc(g, sizeof(*t->recv_reg));
#if BRAID_CUDA
  t->ev = calloc(2 * g, sizeof(*t->ev));
  if (t->ev == NULL) return out_of_memory(r, 2 * g * sizeof(*t->ev), "events");
#endif
  if (!t->dev || !t->comm || !t->stream || !t->send || !t->recv ||
      !t->send_reg || !t->recv_reg)
    return out_of_memory(r, g * 64, "per-rank state");
  for (int i = 0; i < t->g; i++) t->dev[i] = rank_device(t, i);
  return ncclSuccess;
}

static void thr_free(thr_t *t) {
  free(t->dev);
  free(t->comm);
  free(t->stream);
  free(t->send);
  free(t->recv);
  free(t->send_reg);
  free(t->recv_reg);
  free(t->stage);
#if BRAID_CUDA
  free(t->ev);
#endif
}

/* Streams and events (CUDA mode). */
static ncclResult_t setup_streams(thr_t *t) {
  ncclResult_t res = ncclSuccess;
#if BRAID_CUDA
  run_t *r = t->run;
  if (r->host_mode) return ncclSuccess;
  for (int i = 0; i < t->g; i++) {
    CUDA_GOTO(r, cudaSetDevice(t->dev[i]), res, out);
    CUDA_GOTO(r, cudaStreamCreateWithFlags(&t->stream[i], cudaStreamNonBlocking), res, out);
    CUDA_GOTO(r, cudaEventCreate(&t->ev[2 * i]), res, out);
    CUDA_GOTO(r, cudaEventCreate(&t->ev[2 * i + 1]), res, out);
  }
out:
#else
  (void)t;
#endif
  return res;
}

static void teardown_streams(thr_t *t) {
#if BRAID_CUDA
  if (t->run->host_mode) return;
  for (int i = 0; i < t->g; i++) {
    cudaSetDevice(t->dev[i]);
    if (t->ev[2 * i]) cudaEventDestroy(t->ev[2 * i]);
    if (t->ev[2 * i + 1]) cudaEventDestroy(t->ev[2 * i + 1]);
    if (t->stream[i]) cudaStreamDestroy(t->stream[i]);
  }
#else
  (void)t;
#endif
}

static ncclResult_t fill_rank_info(thr_t *t, int i, brd_perf_rank_info_t *ri) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  memset(ri, 0, sizeof(*ri));
  ri->rank = t->first_rank + i;
  ri->pid = (int)getpid();
  ri->device = t->dev[i];
  brd_perf_host_name(ri->host, sizeof(ri->host));
  if (r->host_mode) {
    snprintf(ri->name, sizeof(ri->name), "Braid host executor (CPU)");
    return ncclSuccess;
  }
#if BRAID_CUDA
  struct cudaDeviceProp prop;
  CUDA_GOTO(r, cudaGetDeviceProperties(&prop, t->dev[i]), res, out);
  snprintf(ri->name, sizeof(ri->name), "%.*s", (int)sizeof(ri->name) - 1, prop.name);
  ri->pci_domain = (unsigned)prop.pciDomainID;
  ri->pci_bus = (unsigned)prop.pciBusID;
  ri->pci_dev = (unsigned)prop.pciDeviceID;
  ri->mem = prop.totalGlobalMem;
  ri->cc = prop.major * 10 + prop.minor;
out:
#endif
  return res;
}

static void print_preamble(thr_t *t) {
  run_t *r = t->run;
  const opts_t *o = &r->o;
  printf("# Braid %s version %s (nccl-tests %s format) nccl-headers=%d "
         "nccl-library=%d\n", r->prog, BRAID_VERSION, NCCL_TESTS_FORMAT,
         NCCL_VERSION_CODE, r->library_version);
  printf("# Collective test starting: %s\n", r->prog);
  printf("# nThread %d nGpus %d minBytes %zu maxBytes %zu step: %zu(%s) "
         "warmup iters: %d iters: %d agg iters: %d validation: %d graph: %d "
         "unalign: 0\n", o->nthreads, o->ngpus, o->minbytes, o->maxbytes,
         o->stepfactor > 1 ? o->stepfactor : o->stepbytes,
         o->stepfactor > 1 ? "factor" : "bytes", o->warmup, o->iters, o->agg,
         o->check, o->graph);
  printf("# Braid launch: %d process%s x %d thread%s x %d rank%s = %d rank%s%s\n",
         r->nprocs, r->nprocs > 1 ? "es" : "", o->nthreads,
         o->nthreads > 1 ? "s" : "", o->ngpus, o->ngpus > 1 ? "s" : "",
         r->nranks, r->nranks > 1 ? "s" : "",
         o->mpi ? " (MPI)" : o->world_file != NULL ? " (world file)" : "");
  printf("# %s\n", r->mode_note);
  if (!r->host_mode) {
    int per_host = (o->mpi ? 1 : r->nprocs) * o->nthreads * o->ngpus;
    if (per_host > r->ndev)
      printf("# several ranks share a GPU (Braid feature): %d ranks on %d GPU%s, "
             "rank r uses device r %% %d\n", per_host, r->ndev,
             r->ndev > 1 ? "s" : "", r->ndev);
  }
  if (o->blocking == 1) printf("# Blocking Enabled: wait and barrier after each inner iteration (-m) \n");
  if (o->blocking == 2) printf("# Blocking Enabled: wait after each inner iteration (-m), no barrier \n");
  if (o->blocking == 3)
    printf("# Blocking Enabled: wait and barrier after each outer iteration (-n); "
           "time excludes barrier \n");
  if (r->json_path[0] != '\0') printf("# Writing JSON output to %s\n", r->json_path);
  printf("#\n# Using devices\n");
  for (int k = 0; k < r->nranks; k++) {
    const brd_perf_rank_info_t *ri = &r->ranks[k];
    printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n",
           ri->rank, 0, ri->pid, ri->host, ri->device, ri->pci_domain,
           ri->pci_bus, ri->pci_dev, ri->name);
  }
}

/* Shares every rank's description, prints the preamble, and derives what
 * depends on all ranks: fp8 support and the device-memory size limit. */
static ncclResult_t exchange_info(thr_t *t) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  size_t mine_len = (size_t)t->g * sizeof(brd_perf_rank_info_t);
  brd_perf_rank_info_t *mine = calloc((size_t)t->g, sizeof(*mine));
  brd_perf_rank_info_t *all = calloc((size_t)r->nranks, sizeof(*all));
  if (mine == NULL || all == NULL) {
    res = out_of_memory(r, mine_len * (size_t)r->nranks, "rank descriptions");
    goto out;
  }
  for (int i = 0; i < t->g; i++) {
    res = fill_rank_info(t, i, &mine[i]);
    if (res != ncclSuccess) goto out;
  }
  WORLD_GOTO(r, brd_perf_world_allgather(r->world, t->thread, mine, mine_len, all),
             res, out);
  unsigned long long min_mem = 0;
  for (int k = 0; k < r->nranks; k++) {
    if (all[k].cc > 0 && all[k].cc < 90) t->no_fp8 = 1;
    if (all[k].mem > 0 && (min_mem == 0 || all[k].mem < min_mem)) min_mem = all[k].mem;
  }
  if (t->participant == 0) {
    r->ranks = all;
    all = NULL;
    print_preamble(t);
  }
  if (min_mem > 0) {
    /* nccl-tests' budget: keep 1 GiB per 16 GiB (at most 4 GiB) and 1 GiB
     * more free; the rest holds a send and a receive buffer per rank on
     * that GPU. */
    const unsigned long long gib = 1ull << 30;
    int per_host = (r->o.mpi ? 1 : r->nprocs) * r->o.nthreads * t->g;
    int sharers = (per_host + r->ndev - 1) / r->ndev;
    unsigned long long reserve = (min_mem + 16 * gib - 1) / (16 * gib) * gib;
    if (reserve > 4 * gib) reserve = 4 * gib;
    if (min_mem > reserve + gib) {
      size_t limit = (size_t)((min_mem - reserve - gib) / 2 / (unsigned)sharers);
      if (t->maxbytes > limit) {
        t->maxbytes = limit;
        if (t->minbytes > limit) t->minbytes = limit;
        if (t->participant == 0)
          printf("#\n# Reducing maxBytes to %zu due to memory limitation\n", limit);
      }
    }
  }
out:
  free(mine);
  free(all);
  return res;
}

static ncclResult_t init_comms(thr_t *t) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  int shared = !r->host_mode && r->o.ngpus > r->ndev;
  if (r->nprocs == 1 && r->o.nthreads == 1 && !shared) {
    NCCL_GOTO(r, ncclCommInitAll(t->comm, t->g, r->host_mode ? NULL : t->dev),
              res, out);
    return ncclSuccess;
  }
  ncclUniqueId id;
  memset(&id, 0, sizeof(id));
  if (t->participant == 0) NCCL_GOTO(r, ncclGetUniqueId(&id), res, out);
  WORLD_GOTO(r, brd_perf_world_share_id(r->world, t->thread, &id), res, out);
  NCCL_GOTO(r, ncclGroupStart(), res, out);
  for (int i = 0; i < t->g; i++) {
#if BRAID_CUDA
    if (!r->host_mode) CUDA_GOTO(r, cudaSetDevice(t->dev[i]), res, out);
#endif
    NCCL_GOTO(r, ncclCommInitRank(&t->comm[i], r->nranks, id, t->first_rank + i),
              res, out);
  }
  NCCL_GOTO(r, ncclGroupEnd(), res, out);
out:
  return res;
}

static ncclResult_t alloc_buffers(thr_t *t) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  /* ncclMemAlloc refuses 0 bytes; a run of empty sizes still gets buffers. */
  size_t bytes = t->maxbytes > 64 ? t->maxbytes : 64;
  t->alloc_bytes = bytes;
  for (int i = 0; i < t->g; i++) {
    if (r->host_mode) {
      NCCL_GOTO(r, ncclMemAlloc((void **)&t->send[i], bytes), res, out);
      NCCL_GOTO(r, ncclMemAlloc((void **)&t->recv[i], bytes), res, out);
      /* Defined contents: stray NaNs or denormals would slow a CPU
       * reduction and skew host-mode times under -c 0. */
      memset(t->send[i], 0, bytes);
      memset(t->recv[i], 0, bytes);
      continue;
    }
#if BRAID_CUDA
    CUDA_GOTO(r, cudaSetDevice(t->dev[i]), res, out);
    CUDA_GOTO(r, cudaMalloc((void **)&t->send[i], bytes), res, out);
    CUDA_GOTO(r, cudaMalloc((void **)&t->recv[i], bytes), res, out);
    CUDA_GOTO(r, cudaMemset(t->send[i], 0, bytes), res, out);
    CUDA_GOTO(r, cudaMemset(t->recv[i], 0, bytes), res, out);
    /* The streams are non-blocking: let the clears land before any call.
     * Only the legacy stream: a device-wide synchronisation would wait for
     * the kernels of other ranks sharing this GPU, which wait for this
     * thread's ranks. */
    CUDA_GOTO(r, cudaStreamSynchronize(cudaStreamLegacy), res, out);
#endif
  }
  if (!r->host_mode) {
    t->stage = malloc(bytes);
    if (t->stage == NULL) {
      res = out_of_memory(r, bytes, "the host copy of a buffer");
      goto out;
    }
  }
  if (r->o.reg == 0) return ncclSuccess;
  NCCL_GOTO(r, ncclGroupStart(), res, out);
  for (int i = 0; i < t->g; i++) {
    if (r->o.reg == 2) {
      NCCL_GOTO(r, ncclCommWindowRegister(t->comm[i], t->send[i], bytes,
                                          (ncclWindow_t *)&t->send_reg[i],
                                          NCCL_WIN_COLL_SYMMETRIC), res, out);
      NCCL_GOTO(r, ncclCommWindowRegister(t->comm[i], t->recv[i], bytes,
                                          (ncclWindow_t *)&t->recv_reg[i],
                                          NCCL_WIN_COLL_SYMMETRIC), res, out);
    } else {
      NCCL_GOTO(r, ncclCommRegister(t->comm[i], t->send[i], bytes, &t->send_reg[i]), res, out);
      NCCL_GOTO(r, ncclCommRegister(t->comm[i], t->recv[i], bytes, &t->recv_reg[i]), res, out);
    }
  }
  NCCL_GOTO(r, ncclGroupEnd(), res, out);
out:
  return res;
}

/* Releases registrations, buffers and communicators; aborts the
 * communicators instead of destroying them after a failure. */
static void release(thr_t *t, int ok) {
  run_t *r = t->run;
  if (ok && r->o.reg != 0) {
    /* Window deregistration is collective: one group for all our ranks. */
    ncclGroupStart();
    for (int i = 0; i < t->g; i++) {
      if (t->comm[i] == NULL) continue;
      if (t->send_reg[i] != NULL) {
        if (r->o.reg == 2) ncclCommWindowDeregister(t->comm[i], (ncclWindow_t)t->send_reg[i]);
        else ncclCommDeregister(t->comm[i], t->send_reg[i]);
      }
      if (t->recv_reg[i] != NULL) {
        if (r->o.reg == 2) ncclCommWindowDeregister(t->comm[i], (ncclWindow_t)t->recv_reg[i]);
        else ncclCommDeregister(t->comm[i], t->recv_reg[i]);
      }
    }
    ncclGroupEnd();
  }
  for (int i = 0; i < t->g; i++) {
    if (t->comm[i] != NULL) {
      ncclResult_t res = ok ? ncclCommDestroy(t->comm[i]) : ncclCommAbort(t->comm[i]);
      if (res != ncclSuccess && ok) nccl_failed(r, res, __FILE__, __LINE__);
      t->comm[i] = NULL;
    }
    if (r->host_mode) {
      ncclMemFree(t->send[i]);
      ncclMemFree(t->recv[i]);
    } else {
#if BRAID_CUDA
      cudaSetDevice(t->dev[i]);
      cudaFree(t->send[i]);
      cudaFree(t->recv[i]);
#endif
    }
    t->send[i] = t->recv[i] = NULL;
  }
}

/* ---- one call, completion ------------------------------------------------ */

static void make_cfg(const run_t *r, ncclDataType_t dtype, int op, int root,
                     size_t size, cfg_t *c) {
  memset(c, 0, sizeof(*c));
  c->dtype = dtype;
  c->esize = brd_perf_type_size(dtype);
  c->op = op;
  c->root = root;
  r->coll->shape(size / c->esize, c->esize, r->nranks, &c->sh);
  c->send_bytes = c->sh.send_count * c->esize;
  c->recv_bytes = c->sh.recv_count * c->esize;
  c->size = c->send_bytes > c->recv_bytes ? c->send_bytes : c->recv_bytes;
}

static int rank_has_input(const run_t *r, const cfg_t *c, int rank) {
  return !r->coll->input_on_root || rank == c->root;
}

static ncclResult_t complete(thr_t *t) {
  ncclResult_t res = ncclSuccess;
#if BRAID_CUDA
  run_t *r = t->run;
  if (r->host_mode) return ncclSuccess;
  int wait_s = r->o.timeout > 0 ? r->o.timeout : DEFAULT_WAIT_S;
  double deadline = now_s() + wait_s;
  for (int i = 0; i < t->g; i++) {
    for (;;) {
      cudaError_t err = cudaStreamQuery(t->stream[i]);
      if (err == cudaSuccess) break;
      if (err != cudaErrorNotReady) CUDA_GOTO(r, err, res, out);
      ncclResult_t async;
      NCCL_GOTO(r, ncclCommGetAsyncError(t->comm[i], &async), res, out);
      if (async != ncclSuccess && async != ncclInProgress)
        NCCL_GOTO(r, async, res, out);
      if (brd_perf_world_failed(r->world)) {
        set_exit(r, 1);
        res = ncclSystemError;
        goto out;
      }
      if (now_s() > deadline) {
        char host[256];
        brd_perf_host_name(host, sizeof(host));
        printf("%s: Test timeout (%ds) %s:%d\n", host, wait_s, __FILE__, __LINE__);
        set_exit(r, EXIT_TIMEOUT);
        brd_perf_world_fail(r->world);
        res = ncclSystemError;
        goto out;
      }
      sched_yield();
    }
  }
out:
#else
  (void)t;
#endif
  return res;
}

/* Issues one call per rank of this thread (a group when there are several),
 * at the pointer shift nccl-tests uses for iteration iter. */
static ncclResult_t start_coll(thr_t *t, const cfg_t *c, int in_place, int iter,
                               int may_block) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  size_t total = c->size;
  size_t steps = total ? t->maxbytes / total : 1;
  if (steps == 0) steps = 1;
  size_t shift = total * ((size_t)iter % steps);
  brd_perf_world_busy(r->world, t->thread, 1);
  if (t->g > 1) NCCL_GOTO(r, ncclGroupStart(), res, out);
  for (int i = 0; i < t->g; i++) {
    int rank = t->first_rank + i;
    char *rb = t->recv[i] + shift;
    brd_perf_call_t call = {
        .sendbuff = in_place ? rb + c->sh.send_inplace * (size_t)rank * c->esize
                             : t->send[i] + shift,
        .recvbuff = in_place ? rb + c->sh.recv_inplace * (size_t)rank * c->esize : rb,
        .count = c->sh.count, .dtype = c->dtype, .op = ncclSum, .root = c->root,
        .rank = rank, .nranks = r->nranks, .comm = t->comm[i],
        .stream = t->stream[i]};
    int mulsum = r->coll->reduces && c->op == BRD_PERF_OP_MULSUM;
    if (r->coll->reduces && !mulsum) call.op = (ncclRedOp_t)c->op;
    if (mulsum) {
      brd_perf_gen_t g;
      brd_perf_gen_init(&g, c->dtype, c->op, r->nranks, 0);
      uint64_t scalar = brd_perf_gen_scalar(&g, rank);
      NCCL_GOTO(r, ncclRedOpCreatePreMulSum(&call.op, &scalar, c->dtype,
                                            ncclScalarHostImmediate, t->comm[i]),
                res, out);
    }
    NCCL_GOTO(r, r->coll->run(&call), res, out);
    if (mulsum) NCCL_GOTO(r, ncclRedOpDestroy(call.op, t->comm[i]), res, out);
  }
  if (t->g > 1) NCCL_GOTO(r, ncclGroupEnd(), res, out);
  brd_perf_world_busy(r->world, t->thread, 0);
  if (may_block && r->o.blocking) {
    res = complete(t);
    if (res != ncclSuccess) goto out;
    if (r->o.blocking == 1)
      WORLD_GOTO(r, brd_perf_world_barrier(r->world, t->thread), res, out);
  }
out:
  brd_perf_world_busy(r->world, t->thread, 0);
  return res;
}

/* ---- data ---------------------------------------------------------------- */

static int gen_op(const run_t *r, const cfg_t *c) {
  return r->coll->reduces ? c->op : BRD_PERF_OP_COPY;
}

/* Poisons each rank's receive side and writes its input where the call
 * reads it (inside the receive buffer when in place). */
static ncclResult_t fill(thr_t *t, const cfg_t *c, int in_place, uint64_t seed) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  brd_perf_gen_t g;
  brd_perf_gen_init(&g, c->dtype, gen_op(r, c), r->nranks, seed);
  unsigned char pb = brd_perf_poison_byte(c->dtype);
  for (int i = 0; i < t->g; i++) {
    int rank = t->first_rank + i;
    size_t send_off = in_place ? c->sh.send_inplace * (size_t)rank * c->esize : 0;
    size_t recv_off = in_place ? c->sh.recv_inplace * (size_t)rank * c->esize : 0;
    size_t span = c->recv_bytes + recv_off;
    if (in_place && send_off + c->send_bytes > span) span = send_off + c->send_bytes;
    char *dst = in_place ? t->recv[i] + send_off : t->send[i];
    int has_input = rank_has_input(r, c, rank);
    unsigned char *host = r->host_mode ? (unsigned char *)dst : t->stage;
    if (r->host_mode) memset(t->recv[i], pb, span);
    /* The poison must land before the input when the two overlap. */
    if (has_input) {
      for (size_t j = 0; j < c->sh.send_count; j++)
        brd_perf_elem_store(host, c->esize, j, brd_perf_gen_input(&g, rank, j));
    }
#if BRAID_CUDA
    if (!r->host_mode) {
      CUDA_GOTO(r, cudaSetDevice(t->dev[i]), res, out);
      /* On the rank's own stream, never the legacy one: with ranks that
       * are threads sharing a GPU, a copy waited for on another stream can
       * queue, in a hardware queue CUDA shares between streams, behind a
       * peer's copy-out held by its kernel, which waits for this rank's
       * next call (docs/architecture.md). */
      CUDA_GOTO(r, cudaMemsetAsync(t->recv[i], pb, span, t->stream[i]), res, out);
      if (has_input && c->send_bytes > 0)
        CUDA_GOTO(r, cudaMemcpyAsync(dst, t->stage, c->send_bytes, cudaMemcpyHostToDevice,
                                     t->stream[i]),
                  res, out);
      CUDA_GOTO(r, cudaStreamSynchronize(t->stream[i]), res, out);
    }
  out:
#endif
    if (res != ncclSuccess) break;
  }
  return res;
}

/* Counts output elements that differ from the CPU reference. */
static ncclResult_t verify(thr_t *t, const cfg_t *c, int in_place,
                           uint64_t seed, long long *wrong_out) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  brd_perf_gen_t g;
  brd_perf_gen_init(&g, c->dtype, gen_op(r, c), r->nranks, seed);
  long long wrong = 0;
  for (int i = 0; i < t->g; i++) {
    int rank = t->first_rank + i;
    size_t send_off = in_place ? c->sh.send_inplace * (size_t)rank : 0;
    size_t recv_off = in_place ? c->sh.recv_inplace * (size_t)rank : 0;
    const char *out = t->recv[i] + recv_off * c->esize;
    const unsigned char *buf = (const unsigned char *)out;
    if (!r->host_mode) {
#if BRAID_CUDA
      CUDA_GOTO(r, cudaSetDevice(t->dev[i]), res, done);
      /* The rank's own stream, as in fill. */
      if (c->recv_bytes > 0) {
        CUDA_GOTO(r, cudaMemcpyAsync(t->stage, out, c->recv_bytes, cudaMemcpyDeviceToHost,
                                     t->stream[i]),
                  res, done);
        CUDA_GOTO(r, cudaStreamSynchronize(t->stream[i]), res, done);
      }
#endif
      buf = t->stage;
    }
    int has_input = rank_has_input(r, c, rank);
    for (size_t j = 0; j < c->sh.recv_count; j++) {
      int src_rank = 0;
      size_t idx = 0;
      uint64_t want;
      switch (r->coll->source(&c->sh, r->nranks, c->root, rank, j, &src_rank, &idx)) {
      case BRD_PERF_SRC_REDUCE:
        want = brd_perf_gen_reduce(&g, idx);
        break;
      case BRD_PERF_SRC_COPY:
        want = brd_perf_gen_input(&g, src_rank, idx);
        break;
      default: {
        /* Untouched: the input if this element lies in it, else poison. */
        size_t at = recv_off + j;
        want = g.poison;
        if (in_place && has_input && at >= send_off && at - send_off < c->sh.send_count)
          want = brd_perf_gen_input(&g, rank, at - send_off);
        break;
      }
      }
      if (!brd_perf_gen_match(&g, brd_perf_elem_load(buf, c->esize, j), want)) wrong++;
    }
  }
  *wrong_out = wrong;
#if BRAID_CUDA
done:
#endif
  return res;
}

/* ---- timing -------------------------------------------------------------- */

#if BRAID_CUDA
static ncclResult_t record(thr_t *t, int which) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  for (int i = 0; i < t->g; i++) {
    CUDA_GOTO(r, cudaSetDevice(t->dev[i]), res, out);
    CUDA_GOTO(r, cudaEventRecord(t->ev[2 * i + which], t->stream[i]), res, out);
  }
out:
  return res;
}

static ncclResult_t capture(thr_t *t, int begin, cudaGraph_t *graphs) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  for (int i = 0; i < t->g; i++) {
    CUDA_GOTO(r, cudaSetDevice(t->dev[i]), res, out);
    if (begin)
      CUDA_GOTO(r, cudaStreamBeginCapture(t->stream[i], cudaStreamCaptureModeThreadLocal),
                res, out);
    else
      CUDA_GOTO(r, cudaStreamEndCapture(t->stream[i], &graphs[i]), res, out);
  }
out:
  return res;
}

static ncclResult_t launch_graphs(thr_t *t, cudaGraph_t *graphs,
                                  cudaGraphExec_t *execs, int launches) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  for (int i = 0; i < t->g; i++) {
    CUDA_GOTO(r, cudaSetDevice(t->dev[i]), res, out);
    CUDA_GOTO(r, cudaGraphInstantiateWithFlags(&execs[i], graphs[i], 0), res, out);
  }
  for (int l = 0; l < launches; l++)
    for (int i = 0; i < t->g; i++)
      CUDA_GOTO(r, cudaGraphLaunch(execs[i], t->stream[i]), res, out);
out:
  return res;
}

static void drop_graphs(thr_t *t, cudaGraph_t *graphs, cudaGraphExec_t *execs) {
  for (int i = 0; i < t->g; i++) {
    if (execs[i]) cudaGraphExecDestroy(execs[i]);
    if (graphs[i]) cudaGraphDestroy(graphs[i]);
    execs[i] = NULL;
    graphs[i] = NULL;
  }
}
#endif

/* Runs the call once at offset 0, in a CUDA graph under -G, and waits. */
static ncclResult_t run_once(thr_t *t, const cfg_t *c, int in_place) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  int graph = !r->host_mode && r->o.graph > 0;
  if (!graph) {
    res = start_coll(t, c, in_place, 0, 0);
    return res == ncclSuccess ? complete(t) : res;
  }
#if BRAID_CUDA
  cudaGraph_t *graphs = calloc((size_t)t->g, sizeof(*graphs));
  cudaGraphExec_t *execs = calloc((size_t)t->g, sizeof(*execs));
  if (graphs == NULL || execs == NULL) {
    res = out_of_memory(r, (size_t)t->g * 16, "CUDA graphs");
    goto out;
  }
  res = capture(t, 1, graphs);
  if (res == ncclSuccess) res = start_coll(t, c, in_place, 0, 0);
  if (res == ncclSuccess) res = capture(t, 0, graphs);
  if (res == ncclSuccess) res = launch_graphs(t, graphs, execs, 1);
  if (res == ncclSuccess) res = complete(t);
  drop_graphs(t, graphs, execs);
out:
  free(graphs);
  free(execs);
#endif
  return res;
}

/* The timed loop: iters x agg calls (in a CUDA graph launched -G times
 * under -G). Writes seconds per call: device time and host issue time. */
static ncclResult_t timed_loop(thr_t *t, const cfg_t *c, int in_place,
                               double *sec_out, double *cpu_out) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  const opts_t *o = &r->o;
  int graph = !r->host_mode && o->graph > 0;
  double calls = (double)o->iters * o->agg * (graph ? o->graph : 1);
  double coll_only = 0;
#if BRAID_CUDA
  cudaGraph_t *graphs = NULL;
  cudaGraphExec_t *execs = NULL;
  if (graph) {
    graphs = calloc((size_t)t->g, sizeof(*graphs));
    execs = calloc((size_t)t->g, sizeof(*execs));
    if (graphs == NULL || execs == NULL) {
      res = out_of_memory(r, (size_t)t->g * 16, "CUDA graphs");
      goto out;
    }
    res = capture(t, 1, graphs);
    if (res != ncclSuccess) goto out;
  } else if (!r->host_mode) {
    res = record(t, 0);
    if (res != ncclSuccess) goto out;
  }
#endif
  double t0 = now_s();
  for (int iter = 0; iter < o->iters; iter++) {
    double it0 = now_s();
    if (o->agg > 1) NCCL_GOTO(r, ncclGroupStart(), res, out);
    for (int a = 0; a < o->agg; a++) {
      res = start_coll(t, c, in_place, iter * o->agg + a, o->agg == 1);
      if (res != ncclSuccess) goto out;
    }
    if (o->agg > 1) NCCL_GOTO(r, ncclGroupEnd(), res, out);
    if (o->agg > 1 && o->blocking && o->blocking != 3) {
      res = complete(t);
      if (res != ncclSuccess) goto out;
      if (o->blocking == 1) WORLD_GOTO(r, brd_perf_world_barrier(r->world, t->thread), res, out);
    }
    if (o->blocking == 3) {
      res = complete(t);
      if (res != ncclSuccess) goto out;
      coll_only += now_s() - it0;
      WORLD_GOTO(r, brd_perf_world_barrier(r->world, t->thread), res, out);
    }
  }
#if BRAID_CUDA
  if (graph) {
    res = capture(t, 0, graphs);
    if (res != ncclSuccess) goto out;
    WORLD_GOTO(r, brd_perf_world_barrier(r->world, t->thread), res, out);
    t0 = now_s();
    res = record(t, 0);
    if (res == ncclSuccess) res = launch_graphs(t, graphs, execs, o->graph);
    if (res != ncclSuccess) goto out;
  }
  if (!r->host_mode) {
    res = record(t, 1);
    if (res != ncclSuccess) goto out;
  }
#endif
  double cpu = now_s() - t0;
  res = complete(t);
  if (res != ncclSuccess) goto out;
  double sec = now_s() - t0;
#if BRAID_CUDA
  if (!r->host_mode && o->blocking != 3) {
    /* Device time: the slowest of this thread's ranks. */
    sec = 0;
    for (int i = 0; i < t->g; i++) {
      float ms = 0;
      CUDA_GOTO(r, cudaEventElapsedTime(&ms, t->ev[2 * i], t->ev[2 * i + 1]), res, out);
      if (ms * 1e-3 > sec) sec = ms * 1e-3;
    }
  }
#endif
  if (o->blocking == 3) sec = cpu = coll_only;
  *sec_out = sec / calls;
  *cpu_out = cpu / calls;
out:
#if BRAID_CUDA
  if (graphs != NULL) drop_graphs(t, graphs, execs);
  free(graphs);
  free(execs);
#endif
  return res;
}

/* One half of a row: time it, then check it -c times. */
static ncclResult_t bench(thr_t *t, const cfg_t *c, int in_place,
                          brd_perf_half_t *h) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  const opts_t *o = &r->o;
  memset(h, 0, sizeof(*h));
  if (in_place && r->coll->inplace == BRD_PERF_INPLACE_NONE) return ncclSuccess;
  int check = o->check > 0 &&
              !(in_place && r->coll->inplace == BRD_PERF_INPLACE_UNCHECKED);
  if (o->check > 0) {
    res = fill(t, c, in_place, 99);
    if (res != ncclSuccess) goto out;
  }
  res = run_once(t, c, in_place);
  if (res != ncclSuccess) goto out;
  WORLD_GOTO(r, brd_perf_world_barrier(r->world, t->thread), res, out);

  double sec = 0, cpu = 0;
  res = timed_loop(t, c, in_place, &sec, &cpu);
  if (res != ncclSuccess) goto out;
  WORLD_GOTO(r, brd_perf_world_reduce(r->world, t->thread, &sec, (brd_perf_red_t)o->average),
             res, out);
  WORLD_GOTO(r, brd_perf_world_reduce(r->world, t->thread, &cpu, (brd_perf_red_t)o->average),
             res, out);
  double base = sec > 0 ? (double)c->size / 1.0e9 / sec : 0;
  double factor = r->coll->bus_factor_num;
  if (!r->coll->bus_factor_flat)
    factor = factor * (double)(r->nranks - r->coll->bus_factor_minus) / r->nranks;
  h->ran = 1;
  h->checked = check;
  h->time_us = (o->cputime ? cpu : sec) * 1.0e6;
  h->algbw = base;
  h->busbw = base * factor;

  for (int k = 0; check && k < o->check; k++) {
    uint64_t seed = ++t->rep;
    long long wrong = 0;
    res = fill(t, c, in_place, seed);
    if (res == ncclSuccess) res = run_once(t, c, in_place);
    if (res == ncclSuccess) res = verify(t, c, in_place, seed, &wrong);
    if (res != ncclSuccess) goto out;
    double all = (double)wrong;
    WORLD_GOTO(r, brd_perf_world_reduce(r->world, t->thread, &all, BRD_PERF_RED_SUM),
               res, out);
    h->wrong = (long long)all;
    if (h->wrong) break;
  }
out:
  return res;
}

/* Warm-up at every power-of-two size, then one row per size. */
static ncclResult_t time_test(thr_t *t, ncclDataType_t dtype, int op, int root) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  const opts_t *o = &r->o;
  cfg_t c;
  WORLD_GOTO(r, brd_perf_world_barrier(r->world, t->thread), res, out);
  for (size_t size = t->minbytes; size <= t->maxbytes; size *= 2) {
    make_cfg(r, dtype, op, root, size, &c);
    for (int w = 0; w < o->warmup; w++) {
      res = start_coll(t, &c, 0, w, 1);
      if (res != ncclSuccess) goto out;
    }
    res = complete(t);
    if (res != ncclSuccess || size == 0) goto warm_done;
  }
warm_done:
  if (res != ncclSuccess) goto out;
  for (size_t size = t->minbytes; size <= t->maxbytes;) {
    make_cfg(r, dtype, op, root, size, &c);
    brd_perf_row_t row = {.size = c.size, .count = c.sh.count, .type = (int)dtype,
                          .op = r->coll->op_column ? op : -1, .root = root};
    if (t->participant == 0) brd_perf_print_row_start(stdout, &row);
    for (int in_place = 0; in_place < 2; in_place++) {
      res = bench(t, &c, in_place, &row.half[in_place]);
      if (res != ncclSuccess) {
        if (t->participant == 0) printf("\n");
        goto out;
      }
      if (t->participant == 0) {
        const brd_perf_half_t *h = &row.half[in_place];
        brd_perf_print_half(stdout, h);
        if (h->ran) {
          r->bw_sum += h->busbw;
          r->bw_count++;
        }
        if (h->wrong) r->errors++;
      }
    }
    if (t->participant == 0) {
      printf("\n");
      res = keep_row(r, &row);
      if (res != ncclSuccess) goto out;
    }
    size_t next = o->stepfactor > 1 ? size * o->stepfactor : size + o->stepbytes;
    if (next <= size) break;
    size = next;
  }
out:
  return res;
}

static void print_footer(run_t *r) {
  double avg = r->bw_count ? r->bw_sum / (double)r->bw_count : 0;
  const char *min_bw = getenv("NCCL_TESTS_MIN_BW");
  const char *bw_state = "";
  r->min_bw_state = -1;
  if (min_bw != NULL) {
    r->min_bw_state = avg >= atof(min_bw) * 0.9;
    bw_state = r->min_bw_state ? "OK" : "FAILED";
  }
  printf("# %-20s : %lld %s\n", "Out of bounds values", r->errors,
         r->errors ? "FAILED" : "OK");
  printf("# %-20s : %g %s\n", "Avg bus bandwidth", avg, bw_state);
  printf("#\n# Collective test concluded: %s\n#\n", r->prog);
  const char *err = ncclGetLastError(NULL);
  if (err != NULL && err[0] != '\0') printf("# error: %s\n", err);
  else printf("\n");
  if (r->errors) set_exit(r, EXIT_WRONG);
  if (r->min_bw_state == 0) set_exit(r, EXIT_WRONG);
}

static ncclResult_t run_tests(thr_t *t) {
  ncclResult_t res = ncclSuccess;
  run_t *r = t->run;
  const opts_t *o = &r->o;
  int types[BRD_PERF_NTYPES], ntypes = 0;
  int ops[BRD_PERF_NOPS], nops = 0;
  if (o->type >= 0) {
    types[ntypes++] = o->type;
  } else {
    for (int k = 0; k < BRD_PERF_NTYPES; k++) {
      /* nccl-tests leaves fp8 out of "all" on GPUs before sm_90. */
      if (t->no_fp8 && (k == ncclFloat8e4m3 || k == ncclFloat8e5m2)) continue;
      types[ntypes++] = k;
    }
  }
  if (!r->coll->op_column) ops[nops++] = -1;
  else if (o->op >= 0) ops[nops++] = o->op;
  else for (int k = 0; k < BRD_PERF_NOPS; k++) ops[nops++] = k;
  int root_lo = -1, root_hi = -1;
  if (r->coll->rooted) {
    root_lo = o->root >= 0 ? o->root : 0;
    root_hi = o->root >= 0 ? o->root : r->nranks - 1;
  }
  for (int a = 0; a < ntypes; a++)
    for (int b = 0; b < nops; b++)
      for (int root = root_lo; root <= root_hi; root++) {
        res = time_test(t, (ncclDataType_t)types[a], ops[b], root);
        if (res != ncclSuccess) return res;
      }
  return ncclSuccess;
}

static ncclResult_t thread_run(thr_t *t) {
  ncclResult_t res;
  run_t *r = t->run;
  res = thr_alloc(t);
  if (res != ncclSuccess) goto out_free;
  res = setup_streams(t);
  if (res != ncclSuccess) goto out_streams;
  res = exchange_info(t);
  if (res != ncclSuccess) goto out_streams;
  res = init_comms(t);
  if (res == ncclSuccess) res = alloc_buffers(t);
  if (res != ncclSuccess) goto out_release;
  WORLD_GOTO(r, brd_perf_world_barrier(r->world, t->thread), res, out_release);
  if (t->participant == 0) {
    fflush(stdout);
    brd_perf_print_header(stdout, r->o.cputime);
  }
  res = run_tests(t);
  if (res != ncclSuccess) goto out_release;
  WORLD_GOTO(r, brd_perf_world_barrier(r->world, t->thread), res, out_release);
  if (t->participant == 0) print_footer(r);
out_release:
  release(t, res == ncclSuccess);
out_streams:
  teardown_streams(t);
out_free:
  thr_free(t);
  if (res != ncclSuccess) brd_perf_world_fail(r->world);
  return res;
}

static void *thread_main(void *arg) {
  thr_t *t = arg;
  t->result = thread_run(t);
  return NULL;
}

/* ---- environment, JSON --------------------------------------------------- */

static int has_token(const char *list, const char *tok) {
  size_t n = strlen(tok);
  for (const char *p = list; *p;) {
    size_t len = strcspn(p, ",");
    if (len == n && strncasecmp(p, tok, n) == 0) return 1;
    p += len;
    if (*p == ',') p++;
  }
  return 0;
}

/* Routes the library's log to a private directory with TUNING on, so the
 * algorithm/protocol of each size can be read back for the JSON file. */
static void capture_tuning(run_t *r) {
  r->tuning_dir[0] = '\0';
  if (getenv("NCCL_DEBUG_FILE") != NULL) {
    printf("# NCCL_DEBUG_FILE is set: the JSON file will not name algorithms\n");
    return;
  }
  const char *tmp = getenv("TMPDIR");
  snprintf(r->tuning_dir, sizeof(r->tuning_dir), "%s/braid-perf.XXXXXX",
           tmp != NULL && tmp[0] != '\0' ? tmp : "/tmp");
  if (mkdtemp(r->tuning_dir) == NULL) {
    printf("# cannot create %s for the tuner log (%s): the JSON file will "
           "not name algorithms\n", r->tuning_dir, strerror(errno));
    r->tuning_dir[0] = '\0';
    return;
  }
  char buf[2048];
  snprintf(buf, sizeof(buf), "%s/braid-tuning.%%p.log", r->tuning_dir);
  setenv("NCCL_DEBUG_FILE", buf, 1);
  const char *lvl = getenv("NCCL_DEBUG");
  if (lvl == NULL || (strcasecmp(lvl, "INFO") != 0 && strcasecmp(lvl, "TRACE") != 0))
    setenv("NCCL_DEBUG", "INFO", 1);
  const char *sub = getenv("NCCL_DEBUG_SUBSYS");
  if (sub == NULL || sub[0] == '\0') {
    setenv("NCCL_DEBUG_SUBSYS", "TUNING", 1);
  } else if (sub[0] == '^') {
    /* A negated list: drop TUNING from what it excludes. */
    size_t o = 1;
    buf[0] = '^';
    for (const char *p = sub + 1; *p;) {
      size_t len = strcspn(p, ",");
      if (!(len == 6 && strncasecmp(p, "TUNING", 6) == 0) && len > 0 &&
          o + len + 2 < sizeof(buf)) {
        if (o > 1) buf[o++] = ',';
        memcpy(buf + o, p, len);
        o += len;
      }
      p += len;
      if (*p == ',') p++;
    }
    buf[o] = '\0';
    setenv("NCCL_DEBUG_SUBSYS", o > 1 ? buf : "ALL", 1);
  } else if (!has_token(sub, "TUNING") && !has_token(sub, "ALL")) {
    snprintf(buf, sizeof(buf), "%s,TUNING", sub);
    setenv("NCCL_DEBUG_SUBSYS", buf, 1);
  }
}

static void drop_tuning_dir(run_t *r) {
  if (r->tuning_dir[0] == '\0') return;
  DIR *d = opendir(r->tuning_dir);
  if (d != NULL) {
    struct dirent *e;
    char path[2048];
    while ((e = readdir(d)) != NULL) {
      if (strncmp(e->d_name, "braid-tuning.", 13) != 0) continue;
      snprintf(path, sizeof(path), "%s/%s", r->tuning_dir, e->d_name);
      unlink(path);
    }
    closedir(d);
  }
  rmdir(r->tuning_dir);
}

/* Claims the -J path as nccl-tests does: never overwrite, try path.0,
 * path.1, ... instead. Only names ending in .json are written. */
static void claim_json(run_t *r) {
  const char *path = r->o.json;
  const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
  r->json_path[0] = '\0';
  if (dot == NULL || (slash != NULL && dot < slash) || strcasecmp(dot, ".json") != 0) {
    printf("# -J %s: only .json output is supported; no file written\n", path);
    return;
  }
  snprintf(r->json_path, sizeof(r->json_path), "%s", path);
  for (int n = 0; n < 1000; n++) {
    FILE *f = fopen(r->json_path, "wx");
    if (f != NULL) {
      fclose(f);
      return;
    }
    if (errno != EEXIST) break;
    snprintf(r->json_path, sizeof(r->json_path), "%s.%d", path, n);
  }
  printf("# skipping json output; %s not accessible\n", r->json_path);
  r->json_path[0] = '\0';
}

static void write_json(run_t *r) {
  if (r->json_path[0] == '\0') return;
  if (r->ranks == NULL) {
    /* Nothing ran: drop the empty file claim_json made. */
    unlink(r->json_path);
    return;
  }
  brd_perf_tuning_t *tuning = NULL;
  if (r->tuning_dir[0] != '\0' && brd_perf_tuning_load(r->tuning_dir, &tuning) != ncclSuccess)
    tuning = NULL;
  char date[64], end[64];
  time_t now = time(NULL);
  struct tm tm;
  strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime_r(&now, &tm));
  strftime(end, sizeof(end), "%Y-%m-%d %H:%M:%S", localtime_r(&now, &tm));
  const opts_t *o = &r->o;
  brd_perf_json_t j = {
      .tool = r->prog, .coll = r->coll->name, .start_time = r->start_time,
      .end_time = end, .date = date, .argc = r->argc, .argv = r->argv,
      .nranks = r->nranks, .nprocs = r->nprocs, .nthreads = o->nthreads,
      .ngpus = o->ngpus, .host_mode = r->host_mode,
      .library_version = r->library_version, .minbytes = o->minbytes,
      .maxbytes = o->maxbytes, .stepbytes = o->stepbytes,
      .stepfactor = o->stepfactor, .warmup = o->warmup, .iters = o->iters,
      .agg = o->agg, .check = o->check, .graph = o->graph,
      .blocking = o->blocking, .average = o->average, .cputime = o->cputime,
      .reg = o->reg, .ranks = r->ranks, .rows = r->rows, .nrows = r->nrows,
      .tuning = tuning, .errors = r->errors,
      .avg_busbw = r->bw_count ? r->bw_sum / (double)r->bw_count : 0,
      .min_bw_state = r->min_bw_state, .last_error = ncclGetLastError(NULL)};
  FILE *f = fopen(r->json_path, "w");
  if (f == NULL) {
    printf("# cannot write %s: %s\n", r->json_path, strerror(errno));
    set_exit(r, 1);
  } else {
    if (brd_perf_json_write(f, &j) != ncclSuccess) set_exit(r, 1);
    if (fclose(f) != 0) set_exit(r, 1);
  }
  brd_perf_tuning_destroy(tuning);
}

/* ---- process ------------------------------------------------------------- */

/* Decides host or CUDA mode for this process and tells the library. */
static ncclResult_t choose_mode(run_t *r) {
  const char *dev = getenv("BRAID_DEVICE");
  r->ndev = 0;
  if (!BRAID_CUDA || (dev != NULL && strcasecmp(dev, "host") == 0)) {
    r->host_mode = 1;
    snprintf(r->mode_note, sizeof(r->mode_note),
             "Host mode (BRAID_DEVICE=host): buffers in host memory, NULL "
             "streams, wall-clock timing; %s",
             BRAID_CUDA ? "BRAID_DEVICE=host was set" : "built without CUDA");
  }
#if BRAID_CUDA
  if (!r->host_mode) {
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess || n == 0) {
      if (dev != NULL && strcasecmp(dev, "cuda") == 0) {
        char host[256];
        brd_perf_host_name(host, sizeof(host));
        printf("%s: BRAID_DEVICE=cuda but no GPU is usable (%s); unset it or "
               "set BRAID_DEVICE=host\n", host,
               err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
        set_exit(r, EXIT_CUDA);
        return ncclUnhandledCudaError;
      }
      r->host_mode = 1;
      snprintf(r->mode_note, sizeof(r->mode_note),
               "Host mode (BRAID_DEVICE=host): buffers in host memory, NULL "
               "streams, wall-clock timing; no GPU found (%s)",
               err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    } else {
      r->ndev = n;
      snprintf(r->mode_note, sizeof(r->mode_note),
               "CUDA mode: %d GPU%s visible, cudaMalloc buffers, one stream per "
               "rank, cudaEvent timing", n, n > 1 ? "s" : "");
    }
  }
#endif
  if (r->host_mode) {
    setenv("BRAID_DEVICE", "host", 1);
    if (r->o.graph > 0) {
      strncat(r->mode_note, "; -G ignored (CUDA graphs need a GPU)",
              sizeof(r->mode_note) - strlen(r->mode_note) - 1);
      r->o.graph = 0;
    }
  }
  return ncclSuccess;
}

static void run_process(run_t *r) {
  ncclResult_t res = choose_mode(r);
  if (res != ncclSuccess) {
    brd_perf_world_fail(r->world);
    return;
  }
  NCCL_GOTO(r, ncclGetVersion(&r->library_version), res, fail);
  res = brd_perf_world_watch(r->world, &r->exit_code);
  if (res != ncclSuccess) goto fail;
  int n = r->o.nthreads;
  thr_t *thr = calloc((size_t)n, sizeof(*thr));
  if (thr == NULL) {
    out_of_memory(r, (size_t)n * sizeof(*thr), "threads");
    return;
  }
  for (int k = 0; k < n; k++) {
    thr[k] = (thr_t){.run = r, .thread = k, .participant = r->proc * n + k,
                     .g = r->o.ngpus, .minbytes = r->o.minbytes,
                     .maxbytes = r->o.maxbytes};
    thr[k].first_rank = thr[k].participant * r->o.ngpus;
  }
  int started = 1;
  for (int k = 1; k < n; k++, started++) {
    int rc = pthread_create(&thr[k].tid, NULL, thread_main, &thr[k]);
    if (rc != 0) {
      printf("# pthread_create of benchmark thread %d failed: %s\n", k, strerror(rc));
      set_exit(r, 1);
      brd_perf_world_fail(r->world);
      break;
    }
  }
  thread_main(&thr[0]);
  for (int k = 1; k < started; k++) pthread_join(thr[k].tid, NULL);
  for (int k = 0; k < started; k++)
    if (thr[k].result != ncclSuccess) set_exit(r, 1);
  free(thr);
  return;
fail:
  set_exit(r, 1);
  brd_perf_world_fail(r->world);
}

/* See perf.h. Participants run on this thread and -t - 1 more; -P forks
 * first, before CUDA or the library is touched. */
int brd_perf_main(const brd_perf_coll_t *coll, int argc, char **argv) {
  static run_t run;
  run_t *r = &run;
  int status = 0;
  setlinebuf(stdout);
  const char *slash = strrchr(argv[0], '/');
  r->coll = coll;
  r->prog = slash ? slash + 1 : argv[0];
  r->argc = argc;
  r->argv = argv;
  if (parse_options(argc, argv, r->prog, &r->o, &status)) return status;
  const opts_t *o = &r->o;
#ifdef BRAID_MPI
  /* MPI only under an MPI launcher: a plain run (and -P, which forks) never
   * starts MPI, whose singleton mode does not survive fork. */
  int use_mpi = launched_by_mpi();
  if (use_mpi) {
    /* MPI launchers forward stdout through a pipe they may make
     * non-blocking; one large flush at exit can then fail (EAGAIN) and lose
     * the report, so write it line by line. */
    setvbuf(stdout, NULL, _IOLBF, 0);
    int provided;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    int mpi_size = 1;
    MPI_Comm_size(MPI_COMM_WORLD, &mpi_size);
    if (mpi_size > 1 && (o->nprocs > 1 || o->world_file != NULL)) {
      fprintf(stderr, "invalid options: -P and BRAID_PERF_WORLD cannot be "
              "combined with an MPI launch\n");
      MPI_Finalize();
      return EXIT_USAGE;
    }
    r->o.mpi = mpi_size > 1;
  }
#endif
  time_t now = time(NULL);
  struct tm tm;
  strftime(r->start_time, sizeof(r->start_time), "%Y-%m-%d %H:%M:%S",
           localtime_r(&now, &tm));
  int first_proc = o->world_file == NULL || o->world_proc == 0;
#ifdef BRAID_MPI
  if (use_mpi) {
    int mpi_rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &mpi_rank);
    first_proc = mpi_rank == 0;
  }
#endif
  if (o->json != NULL) {
    if (first_proc) claim_json(r);
    capture_tuning(r);
  }
  int wait_s = o->timeout > 0 ? o->timeout : DEFAULT_WAIT_S;
  size_t slot = (size_t)o->ngpus * sizeof(brd_perf_rank_info_t);
  if (slot < sizeof(double)) slot = sizeof(double);
  if (brd_perf_world_create(o->nprocs, o->nthreads, slot, wait_s, o->timeout,
                            o->mpi, o->mpi ? NULL : o->world_file, o->world_proc,
                            &r->world) != ncclSuccess) {
    drop_tuning_dir(r);
    return 1;
  }
  r->nprocs = brd_perf_world_nprocs(r->world);
  r->nranks = r->nprocs * o->nthreads * o->ngpus;
  if (brd_perf_world_spawn(r->world, &r->proc) != ncclSuccess) {
    set_exit(r, 1);
  } else {
    r->local_proc = brd_perf_world_local_proc(r->world);
    run_process(r);
  }
  int code = brd_perf_world_finish(r->world, atomic_load(&r->exit_code));
  if (r->proc == 0 && o->json != NULL) {
    /* Every process has exited, so every log line is on disk. */
    atomic_store(&r->exit_code, code);
    write_json(r);
    code = atomic_load(&r->exit_code);
  }
  if (r->proc == 0 || o->mpi || o->world_file != NULL) drop_tuning_dir(r);
  brd_perf_world_destroy(r->world);
  free(r->ranks);
  free(r->rows);
#ifdef BRAID_MPI
  if (use_mpi) MPI_Finalize();
#endif
  return code;
}
