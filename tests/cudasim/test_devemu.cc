/*
 * The CUDA simulator's device side (devemu.h) on kernels of its own: what a
 * GPU lets a plain store do that a CPU would not, and what it does not.
 * Compiled as exec.cu is in the cudasim-dev flavour (devemu.h force-included),
 * linked against that flavour's runtime and grid.
 *
 * Memory is one device allocation of 64-byte cells, so no two cells share
 * the 16 bytes a delayed store is kept in. The host writes every cell
 * first; each kernel reports what it read through volatile stores, which
 * are never delayed, and the host reads the cells after the kernel.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CELL = 8, NCELL = 16, DEADLINE_NS = 10000000000ull };

/* Cells. */
enum { C_DATA, C_FLAG, C_ACK, C_SEEN, C_OWN, C_AFTER, C_TIMEOUT, C_X, C_Y };

static __device__ uint64_t *cell(uint64_t *m, int c) { return m + (size_t)c * CELL; }

/* Polls c until it is 1 (cells start at 7) or the deadline; a timeout is
 * recorded. */
static __device__ void await(uint64_t *m, int c) {
  uint64_t end = globaltimer_ns() + DEADLINE_NS;
  while (ld_volatile_u64(cell(m, c)) != 1) {
    if (globaltimer_ns() > end) {
      st_volatile_u64(cell(m, C_TIMEOUT), 1);
      return;
    }
  }
}

/* Block 0 stores DATA plainly, then (fenced or not) raises FLAG and waits
 * for block 1, which reads DATA once FLAG is up and reports it in SEEN. */
__global__ void publish(uint64_t *m, int fence) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) {
    __stcg((unsigned long long *)cell(m, C_DATA), 42ull);
    if (fence) __threadfence_system();
    st_volatile_u64(cell(m, C_FLAG), 1);
    await(m, C_ACK);
  } else {
    await(m, C_FLAG);
    st_volatile_u64(cell(m, C_SEEN), __ldcg((const unsigned long long *)cell(m, C_DATA)));
    st_volatile_u64(cell(m, C_ACK), 1);
  }
}

/* Block 0's thread 1 stores DATA and reads it back (OWN); after a barrier
 * its thread 0 reads it (AFTER) and, with no fence, raises FLAG for block
 * 1, which reads DATA (SEEN). */
__global__ void barrier(uint64_t *m) {
  if (blockIdx.x == 0) {
    if (threadIdx.x == 1) {
      __stcg((unsigned long long *)cell(m, C_DATA), 5ull);
      st_volatile_u64(cell(m, C_OWN), __ldcg((const unsigned long long *)cell(m, C_DATA)));
    }
    __syncthreads_or(0);
    if (threadIdx.x == 0) {
      st_volatile_u64(cell(m, C_AFTER), __ldcg((const unsigned long long *)cell(m, C_DATA)));
      st_volatile_u64(cell(m, C_FLAG), 1);
      await(m, C_ACK);
    }
  } else if (threadIdx.x == 0) {
    await(m, C_FLAG);
    st_volatile_u64(cell(m, C_SEEN), __ldcg((const unsigned long long *)cell(m, C_DATA)));
    st_volatile_u64(cell(m, C_ACK), 1);
  }
}

/* A plain store, then a volatile store (X) or an atomic add (Y) at the
 * same address: the later access wins, as one thread's accesses to one
 * address are ordered on a GPU. */
__global__ void same_address(uint64_t *m) {
  __stcg((unsigned long long *)cell(m, C_X), 1ull);
  st_volatile_u64(cell(m, C_X), 2);
  __stcg((unsigned int *)cell(m, C_Y), 10u);
  atomicAdd((unsigned int *)cell(m, C_Y), 1u);
}

static int failures;

#define CHECK(cond, ...)                                  \
  do {                                                    \
    if (!(cond)) {                                        \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      fprintf(stderr, __VA_ARGS__);                       \
      fprintf(stderr, "\n");                              \
      failures++;                                         \
    }                                                     \
  } while (0)

/* Sets every cell to 7, runs kernel k on grid x block, reads the cells. */
static bool run(const void *k, unsigned grid, unsigned block, void **args,
                uint64_t *dev, uint64_t *host) {
  uint64_t init[NCELL * CELL];
  for (int i = 0; i < NCELL * CELL; i++) init[i] = 7;
  cudaError_t e = cudaMemcpy(dev, init, sizeof(init), cudaMemcpyHostToDevice);
  if (e == cudaSuccess) e = cudaLaunchKernel(k, dim3(grid), dim3(block), args, 0, 0);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e == cudaSuccess) e = cudaMemcpy(host, dev, sizeof(init), cudaMemcpyDeviceToHost);
  CHECK(e == cudaSuccess, "kernel run: %s", cudaGetErrorName(e));
  return e == cudaSuccess;
}

int main(void) {
  const char *d = getenv("BRAID_CUDASIM_DELAY_STORES");
  if (d != NULL && atoi(d) == 0) {
    printf("SKIP: BRAID_CUDASIM_DELAY_STORES=0 turns off what this checks\n");
    return 77;
  }
  uint64_t *dev = NULL, host[NCELL * CELL];
  cudaError_t e = cudaMalloc((void **)&dev, sizeof(host));
  CHECK(e == cudaSuccess, "cudaMalloc: %s", cudaGetErrorName(e));
  if (e != cudaSuccess) return 1;
  int fence = 0;
  void *args[2] = {&dev, &fence};

  /* Unfenced: the other block reads the memory as it was. */
  if (run(BRD_KERNEL(publish), 2, 2, args, dev, host)) {
    CHECK(host[C_TIMEOUT * CELL] == 7, "publish: a wait timed out");
    CHECK(host[C_SEEN * CELL] == 7, "unfenced store seen by another block: %llu, want 7",
          (unsigned long long)host[C_SEEN * CELL]);
    CHECK(host[C_DATA * CELL] == 42, "unfenced store not out at kernel end: %llu, want 42",
          (unsigned long long)host[C_DATA * CELL]);
  }
  /* Fenced: it sees the store. */
  fence = 1;
  if (run(BRD_KERNEL(publish), 2, 2, args, dev, host)) {
    CHECK(host[C_TIMEOUT * CELL] == 7, "publish: a wait timed out");
    CHECK(host[C_SEEN * CELL] == 42, "fenced store not seen by another block: %llu, want 42",
          (unsigned long long)host[C_SEEN * CELL]);
  }
  /* A barrier shows the store to the block, not to other blocks. */
  if (run(BRD_KERNEL(barrier), 2, 2, args, dev, host)) {
    CHECK(host[C_TIMEOUT * CELL] == 7, "barrier: a wait timed out");
    CHECK(host[C_OWN * CELL] == 5, "own store not read back: %llu, want 5",
          (unsigned long long)host[C_OWN * CELL]);
    CHECK(host[C_AFTER * CELL] == 5, "store not seen by its block after a barrier: %llu, "
          "want 5", (unsigned long long)host[C_AFTER * CELL]);
    CHECK(host[C_SEEN * CELL] == 7, "store seen by another block with no fence: %llu, "
          "want 7", (unsigned long long)host[C_SEEN * CELL]);
    CHECK(host[C_DATA * CELL] == 5, "store not out at kernel end: %llu, want 5",
          (unsigned long long)host[C_DATA * CELL]);
  }
  if (run(BRD_KERNEL(same_address), 1, 1, args, dev, host)) {
    CHECK(host[C_X * CELL] == 2, "volatile store undone by an earlier plain one: %llu, "
          "want 2", (unsigned long long)host[C_X * CELL]);
    unsigned y;
    memcpy(&y, &host[C_Y * CELL], sizeof(y));
    CHECK(y == 11, "atomic add after a plain store: %u, want 11", y);
  }
  cudaFree(dev);
  printf("%s: %d check(s) failed\n", failures ? "FAIL" : "PASS", failures);
  return failures ? 1 : 0;
}
