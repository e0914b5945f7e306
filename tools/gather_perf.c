/*
 * gather_perf: nccl-tests-compatible benchmark.
 * Gather: rank k's count elements land in block k of the root's receive
 * buffer; the other ranks' receive buffers stay untouched.
 * Bus bandwidth factor (n-1)/n. Everything else is the shared harness
 * (tools/common/perf.h).
 */
#include "perf.h"

static void shape(size_t count, size_t esize, int nranks, brd_perf_shape_t *out) {
  size_t part = brd_perf_split(count, esize, nranks);
  *out = (brd_perf_shape_t){.count = part, .send_count = part,
                            .recv_count = part * (size_t)nranks,
                            .send_inplace = part, .recv_inplace = 0};
}

static brd_perf_src_t source(const brd_perf_shape_t *sh, int nranks, int root, int rank,
                             size_t j, int *src_rank, size_t *src_idx) {
  (void)nranks;
  if (rank != root) return BRD_PERF_SRC_KEEP;
  *src_rank = (int)(j / sh->count);
  *src_idx = j % sh->count;
  return BRD_PERF_SRC_COPY;
}

static ncclResult_t run(const brd_perf_call_t *c) {
  return ncclGather(c->sendbuff, c->recvbuff, c->count, c->dtype, c->root, c->comm,
                    c->stream);
}

static const brd_perf_coll_t coll = {
    .name = "Gather", .rooted = 1, .inplace = BRD_PERF_INPLACE_CHECKED, .bus_factor_num = 1,
    .bus_factor_minus = 1,
    .shape = shape, .source = source, .run = run};

/* Runs the benchmark; the exit status is nccl-tests' (0 when every value
 * checked out). */
int main(int argc, char **argv) { return brd_perf_main(&coll, argc, argv); }
