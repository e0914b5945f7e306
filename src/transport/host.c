/*
 * Braid host-memory transport: segments for ranks that are threads of one
 * process. Plain page-aligned memory; importing hands back the creator's
 * own pointer. Used when every rank of a communicator lives in this
 * process, so /dev/shm is not needed at all.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "transport.h"

static ncclResult_t host_create(size_t size, const char *tag, brd_seg_t *out) {
  void *p = NULL;
  if (posix_memalign(&p, 4096, size) != 0) {
    WARN("out of host memory allocating %zu bytes for %s", size,
         tag ? tag : "a channel segment");
    return ncclSystemError;
  }
  memset(p, 0, size);
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
  return ncclSuccess;
}

static void host_seal(brd_seg_t *seg) { (void)seg; }

static void host_close(brd_seg_t *seg) {
  if (seg == NULL || seg->ptr == NULL) return;
  if (seg->owner) free(seg->ptr);
  memset(seg, 0, sizeof(*seg));
}

const brd_transport_ops_t brd_transport_host = {
    .name = "HOST",
    .kind = BRD_TRANSPORT_HOST,
    .seg_create = host_create,
    .seg_import = host_import,
    .seg_seal = host_seal,
    .seg_close = host_close,
};
