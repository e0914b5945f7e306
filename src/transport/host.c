/*
 * Braid host-memory transport: segments for ranks that are threads of one
 * process. Plain page-aligned memory; importing hands back the creator's
 * own pointer. Used when every rank of a communicator lives in this
 * process, so /dev/shm is not needed at all.
 *
 * A segment is reference-counted: every import holds a reference and the
 * memory goes back when the last holder closes it. A rank that destroys its
 * communicator while a peer thread is still finishing the last launch (for
 * instance storing a final credit signal into this rank's semaphores) thus
 * never frees memory the peer still writes, without any wait on the peer.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/check.h"
#include "base/param.h"
#include "transport/transport.h"

/* The reference count lives in the page before the segment. */
#define HOST_HDR 4096

static _Atomic int *refcount(void *seg_ptr) {
  return (_Atomic int *)((char *)seg_ptr - HOST_HDR);
}

static ncclResult_t host_create(size_t size, const char *tag, brd_seg_t *out) {
  /* Anonymous pages read as zero and become resident only when touched:
   * a window sized for the largest plan costs what the plans run use. */
  void *base = mmap(NULL, size + HOST_HDR, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    WARN("out of host memory mapping %zu bytes for %s: %s", size,
         tag ? tag : "a channel segment", strerror(errno));
    return ncclSystemError;
  }
  void *p = (char *)base + HOST_HDR;
  atomic_init(refcount(p), 1);
  memset(out, 0, sizeof(*out));
  out->ptr = p;
  out->size = size;
  out->owner = 1;
  out->handle.transport = BRD_TRANSPORT_HOST;
  out->handle.pid = (uint32_t)getpid();
  out->handle.size = size;
  out->handle.local_addr = (uint64_t)(uintptr_t)p;
  return ncclSuccess;
}

static ncclResult_t host_import(const brd_seg_handle_t *h, brd_seg_t *out) {
  if (h->transport != BRD_TRANSPORT_HOST || h->pid != (uint32_t)getpid()) {
    WARN("host-memory segment of pid %u imported in pid %d: ranks in "
         "different processes need the SHM transport", h->pid, (int)getpid());
    return ncclInternalError;
  }
  memset(out, 0, sizeof(*out));
  out->handle = *h;
  out->ptr = (void *)(uintptr_t)h->local_addr;
  out->size = (size_t)h->size;
  atomic_fetch_add(refcount(out->ptr), 1);
  return ncclSuccess;
}

static void host_seal(brd_seg_t *seg) { (void)seg; }

static void host_close(brd_seg_t *seg) {
  if (seg == NULL || seg->ptr == NULL) return;
  if (atomic_fetch_sub(refcount(seg->ptr), 1) == 1)
    munmap((char *)seg->ptr - HOST_HDR, seg->size + HOST_HDR);
  memset(seg, 0, sizeof(*seg));
}

/* A host segment is a pointer: only threads of its creator's process can
 * use it. */
static int host_can_connect(const brd_peer_info_t *a, const brd_peer_info_t *b, char *why,
                            size_t n) {
  if (a->pid_hash != b->pid_hash) {
    snprintf(why, n, "the ranks are in different processes (pids %d and %d)", (int)a->pid,
             (int)b->pid);
    return 0;
  }
  /* Threads of one process share memory as GPUs of one process share
   * P2P: with P2P and SHM both disabled, NCCL would send over the net. */
  if (brd_param_int(BRD_P_P2P_DISABLE) == 1 && brd_param_int(BRD_P_SHM_DISABLE) == 1) {
    snprintf(why, n, "NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1");
    return 0;
  }
  snprintf(why, n, "the ranks are threads of one process");
  return 1;
}

const brd_transport_ops_t brd_transport_host = {
    .name = "HOST",
    .kind = BRD_TRANSPORT_HOST,
    .can_connect = host_can_connect,
    .seg_create = host_create,
    .seg_import = host_import,
    .seg_seal = host_seal,
    .seg_close = host_close,
};
