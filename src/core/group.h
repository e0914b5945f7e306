/*
 * Braid: group semantics (ncclGroupStart/End), as NCCL defines them.
 *
 * Depth is per thread and groups nest; only the outermost ncclGroupEnd
 * launches. Every call of a group on one communicator becomes one launch
 * (brd_launch_run); launches of different communicators run concurrently.
 * A call that fails its checks inside a group also fails the group: the
 * outermost ncclGroupEnd returns that error and runs nothing. Blocking and
 * nonblocking communicators may not share a group (ncclInvalidArgument).
 * A group of nonblocking communicators runs on a helper thread:
 * ncclGroupEnd returns ncclInProgress, and each communicator's async error
 * reads ncclInProgress until its calls are done, then their result.
 */
#ifndef BRD_CORE_GROUP_H
#define BRD_CORE_GROUP_H

#include "core/enqueue.h"

/* Current group depth of the calling thread (0 outside any group). */
int brd_group_depth(void);

/* Opens a group level for the calling thread (what ncclGroupStart does;
 * every call runs inside one, as in NCCL). Never fails. */
void brd_group_start(void);

/* Closes a group level; the outermost runs the group (see above) and
 * returns its result. ncclInvalidUsage with a WARN when no group is open.
 * Blocks until a blocking group's launches are done. Calling thread. */
ncclResult_t brd_group_end(void);

/* Queues a checked call (count > 0) until the outermost group end of this
 * thread. ncclInvalidArgument (WARN) when the call's communicator is
 * blocking and another call's of the group is not, or the reverse;
 * ncclSystemError when out of memory. Calling thread. */
ncclResult_t brd_group_add(const brd_call_t *call);

/* Work a communicator does at the outermost group end, before the group's
 * calls run (ncclCommWindowRegister inside a group, which every rank of the
 * communicator must reach together): fn(comm, arg), then free(arg). Jobs
 * of one communicator run in the order added; those of different
 * communicators concurrently, one thread each, like launches. A failed job
 * fails the group (its calls are dropped). ncclSystemError when out of
 * memory (arg is then freed). Calling thread, inside a group. */
typedef ncclResult_t (*brd_group_job_fn)(struct ncclComm *comm, void *arg);
ncclResult_t brd_group_add_job(struct ncclComm *comm, brd_group_job_fn fn, void *arg);

/* Records a failed call in the calling thread's open group, which then
 * fails as a whole (ncclInProgress and ncclSuccess are not failures).
 * Returns res. */
ncclResult_t brd_group_error(ncclResult_t res);

/* Teardown inside an open group. The calling thread's open group may hold
 * calls or jobs on comm that have not run yet; freeing comm (or memory
 * they read) under them would leave the group's end reading freed memory.
 * Returns ncclInvalidUsage with a WARN naming fn when the calling thread's
 * open group holds a call or job on comm, else ncclSuccess. NCCL issues a
 * group's calls only at its outermost ncclGroupEnd, so ncclCommDestroy
 * (which flushes issued operations) has nothing it could flush yet.
 * Calling thread. */
ncclResult_t brd_group_check_teardown(const struct ncclComm *comm, const char *fn);

/* Drops every call and job on comm from the calling thread's open group
 * (ncclCommAbort: the communicator's unissued work is discarded, the rest
 * of the group still runs). Returns how many were dropped. Calling
 * thread. */
int brd_group_forget(const struct ncclComm *comm);

#endif /* BRD_CORE_GROUP_H */
