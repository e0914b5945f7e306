/*
 * Test helper: the memory and streams an end-to-end test gives the library,
 * chosen at run time between host mode and CUDA the way the library
 * chooses its backend (src/core/device.c):
 *   BRAID_DEVICE=host            host mode: malloc'd buffers, NULL streams;
 *   anything else, CUDA build    CUDA: managed memory (the test reads and
 *                                writes it directly), one non-blocking
 *                                stream per rank;
 *   anything else, CUDA=0 build  host mode (BRAID_DEVICE=cuda is refused by
 *                                tdev_usable, as the library refuses it).
 * The decision reads the environment only (a BRAID_DEVICE given in an
 * nccl.conf file is not seen). No function here touches CUDA
 * except tdev_alloc, tdev_stream_* and the probe's child, so a test may
 * still fork ranks that use CUDA themselves until it calls one of those
 * (tdev_cuda_touched tells).
 * Programs that skip exit with TDEV_EXIT_SKIP after printing "SKIP: why";
 * scripts/run-tests reports that as a skip, never as a pass.
 */
#ifndef BRD_TESTS_TDEV_H
#define BRD_TESTS_TDEV_H

#include <stddef.h>

#include "nccl.h" /* cudaStream_t, with or without the CUDA headers */

#define TDEV_EXIT_SKIP 77

typedef enum { TDEV_HOST = 0, TDEV_CUDA = 1 } tdev_kind_t;

/* The mode for this process, from BRAID_DEVICE and the build. Any thread;
 * never blocks; touches no CUDA. */
tdev_kind_t tdev_kind(void);

/* "host" or "cuda". */
const char *tdev_kind_name(void);

/* Returns 1 when tests can run in tdev_kind()'s mode, else 0 with the
 * reason (for a SKIP line) in why. In CUDA mode it asks a forked child for
 * the device count, so this process has still not touched CUDA. Call it
 * from a single-threaded process (it forks); blocks until the child ends. */
int tdev_usable(char *why, size_t whylen);

/* 1 when BRAID_TEST_QUICK is set to something other than 0: tests then run
 * a reduced matrix (for slow targets such as a simulator). */
int tdev_quick(void);

/* A buffer of `bytes` (at least 1) the test reads and writes directly and
 * the library may use in either mode: malloc, or cudaMallocManaged. NULL
 * on failure, with the reason in tdev_last_error(). Any thread. */
void *tdev_alloc(size_t bytes);

/* Frees a tdev_alloc buffer; NULL is a no-op. In CUDA mode the memory is
 * kept for later tdev_alloc calls rather than given to cudaFree, which
 * would synchronise the whole device (see tdev.c); it is released when
 * the process exits. */
void tdev_free(void *p);

/* Host memory of `bytes` (at least 1, zeroed) for copies from the device
 * (tdev_copy): calloc in host mode, pinned (cudaMallocHost) in CUDA mode,
 * since a copy from the device to pageable memory holds the GPU's context
 * until it is done and so would hold the launch of a peer rank that is a
 * thread sharing the GPU. NULL on failure (tdev_last_error()). Any thread. */
void *tdev_host_alloc(size_t bytes);

/* Frees a tdev_host_alloc buffer; NULL is a no-op. In CUDA mode it waits
 * for the device (cudaFreeHost): call it once the peers' work is done. */
void tdev_host_free(void *p);

/* Creates a rank's stream: non-blocking in CUDA mode, NULL in host mode.
 * Returns 0, or -1 with the reason in tdev_last_error(). */
/* CUDA mode: makes device `rank` current for the calling thread when the
 * process sees more than `rank` devices (returns 1), else leaves the
 * current device (returns 0); host mode: 0. Ranks on devices of their own
 * is what NVLS needs (the simulator: BRAID_CUDASIM_DEVICES). */
int tdev_device_per_rank(int rank);

/* CUDA mode: the devices this process sees (0 on an error); host mode: 0. */
int tdev_device_count(void);

int tdev_stream_create(cudaStream_t *stream_out);

/* Destroys a stream from tdev_stream_create; NULL is a no-op. */
void tdev_stream_destroy(cudaStream_t stream);

/* Waits until everything queued on `stream` has finished, polling with a
 * deadline of timeout_s seconds. Returns 0; -1 on a CUDA error or when the
 * deadline passed, with the reason in tdev_last_error(). A no-op returning
 * 0 in host mode, where the library completes blocking work before the
 * call returns. */
int tdev_stream_sync(cudaStream_t stream, double timeout_s);

/* Copies bytes between any two buffers the library may be given (host,
 * managed or device memory, such as ncclMemAlloc's): memcpy in host mode;
 * in CUDA mode an asynchronous copy on `stream`, waited for (timeout_s).
 * Returns 0, or -1 with the reason in tdev_last_error(). */
int tdev_copy(void *dst, const void *src, size_t bytes, cudaStream_t stream,
              double timeout_s);

/* The reason for the calling thread's last failure in this helper. */
const char *tdev_last_error(void);

/* 1 when this process has made a CUDA call through this helper (tdev_alloc
 * or a stream in CUDA mode): forking ranks that use CUDA is then unsafe. */
int tdev_cuda_touched(void);

/* Rank counts for the one-rank-per-thread and one-rank-per-process tests:
 * host mode runs host_n ranks; CUDA mode shares the GPU among 1, 2, 4 and 8
 * ranks; BRAID_TEST_QUICK runs quick_n only. Fills out (4 entries) and
 * returns how many. Touches no CUDA. */
int tdev_rank_counts(int host_n, int quick_n, int out[4]);

/* One rank's work: returns its failure count and, if any, a message. */
/* In a forked rank process, before its first library call: with
 * BRAID_TEST_HOSTS=k (k > 1) set, stages rank `rank` of n on host
 * "node-<rank * k / n>" (BRAID_HOSTID), so the ranks of different hosts
 * share no memory and their channels go over the net. Returns the host
 * index (0 without BRAID_TEST_HOSTS). */
int tdev_stage_host(int rank, int n);

/* Hands one unique id to n rank processes (n <= 8) forked by the caller,
 * made after the fork (a process must not fork while it runs threads, and
 * in CUDA mode must not have touched CUDA): rank 0 calls ncclGetUniqueId
 * and writes the id to ranks 1..n-1 through one pipe each. Use:
 *   tdev_id_pipes_open before the forks (0, or -1 with the reason in
 *   tdev_last_error(), nothing left open);
 *   tdev_id_pipes_share in each forked rank: 0 with the id in *id_out,
 *   or -1 (tdev_last_error()) when rank 0 could not make or write it or
 *   this rank could not read it; it blocks until rank 0 has written, or
 *   until rank 0 and the parent have closed the pipes (rank 0 died);
 *   tdev_id_pipes_close in the parent once every rank is forked.
 * The struct is the caller's; the pipes are closed by share (in a rank)
 * and close (in the parent). */
typedef struct {
  int n;
  int fd[8][2]; /* rank r reads fd[r][0]; rank 0 writes fd[r][1] */
} tdev_id_pipes_t;

int tdev_id_pipes_open(tdev_id_pipes_t *p, int n);
int tdev_id_pipes_share(tdev_id_pipes_t *p, int rank, ncclUniqueId *id_out);
void tdev_id_pipes_close(tdev_id_pipes_t *p);

/* The parts of a rank process of tdev_run_procs, each called in that
 * process with the caller's ctx (the rank's copy: what it changes there
 * the parent does not see). */
typedef struct {
  /* Before the rank's first library call (NULL: nothing): what its
   * environment needs (BRAID_HOSTID, NCCL_ALGO, ...). */
  void (*before)(const void *ctx, int rank);
  /* The rank's work, given the run's unique id: returns its failure count
   * and, when it failed, a message in msg. */
  int (*run)(const void *ctx, ncclUniqueId id, int n, int rank, char *msg, size_t msglen);
  /* Once run has returned or the id could not be had (NULL: nothing). */
  void (*after)(const void *ctx, int rank);
} tdev_proc_ops_t;

/* Runs ranks 0..n-1 (n <= 8) as processes forked from this one, rank 0
 * making the unique id after the fork (tdev_id_pipes_*), and waits for
 * every one of them. Returns how many ranks failed (run's failures, no id,
 * a non-zero exit or a signal; ranks that could not be forked count too),
 * and the first failure in `first` ("rank R (status S): message"). Call it
 * from a single-threaded process (it forks) that, in CUDA mode, has not
 * touched CUDA; it blocks until every rank has ended (their calls have
 * deadlines of their own). */
int tdev_run_procs(int n, const tdev_proc_ops_t *ops, const void *ctx, char *first,
                   size_t firstlen);

typedef int (*tdev_rank_fn)(ncclUniqueId id, int n, int rank, char *msg, size_t msglen);

/* Runs fn for ranks 0..n-1 (n <= 8) of a fresh unique id, one thread each,
 * and waits for them. Returns the total failure count; msg gets the first
 * failing rank's message (or why the threads could not start). */
int tdev_run_threads(int n, tdev_rank_fn fn, char *msg, size_t msglen);

#endif
