/*
 * Braid transports: how the memory behind a channel comes to exist and is
 * shared with peers. Each transport is one const struct of function
 * pointers, chosen once when a channel is connected; the data path never
 * asks which transport it runs on.
 *
 * A segment is memory one rank creates and others import. Its handle is a
 * fixed-size, position-independent blob that crosses process boundaries
 * through the bootstrap network.
 */
#ifndef BRD_TRANSPORT_TRANSPORT_H
#define BRD_TRANSPORT_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

#define BRD_SEG_HANDLE_BYTES 96

typedef struct {
  uint32_t transport;          /* brd_transport_kind_t that made it */
  uint32_t pid;                /* creating process */
  uint64_t size;               /* bytes */
  uint64_t local_addr;         /* creator's address (same-process import) */
  char name[BRD_SEG_HANDLE_BYTES - 24]; /* transport-specific name */
} brd_seg_handle_t;

_Static_assert(sizeof(brd_seg_handle_t) == BRD_SEG_HANDLE_BYTES,
               "segment handles cross the network: keep the size fixed");

typedef enum {
  BRD_TRANSPORT_SHM = 1,   /* host memory: POSIX shm between processes */
  BRD_TRANSPORT_P2P = 2,   /* GPU memory: cuMem / CUDA IPC */
  BRD_TRANSPORT_NET = 3,   /* port channels over sockets or IB (proxy) */
  BRD_TRANSPORT_NVLS = 4,  /* switch channels: NVLS multicast */
  BRD_TRANSPORT_HOST = 5,  /* host memory of one process (ranks as threads) */
} brd_transport_kind_t;

typedef struct brd_seg {
  void *ptr;               /* mapped address in this process */
  size_t size;
  int owner;               /* 1: this process created it and unlinks it */
  brd_seg_handle_t handle;
} brd_seg_t;

typedef struct brd_transport_ops {
  const char *name;
  brd_transport_kind_t kind;
  /* Creates a segment of size bytes, zero-filled, that peers may import. */
  ncclResult_t (*seg_create)(size_t size, const char *tag, brd_seg_t *seg_out);
  /* Maps a peer's segment from its handle. */
  ncclResult_t (*seg_import)(const brd_seg_handle_t *h, brd_seg_t *seg_out);
  /* Stops new imports (e.g. unlinks the name) once every peer has mapped. */
  void (*seg_seal)(brd_seg_t *seg);
  /* Unmaps; the creator also releases the name. NULL-safe on empty segs. */
  void (*seg_close)(brd_seg_t *seg);
} brd_transport_ops_t;

extern const brd_transport_ops_t brd_transport_shm;
extern const brd_transport_ops_t brd_transport_host;

#endif /* BRD_TRANSPORT_TRANSPORT_H */
