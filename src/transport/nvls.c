/*
 * Braid NVLS transport: a multicast mapping of one window on every local
 * rank, made and given up together (see nvls.h for the sequence and the
 * fail-together rule), and the registry of windows that have one.
 *
 * Driver calls go through the entry-point table of cudrv.c (or one the
 * caller passes, e.g. a test's), descriptors through the servers of ipc.c.
 * A multicast handle shared by ranks that are threads of one process is
 * one driver handle: a process-wide reference count releases it when its
 * last holder lets go, whichever rank that is.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if BRAID_CUDA
#include <cuda.h>
#endif

#include "base/check.h"
#include "base/param.h"
#include "transport/ipc.h"
#include "transport/nvls.h"

/* ---- the registry of bound windows ------------------------------------- */

typedef struct win_rec {
  const void *window;      /* key; borrowed (the window's owner forgets it) */
  int bound;               /* 1: mc_base is set; 0: why says why not */
  char *mc_base;           /* the multicast object's address (not owned) */
  size_t off;              /* the window's offset in the object */
  size_t size;             /* the window's bytes */
  char why[256];
  struct win_rec *next;    /* owned */
} win_rec_t;

static pthread_mutex_t win_mu = PTHREAD_MUTEX_INITIALIZER;
static win_rec_t *win_head; /* under win_mu */

/* The record of window, made when missing (NULL when out of memory).
 * Called under win_mu. */
static win_rec_t *win_get(const void *window, int make) {
  for (win_rec_t *r = win_head; r != NULL; r = r->next)
    if (r->window == window) return r;
  if (!make) return NULL;
  win_rec_t *r = calloc(1, sizeof(*r));
  if (r == NULL) return NULL;
  r->window = window;
  r->next = win_head;
  win_head = r;
  return r;
}

/* See nvls.h. */
ncclResult_t brd_nvls_window_bind(const void *window, void *mc_base, size_t win_offset,
                                  size_t size) {
  if (window == NULL || mc_base == NULL) {
    WARN("NVLS: binding window %p to multicast address %p: both must be set (internal "
         "error; please report it)", window, mc_base);
    return ncclInternalError;
  }
  pthread_mutex_lock(&win_mu);
  win_rec_t *r = win_get(window, 1);
  if (r != NULL) {
    r->bound = 1;
    r->mc_base = mc_base;
    r->off = win_offset;
    r->size = size;
    r->why[0] = '\0';
  }
  pthread_mutex_unlock(&win_mu);
  if (r == NULL) {
    WARN("NVLS: out of memory recording window %p's multicast mapping", window);
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* See nvls.h. */
ncclResult_t brd_nvls_window_unbound(const void *window, const char *why) {
  if (window == NULL) return ncclSuccess;
  pthread_mutex_lock(&win_mu);
  win_rec_t *r = win_get(window, 1);
  if (r != NULL) {
    r->bound = 0;
    r->mc_base = NULL;
    r->off = r->size = 0;
    snprintf(r->why, sizeof(r->why), "%s", why != NULL ? why : "no reason was given");
  }
  pthread_mutex_unlock(&win_mu);
  if (r == NULL) {
    WARN("NVLS: out of memory recording why window %p has no multicast mapping", window);
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* See nvls.h. */
void brd_nvls_window_forget(const void *window) {
  pthread_mutex_lock(&win_mu);
  for (win_rec_t **p = &win_head; *p != NULL; p = &(*p)->next) {
    if ((*p)->window == window) {
      win_rec_t *r = *p;
      *p = r->next;
      free(r);
      break;
    }
  }
  pthread_mutex_unlock(&win_mu);
}

/* See nvls.h. */
ncclResult_t brd_nvls_window_lookup(const void *window, size_t offset, const void *mc_base,
                                    void **ptr_out, char *why, size_t whylen) {
  ncclResult_t res = ncclSuccess;
  char text[400];
  text[0] = '\0';
  pthread_mutex_lock(&win_mu);
  win_rec_t *r = win_get(window, 0);
  if (r == NULL) {
    snprintf(text, sizeof(text),
             "NVLS is not bound for window %p: no multicast mapping was made for it (NVLS "
             "needs every local rank's GPU on one NVSwitch with multicast, "
             "NCCL_NVLS_ENABLE not 0, and a window of cuMem memory)", window);
    res = ncclInvalidUsage;
  } else if (!r->bound) {
    snprintf(text, sizeof(text), "NVLS is not bound for window %p: %s", window, r->why);
    res = ncclInvalidUsage;
  } else if (mc_base != NULL && mc_base != r->mc_base) {
    snprintf(text, sizeof(text),
             "the ncclMultimemHandle's base %p is not the multicast object window %p is "
             "bound to (%p)", mc_base, window, (void *)r->mc_base);
    res = ncclInvalidUsage;
  } else if (offset >= r->size) {
    snprintf(text, sizeof(text),
             "offset %zu is outside window %p's multicast range (%zu bytes)", offset, window,
             r->size);
    res = ncclInvalidArgument;
  } else {
    *ptr_out = r->mc_base + r->off + offset;
  }
  pthread_mutex_unlock(&win_mu);
  if (res != ncclSuccess && why != NULL && whylen > 0) snprintf(why, whylen, "%s", text);
  return res;
}

/* ---- NCCL_NVLS_ENABLE --------------------------------------------------- */

/* 0, 1 or 2; any other value counts as 2 (auto), said at INFO. */
static int nvls_enable(int arg) {
  int64_t v = arg >= 0 ? arg : brd_param_int(BRD_P_NVLS_ENABLE);
  if (v == 0 || v == 1 || v == 2) return (int)v;
  INFO(BRD_SUBSYS_NVLS | BRD_SUBSYS_ENV,
       "NVLS: NCCL_NVLS_ENABLE=%lld is not 0, 1 or 2; using 2 (auto)", (long long)v);
  return 2;
}

static ncclResult_t args_check(const brd_nvls_args_t *a, brd_nvls_t **nvls_out) {
  if (a == NULL || nvls_out == NULL) {
    WARN("NVLS: brd_nvls_create needs args and nvls_out (internal error; please report it)");
    return ncclInvalidArgument;
  }
  if (a->nranks < 1 || a->rank < 0 || a->rank >= a->nranks || a->allgather == NULL ||
      a->size == 0 || (a->bind != BRD_NVLS_BIND_MEM && a->bind != BRD_NVLS_BIND_ADDR)) {
    WARN("NVLS: bad arguments: local rank %d of %d, size %zu, bind kind %d, allgather %s "
         "(internal error; please report it)", a->rank, a->nranks, a->size, (int)a->bind,
         a->allgather != NULL ? "set" : "missing");
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* Whether a status makes this rank's call fail: NCCL_NVLS_ENABLE=1 only. */
static ncclResult_t required_failed(int enable, const brd_nvls_status_t *st, int driver) {
  if (enable != 1) return ncclSuccess;
  WARN("NVLS: NCCL_NVLS_ENABLE=1 requires NVLS, but it cannot be set up: %s. Set "
       "NCCL_NVLS_ENABLE=2 to run without it (collectives then use P2P)", st->why);
  return driver ? ncclSystemError : ncclInvalidUsage;
}

#if BRAID_CUDA

/* ---- multicast handles shared by the threads of this process ------------ */

typedef struct mc_ref {
  CUmemGenericAllocationHandle h;
  const brd_cudrv_t *drv;  /* borrowed; releases h */
  int refs;
  struct mc_ref *next;     /* owned */
} mc_ref_t;

static pthread_mutex_t mc_mu = PTHREAD_MUTEX_INITIALIZER;
static mc_ref_t *mc_refs; /* under mc_mu */

/* One more holder of h (the first: the creator or an importer). 0 when out
 * of memory. */
static int mc_hold(const brd_cudrv_t *drv, CUmemGenericAllocationHandle h) {
  int ok = 1;
  pthread_mutex_lock(&mc_mu);
  mc_ref_t *r = mc_refs;
  while (r != NULL && (r->h != h || r->drv != drv)) r = r->next;
  if (r == NULL) {
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
      ok = 0;
    } else {
      r->h = h;
      r->drv = drv;
      r->next = mc_refs;
      mc_refs = r;
    }
  }
  if (r != NULL) r->refs++;
  pthread_mutex_unlock(&mc_mu);
  return ok;
}

/* One holder fewer; the last one releases h. */
static void mc_drop(const brd_cudrv_t *drv, CUmemGenericAllocationHandle h) {
  int release = 0;
  pthread_mutex_lock(&mc_mu);
  for (mc_ref_t **p = &mc_refs; *p != NULL; p = &(*p)->next) {
    mc_ref_t *r = *p;
    if (r->h != h || r->drv != drv) continue;
    if (--r->refs == 0) {
      *p = r->next;
      free(r);
      release = 1;
    }
    break;
  }
  pthread_mutex_unlock(&mc_mu);
  if (release) {
    CUresult r = drv->mem_release(h);
    if (r != CUDA_SUCCESS)
      INFO(BRD_SUBSYS_NVLS, "NVLS: cuMemRelease of multicast handle %llx: CUresult %d",
           (unsigned long long)h, (int)r);
  }
}

/* ---- one rank's mapping -------------------------------------------------- */

struct brd_nvls {
  const brd_cudrv_t *drv;      /* borrowed */
  int dev;                     /* CUDA device ordinal */
  CUdevice cudev;
  brd_nvls_mem_t mem;          /* sizes */
  CUmemGenericAllocationHandle mc;
  int held;                    /* 1: mc is held (mc_hold) */
  int added;                   /* 1: cuMulticastAddDevice worked */
  int bound;                   /* 1: this rank's memory is bound */
  CUdeviceptr va;              /* the multicast range, mem.mc_size bytes */
  int reserved, mapped;
};

/* What one rank says in each status gather. */
typedef struct {
  int32_t kind;                /* wire_kind_t */
  int32_t code;                /* CUresult of a failed driver call, else 0 */
  int32_t enable;              /* this rank's NCCL_NVLS_ENABLE */
  uint32_t pid;
  uint32_t serial;             /* gather 2, creator: descriptor server, 0: none */
  int32_t dev;                 /* gather 1: CUDA device ordinal (within pid) */
  uint64_t handle;             /* gather 2, creator: the multicast handle */
  uint64_t size, gran_min, gran_rec;
  char call[48];               /* what failed */
  char text[256];              /* why, in words */
} wire_t;

typedef enum {
  WIRE_OK = 0,
  WIRE_OFF = 1,      /* NVLS is off or unsupported here: not an error */
  WIRE_USAGE = 2,    /* the window or the ranks' arguments do not fit */
  WIRE_DRIVER = 3,   /* a driver or system call failed */
} wire_kind_t;

static const char *cu_text(const brd_cudrv_t *drv, CUresult r) {
  const char *s = NULL;
  if (drv == NULL || drv->get_error_string == NULL || drv->get_error_string(r, &s) != CUDA_SUCCESS ||
      s == NULL)
    return "unknown CUDA driver error";
  return s;
}

/* Records this rank's first failure in me; 0 (failed) for chaining. */
static int fail(wire_t *me, wire_kind_t kind, const char *call, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int fail(wire_t *me, wire_kind_t kind, const char *call, int code, const char *fmt, ...) {
  if (me->kind != WIRE_OK) return 0;
  me->kind = kind;
  me->code = code;
  snprintf(me->call, sizeof(me->call), "%s", call);
  va_list ap;
  va_start(ap, fmt);
  (void)vsnprintf(me->text, sizeof(me->text), fmt, ap);
  va_end(ap);
  return 0;
}

/* A driver call's outcome: 1 when it worked, else the failure is recorded. */
static int cu_ok(const brd_cudrv_t *drv, wire_t *me, CUresult r, const char *call) {
  if (r == CUDA_SUCCESS) return 1;
  return fail(me, WIRE_DRIVER, call, (int)r, "%s (CUresult %d)", cu_text(drv, r), (int)r);
}

static size_t round_up(size_t v, size_t g) { return (v + g - 1) / g * g; }

/* Step 1 on this rank: the gates and the sizes. */
static void step_check(const brd_nvls_args_t *a, int enable, brd_nvls_t *n, wire_t *me) {
  const brd_cudrv_t *drv = n->drv;
  char why[160];
  if (enable == 0) {
    fail(me, WIRE_OFF, "NCCL_NVLS_ENABLE", 0, "NCCL_NVLS_ENABLE=0 on local rank %d", a->rank);
    return;
  }
  if (drv == NULL) {
    fail(me, WIRE_OFF, "cudaGetDriverEntryPoint", 0,
         "the CUDA driver API is unavailable (no driver, or one older than CUDA 12.0)");
    return;
  }
  if (!brd_cudrv_has_multicast(drv, why, sizeof(why))) {
    fail(me, WIRE_OFF, "cudaGetDriverEntryPoint", 0, "%s", why);
    return;
  }
  if (!cu_ok(drv, me, drv->device_get(&n->cudev, a->dev), "cuDeviceGet")) return;
  int mc = 0;
  if (!cu_ok(drv, me, drv->device_get_attribute(&mc, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED,
                                                n->cudev),
             "cuDeviceGetAttribute"))
    return;
  if (!mc) {
    fail(me, WIRE_OFF, "CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED", 0,
         "device %d has no multicast (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED is 0: NVLS needs "
         "sm_90 or later on NVSwitches with the fabric manager running)", a->dev);
    return;
  }
  CUmulticastObjectProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.numDevices = (unsigned int)a->nranks;
  prop.size = a->size;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gmin = 0, grec = 0;
  if (!cu_ok(drv, me, drv->mc_get_granularity(&gmin, &prop, CU_MULTICAST_GRANULARITY_MINIMUM),
             "cuMulticastGetGranularity") ||
      !cu_ok(drv, me,
             drv->mc_get_granularity(&grec, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED),
             "cuMulticastGetGranularity"))
    return;
  if (gmin == 0 || grec == 0 || grec % gmin != 0) {
    fail(me, WIRE_DRIVER, "cuMulticastGetGranularity", 0,
         "the driver gave granularities %zu (minimum) and %zu (recommended)", gmin, grec);
    return;
  }
  n->mem.gran_min = gmin;
  n->mem.gran_rec = grec;
  n->mem.size = a->size;
  if (a->size > SIZE_MAX - grec) {
    fail(me, WIRE_USAGE, "window size", 0, "a window of %zu bytes is too large", a->size);
    return;
  }
  n->mem.bind_size = round_up(a->size, gmin);
  n->mem.pad_bytes = n->mem.bind_size - a->size;
  n->mem.mc_size = round_up(n->mem.bind_size, grec);
  n->mem.phys_bytes = 0;
  me->gran_min = gmin;
  me->gran_rec = grec;
  if (a->bind == BRD_NVLS_BIND_MEM) {
    if (a->mem_offset % gmin != 0 || a->mem_offset > a->mem_size ||
        a->mem_size - a->mem_offset < n->mem.bind_size)
      fail(me, WIRE_USAGE, "window alignment", 0,
           "the window (offset %zu, %zu bytes, in an allocation of %zu bytes) must start at "
           "a multiple of the multicast granularity %zu and have %zu bytes of room",
           a->mem_offset, a->size, a->mem_size, gmin, n->mem.bind_size);
  } else if (a->addr % gmin != 0 || a->addr_room < n->mem.bind_size) {
    fail(me, WIRE_USAGE, "window alignment", 0,
         "the window at %#llx (%zu bytes mapped) must start at a multiple of the multicast "
         "granularity %zu and have %zu bytes mapped", (unsigned long long)a->addr,
         a->addr_room, gmin, n->mem.bind_size);
  }
}

/* Exchanges me; 0 with *res set when the allgather itself failed. */
static int gather(const brd_nvls_args_t *a, const wire_t *me, wire_t *all,
                  ncclResult_t *res) {
  *res = a->allgather(a->allgather_ctx, me, all, sizeof(*me));
  if (*res != ncclSuccess) {
    INFO(BRD_SUBSYS_NVLS, "NVLS: local rank %d: the status exchange failed (%s); NVLS setup "
         "stops", a->rank, ncclGetErrorString(*res));
    return 0;
  }
  return 1;
}

/* Whether every rank's step worked; else the first failure goes to st.
 * After gather 1 the ranks must also agree on sizes and granularities. */
static int all_ok(const wire_t *all, int nranks, int first, brd_nvls_status_t *st,
                  int *kind_out) {
  for (int i = 0; i < nranks; i++) {
    const wire_t *w = &all[i];
    if (w->kind == WIRE_OK) continue;
    st->fail_rank = i;
    st->fail_code = w->code;
    snprintf(st->fail_call, sizeof(st->fail_call), "%s", w->call);
    if (w->kind == WIRE_OFF)
      snprintf(st->why, sizeof(st->why), "local rank %d: %s", i, w->text);
    else
      snprintf(st->why, sizeof(st->why), "local rank %d: %s failed: %s", i, w->call, w->text);
    *kind_out = w->kind;
    return 0;
  }
  if (!first) return 1;
  /* One GPU per rank: a device cannot join a multicast object twice
   * (ordinals are compared within a process only; CUDA_VISIBLE_DEVICES may
   * renumber them in another). */
  for (int i = 1; i < nranks; i++) {
    for (int j = 0; j < i; j++) {
      if (all[i].pid != all[j].pid || all[i].dev != all[j].dev) continue;
      st->fail_rank = i;
      st->fail_code = 0;
      snprintf(st->fail_call, sizeof(st->fail_call), "one GPU per rank");
      snprintf(st->why, sizeof(st->why),
               "local ranks %d and %d share device %d; NVLS needs a GPU of its own per rank", j,
               i, all[i].dev);
      *kind_out = WIRE_OFF;
      return 0;
    }
  }
  for (int i = 1; i < nranks; i++) {
    if (all[i].size == all[0].size && all[i].gran_min == all[0].gran_min &&
        all[i].gran_rec == all[0].gran_rec)
      continue;
    st->fail_rank = i;
    st->fail_code = 0;
    snprintf(st->fail_call, sizeof(st->fail_call), "window size");
    snprintf(st->why, sizeof(st->why),
             "local rank %d: window size check failed: it binds %llu bytes with granularities "
             "%llu/%llu, local rank 0 %llu bytes with %llu/%llu; every rank must bind the "
             "same", i, (unsigned long long)all[i].size, (unsigned long long)all[i].gran_min,
             (unsigned long long)all[i].gran_rec, (unsigned long long)all[0].size,
             (unsigned long long)all[0].gran_min, (unsigned long long)all[0].gran_rec);
    *kind_out = WIRE_USAGE;
    return 0;
  }
  return 1;
}

/* Step 2 on local rank 0: makes the multicast object and offers it (the
 * handle; a descriptor server, in *srv_out, when a rank of another process,
 * or share_fd, needs the descriptor). */
static void step_offer(const brd_nvls_args_t *a, brd_nvls_t *n, const wire_t *all,
                       uint32_t mypid, wire_t *me, brd_ipc_fdsrv_t **srv_out) {
  const brd_cudrv_t *drv = n->drv;
  CUmulticastObjectProp prop;
  memset(&prop, 0, sizeof(prop));
  prop.numDevices = (unsigned int)a->nranks;
  prop.size = n->mem.mc_size;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  if (cu_ok(drv, me, drv->mc_create(&n->mc, &prop), "cuMulticastCreate")) {
    if (!mc_hold(drv, n->mc)) {
      (void)drv->mem_release(n->mc);
      fail(me, WIRE_DRIVER, "calloc", 0, "out of memory");
    } else {
      n->held = 1;
      me->handle = (uint64_t)n->mc;
    }
  }
  int need_fd = a->share_fd;
  for (int i = 0; i < a->nranks; i++) need_fd |= all[i].pid != mypid;
  if (n->held && need_fd) {
    int fd = -1;
    if (cu_ok(drv, me, drv->mem_export(&fd, n->mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              "cuMemExportToShareableHandle")) {
      if (brd_ipc_fdsrv_create(fd, srv_out) != ncclSuccess)
        fail(me, WIRE_DRIVER, "descriptor server", 0, "%s", brd_log_last_error());
      else
        me->serial = brd_ipc_fdsrv_serial(*srv_out);
      close(fd);
    }
  }
}

/* Step 3 on every other rank: takes local rank 0's handle (same process)
 * or descriptor. */
static void step_take(const brd_nvls_args_t *a, brd_nvls_t *n, const wire_t *all,
                      uint32_t mypid, double timeout, wire_t *me) {
  const brd_cudrv_t *drv = n->drv;
  const wire_t *c = &all[0];
  if (c->pid == mypid && !a->share_fd) {
    n->mc = (CUmemGenericAllocationHandle)c->handle;
    if (mc_hold(drv, n->mc))
      n->held = 1;
    else
      fail(me, WIRE_DRIVER, "calloc", 0, "out of memory");
  } else if (c->serial == 0) {
    fail(me, WIRE_DRIVER, "descriptor fetch", 0,
         "local rank 0 (pid %u) offered no descriptor", c->pid);
  } else {
    int fd = -1;
    if (brd_ipc_fd_fetch(c->pid, c->serial, timeout, a->abort_flag, &fd) != ncclSuccess) {
      fail(me, WIRE_DRIVER, "descriptor fetch", 0, "from pid %u: %s", c->pid,
           brd_log_last_error());
    } else {
      if (cu_ok(drv, me,
                drv->mem_import(&n->mc, (void *)(uintptr_t)fd,
                                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                "cuMemImportFromShareableHandle")) {
        if (mc_hold(drv, n->mc)) {
          n->held = 1;
        } else {
          (void)drv->mem_release(n->mc);
          fail(me, WIRE_DRIVER, "calloc", 0, "out of memory");
        }
      }
      close(fd);
    }
  }
}

/* Step 4 on this rank: binds its memory, maps the multicast range. */
static void step_bind(const brd_nvls_args_t *a, brd_nvls_t *n, wire_t *me) {
  const brd_cudrv_t *drv = n->drv;
  if (a->bind == BRD_NVLS_BIND_MEM)
    n->bound = cu_ok(drv, me,
                     drv->mc_bind_mem(n->mc, 0, (CUmemGenericAllocationHandle)a->mem_handle,
                                      a->mem_offset, n->mem.bind_size, 0),
                     "cuMulticastBindMem");
  else
    n->bound = cu_ok(drv, me,
                     drv->mc_bind_addr(n->mc, 0, (CUdeviceptr)a->addr, n->mem.bind_size, 0),
                     "cuMulticastBindAddr");
  if (n->bound)
    n->reserved = cu_ok(drv, me,
                        drv->mem_address_reserve(&n->va, n->mem.mc_size, n->mem.gran_rec, 0, 0),
                        "cuMemAddressReserve");
  if (n->reserved)
    n->mapped = cu_ok(drv, me, drv->mem_map(n->va, n->mem.mc_size, 0, n->mc, 0), "cuMemMap");
  if (n->mapped) {
    CUmemAccessDesc acc;
    memset(&acc, 0, sizeof(acc));
    acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    acc.location.id = a->dev;
    acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    (void)cu_ok(drv, me, drv->mem_set_access(n->va, n->mem.mc_size, &acc, 1), "cuMemSetAccess");
  }
}

/* Gives back what this rank holds, in reverse order of making. */
static void nvls_unwind(brd_nvls_t *n) {
  const brd_cudrv_t *drv = n->drv;
  CUresult r;
  if (n->mapped && (r = drv->mem_unmap(n->va, n->mem.mc_size)) != CUDA_SUCCESS)
    INFO(BRD_SUBSYS_NVLS, "NVLS: cuMemUnmap of the multicast range: %s", cu_text(drv, r));
  if (n->reserved && (r = drv->mem_address_free(n->va, n->mem.mc_size)) != CUDA_SUCCESS)
    INFO(BRD_SUBSYS_NVLS, "NVLS: cuMemAddressFree of the multicast range: %s", cu_text(drv, r));
  /* Fails harmlessly when the caller freed the bound memory first. */
  if (n->bound && (r = drv->mc_unbind(n->mc, n->cudev, 0, n->mem.bind_size)) != CUDA_SUCCESS)
    INFO(BRD_SUBSYS_NVLS, "NVLS: cuMulticastUnbind on device %d: %s", n->dev, cu_text(drv, r));
  if (n->held) mc_drop(drv, n->mc);
  n->mapped = n->reserved = n->bound = n->held = n->added = 0;
  n->va = 0;
}

/* See nvls.h. */
ncclResult_t brd_nvls_create(const brd_nvls_args_t *a, brd_nvls_t **nvls_out,
                             brd_nvls_status_t *status_out) {
  ncclResult_t res = ncclSuccess;
  CHECK(args_check(a, nvls_out));
  brd_nvls_status_t st;
  memset(&st, 0, sizeof(st));
  st.fail_rank = -1;
  int enable = nvls_enable(a->enable);
  int kind = WIRE_OK;
  int creator = a->rank == 0;
  brd_ipc_fdsrv_t *srv = NULL;
  wire_t me;
  wire_t *all = calloc((size_t)a->nranks, sizeof(*all));
  brd_nvls_t *n = calloc(1, sizeof(*n));
  if (all == NULL || n == NULL) {
    WARN("NVLS: out of memory setting up %d local ranks", a->nranks);
    res = ncclSystemError;
    goto fail_free;
  }
  n->drv = a->drv != NULL ? a->drv : brd_cudrv_get();
  n->dev = a->dev;
  const brd_cudrv_t *drv = n->drv;
  uint32_t mypid = (uint32_t)getpid();
  double timeout = a->timeout_s > 0 ? a->timeout_s : 60.0;

  /* 1. Gates and sizes, each rank on its own. */
  memset(&me, 0, sizeof(me));
  me.enable = enable;
  me.pid = mypid;
  me.dev = a->dev;
  me.size = a->size;
  step_check(a, enable, n, &me);
  if (!gather(a, &me, all, &res)) goto fail_free;
  if (!all_ok(all, a->nranks, 1, &st, &kind)) goto off;

  /* 2. Local rank 0 makes the object and offers it. */
  memset(&me, 0, sizeof(me));
  me.pid = mypid;
  if (creator) step_offer(a, n, all, mypid, &me, &srv);
  if (!gather(a, &me, all, &res)) goto fail_unwind;
  if (!all_ok(all, a->nranks, 0, &st, &kind)) goto off;

  /* 3. Every rank takes the handle and adds its device. */
  memset(&me, 0, sizeof(me));
  me.pid = mypid;
  if (!creator) step_take(a, n, all, mypid, timeout, &me);
  if (n->held && cu_ok(drv, &me, drv->mc_add_device(n->mc, n->cudev), "cuMulticastAddDevice"))
    n->added = 1;
  /* The status gather before any bind: cuMulticastBind* blocks until every
   * device was added, so nobody binds unless everybody added. */
  int gathered = gather(a, &me, all, &res);
  brd_ipc_fdsrv_destroy(srv); /* every importer has its descriptor by now */
  srv = NULL;
  if (!gathered) goto fail_unwind;
  if (!all_ok(all, a->nranks, 0, &st, &kind)) goto off;

  /* 4. Bind this rank's memory, map the multicast range. */
  memset(&me, 0, sizeof(me));
  me.pid = mypid;
  step_bind(a, n, &me);
  /* A late failure disables every rank too. */
  if (!gather(a, &me, all, &res)) goto fail_unwind;
  if (!all_ok(all, a->nranks, 0, &st, &kind)) goto off;

  st.enabled = 1;
  INFO(BRD_SUBSYS_NVLS | BRD_SUBSYS_INIT,
       "NVLS: local rank %d of %d: multicast range %p (%zu bytes, window %zu bytes, "
       "granularity %zu/%zu) on device %d", a->rank, a->nranks, (void *)(uintptr_t)n->va,
       n->mem.mc_size, n->mem.size, n->mem.gran_min, n->mem.gran_rec, a->dev);
  free(all);
  *nvls_out = n;
  if (status_out != NULL) *status_out = st;
  return ncclSuccess;

off:
  /* Every rank took this branch after the same gather. */
  brd_ipc_fdsrv_destroy(srv);
  nvls_unwind(n);
  if (kind == WIRE_OFF || enable == 0) {
    INFO(BRD_SUBSYS_NVLS | BRD_SUBSYS_INIT, "NVLS: off on all %d local ranks: %s; "
         "collectives use P2P", a->nranks, st.why);
  } else if (enable == 2) {
    WARN("NVLS: %s; NVLS is off on all %d local ranks and collectives use P2P (%s; "
         "NCCL_NVLS_ENABLE=0 skips NVLS)", st.why, a->nranks,
         kind == WIRE_DRIVER ? "a multicast failure usually means the fabric manager or the "
                               "NVSwitches are not healthy"
                             : "every rank must bind the same size of cuMem memory aligned "
                               "to the multicast granularity");
    INFO(BRD_SUBSYS_NVLS | BRD_SUBSYS_INIT, "NVLS: disabled; collectives use P2P plans");
  }
  res = required_failed(enable, &st, kind == WIRE_DRIVER);
  free(all);
  free(n);
  if (res == ncclSuccess) *nvls_out = NULL;
  if (status_out != NULL) *status_out = st;
  return res;

fail_unwind:
  brd_ipc_fdsrv_destroy(srv);
  nvls_unwind(n);
fail_free:
  free(all);
  free(n);
  return res;
}

/* See nvls.h. */
void brd_nvls_destroy(brd_nvls_t *nvls) {
  if (nvls == NULL) return;
  nvls_unwind(nvls);
  free(nvls);
}

/* See nvls.h. */
void *brd_nvls_mc_ptr(const brd_nvls_t *nvls) { return (void *)(uintptr_t)nvls->va; }

/* See nvls.h. */
void brd_nvls_mem(const brd_nvls_t *nvls, brd_nvls_mem_t *mem_out) { *mem_out = nvls->mem; }

#else /* !BRAID_CUDA */

struct brd_nvls {
  brd_nvls_mem_t mem;
};

/* See nvls.h. Without CUDA there is no multicast: off, or an error where
 * NCCL_NVLS_ENABLE=1 asks for it. */
ncclResult_t brd_nvls_create(const brd_nvls_args_t *a, brd_nvls_t **nvls_out,
                             brd_nvls_status_t *status_out) {
  CHECK(args_check(a, nvls_out));
  brd_nvls_status_t st;
  memset(&st, 0, sizeof(st));
  st.fail_rank = a->rank;
  int enable = nvls_enable(a->enable);
  snprintf(st.fail_call, sizeof(st.fail_call), "%s", enable == 0 ? "NCCL_NVLS_ENABLE" : "CUDA=0");
  snprintf(st.why, sizeof(st.why), "local rank %d: %s", a->rank,
           enable == 0 ? "NCCL_NVLS_ENABLE=0"
                       : "this library was built with CUDA=0, which has no multicast");
  ncclResult_t res = required_failed(enable, &st, 0);
  if (res == ncclSuccess) {
    INFO(BRD_SUBSYS_NVLS | BRD_SUBSYS_INIT, "NVLS: off: %s", st.why);
    *nvls_out = NULL;
  }
  if (status_out != NULL) *status_out = st;
  return res;
}

/* See nvls.h. */
void brd_nvls_destroy(brd_nvls_t *nvls) { free(nvls); }

/* See nvls.h. */
void *brd_nvls_mc_ptr(const brd_nvls_t *nvls) {
  (void)nvls;
  return NULL;
}

/* See nvls.h. */
void brd_nvls_mem(const brd_nvls_t *nvls, brd_nvls_mem_t *mem_out) { *mem_out = nvls->mem; }

#endif /* BRAID_CUDA */
