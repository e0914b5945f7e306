/*
 * Test helper: one rank of an end-to-end test that runs in a process or
 * thread of its own (tests/host/test_multinode.c, test_nvls_nodes.c): its
 * failures, the first one's message kept, and an all-reduce checked
 * against the CPU reference (coll_ref.h). Buffers come from tdev.h, so
 * the same code runs in host and CUDA mode.
 */
#ifndef BRD_TESTS_TRANK_H
#define BRD_TESTS_TRANK_H

#include <stddef.h>

#include "nccl.h"

typedef struct {
  int rank, n;
  int failures;
  char *msg;             /* the caller's: the first failure, "rank R: ..." */
  size_t msglen;
  cudaStream_t stream;   /* the rank's (tdev_stream_create); NULL in host mode */
  double sync_timeout_s; /* how long a wait for the stream may take */
} trank_t;

/* Makes c's stream (tdev_stream_create) and communicator: rank c->rank
 * of c->n for id (ncclCommInitRank, which blocks until every rank has
 * come). Returns 0 with the communicator in *comm_out; else records the
 * failure, leaves nothing made and returns -1. */
int trank_init(trank_t *c, ncclUniqueId id, ncclComm_t *comm_out);

/* Destroys comm (ncclCommDestroy) and c's stream. */
void trank_fini(trank_t *c, ncclComm_t comm);

/* Counts a failure of rank c; the first one's message goes to c->msg,
 * after "rank R: ". Only c's thread. */
void trank_fail(trank_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* After a call that returned res on c's stream: res when it is not
 * ncclSuccess; else waits for the stream (c->sync_timeout_s) and returns
 * ncclSuccess, or ncclSystemError with a failure recorded when the wait
 * failed. */
ncclResult_t trank_synced(trank_t *c, ncclResult_t res);

/* One ncclAllReduce of count elements of dt with op on comm, in place or
 * out of place (the output poisoned first), from coll_ref's inputs for
 * c->rank, waited for (trank_synced), its output compared with coll_ref's
 * expectation for c->n ranks (ncclAvg: ref_compare's tolerance): a difference
 * is recorded as a failure. Returns the call's result. Aborts when out of
 * memory (a test helper). */
ncclResult_t trank_allreduce_check(trank_t *c, ncclComm_t comm, ncclDataType_t dt,
                                   ncclRedOp_t op, int inplace, size_t count);

#endif
