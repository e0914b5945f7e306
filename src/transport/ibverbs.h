/*
 * Braid: libibverbs, opened with dlopen at run time. The library never
 * links against verbs, so it loads where RDMA software is absent; the IB
 * transport (port channels) reaches verbs only through this table.
 */
#ifndef BRD_TRANSPORT_IBVERBS_H
#define BRD_TRANSPORT_IBVERBS_H

#include <infiniband/verbs.h>

#include "nccl.h"

/* The entry points, resolved at their IBVERBS_1.1 version where the
 * library versions its symbols (as NCCL does), else by plain name. Members
 * marked optional may be NULL; every other one is present once
 * brd_ibv_load succeeded. post_send, post_recv and poll_cq are not symbols
 * in rdma-core (inline wrappers): call them through the context's ops with
 * brd_ibv_post_send and friends below. */
typedef struct brd_ibv_ops {
  struct ibv_device **(*get_device_list)(int *num_devices);
  void (*free_device_list)(struct ibv_device **list);
  const char *(*get_device_name)(struct ibv_device *device);
  struct ibv_context *(*open_device)(struct ibv_device *device);
  int (*close_device)(struct ibv_context *context);
  int (*query_device)(struct ibv_context *context, struct ibv_device_attr *attr);
  /* The exported symbol; pass a whole, zeroed struct ibv_port_attr. */
  int (*query_port)(struct ibv_context *context, uint8_t port, struct ibv_port_attr *attr);
  int (*query_gid)(struct ibv_context *context, uint8_t port, int index, union ibv_gid *gid);
  /* Optional (rdma-core 32+): GID with its type, without sysfs. */
  int (*query_gid_ex)(struct ibv_context *context, uint32_t port, uint32_t index,
                      struct ibv_gid_entry *entry, uint32_t flags, size_t entry_size);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *context);
  int (*dealloc_pd)(struct ibv_pd *pd);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access);
  /* Optional (rdma-core 34+, IBVERBS_1.12): registers `length` bytes at
   * `offset` of the DMA-BUF `fd`, addressed as `iova` in work requests.
   * NULL where the library predates it: GPU memory then needs peermem. */
  struct ibv_mr *(*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t length,
                                  uint64_t iova, int fd, int access);
  int (*dereg_mr)(struct ibv_mr *mr);
  struct ibv_cq *(*create_cq)(struct ibv_context *context, int cqe, void *cq_context,
                              struct ibv_comp_channel *channel, int comp_vector);
  int (*destroy_cq)(struct ibv_cq *cq);
  struct ibv_qp *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
  int (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
  int (*destroy_qp)(struct ibv_qp *qp);
  int (*get_async_event)(struct ibv_context *context, struct ibv_async_event *event);
  void (*ack_async_event)(struct ibv_async_event *event);
  /* Optional (every libibverbs has them; NULL in a library without):
   * completion channels, whose descriptor a caller can sleep on. */
  struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *context);
  int (*destroy_comp_channel)(struct ibv_comp_channel *channel);
  int (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context);
  void (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
} brd_ibv_ops_t;

/* rdma-core's inline data-path wrappers, through the provider's ops. They
 * return 0 or an errno value (post) / the number of completions or < 0
 * (poll), and never block. */
static inline int brd_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
                                    struct ibv_send_wr **bad) {
  return qp->context->ops.post_send(qp, wr, bad);
}
static inline int brd_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
                                    struct ibv_recv_wr **bad) {
  return qp->context->ops.post_recv(qp, wr, bad);
}
static inline int brd_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) {
  return cq->context->ops.poll_cq(cq, n, wc);
}
/* Asks for an event on cq's completion channel at its next completion. */
static inline int brd_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only) {
  return cq->context->ops.req_notify_cq(cq, solicited_only);
}

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
