/*
 * Braid SHM transport: host memory shared between processes through POSIX
 * shared memory (/dev/shm). A segment imported by the process that created
 * it maps to the creator's own address, so ranks that are threads of one
 * process share plain pointers.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "transport.h"

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
  int err = posix_fallocate(fd, 0, (off_t)size);
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
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    WARN("mmap of %zu bytes of shared memory %s failed: %s", size,
         seg.handle.name, strerror(errno));
    res = ncclSystemError;
    goto fail_unlink;
  }
  close(fd);
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
    *out = seg;
    return ncclSuccess;
  }
  int fd = shm_open(h->name, O_RDWR, 0600);
  if (fd < 0) {
    WARN("opening peer shared memory %s (pid %u) failed: %s; the peer may "
         "have exited", h->name, h->pid, strerror(errno));
    return ncclRemoteError;
  }
  void *p = mmap(NULL, seg.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int map_errno = errno;
  close(fd);
  if (p == MAP_FAILED) {
    WARN("mmap of peer shared memory %s (%zu bytes) failed: %s", h->name,
         seg.size, strerror(map_errno));
    return ncclSystemError;
  }
  seg.ptr = p;
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
  if (seg->owner || !same_process) munmap(seg->ptr, seg->size);
  shm_seal(seg);
  memset(seg, 0, sizeof(*seg));
}

const brd_transport_ops_t brd_transport_shm = {
    .name = "SHM",
    .kind = BRD_TRANSPORT_SHM,
    .seg_create = shm_create,
    .seg_import = shm_import,
    .seg_seal = shm_seal,
    .seg_close = shm_close,
};
