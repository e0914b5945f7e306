/*
 * Braid: dlopen'ed libibverbs (see ibverbs.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "base/check.h"
#include "base/param.h"
#include "transport/ibverbs.h"

static pthread_mutex_t ibv_lock = PTHREAD_MUTEX_INITIALIZER;
static int ibv_tried;
static ncclResult_t ibv_result = ncclSystemError;
static brd_ibv_ops_t ibv_ops;

static ncclResult_t load_locked(void) {
  const char *lib = brd_param_str(BRD_P_BRAID_IBVERBS_LIB);
  if (lib == NULL || lib[0] == '\0') lib = "libibverbs.so.1";
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) {
    INFO(BRD_SUBSYS_NET, "NET/IB : %s is not available (%s); InfiniBand/RoCE "
         "transports are off (install libibverbs1 and the provider for your "
         "NIC to use them)", lib, dlerror());
    return ncclSystemError;
  }
  ibv_ops.get_device_list =
      (struct ibv_device **(*)(int *))dlsym(h, "ibv_get_device_list");
  ibv_ops.free_device_list =
      (void (*)(struct ibv_device **))dlsym(h, "ibv_free_device_list");
  ibv_ops.get_device_name =
      (const char *(*)(struct ibv_device *))dlsym(h, "ibv_get_device_name");
  if (ibv_ops.get_device_list == NULL || ibv_ops.free_device_list == NULL ||
      ibv_ops.get_device_name == NULL) {
    INFO(BRD_SUBSYS_NET, "NET/IB : %s lacks the verbs entry points Braid "
         "needs; InfiniBand/RoCE transports are off", lib);
    memset(&ibv_ops, 0, sizeof(ibv_ops));
    dlclose(h);
    return ncclSystemError;
  }
  /* The handle stays open for the life of the process. */
  return ncclSuccess;
}

ncclResult_t brd_ibv_load(const brd_ibv_ops_t **ops_out) {
  pthread_mutex_lock(&ibv_lock);
  if (!ibv_tried) {
    ibv_result = load_locked();
    ibv_tried = 1;
  }
  ncclResult_t res = ibv_result;
  pthread_mutex_unlock(&ibv_lock);
  if (res == ncclSuccess) *ops_out = &ibv_ops;
  return res;
}

int brd_ibv_devices(char *names, size_t n) {
  const brd_ibv_ops_t *ops;
  if (names != NULL && n > 0) names[0] = '\0';
  if (brd_ibv_load(&ops) != ncclSuccess) return 0;
  int count = 0;
  struct ibv_device **list = ops->get_device_list(&count);
  if (list == NULL) return 0;
  size_t used = 0;
  for (int i = 0; i < count && names != NULL && used + 1 < n; i++) {
    int w = snprintf(names + used, n - used, "%s%s", i ? "," : "",
                     ops->get_device_name(list[i]));
    if (w < 0) break;
    used += (size_t)w;
  }
  ops->free_device_list(list);
  return count;
}

static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_devices(void) {
  char names[256];
  int n = brd_ibv_devices(names, sizeof(names));
  if (n == 0)
    INFO(BRD_SUBSYS_NET, "NET/IB : No device found.");
  else
    INFO(BRD_SUBSYS_NET, "NET/IB : %d device(s): %s", n, names);
}

void brd_ibv_log_devices(void) {
  if (brd_log_on(BRD_LOG_INFO, BRD_SUBSYS_NET)) pthread_once(&log_once, log_devices);
}
