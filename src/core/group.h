/*
 * Braid: group semantics (ncclGroupStart/End). Depth is per thread; only the
 * outermost ncclGroupEnd launches.
 */
#ifndef BRD_CORE_GROUP_H
#define BRD_CORE_GROUP_H

/* Current group depth of the calling thread (0 outside any group). */
int brd_group_depth(void);

#endif /* BRD_CORE_GROUP_H */
