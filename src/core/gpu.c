/*
 * Braid: the device backend seam (see gpu.h). Every CUDA runtime call of
 * the lifecycle lives here, behind #if BRAID_CUDA.
 */
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if BRAID_CUDA
#include <cuda_runtime.h>
#endif

#include "base/check.h"
#include "core/gpu.h"
#include "base/param.h"

#if BRAID_CUDA
#define CUDA_WARN(call, what)                                                 \
  do {                                                                        \
    cudaError_t e_ = (call);                                                  \
    if (e_ != cudaSuccess) {                                                  \
      WARN("CUDA: %s failed: %s (%d)", (what), cudaGetErrorString(e_), (int)e_); \
      return ncclUnhandledCudaError;                                          \
    }                                                                         \
  } while (0)
#endif

/* See gpu.h. */
int64_t brd_device_busid_to_int(const char *bus_id) {
  char hex[17];
  int n = 0;
  for (int i = 0; bus_id[i] != '\0' && n < (int)sizeof(hex) - 1; i++) {
    char c = bus_id[i];
    if (c == '.' || c == ':') continue;
    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'))
      hex[n++] = c;
    else
      break;
  }
  hex[n] = '\0';
  return (int64_t)strtoll(hex, NULL, 16);
}

#if BRAID_CUDA
/* Runs a CUDA runtime query that writes one int, named what, into *v_out. */
static ncclResult_t query_int(cudaError_t (*fn)(int *), const char *what, int *v_out) {
  int v = 0;
  CUDA_WARN(fn(&v), what);
  *v_out = v;
  return ncclSuccess;
}
#define QUERY_INT(fn, v_out) query_int(fn, #fn, v_out)
#else
/* Without CUDA every such query answers 0. */
#define QUERY_INT(fn, v_out) (*(v_out) = 0, ncclSuccess)
#endif

/* See gpu.h. */
ncclResult_t brd_device_count(int *count_out) {
  return QUERY_INT(cudaGetDeviceCount, count_out);
}

/* See gpu.h. */
ncclResult_t brd_device_current(int *dev_out) { return QUERY_INT(cudaGetDevice, dev_out); }

/* See gpu.h. */
ncclResult_t brd_device_set(int dev) {
#if BRAID_CUDA
  CUDA_WARN(cudaSetDevice(dev), "cudaSetDevice");
#else
  (void)dev;
#endif
  return ncclSuccess;
}

#if BRAID_CUDA
/* Whether a CUDA device is usable, without WARNing: auto mode decides on
 * this and gives its own message. */
static int cuda_visible(cudaError_t *err_out) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  *err_out = e;
  if (e != cudaSuccess) {
    (void)cudaGetLastError(); /* clear the sticky-free error for later calls */
    return 0;
  }
  return n > 0;
}
#endif

/* See gpu.h. */
ncclResult_t brd_device_backend(brd_device_backend_t *backend_out) {
  const char *mode = brd_param_str(BRD_P_BRAID_DEVICE);
  if (mode == NULL || mode[0] == '\0') mode = "auto";
  if (strcmp(mode, "host") == 0) {
    *backend_out = BRD_DEVICE_HOST;
    return ncclSuccess;
  }
  if (strcmp(mode, "auto") != 0 && strcmp(mode, "cuda") != 0) {
    WARN("BRAID_DEVICE=%s is not one of auto, cuda or host", mode);
    return ncclInvalidArgument;
  }
#if BRAID_CUDA
  {
    cudaError_t e;
    if (!cuda_visible(&e)) {
      WARN("BRAID_DEVICE=%s but no CUDA device is visible (cudaGetDeviceCount: "
           "%s); set BRAID_DEVICE=host to run on the host executor",
           mode, e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
      return ncclUnhandledCudaError;
    }
    *backend_out = BRD_DEVICE_CUDA;
    return ncclSuccess;
  }
#else
  if (strcmp(mode, "cuda") == 0) {
    WARN("BRAID_DEVICE=cuda but this library was built without CUDA (CUDA=0); "
         "set BRAID_DEVICE=host or use a CUDA build");
    return ncclInvalidUsage;
  }
  {
    static _Atomic int said;
    if (atomic_exchange(&said, 1) == 0)
      INFO(BRD_SUBSYS_INIT, "BRAID_DEVICE=auto in a build without CUDA: using "
           "the host executor");
  }
  *backend_out = BRD_DEVICE_HOST;
  return ncclSuccess;
#endif
}

static pthread_once_t host_hash_once = PTHREAD_ONCE_INIT;
static uint64_t host_hash_value;

static uint64_t fnv1a(const char *s, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 0x100000001b3ull;
  }
  /* Finalise so near-identical strings land far apart. */
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  return h;
}

/* NCCL's host identity: $(hostname)$(cat boot_id), or the override alone. */
static void host_hash_init(void) {
  char id[1024];
  const char *over = brd_param_str(BRD_P_BRAID_HOSTID);
  if (over == NULL || over[0] == '\0') over = brd_param_str(BRD_P_HOSTID);
  if (over != NULL && over[0] != '\0') {
    INFO(BRD_SUBSYS_ENV, "host identity set by environment to %s", over);
    snprintf(id, sizeof(id), "%s", over);
  } else {
    FILE *f;
    size_t off;
    if (gethostname(id, sizeof(id)) != 0) snprintf(id, sizeof(id), "unknown");
    id[sizeof(id) - 1] = '\0';
    off = strlen(id);
    f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
      if (fgets(id + off, (int)(sizeof(id) - off), f) != NULL)
        id[off + strcspn(id + off, "\n")] = '\0';
      fclose(f);
    }
  }
  TRACE(BRD_SUBSYS_INIT, "unique host identity '%s'", id);
  host_hash_value = fnv1a(id, strlen(id));
}

/* See gpu.h. */
uint64_t brd_device_host_hash(void) {
  pthread_once(&host_hash_once, host_hash_init);
  return host_hash_value;
}

/* See device.h. */
uint64_t brd_device_pid_hash(int32_t pid) {
  char s[256];
  int n = snprintf(s, sizeof(s), "%ld", (long)pid);
  ssize_t len = readlink("/proc/self/ns/pid", s + n, sizeof(s) - 1 - (size_t)n);
  if (len < 0) len = 0;
  s[n + len] = '\0';
  return fnv1a(s, strlen(s));
}

/* See gpu.h. */
ncclResult_t brd_device_peer_info(brd_device_backend_t backend, int dev,
                                  brd_peer_info_t *info_out) {
  brd_peer_info_t info;
  memset(&info, 0, sizeof(info));
  info.host_hash = brd_device_host_hash();
  info.pid_hash = brd_device_pid_hash((int32_t)getpid());
  info.pid = (int32_t)getpid();
  info.dev = dev;
  info.backend = backend;
  info.version = NCCL_VERSION_CODE;
  info.bus_id = -1;
  snprintf(info.bus_id_str, sizeof(info.bus_id_str), "host");
  info.p2p = 1;
  if (backend == BRD_DEVICE_CUDA) {
#if BRAID_CUDA
    int major = 0, minor = 0;
    /* "dddd:bb:dd.f" and its NUL fit in 16 bytes. */
    char *bus = info.bus_id_str;
    CUDA_WARN(cudaDeviceGetPCIBusId(bus, (int)sizeof(info.bus_id_str), dev),
              "cudaDeviceGetPCIBusId");
    bus[sizeof(info.bus_id_str) - 1] = '\0';
    for (char *p = bus; *p; p++)
      if (*p >= 'A' && *p <= 'F') *p = (char)(*p - 'A' + 'a');
    info.bus_id = brd_device_busid_to_int(bus);
    CUDA_WARN(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
              "cudaDeviceGetAttribute(major)");
    CUDA_WARN(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev),
              "cudaDeviceGetAttribute(minor)");
    info.cuda_cc = 10 * major + minor;
    info.p2p = brd_param_int(BRD_P_P2P_DISABLE) ? 0 : 1;
#else
    WARN("internal: CUDA backend requested in a build without CUDA");
    return ncclInternalError;
#endif
  }
  *info_out = info;
  return ncclSuccess;
}
