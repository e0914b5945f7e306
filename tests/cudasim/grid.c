/*
 * Braid CUDA simulator, the grid: runs kernels compiled for the CPU
 * (devemu.h) with CUDA's execution model, so src/device/exec.cu itself runs
 * where there is no GPU.
 *
 * Every block of a grid is one CPU thread, all started together, so blocks
 * that wait on each other (the executor's blocks all must be resident) make
 * progress. The threads of a block are fibers (ucontext) on their block's
 * CPU thread: fiber t runs until it reaches __syncthreads_or or returns,
 * then fiber t + 1 runs; when every live fiber has reached the barrier the
 * OR of their predicates is handed back to each and the round starts
 * again. A fiber that returned counts as arrived, as an exited thread does
 * on a GPU. Block-shared memory is thread-local storage of the block's CPU
 * thread, which every fiber of the block shares (devemu.h's __shared__).
 *
 * A fiber starts with makecontext/swapcontext; afterwards switches are
 * _setjmp/_longjmp between the fiber's stack and the scheduler's, which
 * unlike swapcontext make no system call (fibers share a signal mask).
 *
 * A block has BRAID_CUDASIM_THREADS threads (default 32) or the launch's
 * block size if smaller; blockDim says which, and code that strides by
 * blockDim is exercised with fewer, wider strides than on a GPU.
 */
#undef _FORTIFY_SOURCE /* longjmp between stacks is the point here */
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>

#include "cudasim.h"

/* A fiber's stack: kernel frames hold by-value kernel parameters (4 KiB)
 * and a few KiB of locals; pages are only touched as used. */
#define FIBER_STACK (256u << 10)

typedef struct block_run {
  const brd_cudasim_kernel_t *kernel;
  void *args;               /* the launch's packed parameters (shared) */
  dim3 grid, block;         /* block: as the kernel sees it (capped) */
  uint3 block_idx;
  uint3 thread_idx;         /* of the running fiber */
  unsigned nthreads;
  unsigned cur;             /* running fiber */
  ucontext_t start;         /* the scheduler, while it starts a fiber */
  jmp_buf sched;            /* the scheduler, waiting for the running fiber */
  ucontext_t *fibers;       /* owned: nthreads (used to start them) */
  jmp_buf *parked;          /* owned: nthreads, where each waits */
  unsigned char *started;   /* owned */
  char *stacks;             /* owned: nthreads * FIBER_STACK, mmap */
  unsigned char *done;      /* owned: fiber returned */
  int pred;                 /* OR of the predicates of this barrier */
  int result;               /* the last barrier's OR */
} block_run_t;

static _Thread_local block_run_t *tl_block;

/* The grid's settings from the environment: BRAID_CUDASIM_JITTER (default
 * 0) and BRAID_CUDASIM_THREADS (default 32), read once, at the first
 * launch (pthread_once orders the writes before every reader: grids of
 * several streams launch from several threads, and every block thread
 * reads the jitter). */
static pthread_once_t settings_once = PTHREAD_ONCE_INIT;
static int jitter_level; /* written once, under settings_once */
static int threads_cap;  /* written once, under settings_once */

/* The positive integer in environment variable name, or dflt when it is
 * unset, not a number or not positive. */
static int env_positive(const char *name, int dflt) {
  const char *v = getenv(name);
  int n = v != NULL ? atoi(v) : dflt;
  return n > 0 ? n : dflt;
}

static void settings_read(void) {
  jitter_level = env_positive("BRAID_CUDASIM_JITTER", 0);
  threads_cap = env_positive("BRAID_CUDASIM_THREADS", 32);
}

/* BRAID_CUDASIM_JITTER=N (devemu.h): each block starts after a random
 * delay of up to 20 N microseconds, so blocks of a grid, and grids of
 * different streams, start in an order that changes from run to run, as
 * a GPU's block scheduler may start them. 0 (default): at once. */
static void start_jitter(unsigned salt) {
  pthread_once(&settings_once, settings_read);
  int level = jitter_level;
  if (level == 0) return;
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  uint64_t x = ((uint64_t)ts.tv_nsec ^ ((uint64_t)salt << 32)) * 0x9e3779b97f4a7c15ull;
  x ^= x >> 29;
  struct timespec d = {0, (long)(x % (20u * (unsigned)level)) * 1000};
  nanosleep(&d, NULL);
}

static int threads_per_block(unsigned launch) {
  pthread_once(&settings_once, settings_read);
  int cap = threads_cap;
  return launch < (unsigned)cap ? (int)launch : cap;
}

const uint3 *brd_cudasim_thread_idx(void) { return &tl_block->thread_idx; }
const uint3 *brd_cudasim_block_idx(void) { return &tl_block->block_idx; }
const dim3 *brd_cudasim_block_dim(void) { return &tl_block->block; }
const dim3 *brd_cudasim_grid_dim(void) { return &tl_block->grid; }

int brd_cudasim_syncthreads_or(int pred) {
  block_run_t *b = tl_block;
  if (pred) b->pred = 1;
  if (_setjmp(b->parked[b->cur]) == 0) _longjmp(b->sched, 1);
  return b->result;
}

static void fiber_main(void) {
  block_run_t *b = tl_block;
  b->kernel->call(b->args);
  b->done[b->cur] = 1;
  _longjmp(b->sched, 1); /* never returns: the stack is done with */
}

/* Runs fiber t until it reaches a barrier or returns. */
static __attribute__((noinline)) void run_fiber(block_run_t *b, unsigned t) {
  b->cur = t;
  b->thread_idx.x = t % b->block.x;
  b->thread_idx.y = t / b->block.x % b->block.y;
  b->thread_idx.z = t / (b->block.x * b->block.y);
  if (_setjmp(b->sched) == 0) {
    if (b->started[t]) _longjmp(b->parked[t], 1);
    b->started[t] = 1;
    swapcontext(&b->start, &b->fibers[t]);
  }
}

static void *block_main(void *p) {
  block_run_t *b = p;
  tl_block = b;
  start_jitter(b->block_idx.x);
  unsigned n = b->nthreads;
  for (unsigned t = 0; t < n; t++) {
    ucontext_t *f = &b->fibers[t];
    getcontext(f);
    f->uc_stack.ss_sp = b->stacks + (size_t)t * FIBER_STACK;
    f->uc_stack.ss_size = FIBER_STACK;
    f->uc_link = NULL;
    makecontext(f, fiber_main, 0);
  }
  for (;;) {
    unsigned live = 0;
    b->pred = 0;
    for (unsigned t = 0; t < n; t++) {
      if (b->done[t]) continue;
      run_fiber(b, t);
      if (!b->done[t]) live++;
    }
    if (live == 0) break;
    b->result = b->pred;
  }
  return NULL;
}

/* Runs a whole grid; returns when every block has. The stream worker's
 * thread. */
void brd_cudasim_grid_run(const brd_cudasim_kernel_t *k, void *args, dim3 grid,
                          dim3 block) {
  unsigned nblocks = grid.x * grid.y * grid.z;
  unsigned launch_threads = block.x * block.y * block.z;
  dim3 shape = block;
  int n = threads_per_block(launch_threads);
  if ((unsigned)n < launch_threads) { /* a 1-D block of the capped size */
    shape.x = (unsigned)n;
    shape.y = shape.z = 1;
  }
  block_run_t *runs = calloc(nblocks, sizeof(*runs));
  pthread_t *tids = calloc(nblocks, sizeof(*tids));
  if (runs == NULL || tids == NULL) {
    brd_cudasim_fault(cudaErrorMemoryAllocation, "no host memory for a grid");
    goto out;
  }
  unsigned started = 0;
  for (unsigned i = 0; i < nblocks; i++) {
    block_run_t *b = &runs[i];
    b->kernel = k;
    b->args = args;
    b->grid = grid;
    b->block = shape;
    b->nthreads = (unsigned)n;
    b->block_idx.x = i % grid.x;
    b->block_idx.y = i / grid.x % grid.y;
    b->block_idx.z = i / (grid.x * grid.y);
    b->fibers = calloc((size_t)n, sizeof(*b->fibers));
    b->done = calloc((size_t)n, 1);
    b->started = calloc((size_t)n, 1);
    b->parked = calloc((size_t)n, sizeof(*b->parked));
    void *st = mmap(NULL, (size_t)n * FIBER_STACK, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    b->stacks = st == MAP_FAILED ? NULL : st;
    if (b->fibers == NULL || b->done == NULL || b->started == NULL ||
        b->parked == NULL || b->stacks == NULL ||
        pthread_create(&tids[i], NULL, block_main, b) != 0) {
      /* Blocks already started may wait for this one: a GPU could not
       * have launched the grid at all. Report it as a fault; the started
       * blocks leave at their deadline. */
      brd_cudasim_fault(cudaErrorLaunchOutOfResources,
                        "could not start a CPU thread for every block of a grid");
      break;
    }
    started++;
  }
  for (unsigned i = 0; i < started; i++) pthread_join(tids[i], NULL);
  for (unsigned i = 0; i < nblocks; i++) {
    free(runs[i].fibers);
    free(runs[i].done);
    free(runs[i].started);
    free(runs[i].parked);
    if (runs[i].stacks != NULL) munmap(runs[i].stacks, (size_t)n * FIBER_STACK);
  }
out:
  free(runs);
  free(tids);
}
