/*
 * Braid: running checked calls. One launch runs every call a communicator
 * collected (one call outside a group, the whole group inside one) as one
 * executor launch: the collectives in call order, then the group's sends
 * and receives as one point-to-point plan.
 *
 * The per-communicator runtime (window.h: channels, plan cache, sequence
 * numbers, the backend) is created on the first launch, which every rank
 * reaches at the same point of its call sequence: creating it exchanges
 * segment handles over the bootstrap network.
 */
#ifndef BRD_CORE_LAUNCH_H
#define BRD_CORE_LAUNCH_H

#include <stdint.h>

#include "nccl.h"
#include "core/enqueue.h"
#include "device/exec_host.h"

struct brd_backend_rma; /* core/backend.h */

struct ncclComm;
struct brd_rt;

/* Runs ncalls checked calls of comm, in order, as one launch. Host mode
 * completes them before returning (there is no stream to wait on). On a
 * failure the communicator's async error is set too, except for argument
 * errors (ncclInvalidArgument, ncclInvalidUsage) that leave the
 * communicator usable. Blocks on peers; the caller's thread, or a group
 * worker thread, one at a time per communicator. */
ncclResult_t brd_launch_run(struct ncclComm *comm, const brd_call_t *calls,
                            int ncalls);

/* A nonblocking group is about to run comm's calls on a helper thread:
 * marks the runtime busy (brd_rt_destroy waits for it) and sets the
 * communicator's async error to ncclInProgress. ncclSystemError when out
 * of memory. The group's calling thread, before the helper starts. */
ncclResult_t brd_launch_async_begin(struct ncclComm *comm);

/* The helper thread is done with comm: publishes res as the async error
 * (what ncclCommGetAsyncError reports) and releases the runtime. The
 * caller must not touch comm afterwards (its owner may destroy it at
 * once). Never blocks. */
void brd_launch_async_end(struct ncclComm *comm, ncclResult_t res);

/* The one-sided calls (rma.c). brd_launch_connect makes the runtime's
 * window if no launch has yet: collective (every rank calls it at the same
 * point, as ncclCommWindowRegister is), with fn naming the call for
 * messages. brd_launch_rma runs this rank's part of a one-sided plan on
 * stream through the backend's rma_run, as a launch of its own: ordered
 * after the rank's earlier launches, failures recorded as brd_launch_run
 * does. ncclInvalidUsage (WARN) before brd_launch_connect or where the
 * backend has no one-sided runs. The caller's thread. */
ncclResult_t brd_launch_connect(struct ncclComm *comm, const char *fn);

/* The one-sided signal counters in the runtime's windows (window.h):
 * *mine this rank's, peers[p] rank p's as the executor addresses them
 * (peers: nranks entries, the caller's), *words each one's length, *gen
 * the runtime's generation (a new runtime, after ncclCommSuspend with
 * NCCL_SUSPEND_MEM, starts its counters at zero). ncclInvalidUsage (WARN
 * naming fn) when the runtime is not connected, or some peer is reached
 * over a net (not yet). The caller's thread. */
ncclResult_t brd_launch_rma_words(struct ncclComm *comm, const char *fn, uint64_t **mine,
                                  uint64_t **peers, uint64_t *words, uint64_t *gen);
ncclResult_t brd_launch_rma(struct ncclComm *comm, const struct brd_backend_rma *r,
                            cudaStream_t stream, const char *fn);

/* Launches comm has run so far (each ends with every call it held done):
 * a group of many calls on one communicator counts one. 0 before the
 * first. Any thread; a plain read for tests and logs. */
uint64_t brd_launch_count(struct ncclComm *comm);

/* The cost model's estimate, in microseconds, of one checked call on comm
 * (ncclGroupSimulateEnd): once comm has connected (its first launch), the
 * plan its launch would run, priced from its own ops (brd_works_estimate;
 * pipe_ops: the calls of this collective in the group); before that, and
 * for sends and receives, the tuner's formula for its choice. Local: no
 * peer is contacted and nothing runs. Calling thread. */
ncclResult_t brd_launch_estimate(struct ncclComm *comm, const brd_call_t *call, int pipe_ops,
                                 float *us_out);

/* Frees a runtime (comm teardown), first waiting (bounded, up to the
 * collective timeout) for launches still running on it: another thread's
 * stuck in a wait until the abort flag its caller raised stops it, or a
 * nonblocking group's helper; then its backend, which waits (bounded) for
 * the executor to leave the windows. Local: never waits on peers. NULL is
 * a no-op. */
void brd_rt_destroy(struct brd_rt *rt);

/* Reads comm's asynchronous executor failures (CUDA mode: a kernel's
 * timeout or abort), storing one in comm->async_error too: ncclSuccess when
 * none, or before the first connection. Never blocks; any thread
 * (ncclCommGetAsyncError's). */
ncclResult_t brd_rt_poll(struct ncclComm *comm);

/* Raises the executor's abort for comm's running and later work, so it
 * leaves at its next wait (host mode watches comm->abort_flag itself).
 * Never blocks; any thread (ncclCommAbort's, before the teardown). */
void brd_rt_abort(struct ncclComm *comm);

/* Tells the backend a peer is gone (backend.h peer_gone): queued device
 * work stuck for `ns` fails as a hang. Never blocks; any thread. */
void brd_rt_peer_gone(struct ncclComm *comm, uint64_t ns);

/* Device memory comm's runtime owns now, in bytes (the backend's count of
 * its allocations): 0 before the first launch, after a release, and in
 * host mode. Never blocks; any thread (ncclCommMemStats'). */
uint64_t brd_rt_mem_bytes(struct ncclComm *comm);

/* Waits (BRAID_TIMEOUT at most) until this rank's launched work has left
 * the executor, so that no kernel of it still reads a peer's window:
 * ncclSuccess at once in host mode or before the first launch;
 * ncclRemoteError (WARN) when it still runs at the deadline or abort. The
 * launching thread. */
ncclResult_t brd_rt_drain(struct ncclComm *comm);

/* Unpublishes and frees comm's runtime (suspend): the next launch builds
 * it again, with the peers, as the first did. Waits for threads reading it
 * (brd_rt_poll, brd_rt_abort, brd_rt_mem_bytes) to leave first; the caller
 * has drained every rank (brd_rt_drain, then a barrier). Local. The
 * launching thread, no launch running. */
ncclResult_t brd_rt_release(struct ncclComm *comm);

#endif /* BRD_CORE_LAUNCH_H */
