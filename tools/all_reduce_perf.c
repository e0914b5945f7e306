/*
 * all_reduce_perf: nccl-tests-compatible benchmark.
 * All-reduce: every rank ends with the reduction of all ranks' count elements.
 * Bus bandwidth factor 2(n-1)/n. Everything else is the shared harness
 * (tools/common/perf.h).
 */
#include "perf.h"

static void shape(size_t count, size_t esize, int nranks, brd_perf_shape_t *out) {
  (void)esize;
  (void)nranks;
  *out = (brd_perf_shape_t){.count = count, .send_count = count, .recv_count = count};
}

static brd_perf_src_t source(const brd_perf_shape_t *sh, int nranks, int root, int rank,
                             size_t j, int *src_rank, size_t *src_idx) {
  (void)sh;
  (void)nranks;
  (void)root;
  (void)rank;
  (void)src_rank;
  *src_idx = j;
  return BRD_PERF_SRC_REDUCE;
}

static ncclResult_t run(const brd_perf_call_t *c) {
  return ncclAllReduce(c->sendbuff, c->recvbuff, c->count, c->dtype, c->op, c->comm,
                       c->stream);
}

static const brd_perf_coll_t coll = {
    .name = "AllReduce", .reduces = 1, .op_column = 1, .inplace = BRD_PERF_INPLACE_CHECKED,
    .bus_factor_num = 2, .bus_factor_minus = 1,
    .shape = shape, .source = source, .run = run};

/* Runs the benchmark; the exit status is nccl-tests' (0 when every value
 * checked out). */
int main(int argc, char **argv) { return brd_perf_main(&coll, argc, argv); }
