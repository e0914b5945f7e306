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

/* NCCL's GPU-NIC path types, in NCCL's order and numbering
 * (NCCL_NET_GDR_LEVEL names one): a GPU and a NIC are LOC (one device),
 * PIX (one PCIe switch), PXB (several switches), PHB (the host bridge,
 * or host bridges of one NUMA node) or SYS (across NUMA nodes). */
enum {
  BRD_IB_PATH_LOC = 0, BRD_IB_PATH_NVL, BRD_IB_PATH_NVB, BRD_IB_PATH_C2C, BRD_IB_PATH_PIX,
  BRD_IB_PATH_PXB, BRD_IB_PATH_P2C, BRD_IB_PATH_PXN, BRD_IB_PATH_PHB, BRD_IB_PATH_SYS,
  BRD_IB_PATH_COUNT
};

/* "LOC" .. "SYS"; "?" out of range. Static strings. */
const char *brd_ib_path_name(int path);

/* NCCL_NET_GDR_LEVEL as a path type: a name (any case) or NCCL's old
 * numbers (0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 and above SYS); -1 for NULL, ""
 * or anything else. Pure. */
int brd_ib_gdr_level_parse(const char *s);

/* The path type between two PCI devices given by their sysfs paths
 * ("/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0": the root and the
 * bus ids after it count) and NUMA nodes (-1 unknown): LOC when the bus
 * ids are the same, PIX when both sit at most two levels below their last
 * shared bridge, PXB when deeper, PHB when they share only the root (or
 * have roots on one known NUMA node), SYS otherwise, or when a path is
 * NULL or not a PCI device. The rule of the plan layer's topology
 * (brd_topo_path_classify), which a transport cannot include. Pure. */
int brd_ib_pci_distance(const char *a_path, int a_numa, const char *b_path, int b_numa);

#endif /* BRD_TRANSPORT_NET_IB_H */
