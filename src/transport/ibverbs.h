/*
 * Braid: libibverbs, opened with dlopen at run time. The library never
 * links against verbs, so it loads where RDMA software is absent; the IB
 * transport (port channels) reaches verbs only through this table.
 */
#ifndef BRD_TRANSPORT_IBVERBS_H
#define BRD_TRANSPORT_IBVERBS_H

#include <infiniband/verbs.h>

#include "nccl.h"

typedef struct brd_ibv_ops {
  struct ibv_device **(*get_device_list)(int *num_devices);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *device);
} brd_ibv_ops_t;

/* Opens libibverbs.so.1 (BRAID_IBVERBS_LIB overrides the name) once and
 * resolves the entry points Braid uses. ncclSystemError with an INFO line
 * (not a WARN: verbs is optional) when the library or a symbol is missing.
 * Any thread. */
ncclResult_t brd_ibv_load(const brd_ibv_ops_t **ops_out);

/* Number of RDMA devices verbs reports, 0 when verbs is absent. Fills up
 * to n names (comma-separated) into names when not NULL. Any thread. */
int brd_ibv_devices(char *names, size_t n);

/* Logs, once per process at INFO/NET, the RDMA devices found ("NET/IB :
 * No device found." when none, as NCCL prints). Any thread. */
void brd_ibv_log_devices(void);

#endif /* BRD_TRANSPORT_IBVERBS_H */
