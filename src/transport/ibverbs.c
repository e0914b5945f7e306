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
  /* Each entry point at the version NCCL asks for, else by plain name
   * (a library without symbol versions, such as the test mock). */
#define RESOLVE(field, sym, optional)                                        \
  do {                                                                       \
    void *p_ = dlvsym(h, sym, "IBVERBS_1.1");                                \
    if (p_ == NULL) p_ = dlsym(h, sym);                                      \
    memcpy(&ibv_ops.field, &p_, sizeof(p_));                                 \
    if (p_ == NULL && !(optional)) missing = sym;                            \
  } while (0)
  const char *missing = NULL;
  RESOLVE(get_device_list, "ibv_get_device_list", 0);
  RESOLVE(free_device_list, "ibv_free_device_list", 0);
  RESOLVE(get_device_name, "ibv_get_device_name", 0);
  RESOLVE(open_device, "ibv_open_device", 0);
  RESOLVE(close_device, "ibv_close_device", 0);
  RESOLVE(query_device, "ibv_query_device", 0);
  RESOLVE(query_port, "ibv_query_port", 0);
  RESOLVE(query_gid, "ibv_query_gid", 0);
  RESOLVE(alloc_pd, "ibv_alloc_pd", 0);
  RESOLVE(dealloc_pd, "ibv_dealloc_pd", 0);
  RESOLVE(reg_mr, "ibv_reg_mr", 0);
  RESOLVE(dereg_mr, "ibv_dereg_mr", 0);
  RESOLVE(create_cq, "ibv_create_cq", 0);
  RESOLVE(destroy_cq, "ibv_destroy_cq", 0);
  RESOLVE(create_qp, "ibv_create_qp", 0);
  RESOLVE(modify_qp, "ibv_modify_qp", 0);
  RESOLVE(destroy_qp, "ibv_destroy_qp", 0);
  RESOLVE(get_async_event, "ibv_get_async_event", 0);
  RESOLVE(ack_async_event, "ibv_ack_async_event", 0);
  RESOLVE(create_comp_channel, "ibv_create_comp_channel", 1);
  RESOLVE(destroy_comp_channel, "ibv_destroy_comp_channel", 1);
  RESOLVE(get_cq_event, "ibv_get_cq_event", 1);
  RESOLVE(ack_cq_events, "ibv_ack_cq_events", 1);
  {
    /* Versioned apart from the 1.1 set. */
    void *p = dlvsym(h, "_ibv_query_gid_ex", "IBVERBS_1.11");
    if (p == NULL) p = dlsym(h, "_ibv_query_gid_ex");
    memcpy(&ibv_ops.query_gid_ex, &p, sizeof(p));
    /* DMA-BUF registration (GPU memory without nvidia-peermem). */
    p = dlvsym(h, "ibv_reg_dmabuf_mr", "IBVERBS_1.12");
    if (p == NULL) p = dlsym(h, "ibv_reg_dmabuf_mr");
    memcpy(&ibv_ops.reg_dmabuf_mr, &p, sizeof(p));
  }
#undef RESOLVE
  if (missing != NULL) {
    INFO(BRD_SUBSYS_NET, "NET/IB : %s lacks %s, a verbs entry point Braid needs; "
         "InfiniBand/RoCE transports are off", lib, missing);
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
