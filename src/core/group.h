/*
 * Braid: group semantics (ncclGroupStart/End). Depth is per thread; only the
 * outermost ncclGroupEnd launches.
 */
#ifndef BRD_CORE_GROUP_H
#define BRD_CORE_GROUP_H

#include "enqueue.h"

/* Current group depth of the calling thread (0 outside any group). */
int brd_group_depth(void);

/* Queues a checked call until the outermost ncclGroupEnd of this thread.
 * ncclSystemError when out of memory. Calling thread. */
ncclResult_t brd_group_add(const brd_call_t *call);

#endif /* BRD_CORE_GROUP_H */
