/*
 * Braid: windows seen from the one-sided and device-API calls (rma.c), and
 * the view of a window that the registration code (mem.c) gives them.
 */
#ifndef BRD_CORE_RMA_H
#define BRD_CORE_RMA_H

#include <stddef.h>

#include "nccl.h"

struct ncclComm;

/* Signal indices per context of the one-sided calls, and contexts at most
 * (ncclConfig_t.numRmaCtx beyond is capped). */
#define BRD_RMA_SIGNALS 64
#define BRD_RMA_MAX_CTX 16

/* The contexts comm's one-sided calls have: numRmaCtx, 1 to
 * BRD_RMA_MAX_CTX. Pure. (rma.c) */
int brd_rma_ctx_count(const struct ncclComm *comm);

/* What one rank knows of a window it registered. */
typedef struct brd_window_view {
  char *user_ptr;      /* the buffer this rank registered */
  size_t size;         /* its size in bytes */
  int mapped;          /* 1: every rank's buffer is mapped in this process */
  char *peer_base;     /* the asked peer's buffer as mapped here, NULL when
                        * not mapped (or no peer was asked) */
  size_t peer_size;    /* the asked peer's registered bytes (0: unknown) */
} brd_window_view_t;

/* Fills *view_out for window win of comm, with peer (a rank, or -1 for
 * none) as the asked peer. ncclInvalidArgument (WARN naming fn) when win is
 * not a live window of comm. Takes the registration lock; any thread. (mem.c) */
ncclResult_t brd_mem_window_view(struct ncclComm *comm, ncclWindow_t win, int peer,
                                 const char *fn, brd_window_view_t *view_out);

/* The registration code reports each window it creates and frees, so the
 * calls that name a window without its communicator find it. track returns
 * ncclSystemError (WARN) when out of memory; untrack of an unknown window
 * is a no-op. Any thread. (rma.c) */
ncclResult_t brd_rma_window_track(struct ncclComm *comm, ncclWindow_t win);
void brd_rma_window_untrack(ncclWindow_t win);

/* The communicator win was registered on, or ncclInvalidArgument (WARN
 * naming fn) for NULL or a window not (or no longer) registered. */
ncclResult_t brd_rma_window_comm(ncclWindow_t win, const char *fn, struct ncclComm **comm_out);

#endif /* BRD_CORE_RMA_H */
