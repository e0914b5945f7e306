/*
 * sendrecv_perf: nccl-tests-compatible benchmark.
 * Send/receive: each rank sends count elements to the next rank and
 * receives from the previous one, in one group. As in nccl-tests the op
 * column is printed though unused, and the in-place half (sending from and
 * receiving into one buffer) is timed but not checked.
 * Bus bandwidth factor 1. Everything else is the shared harness
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
  (void)root;
  *src_rank = (rank - 1 + nranks) % nranks;
  *src_idx = j;
  return BRD_PERF_SRC_COPY;
}

static ncclResult_t run(const brd_perf_call_t *c) {
  ncclResult_t res = ncclGroupStart();
  if (res != ncclSuccess) return res;
  res = ncclSend(c->sendbuff, c->count, c->dtype, (c->rank + 1) % c->nranks, c->comm,
                 c->stream);
  if (res == ncclSuccess)
    res = ncclRecv(c->recvbuff, c->count, c->dtype, (c->rank - 1 + c->nranks) % c->nranks,
                   c->comm, c->stream);
  /* Close the group whatever happened, so the thread is not left in it. */
  ncclResult_t end = ncclGroupEnd();
  return res != ncclSuccess ? res : end;
}

static const brd_perf_coll_t coll = {
    .name = "SendRecv", .op_column = 1, .inplace = BRD_PERF_INPLACE_UNCHECKED,
    .bus_factor_num = 1, .bus_factor_flat = 1,
    .shape = shape, .source = source, .run = run};

/* Runs the benchmark; the exit status is nccl-tests' (0 when every value
 * checked out). */
int main(int argc, char **argv) { return brd_perf_main(&coll, argc, argv); }
