/*
 * Braid: external profiler plugins (ncclProfiler_v1 .. v6).
 *
 * The library is loaded once per process, on the first communicator's
 * init, from NCCL_PROFILER_PLUGIN by NCCL's rules (unset: libnccl-profiler.so;
 * a name X: X, then libnccl-profiler-X.so; a path: that file; none: no
 * profiler). The newest ncclProfiler_vN it exports wins. A failed load is
 * remembered for the process. Each communicator then gets its own plugin
 * context (init .. finalize) and its own activation mask: init receives
 * NCCL_PROFILE_EVENT_MASK (default 0) and writes the mask it wants. An init
 * that fails is WARNed and that communicator runs without the profiler.
 *
 * Events (the types the version knows, filtered by the mask):
 *   Group      one per launch (a group's calls on this communicator, or one
 *              call outside a group); parent NULL
 *   GroupApi   (v5+) the same span; parent NULL
 *   CollApi / P2pApi (v5+) one per call, parent GroupApi
 *   KernelLaunch (v5+) the executor run of the launch, parent GroupApi
 *   Coll / P2p one per call; parent Group (v1..v4) or the call's CollApi /
 *              P2pApi (v5+, with parentGroup = Group). In host mode a Coll
 *              spans its works (from its first piece's start to its last
 *              piece's end); a backend without per-work hooks (CUDA)
 *              starts them at the launch (NCCL: "enqueued") and stops
 *              them once the stream is past the works (see KernelCh;
 *              at the launch's end when the plugin wants no KernelCh,
 *              ProxyOp or ProxyStep events)
 *   KernelCh   (v3+) one per block of each work, channelId = block; parent
 *              the work's Coll (or the launch's first P2p). Host mode:
 *              around the work. CUDA mode: from the launch until the
 *              stream reaches a host function queued after the works
 *              (brd_prof_launch_enqueued; none while capturing: then they
 *              stop at the launch's end)
 *   ProxyOp / ProxyStep  one per message the proxy of port channels sends
 *              or receives while a launch is live, with one step each;
 *              ProxyOp's parent is the Coll/P2p of the call it serves
 * Every started event is stopped once, children before parents: a call
 * whose proxy operations (or, in CUDA mode, kernel) outlive it keeps its
 * Coll/P2p and API events open until the last of them stops, and the
 * launch's Group/GroupApi wait for all its calls' (they are then stopped
 * by the proxy thread or the CUDA callback thread).
 *
 * The hooks below are called only when comm->prof is not NULL, so a
 * communicator without a plugin pays one branch per hook.
 */
#ifndef BRD_CORE_PROFILER_H
#define BRD_CORE_PROFILER_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "core/enqueue.h"

struct ncclComm;
struct brd_works;
typedef struct brd_prof brd_prof_t;

/* Loads the process's profiler plugin if that was not tried yet and makes
 * comm's context with the plugin's init. *out is NULL when there is no
 * plugin, it was disabled, an earlier load failed, or init failed (WARN:
 * the communicator runs without it). ncclSystemError only when out of
 * memory. The init thread; blocks on dlopen and the plugin's init. */
ncclResult_t brd_prof_create(struct ncclComm *comm, brd_prof_t **out);

/* Calls finalize and drops the process's reference (the library is closed
 * with the last: "PROFILER/Plugin: Closing profiler plugin <name>"). NULL
 * is a no-op. After the communicator's runtime (and proxy) is gone. */
void brd_prof_destroy(brd_prof_t *p);

/* The plugin's name, its ABI version (1 .. 6), and the mask init wrote. */
const char *brd_prof_name(const brd_prof_t *p);
int brd_prof_version(const brd_prof_t *p);
int brd_prof_mask(const brd_prof_t *p);

/* A launch of ncalls calls begins (Group, GroupApi, the API events). The
 * launching thread; one launch at a time per communicator. callbacks: its
 * events may end in a completion callback on another thread (CUDA mode);
 * proxy: the communicator has a proxy thread. With neither (or a plugin
 * that wants no proxy events) the launch's bookkeeping takes no lock. */
void brd_prof_launch_begin(brd_prof_t *p, const brd_call_t *calls, int ncalls, int callbacks,
                           int proxy);

/* The launch's works are built and about to run. per_work: the backend
 * calls brd_prof_work_begin/end around each work; otherwise Coll/P2p
 * events start here and stop at brd_prof_launch_end. */
void brd_prof_launch_works(brd_prof_t *p, const struct brd_works *ws, int per_work);

/* Work w of the launch's works starts / has finished (host backend,
 * the thread that sequences the works). */
void brd_prof_work_begin(brd_prof_t *p, int w);
void brd_prof_work_end(brd_prof_t *p, int w);

/* The launch is over (res: its result): every event it started and did
 * not stop yet is stopped, children first. */
void brd_prof_launch_end(brd_prof_t *p, ncclResult_t res);

/* The CUDA backend enqueued the launch's works on its stream. Returns 1
 * with a host function and its argument that the caller must run once
 * (cudaLaunchHostFunc on that stream, or directly when that fails) when
 * the stream gets there: the launch's KernelCh events stop then, and its
 * calls' events stay open (their stop waits) until then, so proxy
 * operations of the running kernel find them. 0: nothing to run (the
 * plugin wants none of those events, or a host-backend launch). Not while
 * the stream is captured. The launching thread, before launch_end. */
int brd_prof_launch_enqueued(brd_prof_t *p, void (**fn_out)(void *), void **arg_out);

/* A proxy operation's events (the proxy's, zeroed; NULL: not tracked). */
typedef struct brd_prof_op {
  void *op, *step;    /* ProxyOp, ProxyStep handles */
  void *owner;        /* the launch record holding its parent open */
  int call;           /* the parent's call in it */
} brd_prof_op_t;

/* A proxy operation: one message of `bytes` to (is_send) or from peer.
 * Its ProxyOp's parent is the Coll/P2p event of the call the message
 * serves (the send or receive with that peer, else the collective running
 * now), which stays open until brd_prof_proxy_stop; a message outside
 * every launch is not tracked. The proxy thread; takes the context's lock
 * briefly. */
void brd_prof_proxy_start(brd_prof_t *p, int peer, int is_send, size_t bytes, brd_prof_op_t *op);
void brd_prof_proxy_stop(brd_prof_t *p, brd_prof_op_t *op);

/* Forgets a failed or finished load so the next brd_prof_create reads
 * NCCL_PROFILER_PLUGIN again. For tests: no context may be alive. */
void brd_prof_reset(void);

#endif /* BRD_CORE_PROFILER_H */
