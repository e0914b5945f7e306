/*
 * Braid: what the works builder's files share (works.c: collectives;
 * works_p2p.c: sends and receives). Not for other modules: works.h is
 * the interface.
 */
#ifndef BRD_CORE_WORKS_INT_H
#define BRD_CORE_WORKS_INT_H

#include "core/works.h"

/* Appends a zeroed work with a channel array for `plan` on `rank`.
 * ncclSystemError (WARN) when out of host memory. */
ncclResult_t brd_works_work_add(brd_works_t *ws, const brd_ir_plan_t *plan, int rank,
                                brd_work_t **w_out);

/* Appends the works of the launch's sends and receives (the calls among
 * calls[0..ncalls) that are): rounds of batched transfers per peer, each
 * a point-to-point plan (works_p2p.c). Errors as brd_works_build's. */
ncclResult_t brd_works_add_p2p(const brd_works_view_t *v, brd_works_seq_t *seq,
                               const brd_call_t *calls, int ncalls, brd_works_t *ws);

#endif /* BRD_CORE_WORKS_INT_H */
