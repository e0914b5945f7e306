/*
 * Braid's IB verbs net ("IB", net_ib.c): the pure pieces its device and
 * GID choice are made of, apart so that tests can check them against
 * hand-made tables.
 */
#ifndef BRD_TRANSPORT_NET_IB_H
#define BRD_TRANSPORT_NET_IB_H

#include <infiniband/verbs.h>

#include "transport/net.h"

/* The built-in IB verbs net ("IB"). */
extern const brd_net_ops_t brd_net_ib;

/* NCCL_IB_HCA for one port: spec is "[^][=]name[:port],..." (NCCL's
 * syntax; a rail or plane after the port is ignored). Names are prefixes
 * unless "=" asks for exact ones; an entry without a port matches every
 * port; "^" keeps what matches no entry. NULL or "" keeps everything.
 * Returns 1 to keep (dev, port), 0 to skip it. Pure. */
int brd_ib_hca_match(const char *spec, const char *dev, int port);

/* One GID table entry as the automatic choice sees it. */
typedef struct {
  union ibv_gid gid;
  int roce_version;  /* 1 or 2; 0 when unknown */
} brd_ib_gid_t;

/* NCCL's automatic RoCE GID choice over table[0..n-1]: start at index 0;
 * a later entry of the wanted address family (AF_INET: IPv4-mapped
 * ::ffff:a.b.c.d, AF_INET6: anything else) replaces one of the other
 * family; among valid (non-zero) entries of the wanted family, one of the
 * wanted RoCE version replaces one that is not. Returns the index (0 when
 * n <= 1). Pure. */
int brd_ib_gid_select(const brd_ib_gid_t *table, int n, int family, int roce_version);

/* The bytes of a message of `size` bytes each of the nq QPs it is split
 * over carries (the last ones may get less, or nothing):
 * ceil(size / nq) rounded up to a multiple of 128, as NCCL's IB net cuts
 * it, so LL and LL128 lines never straddle two QPs. nq < 1 counts as 1. */
size_t brd_ib_split_chunk(size_t size, int nq);

#endif /* BRD_TRANSPORT_NET_IB_H */
