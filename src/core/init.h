/*
 * Braid: the init job, shared by the entry points that make jobs (init.c)
 * and the code that runs them (init_job.c). Private to those two files.
 */
#ifndef BRAID_CORE_INIT_H
#define BRAID_CORE_INIT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/comm.h"

#define DEV_LOCAL (-1)              /* host-mode InitRank: device = local rank */

struct brd_init_job {
  /* Set by the entry point before the job runs. */
  struct ncclComm *comm;       /* borrowed: the communicator made, NULL for NOCOLOR */
  ncclComm_t *newcomm;         /* borrowed: the caller's handle, cleared on failure */
  const char *fn;              /* entry point name, for messages */
  int nranks, rank, nids, dev;
  ncclUniqueId *ids;           /* owned copy (root init) */
  struct ncclComm *parent;     /* borrowed (split/shrink): its children_busy counts us */
  int is_shrink, color, key;
  uint32_t seq;                /* parent's split count for this child */
  int *exclude;                /* owned sorted copy (shrink) */
  int nexclude;
  int parent_async;            /* nonblocking child: parent->async_error tracks us */
  /* Completion. */
  pthread_mutex_t lock;
  pthread_cond_t cond;
  int done;                    /* under lock */
  ncclResult_t result;         /* valid once done */
  _Atomic int refs;            /* helper thread + communicator */
  struct brd_init_job *group_next;
};

/* A job with one reference (the creator's), no communicator and dev
 * DEV_LOCAL; the caller fills in the rest. Writes *job_out only on
 * success. Any thread; does not block. */
ncclResult_t brd_init_job_create(struct brd_init_job **job_out);

/* Drops one reference; the last frees the job and what it owns (ids,
 * exclude). NULL is a no-op. Any thread; does not block. */
void brd_init_job_release(struct brd_init_job *job);

/* Waits until job is done or deadline_ns (brd_time_now_ns clock) passes;
 * INT64_MAX waits without a deadline, which only callers whose job's own
 * waits are bounded may use. Returns 1 when done, 0 at the deadline. Any
 * thread; blocks. */
int brd_init_job_wait(struct brd_init_job *job, int64_t deadline_ns);

/* Runs job inline (blocking, outside a group, not threaded), on a helper
 * thread (nonblocking or threaded), or on a helper thread the enclosing
 * group waits for (brd_init_group_wait). Takes over the creator's
 * reference; writes the caller's handle once the communicator exists.
 * Returns the inline result, ncclInProgress for a nonblocking init outside
 * a group, or a failure to start the thread (the job is then released and
 * its communicator destroyed). Caller's thread; blocks only when inline. */
ncclResult_t brd_init_job_launch(struct brd_init_job *job, int blocking, int threaded);

#endif /* BRAID_CORE_INIT_H */
