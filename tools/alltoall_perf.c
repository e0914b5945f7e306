/*
 * alltoall_perf: nccl-tests-compatible benchmark.
 * All-to-all: block j of rank k's send buffer lands in block k of rank j's
 * receive buffer. NCCL defines no in-place form, so that half is N/A.
 * Bus bandwidth factor (n-1)/n. Everything else is the shared harness
 * (tools/common/perf.h).
 */
#include "perf.h"

static void shape(size_t count, size_t esize, int nranks, brd_perf_shape_t *out) {
  size_t part = brd_perf_split(count, esize, nranks);
  *out = (brd_perf_shape_t){.count = part, .send_count = part * (size_t)nranks,
                            .recv_count = part * (size_t)nranks};
}

static brd_perf_src_t source(const brd_perf_shape_t *sh, int nranks, int root, int rank,
                             size_t j, int *src_rank, size_t *src_idx) {
  (void)nranks;
  (void)root;
  *src_rank = (int)(j / sh->count);
  *src_idx = (size_t)rank * sh->count + j % sh->count;
  return BRD_PERF_SRC_COPY;
}

static ncclResult_t run(const brd_perf_call_t *c) {
  return ncclAlltoAll(c->sendbuff, c->recvbuff, c->count, c->dtype, c->comm, c->stream);
}

static const brd_perf_coll_t coll = {
    .name = "AlltoAll", .inplace = BRD_PERF_INPLACE_NONE, .bus_factor_num = 1,
    .bus_factor_minus = 1,
    .shape = shape, .source = source, .run = run};

/* Runs the benchmark; the exit status is nccl-tests' (0 when every value
 * checked out). */
int main(int argc, char **argv) { return brd_perf_main(&coll, argc, argv); }
