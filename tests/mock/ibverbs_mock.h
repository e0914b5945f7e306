/*
 * Braid test support: the control surface of the verbs mock
 * (libibverbs-mock.so, ibverbs_mock.c), for tests that dlsym it.
 *
 * The mock is configured by environment, read at each call so a test may
 * change it between steps:
 *   BRAID_MOCK_IB_DEVICES       "name:ports:IB|ETH[:DOWN],..."
 *                               (default "mlx5_0:1:IB,mlx5_1:1:ETH")
 *   BRAID_MOCK_IB_FAIL_AFTER    N: the (N+1)th RDMA write of this process
 *                               completes in error (and its QP goes to ERR)
 *   BRAID_MOCK_IB_FAIL_STATUS   REM_ACCESS (default) or RETRY_EXC
 *   BRAID_MOCK_IB_REG_LIMIT     N: ibv_reg_mr of more than N bytes fails
 *                               with ENOMEM (as a locked-memory limit does)
 *   BRAID_MOCK_IB_PORT_DOWN_AFTER N: after N RDMA writes of this process
 *                               the initiating port goes down (async
 *                               IBV_EVENT_PORT_ERR; later writes fail)
 *   BRAID_MOCK_IB_HOLD_IMM      1: RDMA writes with immediate are held
 *                               (not delivered, not completed) until
 *                               braid_mock_ib_release lets them go
 *   BRAID_MOCK_IB_DMABUF        0: the NIC takes no DMA-BUF (ibv_reg_dmabuf_mr
 *                               fails with EOPNOTSUPP); 2: the probe (fd -1)
 *                               passes but registrations fail (EINVAL);
 *                               default 1
 *   BRAID_MOCK_IB_PEERMEM       0: nvidia-peermem is absent: ibv_reg_mr of
 *                               the CUDA simulator's memory fails (EFAULT);
 *                               default 1
 *   BRAID_MOCK_IB_COMP_CHANNEL  0: ibv_create_comp_channel fails (ENOSYS),
 *                               as with a provider without them; default 1
 *
 * Completion channels: an eventfd each; a CQ armed with ibv_req_notify_cq
 * raises one event (the descriptor turns readable) at its next completion.
 */
#ifndef BRAID_TESTS_IBVERBS_MOCK_H
#define BRAID_TESTS_IBVERBS_MOCK_H

#include <infiniband/verbs.h>

/* Takes port `port` of device `name` down in this process: its state
 * becomes DOWN, every open context of the device gets IBV_EVENT_PORT_ERR,
 * and writes posted on it fail. 0 on success, -1 for an unknown port. */
typedef int (*braid_mock_ib_port_down_fn)(const char *name, int port);

/* The attributes of the last QP this process moved to RTS (as given to
 * modify_qp, merged over its transitions). 0, or -1 when there is none. */
typedef int (*braid_mock_ib_last_qp_fn)(struct ibv_qp_attr *attr_out);

/* RDMA writes this process initiated so far. */
typedef unsigned long (*braid_mock_ib_writes_fn)(void);

/* One RDMA write as posted, for tests that check what travelled where. */
typedef struct {
  uint32_t src_qpn, dst_qpn;
  uint32_t has_imm;
  uint32_t imm;             /* network order, as posted */
  uint64_t raddr, len;
} braid_mock_ib_write_t;

/* The i-th RDMA write this process initiated (1-based, counted as
 * braid_mock_ib_writes counts; the last 4096 are kept). 0, or -1 when it
 * is not kept. */
typedef int (*braid_mock_ib_write_log_fn)(unsigned long i, braid_mock_ib_write_t *out);

/* Delivers and completes up to n writes held by BRAID_MOCK_IB_HOLD_IMM,
 * oldest first. Returns how many it let go. */
typedef int (*braid_mock_ib_release_fn)(int n);

/* RDMA reads this process served; the last one ({reader QP, its
 * destination QP, 0, 0, remote address, length}; 0, or -1 when none). */
typedef unsigned long (*braid_mock_ib_reads_fn)(void);
typedef int (*braid_mock_ib_last_read_fn)(braid_mock_ib_write_t *out);

/* DMA-BUF registrations this process made (ibv_reg_dmabuf_mr that succeeded). */
typedef unsigned long (*braid_mock_ib_dmabuf_regs_fn)(void);

#endif /* BRAID_TESTS_IBVERBS_MOCK_H */
