/*
 * Braid benchmarks: launcher, barrier, exchange and watchdog (world.h).
 *
 * Barrier: a generation counter in shared memory. Each arrival bumps
 * `arrived`; the last one resets it and bumps `generation`, which releases
 * the others. Waiters read `generation` before arriving, so a fast
 * participant cannot slip into the next round unnoticed. All atomics are
 * sequentially consistent: barriers are rare and never in a timed loop
 * except under -z 1, where nccl-tests times them too.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifdef BRAID_MPI
#include <mpi.h>
#endif

#include "world.h"

/* Seconds a process may stay stuck after another participant failed. */
#define ABORT_GRACE_S 15

struct world_shared {
  _Atomic unsigned joined;     /* world file: processes that mapped it */
  _Atomic int abort;           /* 1 once any participant failed */
  _Atomic unsigned arrived;    /* arrivals in the current barrier round */
  _Atomic unsigned generation; /* completed barrier rounds */
  ncclUniqueId id;             /* written by participant 0 only */
  unsigned char slots[];       /* nlocal * slot_bytes */
};

struct brd_perf_world {
  int nprocs;
  int nthreads;
  int proc;
  int local_proc;
  int use_mpi;
  char *file;                  /* owned: the world file, or NULL */
  int nlocal;                  /* participants sharing `sh` */
  size_t slot_bytes;
  int wait_s;
  int timeout_s;
  struct world_shared *sh;     /* owned mapping of sh_len bytes */
  size_t sh_len;
  unsigned char *global;       /* owned (MPI): every participant's slot */
  unsigned char *pack;         /* owned (MPI): this process's slots, packed */
  pid_t *children;             /* owned (process 0): the forked processes */
  int nchildren;
  _Atomic long long *busy_since; /* owned: per local thread, ns or 0 */
  pthread_t watchdog;
  int watching;
  _Atomic int *exit_code;        /* borrowed: the process's exit status */
  _Atomic int stop;
};

static long long now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* See world.h. */
void brd_perf_host_name(char *buf, size_t len) {
  if (gethostname(buf, len) != 0) snprintf(buf, len, "unknown");
  buf[len - 1] = '\0';
  buf[strcspn(buf, ".")] = '\0';
}

/* World file mode: every process maps the same file, so the barrier and
 * slots work as they do for forked processes. The file starts empty (or
 * absent); each process grows it to the same length, which reads as zeros.
 * A file left by an earlier run is noticed when more processes join it
 * than the run has, or when that run failed (its abort flag is up). */
static ncclResult_t map_file(brd_perf_world_t *w, const char *path) {
  int fd = open(path, O_RDWR | O_CREAT, 0600);
  if (fd < 0) {
    printf("# cannot open the world file %s: %s\n", path, strerror(errno));
    return ncclSystemError;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 ||
      (st.st_size != 0 && (size_t)st.st_size != w->sh_len)) {
    printf("# the world file %s has %lld bytes, this run needs %zu: it is left "
           "from another run; delete it, or give every process the same "
           "options\n", path, (long long)st.st_size, w->sh_len);
    close(fd);
    return ncclInvalidUsage;
  }
  if (ftruncate(fd, (off_t)w->sh_len) != 0) {
    printf("# cannot size the world file %s: %s\n", path, strerror(errno));
    close(fd);
    return ncclSystemError;
  }
  void *m = mmap(NULL, w->sh_len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) {
    printf("# mmap of the world file %s failed: %s\n", path, strerror(errno));
    return ncclSystemError;
  }
  w->sh = m;
  unsigned before = atomic_fetch_add(&w->sh->joined, 1);
  if (before >= (unsigned)w->nprocs || atomic_load(&w->sh->abort)) {
    printf("# the world file %s was already joined by %u process%s%s: it is "
           "left from another run; delete it\n", path, before, before == 1 ? "" : "es",
           atomic_load(&w->sh->abort) ? " and marks a failed run" : "");
    munmap(m, w->sh_len);
    w->sh = NULL;
    return ncclInvalidUsage;
  }
  w->file = strdup(path);
  if (w->file == NULL) {
    munmap(m, w->sh_len);
    w->sh = NULL;
    printf("# out of host memory creating the benchmark world\n");
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* See world.h. */
ncclResult_t brd_perf_world_create(int nprocs, int nthreads, size_t slot_bytes,
                                   int wait_s, int timeout_s, int use_mpi,
                                   const char *file, int file_proc,
                                   brd_perf_world_t **out) {
  ncclResult_t res = ncclSuccess;
  brd_perf_world_t *w = calloc(1, sizeof(*w));
  if (w == NULL) {
    printf("# out of host memory creating the benchmark world\n");
    return ncclSystemError;
  }
  w->nprocs = nprocs;
  w->nthreads = nthreads;
  w->use_mpi = use_mpi;
  w->wait_s = wait_s;
  w->timeout_s = timeout_s;
  w->slot_bytes = (slot_bytes + 63) & ~(size_t)63;
#ifdef BRAID_MPI
  if (use_mpi) {
    MPI_Comm local;
    MPI_Comm_size(MPI_COMM_WORLD, &w->nprocs);
    MPI_Comm_rank(MPI_COMM_WORLD, &w->proc);
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, w->proc,
                        MPI_INFO_NULL, &local);
    MPI_Comm_rank(local, &w->local_proc);
    MPI_Comm_free(&local);
  }
#endif
  w->nlocal = use_mpi ? nthreads : w->nprocs * nthreads;
  w->busy_since = calloc((size_t)nthreads, sizeof(*w->busy_since));
  if (w->busy_since == NULL) {
    printf("# out of host memory creating the benchmark world\n");
    res = ncclSystemError;
    goto fail_free;
  }
  if (use_mpi) {
    size_t all = (size_t)w->nprocs * (size_t)nthreads * w->slot_bytes;
    w->global = malloc(all);
    w->pack = malloc((size_t)nthreads * w->slot_bytes);
    if (w->global == NULL || w->pack == NULL) {
      printf("# out of host memory for %zu bytes of exchange space\n", all);
      res = ncclSystemError;
      goto fail_free_mpi;
    }
  }
  w->sh_len = sizeof(struct world_shared) + (size_t)w->nlocal * w->slot_bytes;
  if (file != NULL) {
    w->proc = file_proc;
    w->local_proc = file_proc;
    res = map_file(w, file);
    if (res != ncclSuccess) goto fail_free_mpi;
    *out = w;
    return ncclSuccess;
  }
  /* Shared and anonymous: forked processes inherit it at the same address. */
  void *m = mmap(NULL, w->sh_len, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    printf("# mmap of %zu bytes of shared memory for the launcher failed: %s\n",
           w->sh_len, strerror(errno));
    res = ncclSystemError;
    goto fail_free_mpi;
  }
  w->sh = m;
  if (!use_mpi && w->nprocs > 1) {
    w->children = calloc((size_t)w->nprocs, sizeof(*w->children));
    if (w->children == NULL) {
      printf("# out of host memory creating the benchmark world\n");
      res = ncclSystemError;
      goto fail_unmap;
    }
  }
  *out = w;
  return ncclSuccess;

fail_unmap:
  munmap(w->sh, w->sh_len);
fail_free_mpi:
  free(w->global);
  free(w->pack);
  free(w->busy_since);
fail_free:
  free(w);
  return res;
}

/* See world.h. */
ncclResult_t brd_perf_world_spawn(brd_perf_world_t *w, int *proc_out) {
  if (w->use_mpi || w->file != NULL || w->nprocs == 1) {
    *proc_out = w->proc;
    return ncclSuccess;
  }
  pid_t parent = getpid();
  fflush(stdout);
  fflush(stderr);
  for (int p = 1; p < w->nprocs; p++) {
    pid_t pid = fork();
    if (pid < 0) {
      printf("# fork of benchmark process %d failed: %s\n", p, strerror(errno));
      /* The children already started give up at their first barrier. */
      brd_perf_world_fail(w);
      return ncclSystemError;
    }
    if (pid == 0) {
      /* A child must not outlive the launcher, nor wait for siblings. */
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      w->proc = p;
      w->local_proc = p;
      w->nchildren = 0;
      *proc_out = p;
      return ncclSuccess;
    }
    w->children[w->nchildren++] = pid;
  }
  *proc_out = 0;
  return ncclSuccess;
}

/* See world.h. */
int brd_perf_world_proc(const brd_perf_world_t *w) { return w->proc; }
/* See world.h. */
int brd_perf_world_nprocs(const brd_perf_world_t *w) { return w->nprocs; }
/* See world.h. */
int brd_perf_world_local_proc(const brd_perf_world_t *w) { return w->local_proc; }

/* See world.h. */
void brd_perf_world_fail(brd_perf_world_t *w) { atomic_store(&w->sh->abort, 1); }

/* See world.h. */
int brd_perf_world_failed(const brd_perf_world_t *w) {
  return atomic_load(&w->sh->abort) != 0;
}

/* See world.h. */
void brd_perf_world_busy(brd_perf_world_t *w, int thread, int on) {
  atomic_store(&w->busy_since[thread], on ? now_ns() : 0);
}

/* Sleeps a little longer each round so waiting processes leave the CPU to
 * the library's threads on small machines. */
static void backoff(int *round) {
  if (*round < 64) {
    sched_yield();
  } else {
    long us = *round < 256 ? 20 : 500;
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
  }
  (*round)++;
}

static ncclResult_t local_barrier(brd_perf_world_t *w) {
  struct world_shared *sh = w->sh;
  unsigned gen = atomic_load(&sh->generation);
  if (atomic_fetch_add(&sh->arrived, 1) + 1 == (unsigned)w->nlocal) {
    atomic_store(&sh->arrived, 0);
    atomic_fetch_add(&sh->generation, 1);
    return ncclSuccess;
  }
  long long deadline = now_ns() + (long long)w->wait_s * 1000000000LL;
  int round = 0;
  while (atomic_load(&sh->generation) == gen) {
    if (atomic_load(&sh->abort)) return ncclSystemError;
    if (now_ns() > deadline) {
      char host[256];
      brd_perf_host_name(host, sizeof(host));
      printf("%s: Test timeout (%ds): process %d waited for the other "
             "participants at a barrier; one of them is stuck or gone\n",
             host, w->wait_s, w->proc);
      brd_perf_world_fail(w);
      return ncclSystemError;
    }
    backoff(&round);
  }
  return ncclSuccess;
}

/* See world.h. */
ncclResult_t brd_perf_world_barrier(brd_perf_world_t *w, int thread) {
  ncclResult_t res = local_barrier(w);
  if (res != ncclSuccess || !w->use_mpi) return res;
#ifdef BRAID_MPI
  /* MPI_Barrier has no deadline of its own; a failed process ends the job
   * through MPI_Abort in brd_perf_world_finish. */
  if (thread == 0) MPI_Barrier(MPI_COMM_WORLD);
#else
  (void)thread;
#endif
  return local_barrier(w);
}

/* See world.h. */
ncclResult_t brd_perf_world_allgather(brd_perf_world_t *w, int thread,
                                      const void *mine, size_t len,
                                      void *all_out) {
  ncclResult_t res;
  int me = w->use_mpi ? thread : w->proc * w->nthreads + thread;
  if (len > w->slot_bytes) {
    printf("# internal error: %zu bytes exchanged, slots hold %zu\n", len,
           w->slot_bytes);
    brd_perf_world_fail(w);
    return ncclInternalError;
  }
  memcpy(w->sh->slots + (size_t)me * w->slot_bytes, mine, len);
  res = local_barrier(w);
  if (res != ncclSuccess) return res;
  unsigned char *out = all_out;
  if (!w->use_mpi) {
    for (int p = 0; p < w->nlocal; p++)
      memcpy(out + (size_t)p * len, w->sh->slots + (size_t)p * w->slot_bytes, len);
    return local_barrier(w);
  }
#ifdef BRAID_MPI
  size_t block = (size_t)w->nthreads * len;
  if (thread == 0) {
    for (int t = 0; t < w->nthreads; t++)
      memcpy(w->pack + (size_t)t * len, w->sh->slots + (size_t)t * w->slot_bytes, len);
    MPI_Allgather(w->pack, (int)block, MPI_BYTE, w->global, (int)block,
                  MPI_BYTE, MPI_COMM_WORLD);
  }
  res = local_barrier(w);
  if (res != ncclSuccess) return res;
  memcpy(out, w->global, block * (size_t)w->nprocs);
  return local_barrier(w);
#else
  return ncclInternalError;
#endif
}

/* See world.h. */
ncclResult_t brd_perf_world_reduce(brd_perf_world_t *w, int thread,
                                   double *val, brd_perf_red_t how) {
  int n = w->nprocs * w->nthreads;
  double *all = malloc((size_t)n * sizeof(double));
  if (all == NULL) {
    printf("# out of host memory reducing a result\n");
    brd_perf_world_fail(w);
    return ncclSystemError;
  }
  ncclResult_t res = brd_perf_world_allgather(w, thread, val, sizeof(*val), all);
  if (res != ncclSuccess) goto out;
  double acc = all[0];
  for (int i = 1; i < n; i++) {
    switch (how) {
    case BRD_PERF_RED_FIRST: break;
    case BRD_PERF_RED_MIN: acc = all[i] < acc ? all[i] : acc; break;
    case BRD_PERF_RED_MAX: acc = all[i] > acc ? all[i] : acc; break;
    case BRD_PERF_RED_AVG: case BRD_PERF_RED_SUM: acc += all[i]; break;
    }
  }
  if (how == BRD_PERF_RED_AVG) acc /= n;
  *val = acc;
out:
  free(all);
  return res;
}

/* See world.h. */
ncclResult_t brd_perf_world_share_id(brd_perf_world_t *w, int thread,
                                     ncclUniqueId *id) {
  ncclResult_t res;
  if (w->proc == 0 && thread == 0) w->sh->id = *id;
#ifdef BRAID_MPI
  if (w->use_mpi && thread == 0)
    MPI_Bcast(&w->sh->id, (int)sizeof(w->sh->id), MPI_BYTE, 0, MPI_COMM_WORLD);
#endif
  res = local_barrier(w);
  if (res == ncclSuccess) *id = w->sh->id;
  return res;
}

static void *watchdog_main(void *arg) {
  brd_perf_world_t *w = arg;
  long long abort_seen = 0;
  char host[256];
  brd_perf_host_name(host, sizeof(host));
  while (!atomic_load(&w->stop)) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    long long now = now_ns();
    for (int t = 0; t < w->nthreads && w->timeout_s > 0; t++) {
      long long since = atomic_load(&w->busy_since[t]);
      if (since != 0 && now - since > (long long)w->timeout_s * 1000000000LL) {
        printf("%s: Test timeout (%ds): a collective on thread %d of process "
               "%d did not finish\n", host, w->timeout_s, t, w->proc);
        fflush(stdout);
        brd_perf_world_fail(w);
        _exit(4);
      }
    }
    for (int c = 0; c < w->nchildren; c++) {
      siginfo_t si;
      memset(&si, 0, sizeof(si));
      /* WNOWAIT: look without reaping; finish() collects the status. */
      if (waitid(P_PID, (id_t)w->children[c], &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          si.si_pid != 0 && !(si.si_code == CLD_EXITED && si.si_status == 0))
        brd_perf_world_fail(w);
    }
    if (atomic_load(&w->sh->abort)) {
      if (abort_seen == 0) abort_seen = now;
      if (now - abort_seen > ABORT_GRACE_S * 1000000000LL) {
        int code = atomic_load(w->exit_code);
        printf("%s: process %d is still blocked %d s after another "
               "participant failed; exiting\n", host, w->proc, ABORT_GRACE_S);
        fflush(stdout);
        _exit(code != 0 ? code : 1);
      }
    }
  }
  return NULL;
}

/* See world.h. */
ncclResult_t brd_perf_world_watch(brd_perf_world_t *w, _Atomic int *exit_code) {
  w->exit_code = exit_code;
  int rc = pthread_create(&w->watchdog, NULL, watchdog_main, w);
  if (rc != 0) {
    printf("# pthread_create of the watchdog failed: %s\n", strerror(rc));
    return ncclSystemError;
  }
  w->watching = 1;
  return ncclSuccess;
}

/* See world.h. */
int brd_perf_world_finish(brd_perf_world_t *w, int own_code) {
  if (w->watching) {
    atomic_store(&w->stop, 1);
    pthread_join(w->watchdog, NULL);
    w->watching = 0;
  }
#ifdef BRAID_MPI
  if (w->use_mpi && own_code != 0) MPI_Abort(MPI_COMM_WORLD, own_code);
#endif
  int code = own_code;
  for (int c = 0; c < w->nchildren; c++) {
    int wait_s = brd_perf_world_failed(w) ? ABORT_GRACE_S : w->wait_s;
    long long deadline = now_ns() + (long long)wait_s * 1000000000LL;
    int status = 0, round = 0;
    pid_t got;
    while ((got = waitpid(w->children[c], &status, WNOHANG)) == 0) {
      if (now_ns() > deadline) {
        printf("# benchmark process %d (pid %d) did not exit within %d s; "
               "killing it\n", c + 1, (int)w->children[c], wait_s);
        kill(w->children[c], SIGKILL);
        got = waitpid(w->children[c], &status, 0);
        break;
      }
      backoff(&round);
    }
    int child_code = 1;
    if (got == w->children[c] && WIFEXITED(status)) child_code = WEXITSTATUS(status);
    else if (got == w->children[c] && WIFSIGNALED(status)) child_code = 128 + WTERMSIG(status);
    if (code == 0) code = child_code;
  }
  w->nchildren = 0;
  return code;
}

/* See world.h. */
void brd_perf_world_destroy(brd_perf_world_t *w) {
  if (w == NULL) return;
  if (w->watching) {
    atomic_store(&w->stop, 1);
    pthread_join(w->watchdog, NULL);
  }
  munmap(w->sh, w->sh_len);
  /* Every process mapped the file before the first barrier passed. */
  if (w->file != NULL && w->proc == 0) unlink(w->file);
  free(w->file);
  free(w->children);
  free(w->global);
  free(w->pack);
  free((void *)w->busy_since);
  free(w);
}
