/*
 * Braid bootstrap, private to bootstrap.c (the rank side) and
 * bootstrap_root.c (the rendezvous root): the wire formats they exchange,
 * the rank-to-root split, and the rank's bootstrap state.
 *
 * Wire formats are fixed-size structs; every rank runs the same library
 * build, so host byte order and layout are shared.
 */
#ifndef BRD_CORE_BOOTSTRAP_WIRE_H
#define BRD_CORE_BOOTSTRAP_WIRE_H

#include <stdint.h>
#include <string.h>

#include "core/bootstrap.h"
#include "base/socket.h"

#define BOOT_PROTO 0x3154304f42445242ull /* "BRDBO0T1" */
#define BOOT_MSG_LEN 1024

/* Tags below BRD_BOOT_TAG_MAX belong to callers; internal ones carry a kind
 * and a sequence number so successive collectives never match each other. */
#define TAG_RING (-1)
#define TAG_KIND_SPLIT 1
#define TAG_KIND_BCAST 2
#define TAG_KIND_BARRIER 3
#define TAG_INTERNAL(kind, seq) (BRD_BOOT_TAG_MAX | ((kind) << 24) | (int)((seq) & 0xffffffu))

#define PROBE_INTERVAL_NS 1000000000LL /* dead-peer check while receiving */
#define PROBE_TIMEOUT_MS 200
#define HDR_WAIT_NS 1000000000LL       /* a connection must identify itself within this */
#define REPLY_GRACE_S 2                /* a rank outwaits its root by this much */
#define SLICE_MS 20

_Static_assert(sizeof(brd_boot_handle_t) <= NCCL_UNIQUE_ID_BYTES,
               "bootstrap handle must fit in ncclUniqueId");

/* Rank -> root registration. */
struct boot_hello {
  uint64_t proto;
  uint64_t magic;            /* the magic of the id this rank was given */
  int32_t rank, nranks;
  int32_t iroot, nroots;     /* which root this is, out of how many ids */
  int32_t extra;             /* 1: first rank of the next root's block */
  int32_t pid;               /* of the registering process */
  union brd_sock_addr listen; /* where this rank accepts ring and p2p */
  uint8_t pad2[4];
};
_Static_assert(sizeof(struct boot_hello) == 72, "boot_hello is a wire format");

/* Root -> rank answer. */
struct boot_reply {
  int32_t status;            /* ncclResult_t */
  int32_t pad;
  union brd_sock_addr next;  /* listener of the next rank in the ring */
  uint8_t pad2[4];
  char msg[BOOT_MSG_LEN];    /* why, when status != ncclSuccess */
};

/* The ring connections carry frames: a ring_hdr, then len bytes. An
 * allgather step sends one RING_DATA frame each way. A rank that leaves
 * after an error (its abort flag set, one of its bootstrap operations
 * failed, or its process exiting with the communicator open) puts one
 * RING_LEAVE frame on each ring connection whose outgoing stream is whole,
 * then closes: its text (len bytes, no NUL) is why, then a leave_tail, so
 * that a reader who sees only the end of the stream (a peek after the
 * close) finds it too. */
#define RING_DATA 0x41544144u  /* "DATA" */
#define RING_LEAVE 0x5641454cu /* "LEAV" */
#define LEAVE_MAGIC 0x455641454c445242ull /* "BRDLEAVE" */
#define LEAVE_TEXT_MAX (BRD_BOOT_WHY_LEN - 1)
#define LEAVE_PEEK_MAX 65536   /* a peek sees at most this much of a stream */
#define LEAVE_READ_MS 500      /* the rest of a leave frame already on its way */

struct ring_hdr {
  uint32_t kind;             /* RING_DATA or RING_LEAVE */
  uint32_t len;              /* bytes that follow (RING_LEAVE: the text) */
};
_Static_assert(sizeof(struct ring_hdr) == 8, "ring_hdr is a wire format");

struct leave_tail {
  uint32_t len;              /* the text's, again */
  uint32_t pad;
  uint64_t magic;            /* LEAVE_MAGIC */
};
_Static_assert(sizeof(struct leave_tail) == 16, "leave_tail is a wire format");

/* First bytes of every connection to a rank's listener. */
struct conn_hdr {
  uint64_t magic;
  int32_t rank;
  int32_t tag;
};

struct unexpected {
  int peer, tag;
  struct brd_sock sock;      /* owned; header already read */
  struct unexpected *next;
};

struct brd_boot {
  int rank, nranks;
  uint64_t magic;
  int64_t timeout_s;
  _Atomic int *abort;                 /* borrowed: the owner's abort flag */
  _Atomic(_Atomic int *) extra_abort; /* borrowed: a child's flag, or NULL */
  _Atomic int busy;                   /* operations in progress */
  uint32_t coll_seq;                  /* same on every rank: bcast/barrier count */
  struct brd_sock listen;             /* owned */
  struct brd_sock ring_next;          /* owned: to rank+1 */
  struct brd_sock ring_prev;          /* owned: from rank-1 */
  union brd_sock_addr *peer_addrs;    /* owned: nranks listeners */
  struct unexpected *unexpected;      /* owned: connections not yet received */
  int failed;                         /* an operation failed (not by abort) */
  _Atomic int why_state;              /* 0: none; 1: being written; 2: why set */
  char why[BRD_BOOT_WHY_LEN];         /* this communicator's own failure, for
                                       * the leave frame (brd_boot_note_failure) */
  int left;                           /* the leave frames went out */
  uint8_t torn[2];                    /* [0] ring_next, [1] ring_prev: a frame
                                       * was sent only in part */
  int pid;                            /* of the process that made it */
  struct brd_boot *live_next;         /* the process's list (bootstrap.c) */
};

/* ---------------------------------------------------------------------- */
/* Rank blocks per root, NCCL's split of nranks over nroots ids.           */

static inline int root_first_rank(int root, int nranks, int nroots) {
  int rpr = nranks / nroots, rmr = nranks % nroots;
  return root * rpr + (root < rmr ? root : rmr);
}

static inline int root_nranks(int root, int nranks, int nroots) {
  return nranks / nroots + (root < nranks % nroots ? 1 : 0);
}

static inline int root_of_rank(int rank, int nranks, int nroots) {
  int rpr = nranks / nroots, rmr = nranks % nroots;
  int d = rmr * (rpr + 1);
  return rank < d ? rank / (rpr + 1) : (rank - d) / rpr + rmr;
}

static inline void handle_get(const ncclUniqueId *id, brd_boot_handle_t *h) {
  memcpy(h, id->internal, sizeof(*h));
}

static inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* After a rejected rendezvous, gives a root of this process time (bounded,
 * 2 s) to tell the other ranks why before this process, which may exit
 * next, takes the thread with it. Returns at once when there is no such
 * root or it has told everyone it knows of (bootstrap_root.c). The rank's
 * thread; blocks up to the bound. */
void brd_boot_root_linger(const brd_boot_handle_t *h);

#endif
