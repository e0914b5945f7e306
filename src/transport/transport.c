/*
 * Braid transports: which one a communicator's channels use.
 *
 * The choice is made once per communicator, when its channels are first
 * connected, from the identities every rank published at init: the first
 * candidate for the kind of memory whose can_connect accepts this rank
 * with every peer. Nothing else in the library compares identities to pick
 * a transport.
 */
#include <stdio.h>
#include <string.h>

#include "transport/transport.h"

/* Candidates per kind of memory, in order of preference; NULL-terminated. */
static const brd_transport_ops_t *const host_candidates[] = {
    &brd_transport_host, /* every rank in this process: no /dev/shm at all */
    &brd_transport_shm,
    NULL,
};
static const brd_transport_ops_t *const gpu_candidates[] = {
    &brd_transport_p2p,
    NULL,
};

/* 1 when t connects me with every other rank, else 0 with
 * "rank <r>: <reason>" for the first rank it refuses. */
static int connects_all(const brd_transport_ops_t *t, const brd_peer_info_t *peers,
                        int nranks, int me, const uint8_t *skip, char *why, size_t n) {
  for (int r = 0; r < nranks; r++) {
    char w[384];
    if (r == me || (skip != NULL && skip[r])) continue;
    if (!t->can_connect(&peers[me], &peers[r], w, sizeof(w))) {
      snprintf(why, n, "rank %d: %s", r, w);
      return 0;
    }
  }
  return 1;
}

/* See transport.h. */
const brd_transport_ops_t *brd_transport_choose(const brd_peer_info_t *peers, int nranks,
                                                int me, brd_transport_mem_t mem,
                                                char *why, size_t n) {
  const brd_transport_ops_t *const *c =
      mem == BRD_TRANSPORT_MEM_GPU ? gpu_candidates : host_candidates;
  if (n > 0) why[0] = '\0';
  for (; *c != NULL; c++) {
    if (connects_all(*c, peers, nranks, me, NULL, why, n)) {
      if (n > 0) why[0] = '\0';
      return *c;
    }
  }
  return NULL;
}

/* See transport.h. */
int brd_transport_host_port(const brd_peer_info_t *a, const brd_peer_info_t *b) {
  for (const brd_transport_ops_t *const *c = host_candidates; *c != NULL; c++)
    if ((*c)->can_connect(a, b, NULL, 0)) return 0;
  return 1;
}

/* See transport.h. */
const brd_transport_ops_t *brd_transport_split(const brd_peer_info_t *peers, int nranks, int me,
                                               brd_transport_mem_t mem, uint8_t *port_out,
                                               char *why, size_t n) {
  memset(port_out, 0, (size_t)nranks);
  if (mem == BRD_TRANSPORT_MEM_GPU)
    return brd_transport_choose(peers, nranks, me, mem, why, n);
  for (int r = 0; r < nranks; r++)
    port_out[r] = (uint8_t)(r != me && brd_transport_host_port(&peers[me], &peers[r]));
  if (n > 0) why[0] = '\0';
  for (const brd_transport_ops_t *const *c = host_candidates; *c != NULL; c++) {
    if (connects_all(*c, peers, nranks, me, port_out, why, n)) {
      if (n > 0) why[0] = '\0';
      return *c;
    }
  }
  return NULL;
}
