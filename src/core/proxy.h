/*
 * Braid proxy: port channels over a net (transport/net.h).
 *
 * Where two ranks cannot map each other's memory (other hosts, or P2P and
 * SHM disabled), the channel between them is a port. The writer's
 * executor writes into a mirror of the peer's window (same layout, same
 * offsets) and puts each written range on the port (device/exec.h); the
 * proxy copies it into a send slot, ships it over the net and, on the
 * reader's side, lays it into the reader's own window at the same offset.
 * The reader's executor then sees plain writes in its window, as from a
 * memory channel: its waits and LL flags are unchanged.
 *
 * One progress thread per communicator runs every port of it: posts
 * filled send slots, tests sends and receives, applies what arrived. A
 * port's sends are one ordered stream, so data put before a semaphore
 * lands before it. See docs/architecture.md "Port channels and the proxy"
 * for why this shape (MSCCL++'s FIFO of small triggers) and not NCCL's.
 */
#ifndef BRD_CORE_PROXY_H
#define BRD_CORE_PROXY_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "device/exec.h"

struct ncclComm;
typedef struct brd_proxy brd_proxy_t;

/* How the proxy allocates the mirrors: zeroed memory the proxy reads and
 * writes at *host_out and the executor addresses at *dev_out (the same
 * for the host executor; mapped host memory for the CUDA executor). */
typedef struct brd_proxy_mem {
  void *ctx;
  ncclResult_t (*alloc)(void *ctx, size_t bytes, void **host_out, char **dev_out);
  void (*free)(void *ctx, void *host);
} brd_proxy_mem_t;

/* ncclSuccess when no port[r] (nranks entries) is set or the process has
 * a usable net; else ncclInvalidUsage with a WARN naming the ranks and
 * what to change. Local (it never waits on peers), so every rank of a
 * communicator that needs the net finds out alike. The launching thread. */
ncclResult_t brd_proxy_check(struct ncclComm *comm, const uint8_t *port);

/* The line rate (Mbit/s, the net's getProperties speed) of the net device
 * this rank's proxy would use; 0 when no net is usable or the net does not
 * say. Blocks on the net's selection and on topology discovery once; keeps
 * the device chosen in comm (proxy_dev_kept) for brd_proxy_create. */
int brd_proxy_nic_mbps(struct ncclComm *comm);

/* Connects this rank to every rank r with port[r] != 0 over the process's
 * net (brd_net_get): a send and a receive connection each, the listen
 * handles exchanged over the bootstrap; gives each such peer a zeroed
 * mirror of `bytes` (every window has that size); starts the progress
 * thread, which applies what peers put into `own` (this rank's window,
 * `bytes` long, borrowed until destroy; its host address); mem says how
 * mirrors are allocated (NULL: calloc). port must be symmetric across
 * ranks (port[r] on rank q iff port[q] on rank r). Collective over the
 * ranks with ports to this one; blocks up to BRAID_BOOTSTRAP_TIMEOUT or
 * the comm's abort. ncclInvalidUsage (WARN) when no net is usable,
 * ncclRemoteError when a peer cannot be reached, ncclSystemError when out
 * of memory. The launching thread. */
ncclResult_t brd_proxy_create(struct ncclComm *comm, const uint8_t *port, char *own,
                              size_t bytes, const brd_proxy_mem_t *mem,
                              brd_proxy_t **proxy_out);

/* Peer's mirror as the executor addresses it (mem's dev), or NULL for a
 * memory channel. Any thread. */
char *brd_proxy_mirror_dev(brd_proxy_t *p, int peer);

/* The progress thread also drains fifo (the CUDA executor's triggers,
 * device/exec.h; host view), from now until destroy; fifo must outlive
 * the proxy. At most 4. The launching thread. */
ncclResult_t brd_proxy_fifo_add(brd_proxy_t *p, brd_exec_fifo_t *fifo);

/* Peer's port, or NULL when the channel to peer is a memory channel.
 * Owned by the proxy. Any thread. */
brd_exec_port_t *brd_proxy_port(brd_proxy_t *p, int peer);

/* The flag every executor wait polls (brd_exec_port_t.failed). */
int *brd_proxy_failed(brd_proxy_t *p);

/* The doorbell the proxy rings after laying received messages into the
 * window (device/exec.h), for the host executor's waits to sleep on; NULL
 * when p is NULL. Any thread. */
brd_exec_bell_t *brd_proxy_bell(brd_proxy_t *p);

/* CUDA mode: a kernel that may post triggers was just enqueued. The
 * progress thread, which naps while only FIFOs (which ring nothing) can
 * bring work, wakes now and keeps polling them without napping for a
 * while (PROXY_HOT_NS after the last trigger it took, or after this).
 * A graph replay enqueues kernels without this: the thread then finds
 * their triggers after its nap, as it did. Any thread; never blocks. */
void brd_proxy_poke(brd_proxy_t *p);

/* The proxy's failure as its WARN said it (the connection and the rank
 * lost), or NULL while healthy (p NULL too): a launch that fails after it
 * makes this the last error, so that the cause, not a later consequence
 * (a net's own warning about the same dead connection), is what
 * ncclGetLastError reports. Any thread; the text stays until destroy. */
const char *brd_proxy_failure(brd_proxy_t *p);

/* Tells every peer this rank is done (so its closing is not a failure),
 * waits (a few seconds at most) for queued sends, stops the thread and
 * closes the connections. Local. NULL is a no-op. */
void brd_proxy_destroy(brd_proxy_t *p);

#endif /* BRD_CORE_PROXY_H */
