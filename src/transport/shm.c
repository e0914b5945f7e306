/*
 * Braid SHM transport: host memory shared between processes through POSIX
 * shared memory (/dev/shm). A segment imported by the process that created
 * it maps to the creator's own address, so ranks that are threads of one
 * process share plain pointers.
 *
 * The creator's mapping is reference-counted like the host transport's
 * segments: each same-process import holds a reference and the mapping goes
 * when the last holder closes it. A rank that destroys its communicator
 * while a peer thread of its process is still finishing the last launch
 * thus never unmaps memory that thread still writes. The count lives in a
 * header page before the segment; only the creator's process touches it.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/check.h"
#include "base/param.h"
#include "transport/transport.h"

/* The header page before every segment; it holds the reference count. */
#define SHM_HDR 4096

static _Atomic int *refcount(void *seg_ptr) {
  return (_Atomic int *)((char *)seg_ptr - SHM_HDR);
}

static ncclResult_t shm_create(size_t size, const char *tag, brd_seg_t *out) {
  static _Atomic unsigned serial;
  ncclResult_t res = ncclSuccess;
  brd_seg_t seg;
  memset(&seg, 0, sizeof(seg));
  snprintf(seg.handle.name, sizeof(seg.handle.name), "/braid-%d-%u-%s",
           (int)getpid(), serial++, tag ? tag : "seg");

  int fd = shm_open(seg.handle.name, O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) {
    WARN("shm_open(%s) failed: %s; check that /dev/shm is mounted and "
         "writable", seg.handle.name, strerror(errno));
    return ncclSystemError;
  }
  /* posix_fallocate reserves the pages now, so a full /dev/shm fails here
   * with a clear message rather than with SIGBUS on first touch. */
  int err = posix_fallocate(fd, 0, (off_t)(size + SHM_HDR));
  if (err != 0) {
    if (err == ENOSPC) {
      WARN("/dev/shm is too small for %zu bytes of shared memory (%s); "
           "free space there, or give the container more with "
           "docker run --shm-size=<bytes> (e.g. --shm-size=8g)",
           size, seg.handle.name);
    } else {
      WARN("allocating %zu bytes in /dev/shm (%s) failed: %s", size,
           seg.handle.name, strerror(err));
    }
    res = ncclSystemError;
    goto fail_unlink;
  }
  void *base = mmap(NULL, size + SHM_HDR, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    WARN("mmap of %zu bytes of shared memory %s failed: %s", size,
         seg.handle.name, strerror(errno));
    res = ncclSystemError;
    goto fail_unlink;
  }
  close(fd);
  void *p = (char *)base + SHM_HDR;
  atomic_init(refcount(p), 1);
  seg.ptr = p;
  seg.size = size;
  seg.owner = 1;
  seg.handle.transport = BRD_TRANSPORT_SHM;
  seg.handle.pid = (uint32_t)getpid();
  seg.handle.size = size;
  seg.handle.local_addr = (uint64_t)(uintptr_t)p;
  *out = seg;
  return ncclSuccess;

fail_unlink:
  shm_unlink(seg.handle.name);
  close(fd);
  return res;
}

static ncclResult_t shm_import(const brd_seg_handle_t *h, brd_seg_t *out) {
  brd_seg_t seg;
  memset(&seg, 0, sizeof(seg));
  seg.handle = *h;
  seg.size = (size_t)h->size;
  if (h->transport != BRD_TRANSPORT_SHM) {
    WARN("shared-memory import of a handle made by transport %u",
         h->transport);
    return ncclInternalError;
  }
  if (h->pid == (uint32_t)getpid()) {
    seg.ptr = (void *)(uintptr_t)h->local_addr;
    atomic_fetch_add(refcount(seg.ptr), 1);
    *out = seg;
    return ncclSuccess;
  }
  int fd = shm_open(h->name, O_RDWR, 0600);
  if (fd < 0) {
    WARN("opening peer shared memory %s (pid %u) failed: %s; the peer may "
         "have exited", h->name, h->pid, strerror(errno));
    return ncclRemoteError;
  }
  void *base = mmap(NULL, seg.size + SHM_HDR, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int map_errno = errno;
  close(fd);
  if (base == MAP_FAILED) {
    WARN("mmap of peer shared memory %s (%zu bytes) failed: %s", h->name,
         seg.size, strerror(map_errno));
    return ncclSystemError;
  }
  seg.ptr = (char *)base + SHM_HDR;
  *out = seg;
  return ncclSuccess;
}

static void shm_seal(brd_seg_t *seg) {
  if (seg->owner && seg->handle.name[0] != '\0') {
    shm_unlink(seg->handle.name);
    seg->handle.name[0] = '\0';
  }
}

static void shm_close(brd_seg_t *seg) {
  if (seg == NULL || seg->ptr == NULL) return;
  int same_process = seg->handle.pid == (uint32_t)getpid();
  if (!same_process || atomic_fetch_sub(refcount(seg->ptr), 1) == 1)
    munmap((char *)seg->ptr - SHM_HDR, seg->size + SHM_HDR);
  shm_seal(seg);
  memset(seg, 0, sizeof(*seg));
}

/* POSIX shared memory names are seen by the processes of one host. */
static int shm_can_connect(const brd_peer_info_t *a, const brd_peer_info_t *b, char *why,
                           size_t n) {
  if (a->host_hash != b->host_hash) {
    snprintf(why, n, "the ranks are on different hosts (no shared /dev/shm)");
    return 0;
  }
  if (brd_param_int(BRD_P_SHM_DISABLE) == 1) {
    snprintf(why, n, "NCCL_SHM_DISABLE=1");
    return 0;
  }
  snprintf(why, n, "the ranks share a host");
  return 1;
}

const brd_transport_ops_t brd_transport_shm = {
    .name = "SHM",
    .kind = BRD_TRANSPORT_SHM,
    .can_connect = shm_can_connect,
    .seg_create = shm_create,
    .seg_import = shm_import,
    .seg_seal = shm_seal,
    .seg_close = shm_close,
};
