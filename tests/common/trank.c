/*
 * Test helper: one rank's failures and checked all-reduce (trank.h).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "coll_ref.h"
#include "tdev.h"
#include "trank.h"

/* See trank.h. */
void trank_fail(trank_t *c, const char *fmt, ...) {
  if (c->failures++ == 0) {
    va_list ap;
    va_start(ap, fmt);
    int k = snprintf(c->msg, c->msglen, "rank %d: ", c->rank);
    vsnprintf(c->msg + k, c->msglen - (size_t)k, fmt, ap);
    va_end(ap);
  }
}

/* See trank.h. */
ncclResult_t trank_synced(trank_t *c, ncclResult_t res) {
  if (res == ncclSuccess && tdev_stream_sync(c->stream, c->sync_timeout_s) != 0) {
    trank_fail(c, "stream: %s (%s)", tdev_last_error(), ncclGetLastError(NULL));
    return ncclSystemError;
  }
  return res;
}

/* See trank.h. */
int trank_init(trank_t *c, ncclUniqueId id, ncclComm_t *comm_out) {
  ncclComm_t comm;
  if (tdev_stream_create(&c->stream) != 0) {
    trank_fail(c, "%s", tdev_last_error());
    return -1;
  }
  if (ncclCommInitRank(&comm, c->n, id, c->rank) != ncclSuccess) {
    trank_fail(c, "init: %s", ncclGetLastError(NULL));
    tdev_stream_destroy(c->stream);
    c->stream = NULL;
    return -1;
  }
  *comm_out = comm;
  return 0;
}

/* See trank.h. */
void trank_fini(trank_t *c, ncclComm_t comm) {
  ncclCommDestroy(comm);
  tdev_stream_destroy(c->stream);
  c->stream = NULL;
}

/* A buffer the library may be given (managed memory in CUDA mode). */
static void *buf_alloc(size_t bytes) {
  void *p = tdev_alloc(bytes ? bytes : 1);
  if (p == NULL) abort();
  return p;
}

/* See trank.h. */
ncclResult_t trank_allreduce_check(trank_t *c, ncclComm_t comm, ncclDataType_t dt,
                                   ncclRedOp_t op, int inplace, size_t count) {
  size_t bytes = count * ref_dtype_size(dt);
  void *send = buf_alloc(bytes), *recv = inplace ? send : buf_alloc(bytes);
  void *expect = malloc(bytes > 0 ? bytes : 1);
  if (expect == NULL) abort();
  ref_fill_input(dt, op, c->rank, send, count);
  if (!inplace) ref_poison(dt, recv, count);
  ncclResult_t res = trank_synced(c, ncclAllReduce(send, recv, count, dt, op, comm, c->stream));
  if (res == ncclSuccess) {
    ref_reduce_expect(dt, op, c->n, 1.0, expect, count);
    char m[160] = "";
    size_t wrong = ref_compare(dt, op == ncclAvg, recv, expect, count, m, sizeof(m));
    if (wrong)
      trank_fail(c, "all-reduce %s %s %s count %zu: %zu wrong, %s", ref_dtype_name(dt),
                 ref_op_name(op), inplace ? "in place" : "out of place", count, wrong, m);
  }
  if (!inplace) tdev_free(recv);
  tdev_free(send);
  free(expect);
  return res;
}
