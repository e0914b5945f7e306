/*
 * Braid bootstrap: how the ranks of a communicator find each other and the
 * few host-side primitives everything else builds on.
 *
 * Rendezvous. ncclGetUniqueId starts a root thread listening on the
 * bootstrap interface; the unique id carries its address and a random magic
 * (NCCL's layout: uint64 magic, then the socket address). Each rank opens a
 * listener, registers with the root (magic, rank, nranks, listener address),
 * and the root, once every rank of its share has registered and agrees,
 * tells each rank the listener address of the next rank. The ranks connect
 * into a ring and allgather every listener address, so any rank can later
 * reach any other directly. With several ids (ncclCommInitRankScalable) each
 * root serves a contiguous block of ranks, NCCL's split.
 *
 * Every wait has a deadline of BRAID_BOOTSTRAP_TIMEOUT seconds per socket
 * operation and polls the owner's abort flag (ncclInternalError on abort,
 * no WARN). A peer that dies is ncclRemoteError naming its rank and address.
 *
 * Leaving with a reason. A rank that leaves after an error (its abort flag
 * set when it is destroyed, one of its operations failed, or its process
 * exits with it open) first puts its last WARN on its two ring
 * connections; a ring neighbour that then fails an operation with it, or
 * finds its ring connection closed (brd_boot_ring_left), says "rank A
 * left: <A's last error>", which names whatever A's own error named. A
 * rank killed by a signal, or one that destroys a healthy communicator,
 * sends nothing: its peers say it is gone. Ranks that are not its ring
 * neighbours do not hear the reason from the bootstrap.
 *
 * A brd_boot is used by one thread at a time; brd_boot_link_abort is the
 * only call another thread may make.
 */
#ifndef BRD_CORE_BOOTSTRAP_H
#define BRD_CORE_BOOTSTRAP_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "base/socket.h"

struct brd_boot;

/* What a unique id holds (the rest of the 128 bytes is zero). */
typedef struct {
  uint64_t magic;
  union brd_sock_addr addr;
} brd_boot_handle_t;

/* The magic NCCL uses for ids built from NCCL_COMM_ID (Braid's, unless
 * BRAID_COMM_SECRET is set: then one derived from the secret). */
#define BRD_BOOT_ENV_MAGIC 0x0280028002800280ull

/* Tags callers may use with brd_boot_send/recv: [0, BRD_BOOT_TAG_MAX). */
#define BRD_BOOT_TAG_MAX (1 << 28)

/* Fills id_out: from NCCL_COMM_ID when set (no root is started: rank 0
 * starts it in init; the magic is NCCL's constant, or derived from
 * BRAID_COMM_SECRET when that is set), else a fresh random magic and a root thread listening
 * on the bootstrap interface. Any thread; does not block on peers. */
ncclResult_t brd_boot_get_unique_id(ncclUniqueId *id_out);

/* Starts a root thread for id on the address the id holds (rank 0 does this
 * when NCCL_COMM_ID is set). ncclSystemError when the address is not local
 * or the port is taken. Does not block. */
ncclResult_t brd_boot_root_start(const ncclUniqueId *id);

/* Stops the root thread of this process that serves id, if any: ranks still
 * waiting on it get ncclRemoteError with a message saying so. Returns once
 * the thread has ended (the root polls its stop flag every few ms; the wait
 * is bounded at 2 s). Any thread. */
void brd_boot_root_stop(const ncclUniqueId *id);

/* Forgets root threads that have finished (each root thread is detached and
 * frees itself with the last reference). Never blocks. Any thread. */
void brd_boot_roots_sweep(void);

/* Rendezvous of one rank: registers with the root(s) of ids (nids of them),
 * forms the ring and learns every rank's address. abort is borrowed and
 * polled by every later operation too. Blocks until done, the deadline or
 * an abort. Errors: ncclInvalidArgument (rank/nranks/nids out of range,
 * WARNed here), ncclInvalidUsage (the root rejected the rendezvous: wrong
 * magic, mismatched nranks, duplicate or out-of-range rank; the root's
 * reason is WARNed), ncclRemoteError (a peer or the root died or timed
 * out), ncclSystemError, ncclInternalError (aborted). */
ncclResult_t brd_boot_create(const ncclUniqueId *ids, int nids, int rank, int nranks,
                             _Atomic int *abort, struct brd_boot **boot_out);

/* Bootstrap of a communicator made from parent (split or shrink): rank is
 * this process's rank in the child, parent_ranks[i] the parent rank of child
 * rank i (nranks entries). Only the listed parent ranks are contacted, each
 * directly, so dead parent ranks left out of the list do not matter. seq and
 * color make the child's magic (every member passes the same). abort is the
 * child's flag; the parent's is polled too. Blocks like brd_boot_create. */
ncclResult_t brd_boot_create_child(struct brd_boot *parent, uint32_t seq, int color,
                                   int nranks, int rank, const int *parent_ranks,
                                   _Atomic int *abort, struct brd_boot **boot_out);

/* Closes every socket and frees. When the owner's abort flag is set or an
 * operation on boot failed, it first tells the ring neighbours why (the
 * first failure noted on boot, else the destroying thread's last WARN),
 * without waiting. Local only: never waits on a
 * peer. NULL is a no-op. The caller must be the only user of boot. */
void brd_boot_destroy(struct brd_boot *boot);

/* Notes why the communicator of boot failed (its proxy's WARN), for the
 * leave frame brd_boot_destroy sends; the first note wins (a failed
 * bootstrap operation notes its own WARN). Any thread, while boot is
 * alive; never blocks. NULL boot is a no-op. */
void brd_boot_note_failure(struct brd_boot *boot, const char *why);

/* While extra is linked, every operation on boot also stops when *extra is
 * set (a child being created from boot links its own abort flag). NULL
 * unlinks. Any thread. */
void brd_boot_link_abort(struct brd_boot *boot, _Atomic int *extra);

/* Number of operations running on boot right now (for revoke/shrink, which
 * wait for an aborted operation to return before clearing the flag). */
int brd_boot_busy(const struct brd_boot *boot);

/* Room for the reason brd_boot_ring_left gives, its NUL included. */
#define BRD_BOOT_WHY_LEN 641

/* Liveness: the rank whose end of this rank's ring connection has closed
 * (its process died or exited, or it destroyed the communicator), or -1;
 * with why (len bytes, BRD_BOOT_WHY_LEN is enough) not NULL, also the
 * reason that rank gave for leaving (see "Leaving with a reason"), or ""
 * when it gave none. Never blocks, consumes nothing; any thread, while boot
 * is alive. */
int brd_boot_ring_left(const struct brd_boot *boot, char *why, size_t len);

/* Where peer's bootstrap listener is (its host, for messages). */
const union brd_sock_addr *brd_boot_peer_addr(const struct brd_boot *boot, int peer);

/* The magic of boot (same on every rank of the communicator). */
uint64_t brd_boot_magic(const struct brd_boot *boot);

/* Sends size bytes to peer with tag (0 <= tag < BRD_BOOT_TAG_MAX). Opens a
 * connection to peer's listener; returns once the bytes are handed to the
 * kernel (the peer need not be receiving yet for small messages). */
ncclResult_t brd_boot_send(struct brd_boot *boot, int peer, int tag,
                           const void *buf, size_t size);

/* Receives exactly size bytes sent by peer with tag; messages from other
 * (peer, tag) pairs that arrive meanwhile are kept for later receives.
 * While waiting, checks about once a second that peer's listener is still
 * there, so a dead peer is ncclRemoteError within a second or two. A size
 * different from the sender's is ncclInternalError. */
ncclResult_t brd_boot_recv(struct brd_boot *boot, int peer, int tag,
                           void *buf, size_t size);

/* buf holds nranks slices of size_per_rank bytes; this rank's slice (index
 * rank) is sent to all, the others are filled in. Bidirectional ring. Every
 * rank must pass the same size. */
ncclResult_t brd_boot_allgather(struct brd_boot *boot, void *buf, size_t size_per_rank);

/* brd_boot_allgather with one deadline for the whole exchange, timeout_s
 * from now (the caller's timeout, e.g. BRAID_TIMEOUT for the first
 * collective's connection), instead of BRAID_BOOTSTRAP_TIMEOUT per socket
 * operation. When it passes: ncclRemoteError, and a WARN starting with
 * `what` that names the ranks whose slices have not arrived and the fix;
 * the socket layer logs its own timeout only at INFO (caller_reports), so
 * that WARN is the only one a timeout gives. Blocks; polls the abort flags
 * (ncclInternalError). */
ncclResult_t brd_boot_allgather_timed(struct brd_boot *boot, void *buf, size_t size_per_rank,
                                      int64_t timeout_s, const char *what);

/* Copies root's size bytes into every rank's buf. */
ncclResult_t brd_boot_bcast(struct brd_boot *boot, int root, void *buf, size_t size);

/* Returns on each rank once every rank has entered (dissemination). */
ncclResult_t brd_boot_barrier(struct brd_boot *boot);

#endif /* BRD_CORE_BOOTSTRAP_H */
