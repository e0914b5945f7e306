/*
 * Braid test support: a verbs library (libibverbs-mock.so) with real
 * semantics for what Braid uses, between threads and processes of one
 * machine, loaded through BRAID_IBVERBS_LIB.
 *
 * Devices, ports and GIDs come from BRAID_MOCK_IB_DEVICES (ibverbs_mock.h).
 * An IB port has LID 0x10 + 4*dev + port and one GID (fe80::guid); an
 * Ethernet (RoCE) port has LID 0 and mlx5's four GIDs: fe80::guid as RoCE
 * v1 and v2, then ::ffff:10.<dev>.<port>.1 as RoCE v1 and v2.
 *
 * The wire: every process that opens a device runs a service thread on
 * the abstract Unix socket "braid-mock-ib-<uid>-<pid>". QP numbers come
 * from a counter in /dev/shm/braid-mock-ib-<uid>, which also maps each
 * QP number to the process that owns it. post_send checks the local keys,
 * sends {destination QP, address vector, rkey, address, length, imm} and
 * the bytes to the owner's service thread and waits for its answer; the
 * service checks the destination QP (state RTR or RTS, connected to the
 * sender's QP, addressed by the right LID or GID), the rkey (registered
 * in that QP's PD with remote write, range inside), copies the bytes in
 * (ascending, the last 8 bytes last, as an HCA places them), and for a
 * write with immediate consumes a posted receive and completes it. The
 * initiator then completes its WR (signalled or in error). So completions
 * of a QP come in post order, and a write is in the target's memory before
 * the target's receive completes.
 *
 * RDMA reads are served within one process (the IB net's loopback flush
 * QP reads its own GPU buffers): the target QP must be RTR or RTS,
 * connected back to the reader and allow remote reads, and the rkey must
 * give remote read over the range.
 *
 * GPU memory. ibv_reg_dmabuf_mr takes a DMA-BUF fd as the CUDA simulator
 * hands them out (tests/cudasim: the allocation's memfd) and checks that
 * byte `offset` of it is the memory at `iova` (the same file at the same
 * file offset in /proc/self/maps) and that offset + length fits; the
 * probe NCCL makes (fd -1) fails with EBADF, or EOPNOTSUPP with
 * BRAID_MOCK_IB_DMABUF=0; with 2 the probe passes and every real
 * registration fails (EINVAL). BRAID_MOCK_IB_PEERMEM=0 makes ibv_reg_mr refuse
 * (EFAULT, as the kernel does without nvidia-peermem) ranges mapped from
 * the simulator's memory ("/memfd:braid-cudasim-" mappings).
 *
 * Not modelled: reads across processes, atomics, send/receive with data,
 * SRQs, CQ events; an RNR is reported at once instead of retried.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include "ibverbs_mock.h"

#define EXPORT __attribute__((visibility("default")))
#define MAX_DEVS 8
#define MAX_PORTS 2
#define NGID 4
#define REG_SLOTS (1u << 20)
#define WIRE_MAGIC 0x6d6f636bu

/* ---- configuration ------------------------------------------------------ */

typedef struct {
  struct ibv_device dev; /* first: the pointer verbs hands out */
  int index;
  int nports;
  int eth[MAX_PORTS + 1];
  int cfg_down[MAX_PORTS + 1];
} mdev_t;

static mdev_t devs[MAX_DEVS];
static int ndevs;

static pthread_mutex_t G = PTHREAD_MUTEX_INITIALIZER; /* every object below */
static int port_down[MAX_DEVS][MAX_PORTS + 1];         /* taken down at run time */

static void parse_devices(void) {
  const char *env = getenv("BRAID_MOCK_IB_DEVICES");
  char buf[1024];
  snprintf(buf, sizeof(buf), "%s", env != NULL ? env : "mlx5_0:1:IB,mlx5_1:1:ETH");
  ndevs = 0;
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok != NULL && ndevs < MAX_DEVS;
       tok = strtok_r(NULL, ",", &save)) {
    mdev_t *d = &devs[ndevs];
    char *f[4] = {tok, NULL, NULL, NULL};
    for (int i = 1; i < 4; i++) {
      f[i] = f[i - 1] != NULL ? strchr(f[i - 1], ':') : NULL;
      if (f[i] != NULL) *f[i]++ = '\0';
    }
    memset(d, 0, sizeof(*d));
    d->index = ndevs;
    snprintf(d->dev.name, sizeof(d->dev.name), "%s", f[0]);
    snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", ndevs);
    d->dev.node_type = IBV_NODE_CA;
    d->dev.transport_type = IBV_TRANSPORT_IB;
    d->nports = f[1] != NULL ? atoi(f[1]) : 1;
    if (d->nports < 1) d->nports = 1;
    if (d->nports > MAX_PORTS) d->nports = MAX_PORTS;
    for (int p = 1; p <= d->nports; p++) {
      d->eth[p] = f[2] != NULL && strcasecmp(f[2], "ETH") == 0;
      d->cfg_down[p] = f[3] != NULL && strcasecmp(f[3], "DOWN") == 0;
    }
    ndevs++;
  }
}

static long env_long(const char *name, long dflt) {
  const char *v = getenv(name);
  return v != NULL && v[0] != '\0' ? strtol(v, NULL, 0) : dflt;
}

static uint64_t dev_guid(int dev) { return 0x0002c90300a00000ull + (uint64_t)dev; }

static uint16_t port_lid(const mdev_t *d, int port) {
  return d->eth[port] ? 0 : (uint16_t)(0x10 + 4 * d->index + port);
}

/* GID idx of (dev, port), and its type; all zero when unpopulated. */
static void port_gid(const mdev_t *d, int port, int idx, union ibv_gid *gid,
                     enum ibv_gid_type *type) {
  uint64_t guid = dev_guid(d->index);
  memset(gid, 0, sizeof(*gid));
  *type = IBV_GID_TYPE_IB;
  if (!d->eth[port]) {
    if (idx != 0) return;
    gid->raw[0] = 0xfe;
    gid->raw[1] = 0x80;
    for (int i = 0; i < 8; i++) gid->raw[8 + i] = (uint8_t)(guid >> (56 - 8 * i));
    gid->raw[15] = (uint8_t)(gid->raw[15] + port);
    return;
  }
  *type = (idx & 1) ? IBV_GID_TYPE_ROCE_V2 : IBV_GID_TYPE_ROCE_V1;
  if (idx < 2) {
    gid->raw[0] = 0xfe;
    gid->raw[1] = 0x80;
    for (int i = 0; i < 8; i++) gid->raw[8 + i] = (uint8_t)(guid >> (56 - 8 * i));
    gid->raw[15] = (uint8_t)(gid->raw[15] + port);
  } else if (idx < 4) {
    gid->raw[10] = 0xff;
    gid->raw[11] = 0xff;
    gid->raw[12] = 10;
    gid->raw[13] = (uint8_t)d->index;
    gid->raw[14] = (uint8_t)port;
    gid->raw[15] = 1;
  }
}

static int gid_zero(const union ibv_gid *g) {
  for (int i = 0; i < 16; i++)
    if (g->raw[i]) return 0;
  return 1;
}

/* ---- objects ---------------------------------------------------------------- */

typedef struct mctx {
  struct ibv_context ctx;
  int dev;
  int evw;            /* write end of the async event pipe */
  struct mctx *next;
} mctx_t;

typedef struct {
  uint32_t type;
  uint32_t port;
} ev_rec_t;

typedef struct {
  struct ibv_pd pd;
} mpd_t;

typedef struct mmr {
  struct ibv_mr mr;
  int access;
  struct mmr *next;
} mmr_t;

/* A completion channel: an eventfd that an armed CQ bound to it writes at
 * its next completion, and the CQs whose event ibv_get_cq_event has not
 * taken yet, oldest first (under G). */
#define CHAN_EVENTS 256
typedef struct {
  struct ibv_comp_channel ch;
  struct ibv_cq *ev[CHAN_EVENTS];
  int nev;
} mchan_t;

typedef struct {
  struct ibv_cq cq;
  struct ibv_wc *ring;
  int cap, head, count, overflow;
  int armed;               /* ibv_req_notify_cq since the last event (under G) */
} mcq_t;

typedef struct mqp {
  struct ibv_qp qp;
  struct ibv_qp_attr attr;  /* merged over the modify_qp calls */
  int max_send, max_recv, max_sge;
  uint64_t *rq;             /* posted receive wr_ids */
  int rq_head, rq_count;
  struct mqp *next;
} mqp_t;

static mctx_t *ctxs;
static mmr_t *mrs;
static mqp_t *qps;
static uint32_t next_key = 0x1000;
static struct ibv_qp_attr last_rts;
static int have_last_rts;
static atomic_ulong writes;
static atomic_ulong reads;          /* RDMA reads served */
static atomic_ulong dmabuf_regs;    /* DMA-BUF registrations made */
static braid_mock_ib_write_t last_read; /* under G */

#define WLOG 4096
static braid_mock_ib_write_t wlog[WLOG]; /* write i at (i - 1) % WLOG; under G */
static unsigned long wlog_seq[WLOG];

/* ---- the QP registry in /dev/shm ---------------------------------------------- */

typedef struct {
  _Atomic uint32_t next;
  uint32_t pad;
  _Atomic int32_t pid[REG_SLOTS];
} registry_t;

static registry_t *reg;

static registry_t *registry(void) {
  if (reg != NULL) return reg;
  char path[128];
  snprintf(path, sizeof(path), "/dev/shm/braid-mock-ib-%u", (unsigned)getuid());
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return NULL;
  if (ftruncate(fd, sizeof(registry_t)) != 0) {
    close(fd);
    return NULL;
  }
  void *p = mmap(NULL, sizeof(registry_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return NULL;
  reg = p;
  return reg;
}

/* ---- the service thread --------------------------------------------------------- */

typedef struct {
  uint32_t magic, has_imm;
  uint32_t src_qpn, dst_qpn;
  uint8_t dgid[16];
  uint16_t dlid, is_global;
  uint32_t imm;             /* network order, passed through */
  uint64_t raddr;
  uint32_t rkey, pad;
  uint64_t len;
} wire_req_t;

typedef struct {
  uint32_t status;
  uint32_t pad;
} wire_rep_t;

/* Writes held by BRAID_MOCK_IB_HOLD_IMM, oldest first; under G. */
typedef struct held {
  mqp_t *q;
  uint64_t wr_id;
  int signaled;
  wire_req_t rq;
  char *data;               /* owned */
  struct held *next;
} held_t;
static held_t *held_head, **held_tail = &held_head;

static pid_t service_pid;
static int service_fd = -1;

typedef struct conn {
  pid_t pid;
  int fd;
  pthread_mutex_t mu;
  struct conn *next;
} conn_t;
static conn_t *conns;

static void sock_name(pid_t pid, struct sockaddr_un *sa, socklen_t *len) {
  memset(sa, 0, sizeof(*sa));
  sa->sun_family = AF_UNIX;
  int n = snprintf(sa->sun_path + 1, sizeof(sa->sun_path) - 1, "braid-mock-ib-%u-%d",
                   (unsigned)getuid(), (int)pid);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int full_io(int fd, void *buf, size_t n, int is_send) {
  char *p = buf;
  while (n > 0) {
    ssize_t r = is_send ? send(fd, p, n, MSG_NOSIGNAL) : recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

static mqp_t *qp_find(uint32_t qpn) {
  for (mqp_t *q = qps; q != NULL; q = q->next)
    if (q->qp.qp_num == qpn) return q;
  return NULL;
}

static mmr_t *mr_find(uint32_t key) {
  for (mmr_t *m = mrs; m != NULL; m = m->next)
    if (m->mr.rkey == key) return m;
  return NULL;
}

static int range_in(const mmr_t *m, uint64_t addr, uint64_t len) {
  uint64_t lo = (uint64_t)(uintptr_t)m->mr.addr;
  return addr >= lo && len <= m->mr.length && addr - lo <= m->mr.length - len;
}

static const mdev_t *qp_dev(const mqp_t *q) {
  return &devs[((const mctx_t *)(const void *)q->qp.context)->dev];
}

static int is_down(int dev, int port) {
  return port_down[dev][port] || devs[dev].cfg_down[port];
}

/* Under G. */
static void cq_push(mcq_t *cq, const struct ibv_wc *wc) {
  if (cq->count == cq->cap) {
    cq->overflow = 1;
    return;
  }
  cq->ring[(cq->head + cq->count) % cq->cap] = *wc;
  cq->count++;
  mchan_t *chan = (mchan_t *)(void *)cq->cq.channel;
  if (cq->armed && chan != NULL && chan->nev < CHAN_EVENTS) {
    /* One event per arming, as a NIC raises; the eventfd's count then
     * covers every event not taken. */
    cq->armed = 0;
    chan->ev[chan->nev++] = &cq->cq;
    uint64_t one = 1;
    (void)!write(chan->ch.fd, &one, sizeof(one));
  }
}

/* Places len bytes at dst in ascending order, the last 8 last. */
static void place(char *dst, const char *src, size_t len) {
  if (len <= 8) {
    for (size_t i = 0; i < len; i++) ((volatile char *)dst)[i] = src[i];
  } else {
    memcpy(dst, src, len - 8);
    atomic_thread_fence(memory_order_release);
    for (size_t i = len - 8; i < len; i++) ((volatile char *)dst)[i] = src[i];
  }
  atomic_thread_fence(memory_order_release);
}

/* One incoming write: the status the initiator completes with. */
static uint32_t serve_one(const wire_req_t *rq, const char *data) {
  uint32_t st = IBV_WC_SUCCESS;
  pthread_mutex_lock(&G);
  mqp_t *q = qp_find(rq->dst_qpn);
  if (q == NULL || q->attr.dest_qp_num != rq->src_qpn ||
      (q->qp.state != IBV_QPS_RTR && q->qp.state != IBV_QPS_RTS)) {
    st = IBV_WC_RETRY_EXC_ERR; /* nobody answers: the requester retries out */
    goto out;
  }
  const mdev_t *d = qp_dev(q);
  int port = q->attr.port_num;
  if (is_down(d->index, port)) {
    st = IBV_WC_RETRY_EXC_ERR;
    goto out;
  }
  if (d->eth[port]) {
    int hit = 0;
    for (int i = 0; i < NGID && rq->is_global; i++) {
      union ibv_gid g;
      enum ibv_gid_type t;
      port_gid(d, port, i, &g, &t);
      if (!gid_zero(&g) && memcmp(g.raw, rq->dgid, 16) == 0) hit = 1;
    }
    if (!hit) {
      st = IBV_WC_RETRY_EXC_ERR;
      goto out;
    }
  } else if (rq->dlid != port_lid(d, port)) {
    st = IBV_WC_RETRY_EXC_ERR;
    goto out;
  }
  if (rq->len > 0) {
    mmr_t *m = mr_find(rq->rkey);
    if (m == NULL || m->mr.pd != q->qp.pd || !(m->access & IBV_ACCESS_REMOTE_WRITE) ||
        !range_in(m, rq->raddr, rq->len)) {
      st = IBV_WC_REM_ACCESS_ERR;
      goto out;
    }
  }
  if (rq->has_imm && q->rq_count == 0) {
    st = IBV_WC_RNR_RETRY_EXC_ERR;
    goto out;
  }
  if (rq->len > 0) place((char *)(uintptr_t)rq->raddr, data, rq->len);
  if (rq->has_imm) {
    struct ibv_wc wc;
    memset(&wc, 0, sizeof(wc));
    wc.wr_id = q->rq[q->rq_head];
    q->rq_head = (q->rq_head + 1) % q->max_recv;
    q->rq_count--;
    wc.status = IBV_WC_SUCCESS;
    wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
    wc.byte_len = (uint32_t)rq->len;
    wc.imm_data = rq->imm;
    wc.wc_flags = IBV_WC_WITH_IMM;
    wc.qp_num = q->qp.qp_num;
    wc.src_qp = rq->src_qpn;
    cq_push((mcq_t *)(void *)q->qp.recv_cq, &wc);
  }
out:
  pthread_mutex_unlock(&G);
  return st;
}

static void *conn_main(void *arg) {
  int fd = (int)(intptr_t)arg;
  char *buf = NULL;
  size_t cap = 0;
  for (;;) {
    wire_req_t rq;
    if (full_io(fd, &rq, sizeof(rq), 0) != 0 || rq.magic != WIRE_MAGIC) break;
    if (rq.len > cap) {
      char *nb = realloc(buf, rq.len);
      if (nb == NULL) break;
      buf = nb;
      cap = rq.len;
    }
    if (rq.len > 0 && full_io(fd, buf, rq.len, 0) != 0) break;
    wire_rep_t rep = {serve_one(&rq, buf), 0};
    if (full_io(fd, &rep, sizeof(rep), 1) != 0) break;
  }
  free(buf);
  close(fd);
  return NULL;
}

static void *service_main(void *arg) {
  int lfd = (int)(intptr_t)arg;
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      break;
    }
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    if (pthread_create(&t, &a, conn_main, (void *)(intptr_t)fd) != 0) close(fd);
    pthread_attr_destroy(&a);
  }
  return NULL;
}

/* Starts this process's service once (again in a forked child). G held. */
static int service_start(void) {
  if (service_pid == getpid()) return 0;
  struct sockaddr_un sa;
  socklen_t len;
  sock_name(getpid(), &sa, &len);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (bind(fd, (struct sockaddr *)&sa, len) != 0 || listen(fd, 128) != 0) {
    close(fd);
    return -1;
  }
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  int rc = pthread_create(&t, &a, service_main, (void *)(intptr_t)fd);
  pthread_attr_destroy(&a);
  if (rc != 0) {
    close(fd);
    return -1;
  }
  service_fd = fd;
  service_pid = getpid();
  return 0;
}

/* The connection to pid's service, locked; NULL when it cannot be had. */
static conn_t *conn_get(pid_t pid) {
  pthread_mutex_lock(&G);
  conn_t *c = conns;
  while (c != NULL && c->pid != pid) c = c->next;
  if (c == NULL) {
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
      pthread_mutex_unlock(&G);
      return NULL;
    }
    c->pid = pid;
    c->fd = -1;
    pthread_mutex_init(&c->mu, NULL);
    c->next = conns;
    conns = c;
  }
  pthread_mutex_unlock(&G);
  pthread_mutex_lock(&c->mu);
  if (c->fd < 0) {
    struct sockaddr_un sa;
    socklen_t len;
    sock_name(pid, &sa, &len);
    c->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd >= 0 && connect(c->fd, (struct sockaddr *)&sa, len) != 0) {
      close(c->fd);
      c->fd = -1;
    }
    if (c->fd < 0) {
      pthread_mutex_unlock(&c->mu);
      return NULL;
    }
  }
  return c;
}

/* Sends one write to its target; the status to complete it with. */
static uint32_t wire_write(const wire_req_t *rq, const char *data) {
  registry_t *r = registry();
  if (r == NULL || rq->dst_qpn >= REG_SLOTS) return IBV_WC_RETRY_EXC_ERR;
  pid_t pid = atomic_load(&r->pid[rq->dst_qpn]);
  if (pid <= 0) return IBV_WC_RETRY_EXC_ERR;
  conn_t *c = conn_get(pid);
  if (c == NULL) return IBV_WC_RETRY_EXC_ERR;
  wire_rep_t rep;
  uint32_t st;
  if (full_io(c->fd, (void *)rq, sizeof(*rq), 1) != 0 ||
      (rq->len > 0 && full_io(c->fd, (void *)data, rq->len, 1) != 0) ||
      full_io(c->fd, &rep, sizeof(rep), 0) != 0) {
    close(c->fd);
    c->fd = -1;
    st = IBV_WC_RETRY_EXC_ERR;
  } else {
    st = rep.status;
  }
  pthread_mutex_unlock(&c->mu);
  return st;
}

/* ---- fork -------------------------------------------------------------------------- */

static void fork_prepare(void) { pthread_mutex_lock(&G); }
static void fork_parent(void) { pthread_mutex_unlock(&G); }
static void fork_child(void) {
  /* The child has no service thread and must not share the parent's
   * connections; its inherited objects stay usable locally. */
  for (conn_t *c = conns; c != NULL;) {
    conn_t *n = c->next;
    if (c->fd >= 0) close(c->fd);
    free(c);
    c = n;
  }
  conns = NULL;
  if (service_fd >= 0) close(service_fd);
  service_fd = -1;
  service_pid = 0;
  pthread_mutex_unlock(&G);
}

__attribute__((constructor)) static void mock_init(void) {
  pthread_atfork(fork_prepare, fork_parent, fork_child);
}

/* ---- data path through context->ops ---------------------------------------------- */

static void qp_error(mqp_t *q) { q->qp.state = q->attr.qp_state = IBV_QPS_ERR; }

static void complete(mqp_t *q, uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op) {
  struct ibv_wc wc;
  memset(&wc, 0, sizeof(wc));
  wc.wr_id = wr_id;
  wc.status = st;
  wc.opcode = op;
  wc.qp_num = q->qp.qp_num;
  wc.vendor_err = st != IBV_WC_SUCCESS ? 0x81 : 0;
  cq_push((mcq_t *)(void *)q->qp.send_cq, &wc);
}

/* Takes the port down: state DOWN and IBV_EVENT_PORT_ERR to every open
 * context of the device. G held. */
static void take_down(int dev, int port) {
  if (port_down[dev][port]) return;
  port_down[dev][port] = 1;
  for (mctx_t *c = ctxs; c != NULL; c = c->next) {
    if (c->dev != dev) continue;
    ev_rec_t e = {IBV_EVENT_PORT_ERR, (uint32_t)port};
    (void)!write(c->evw, &e, sizeof(e));
  }
}

/* An RDMA read of this process's memory through a QP connected to a QP
 * of this process; completes it (signalled or in error). G held. */
static void serve_read(mqp_t *q, struct ibv_send_wr *wr) {
  enum ibv_wc_status st = IBV_WC_SUCCESS;
  uint64_t len = 0;
  for (int i = 0; i < wr->num_sge; i++) len += wr->sg_list[i].length;
  atomic_fetch_add(&reads, 1);
  last_read = (braid_mock_ib_write_t){q->qp.qp_num, q->attr.dest_qp_num, 0, 0,
                                      wr->wr.rdma.remote_addr, len};
  mqp_t *t = qp_find(q->attr.dest_qp_num);
  mmr_t *rm = mr_find(wr->wr.rdma.rkey);
  const mdev_t *d = qp_dev(q);
  if (q->qp.state == IBV_QPS_ERR) {
    st = IBV_WC_WR_FLUSH_ERR;
  } else if (is_down(d->index, q->attr.port_num) || t == NULL ||
             t->attr.dest_qp_num != q->qp.qp_num ||
             (t->qp.state != IBV_QPS_RTR && t->qp.state != IBV_QPS_RTS)) {
    st = IBV_WC_RETRY_EXC_ERR; /* no responder (reads across processes are not modelled) */
  } else if (!(t->attr.qp_access_flags & IBV_ACCESS_REMOTE_READ) || rm == NULL ||
             rm->mr.pd != t->qp.pd || !(rm->access & IBV_ACCESS_REMOTE_READ) ||
             !range_in(rm, wr->wr.rdma.remote_addr, len)) {
    st = IBV_WC_REM_ACCESS_ERR;
  } else {
    for (int i = 0; i < wr->num_sge && st == IBV_WC_SUCCESS; i++) {
      mmr_t *m = mr_find(wr->sg_list[i].lkey);
      if (m == NULL || m->mr.pd != q->qp.pd || !(m->access & IBV_ACCESS_LOCAL_WRITE) ||
          !range_in(m, wr->sg_list[i].addr, wr->sg_list[i].length))
        st = IBV_WC_LOC_PROT_ERR;
    }
    uint64_t off = 0;
    for (int i = 0; i < wr->num_sge && st == IBV_WC_SUCCESS; i++) {
      memcpy((void *)(uintptr_t)wr->sg_list[i].addr,
             (const char *)(uintptr_t)wr->wr.rdma.remote_addr + off, wr->sg_list[i].length);
      off += wr->sg_list[i].length;
    }
  }
  if (st != IBV_WC_SUCCESS) {
    qp_error(q);
    complete(q, wr->wr_id, st, IBV_WC_RDMA_READ);
  } else if (wr->send_flags & IBV_SEND_SIGNALED) {
    complete(q, wr->wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_READ);
  }
}

static int mock_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  mqp_t *q = (mqp_t *)(void *)ibqp;
  for (; wr != NULL; wr = wr->next) {
    pthread_mutex_lock(&G);
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) {
      pthread_mutex_unlock(&G);
      *bad = wr;
      return EINVAL;
    }
    if (wr->opcode == IBV_WR_RDMA_READ && wr->num_sge >= 0 && wr->num_sge <= q->max_sge) {
      serve_read(q, wr);
      pthread_mutex_unlock(&G);
      continue;
    }
    if ((wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) ||
        wr->num_sge < 0 || wr->num_sge > q->max_sge) {
      pthread_mutex_unlock(&G);
      *bad = wr;
      return EINVAL;
    }
    if (q->qp.state == IBV_QPS_ERR) {
      complete(q, wr->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RDMA_WRITE);
      pthread_mutex_unlock(&G);
      continue;
    }
    /* Gather the local bytes, checking each lkey and range. */
    uint64_t len = 0;
    int local_ok = 1;
    for (int i = 0; i < wr->num_sge; i++) {
      mmr_t *m = mr_find(wr->sg_list[i].lkey);
      if (m == NULL || m->mr.pd != q->qp.pd ||
          !range_in(m, wr->sg_list[i].addr, wr->sg_list[i].length))
        local_ok = 0;
      len += wr->sg_list[i].length;
    }
    char *data = NULL;
    if (local_ok && len > 0) {
      data = malloc(len);
      if (data == NULL) {
        pthread_mutex_unlock(&G);
        *bad = wr;
        return ENOMEM;
      }
      uint64_t off = 0;
      for (int i = 0; i < wr->num_sge; i++) {
        memcpy(data + off, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
        off += wr->sg_list[i].length;
      }
    }
    wire_req_t rq;
    memset(&rq, 0, sizeof(rq));
    rq.magic = WIRE_MAGIC;
    rq.has_imm = wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    rq.src_qpn = q->qp.qp_num;
    rq.dst_qpn = q->attr.dest_qp_num;
    rq.is_global = q->attr.ah_attr.is_global;
    memcpy(rq.dgid, q->attr.ah_attr.grh.dgid.raw, 16);
    rq.dlid = q->attr.ah_attr.dlid;
    rq.imm = wr->imm_data;
    rq.raddr = wr->wr.rdma.remote_addr;
    rq.rkey = wr->wr.rdma.rkey;
    rq.len = len;
    const mdev_t *d = qp_dev(q);
    int port = q->attr.port_num;
    pthread_mutex_unlock(&G);

    unsigned long n = atomic_fetch_add(&writes, 1) + 1;
    pthread_mutex_lock(&G);
    wlog[(n - 1) % WLOG] = (braid_mock_ib_write_t){rq.src_qpn, rq.dst_qpn, rq.has_imm, rq.imm,
                                                   rq.raddr, rq.len};
    wlog_seq[(n - 1) % WLOG] = n;
    pthread_mutex_unlock(&G);
    if (rq.has_imm && local_ok && env_long("BRAID_MOCK_IB_HOLD_IMM", 0) == 1) {
      held_t *h = calloc(1, sizeof(*h));
      if (h == NULL) {
        free(data);
        *bad = wr;
        return ENOMEM;
      }
      *h = (held_t){q, wr->wr_id, (wr->send_flags & IBV_SEND_SIGNALED) != 0, rq, data, NULL};
      pthread_mutex_lock(&G);
      *held_tail = h;
      held_tail = &h->next;
      pthread_mutex_unlock(&G);
      continue;
    }
    long fail_after = env_long("BRAID_MOCK_IB_FAIL_AFTER", -1);
    long down_after = env_long("BRAID_MOCK_IB_PORT_DOWN_AFTER", -1);
    uint32_t st;
    if (!local_ok) {
      st = IBV_WC_LOC_PROT_ERR;
    } else if (down_after >= 0 && n > (unsigned long)down_after) {
      pthread_mutex_lock(&G);
      take_down(d->index, port);
      pthread_mutex_unlock(&G);
      st = IBV_WC_RETRY_EXC_ERR;
    } else if (is_down(d->index, port)) {
      st = IBV_WC_RETRY_EXC_ERR;
    } else if (fail_after >= 0 && n > (unsigned long)fail_after) {
      const char *s = getenv("BRAID_MOCK_IB_FAIL_STATUS");
      st = s != NULL && strcasecmp(s, "RETRY_EXC") == 0 ? IBV_WC_RETRY_EXC_ERR
                                                        : IBV_WC_REM_ACCESS_ERR;
    } else {
      st = wire_write(&rq, data);
    }
    free(data);
    pthread_mutex_lock(&G);
    if (st != IBV_WC_SUCCESS) {
      qp_error(q);
      complete(q, wr->wr_id, (enum ibv_wc_status)st, IBV_WC_RDMA_WRITE);
    } else if (wr->send_flags & IBV_SEND_SIGNALED) {
      complete(q, wr->wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    }
    pthread_mutex_unlock(&G);
  }
  return 0;
}

static int mock_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  mqp_t *q = (mqp_t *)(void *)ibqp;
  int rc = 0;
  pthread_mutex_lock(&G);
  for (; wr != NULL; wr = wr->next) {
    if (q->qp.state == IBV_QPS_RESET || wr->num_sge > q->max_sge) {
      rc = EINVAL;
    } else if (q->rq_count == q->max_recv) {
      rc = ENOMEM;
    }
    if (rc != 0) {
      *bad = wr;
      break;
    }
    q->rq[(q->rq_head + q->rq_count) % q->max_recv] = wr->wr_id;
    q->rq_count++;
  }
  pthread_mutex_unlock(&G);
  return rc;
}

static int mock_req_notify_cq(struct ibv_cq *ibcq, int solicited_only) {
  (void)solicited_only;
  if (ibcq->channel == NULL) return EINVAL;
  pthread_mutex_lock(&G);
  ((mcq_t *)(void *)ibcq)->armed = 1;
  pthread_mutex_unlock(&G);
  return 0;
}

static int mock_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc) {
  mcq_t *cq = (mcq_t *)(void *)ibcq;
  int got = 0;
  pthread_mutex_lock(&G);
  if (cq->overflow) {
    pthread_mutex_unlock(&G);
    return -1;
  }
  while (got < n && cq->count > 0) {
    wc[got++] = cq->ring[cq->head];
    cq->head = (cq->head + 1) % cq->cap;
    cq->count--;
  }
  pthread_mutex_unlock(&G);
  return got;
}

/* ---- the verbs entry points -------------------------------------------------------- */

EXPORT struct ibv_device **ibv_get_device_list(int *num) {
  pthread_mutex_lock(&G);
  /* BRAID_MOCK_IB_DEVICES is read again whenever no context is open
   * (an open context's device must stay what it was). */
  if (ndevs == 0 || ctxs == NULL) parse_devices();
  struct ibv_device **list = calloc((size_t)ndevs + 1, sizeof(*list));
  if (list != NULL)
    for (int i = 0; i < ndevs; i++) list[i] = &devs[i].dev;
  if (num != NULL) *num = list != NULL ? ndevs : 0;
  pthread_mutex_unlock(&G);
  if (list == NULL) errno = ENOMEM;
  return list;
}

EXPORT void ibv_free_device_list(struct ibv_device **list) {
  free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device) { return device->name; }

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device) {
  return htobe64(dev_guid(((mdev_t *)(void *)device)->index));
}

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device) {
  mctx_t *c = calloc(1, sizeof(*c));
  int p[2];
  if (c == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  if (pipe2(p, O_CLOEXEC) != 0) {
    free(c);
    return NULL;
  }
  pthread_mutex_lock(&G);
  if (service_start() != 0 || registry() == NULL) {
    pthread_mutex_unlock(&G);
    close(p[0]);
    close(p[1]);
    free(c);
    errno = ENODEV;
    return NULL;
  }
  c->dev = ((mdev_t *)(void *)device)->index;
  c->ctx.device = device;
  c->ctx.cmd_fd = -1;
  c->ctx.async_fd = p[0];
  c->evw = p[1];
  c->ctx.num_comp_vectors = 1;
  c->ctx.ops.post_send = mock_post_send;
  c->ctx.ops.post_recv = mock_post_recv;
  c->ctx.ops.poll_cq = mock_poll_cq;
  c->ctx.ops.req_notify_cq = mock_req_notify_cq;
  pthread_mutex_init(&c->ctx.mutex, NULL);
  c->next = ctxs;
  ctxs = c;
  pthread_mutex_unlock(&G);
  return &c->ctx;
}

EXPORT int ibv_close_device(struct ibv_context *context) {
  mctx_t *c = (mctx_t *)(void *)context;
  pthread_mutex_lock(&G);
  for (mctx_t **pp = &ctxs; *pp != NULL; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  pthread_mutex_unlock(&G);
  close(c->ctx.async_fd);
  close(c->evw);
  free(c);
  return 0;
}

EXPORT int ibv_query_device(struct ibv_context *context, struct ibv_device_attr *attr) {
  const mdev_t *d = &devs[((mctx_t *)(void *)context)->dev];
  memset(attr, 0, sizeof(*attr));
  snprintf(attr->fw_ver, sizeof(attr->fw_ver), "mock-1.0");
  attr->node_guid = htobe64(dev_guid(d->index));
  attr->sys_image_guid = attr->node_guid;
  attr->max_mr_size = UINT64_MAX;
  attr->vendor_id = 0x02c9;
  attr->vendor_part_id = 4129;
  attr->max_qp = 1 << 16;
  attr->max_qp_wr = 1 << 15;
  attr->max_sge = 30;
  attr->max_cq = 1 << 16;
  attr->max_cqe = 1 << 22;
  attr->max_mr = 1 << 20;
  attr->max_pd = 1 << 16;
  attr->max_qp_rd_atom = 16;
  attr->max_qp_init_rd_atom = 16;
  attr->phys_port_cnt = (uint8_t)d->nports;
  return 0;
}

#undef ibv_query_port
EXPORT int ibv_query_port(struct ibv_context *context, uint8_t port,
                          struct _compat_ibv_port_attr *compat) {
  /* Braid passes a whole struct ibv_port_attr, as rdma-core's wrapper does. */
  struct ibv_port_attr *attr = (struct ibv_port_attr *)(void *)compat;
  const mdev_t *d = &devs[((mctx_t *)(void *)context)->dev];
  if (port < 1 || port > d->nports) return EINVAL;
  pthread_mutex_lock(&G);
  int down = is_down(d->index, port);
  pthread_mutex_unlock(&G);
  memset(attr, 0, sizeof(*attr));
  attr->state = down ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
  attr->phys_state = down ? 3 : 5;
  attr->max_mtu = IBV_MTU_4096;
  attr->active_mtu = d->eth[port] ? IBV_MTU_1024 : IBV_MTU_4096;
  attr->gid_tbl_len = NGID;
  attr->max_msg_sz = 1u << 30;
  attr->pkey_tbl_len = 1;
  attr->lid = port_lid(d, port);
  attr->active_width = 2;   /* 4x */
  attr->active_speed = 32;  /* EDR: 25 Gb/s per lane */
  /* BRAID_MOCK_IB_SLOW_HOST=<id>: the process whose BRAID_HOSTID is <id>
   * has FDR ports (14 Gb/s per lane, 56 Gbit/s at 4x). */
  const char *slow = getenv("BRAID_MOCK_IB_SLOW_HOST"), *host = getenv("BRAID_HOSTID");
  if (slow != NULL && host != NULL && strcmp(slow, host) == 0) attr->active_speed = 16;
  attr->link_layer = d->eth[port] ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
  return 0;
}

EXPORT int ibv_query_gid(struct ibv_context *context, uint8_t port, int index,
                         union ibv_gid *gid) {
  const mdev_t *d = &devs[((mctx_t *)(void *)context)->dev];
  enum ibv_gid_type t;
  if (port < 1 || port > d->nports || index < 0 || index >= NGID) return -1;
  port_gid(d, port, index, gid, &t);
  return 0;
}

EXPORT int _ibv_query_gid_ex(struct ibv_context *context, uint32_t port, uint32_t index,
                             struct ibv_gid_entry *entry, uint32_t flags, size_t size) {
  const mdev_t *d = &devs[((mctx_t *)(void *)context)->dev];
  enum ibv_gid_type t;
  (void)flags;
  if (port < 1 || port > (uint32_t)d->nports || index >= NGID || size < sizeof(*entry))
    return EINVAL;
  memset(entry, 0, sizeof(*entry));
  port_gid(d, (int)port, (int)index, &entry->gid, &t);
  if (gid_zero(&entry->gid)) return ENODATA;
  entry->gid_index = index;
  entry->port_num = port;
  entry->gid_type = t;
  return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *context) {
  mpd_t *p = calloc(1, sizeof(*p));
  if (p == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  p->pd.context = context;
  pthread_mutex_lock(&G);
  p->pd.handle = next_key++;
  pthread_mutex_unlock(&G);
  return &p->pd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
  pthread_mutex_lock(&G);
  for (mmr_t *m = mrs; m != NULL; m = m->next)
    if (m->mr.pd == pd) {
      pthread_mutex_unlock(&G);
      return EBUSY;
    }
  for (mqp_t *q = qps; q != NULL; q = q->next)
    if (q->qp.pd == pd) {
      pthread_mutex_unlock(&G);
      return EBUSY;
    }
  pthread_mutex_unlock(&G);
  free(pd);
  return 0;
}

#undef ibv_reg_mr
/* Whether addr lies in a mapping of the CUDA simulator's memory (its
 * memfds); with the mapped file's device, inode and file offset of addr. */
static int sim_memory(uint64_t addr, dev_t *dev_out, ino_t *ino_out, uint64_t *off_out) {
  FILE *f = fopen("/proc/self/maps", "re");
  char line[512];
  int hit = 0;
  if (f == NULL) return 0;
  while (!hit && fgets(line, sizeof(line), f) != NULL) {
    unsigned long lo, hi, off, ino;
    unsigned maj, min;
    int at = 0;
    if (sscanf(line, "%lx-%lx %*s %lx %x:%x %lu %n", &lo, &hi, &off, &maj, &min, &ino, &at) < 6)
      continue;
    if (addr < lo || addr >= hi) continue;
    if (strstr(line + at, "/memfd:braid-cudasim-") != line + at) break;
    hit = 1;
    if (dev_out != NULL) *dev_out = makedev(maj, min);
    if (ino_out != NULL) *ino_out = (ino_t)ino;
    if (off_out != NULL) *off_out = off + (addr - lo);
  }
  fclose(f);
  return hit;
}

static struct ibv_mr *mr_new(struct ibv_pd *pd, void *addr, size_t length, int access);

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
  long limit = env_long("BRAID_MOCK_IB_REG_LIMIT", -1);
  if (limit >= 0 && length > (size_t)limit) {
    errno = ENOMEM;
    return NULL;
  }
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
      !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return NULL;
  }
  if (addr == NULL && length > 0) {
    errno = EFAULT;
    return NULL;
  }
  if (env_long("BRAID_MOCK_IB_PEERMEM", 1) == 0 && length > 0 &&
      sim_memory((uint64_t)(uintptr_t)addr, NULL, NULL, NULL)) {
    errno = EFAULT; /* GPU memory without nvidia-peermem */
    return NULL;
  }
  return mr_new(pd, addr, length, access);
}

/* A new MR over [addr, addr + length). */
static struct ibv_mr *mr_new(struct ibv_pd *pd, void *addr, size_t length, int access) {
  mmr_t *m = calloc(1, sizeof(*m));
  if (m == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = length;
  m->access = access;
  pthread_mutex_lock(&G);
  m->mr.handle = next_key;
  m->mr.lkey = m->mr.rkey = (next_key++ * 0x9e37u) ^ 0x5a000000u;
  m->next = mrs;
  mrs = m;
  pthread_mutex_unlock(&G);
  return &m->mr;
}

EXPORT struct ibv_mr *ibv_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset, size_t length,
                                       uint64_t iova, int fd, int access) {
  if (env_long("BRAID_MOCK_IB_DMABUF", 1) == 0) {
    errno = EOPNOTSUPP;
    return NULL;
  }
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    errno = EBADF;
    return NULL;
  }
  if (env_long("BRAID_MOCK_IB_DMABUF", 1) == 2) {
    errno = EINVAL; /* the probe passed, this registration does not */
    return NULL;
  }
  /* Byte `offset` of the DMA-BUF must be the memory at iova, and the
   * range must lie inside the DMA-BUF. */
  dev_t dev;
  ino_t ino;
  uint64_t file_off;
  if (!sim_memory(iova, &dev, &ino, &file_off) || ino != st.st_ino || file_off != offset ||
      offset > (uint64_t)st.st_size || length > (uint64_t)st.st_size - offset || length == 0) {
    errno = EINVAL;
    return NULL;
  }
  (void)dev;
  struct ibv_mr *mr = mr_new(pd, (void *)(uintptr_t)iova, length, access);
  if (mr != NULL) atomic_fetch_add(&dmabuf_regs, 1);
  return mr;
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
  pthread_mutex_lock(&G);
  for (mmr_t **pp = &mrs; *pp != NULL; pp = &(*pp)->next)
    if (&(*pp)->mr == mr) {
      mmr_t *m = *pp;
      *pp = m->next;
      pthread_mutex_unlock(&G);
      free(m);
      return 0;
    }
  pthread_mutex_unlock(&G);
  return EINVAL;
}

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context) {
  if (env_long("BRAID_MOCK_IB_COMP_CHANNEL", 1) == 0) { /* a provider without them */
    errno = ENOSYS;
    return NULL;
  }
  mchan_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    errno = ENOMEM;
    return NULL;
  }
  c->ch.context = context;
  c->ch.fd = eventfd(0, EFD_CLOEXEC);
  if (c->ch.fd < 0) {
    free(c);
    return NULL;
  }
  return &c->ch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel) {
  mchan_t *c = (mchan_t *)(void *)channel;
  close(c->ch.fd);
  free(c);
  return 0;
}

/* The oldest event not taken; with none, EAGAIN on a non-blocking
 * descriptor, else waits for one. */
EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                            void **cq_context) {
  mchan_t *c = (mchan_t *)(void *)channel;
  for (;;) {
    pthread_mutex_lock(&G);
    if (c->nev > 0) {
      *cq = c->ev[0];
      *cq_context = c->ev[0]->cq_context;
      memmove(&c->ev[0], &c->ev[1], (size_t)(c->nev - 1) * sizeof(c->ev[0]));
      c->nev--;
      if (c->nev == 0) { /* the last event: drain the descriptor (its count is not 0) */
        uint64_t v;
        (void)!read(c->ch.fd, &v, sizeof(v));
      }
      pthread_mutex_unlock(&G);
      return 0;
    }
    pthread_mutex_unlock(&G);
    int fl = fcntl(c->ch.fd, F_GETFL);
    if (fl & O_NONBLOCK) {
      errno = EAGAIN;
      return -1;
    }
    struct pollfd pfd = {c->ch.fd, POLLIN, 0};
    (void)poll(&pfd, 1, 100);
  }
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents) {
  (void)cq;
  (void)nevents;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector) {
  (void)comp_vector;
  if (cqe < 1 || cqe > (1 << 22)) {
    errno = EINVAL;
    return NULL;
  }
  mcq_t *cq = calloc(1, sizeof(*cq));
  if (cq != NULL) cq->ring = calloc((size_t)cqe, sizeof(*cq->ring));
  if (cq == NULL || cq->ring == NULL) {
    free(cq);
    errno = ENOMEM;
    return NULL;
  }
  cq->cap = cqe;
  cq->cq.context = context;
  cq->cq.channel = channel;
  cq->cq.cq_context = cq_context;
  cq->cq.cqe = cqe;
  return &cq->cq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq) {
  mcq_t *cq = (mcq_t *)(void *)ibcq;
  pthread_mutex_lock(&G);
  for (mqp_t *q = qps; q != NULL; q = q->next)
    if (q->qp.send_cq == ibcq || q->qp.recv_cq == ibcq) {
      pthread_mutex_unlock(&G);
      return EBUSY;
    }
  pthread_mutex_unlock(&G);
  free(cq->ring);
  free(cq);
  return 0;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init) {
  registry_t *r = registry();
  if (init->qp_type != IBV_QPT_RC || init->send_cq == NULL || init->recv_cq == NULL ||
      init->cap.max_send_wr < 1 || init->cap.max_recv_wr < 1 || init->cap.max_send_wr > (1u << 15) ||
      init->cap.max_recv_wr > (1u << 15) || init->cap.max_send_sge > 30 || r == NULL) {
    errno = EINVAL;
    return NULL;
  }
  mqp_t *q = calloc(1, sizeof(*q));
  if (q != NULL) q->rq = calloc(init->cap.max_recv_wr, sizeof(*q->rq));
  if (q == NULL || q->rq == NULL) {
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->max_send = (int)init->cap.max_send_wr;
  q->max_recv = (int)init->cap.max_recv_wr;
  q->max_sge = init->cap.max_send_sge > 0 ? (int)init->cap.max_send_sge : 1;
  q->qp.context = pd->context;
  q->qp.qp_context = init->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = init->send_cq;
  q->qp.recv_cq = init->recv_cq;
  q->qp.qp_type = IBV_QPT_RC;
  q->qp.state = IBV_QPS_RESET;
  uint32_t qpn;
  do qpn = atomic_fetch_add(&r->next, 1) % REG_SLOTS;
  while (qpn < 0x100);
  q->qp.qp_num = qpn;
  q->qp.handle = qpn;
  atomic_store(&r->pid[qpn], (int32_t)getpid());
  pthread_mutex_lock(&G);
  q->next = qps;
  qps = q;
  pthread_mutex_unlock(&G);
  return &q->qp;
}

EXPORT int ibv_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask) {
  mqp_t *q = (mqp_t *)(void *)ibqp;
  int rc = 0;
  pthread_mutex_lock(&G);
  enum ibv_qp_state cur = q->qp.state;
  enum ibv_qp_state to = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
  const mdev_t *d = qp_dev(q);
  int need = 0;
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) {
    need = 0;
  } else if (cur == IBV_QPS_RESET && to == IBV_QPS_INIT) {
    need = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
    if (attr->port_num < 1 || attr->port_num > d->nports) rc = EINVAL;
  } else if (cur == IBV_QPS_INIT && to == IBV_QPS_INIT) {
    need = 0;
  } else if (cur == IBV_QPS_INIT && to == IBV_QPS_RTR) {
    need = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    int port = q->attr.port_num;
    if (d->eth[port]) {
      union ibv_gid g;
      enum ibv_gid_type t;
      if (!attr->ah_attr.is_global || attr->ah_attr.grh.sgid_index >= NGID) {
        rc = EINVAL;
      } else {
        port_gid(d, port, attr->ah_attr.grh.sgid_index, &g, &t);
        if (gid_zero(&g)) rc = EINVAL;
      }
    } else if (attr->ah_attr.dlid == 0) {
      rc = EINVAL;
    }
  } else if ((cur == IBV_QPS_RTR || cur == IBV_QPS_RTS) && to == IBV_QPS_RTS) {
    need = cur == IBV_QPS_RTR ? IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                    IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC
                              : 0;
  } else {
    rc = EINVAL;
  }
  if (rc == 0 && (mask & need) != need) rc = EINVAL;
  if (rc == 0) {
    struct ibv_qp_attr *a = &q->attr;
    if (mask & IBV_QP_PKEY_INDEX) a->pkey_index = attr->pkey_index;
    if (mask & IBV_QP_PORT) a->port_num = attr->port_num;
    if (mask & IBV_QP_ACCESS_FLAGS) a->qp_access_flags = attr->qp_access_flags;
    if (mask & IBV_QP_AV) a->ah_attr = attr->ah_attr;
    if (mask & IBV_QP_PATH_MTU) a->path_mtu = attr->path_mtu;
    if (mask & IBV_QP_DEST_QPN) a->dest_qp_num = attr->dest_qp_num;
    if (mask & IBV_QP_RQ_PSN) a->rq_psn = attr->rq_psn;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) a->max_dest_rd_atomic = attr->max_dest_rd_atomic;
    if (mask & IBV_QP_MIN_RNR_TIMER) a->min_rnr_timer = attr->min_rnr_timer;
    if (mask & IBV_QP_TIMEOUT) a->timeout = attr->timeout;
    if (mask & IBV_QP_RETRY_CNT) a->retry_cnt = attr->retry_cnt;
    if (mask & IBV_QP_RNR_RETRY) a->rnr_retry = attr->rnr_retry;
    if (mask & IBV_QP_SQ_PSN) a->sq_psn = attr->sq_psn;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) a->max_rd_atomic = attr->max_rd_atomic;
    a->qp_state = to;
    q->qp.state = to;
    if (to == IBV_QPS_RESET) q->rq_count = 0;
    if (to == IBV_QPS_RTS) {
      last_rts = *a;
      have_last_rts = 1;
    }
  }
  pthread_mutex_unlock(&G);
  return rc;
}

EXPORT int ibv_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int mask,
                        struct ibv_qp_init_attr *init) {
  mqp_t *q = (mqp_t *)(void *)ibqp;
  (void)mask;
  pthread_mutex_lock(&G);
  *attr = q->attr;
  pthread_mutex_unlock(&G);
  if (init != NULL) {
    memset(init, 0, sizeof(*init));
    init->qp_type = IBV_QPT_RC;
    init->send_cq = q->qp.send_cq;
    init->recv_cq = q->qp.recv_cq;
    init->cap.max_send_wr = (uint32_t)q->max_send;
    init->cap.max_recv_wr = (uint32_t)q->max_recv;
    init->cap.max_send_sge = init->cap.max_recv_sge = (uint32_t)q->max_sge;
  }
  return 0;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *ibqp) {
  mqp_t *q = (mqp_t *)(void *)ibqp;
  registry_t *r = registry();
  pthread_mutex_lock(&G);
  for (mqp_t **pp = &qps; *pp != NULL; pp = &(*pp)->next)
    if (*pp == q) {
      *pp = q->next;
      break;
    }
  pthread_mutex_unlock(&G);
  if (r != NULL) {
    int32_t me = (int32_t)getpid();
    atomic_compare_exchange_strong(&r->pid[q->qp.qp_num], &me, 0);
  }
  free(q->rq);
  free(q);
  return 0;
}

EXPORT int ibv_get_async_event(struct ibv_context *context, struct ibv_async_event *event) {
  ev_rec_t e;
  ssize_t n = read(context->async_fd, &e, sizeof(e));
  if (n != (ssize_t)sizeof(e)) return -1;
  memset(event, 0, sizeof(*event));
  event->event_type = (enum ibv_event_type)e.type;
  event->element.port_num = (int)e.port;
  return 0;
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *event) { (void)event; }

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status) {
  switch (status) {
  case IBV_WC_SUCCESS: return "success";
  case IBV_WC_LOC_PROT_ERR: return "local protection error";
  case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
  case IBV_WC_REM_ACCESS_ERR: return "remote access error";
  case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
  case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
  default: return "unknown";
  }
}

/* ---- test controls (ibverbs_mock.h) ------------------------------------------------- */

EXPORT int braid_mock_ib_port_down(const char *name, int port);
EXPORT int braid_mock_ib_port_down(const char *name, int port) {
  int rc = -1;
  pthread_mutex_lock(&G);
  for (int i = 0; i < ndevs; i++)
    if (strcmp(devs[i].dev.name, name) == 0 && port >= 1 && port <= devs[i].nports) {
      take_down(i, port);
      rc = 0;
    }
  pthread_mutex_unlock(&G);
  return rc;
}

EXPORT int braid_mock_ib_last_qp(struct ibv_qp_attr *attr_out);
EXPORT int braid_mock_ib_last_qp(struct ibv_qp_attr *attr_out) {
  pthread_mutex_lock(&G);
  int ok = have_last_rts;
  if (ok) *attr_out = last_rts;
  pthread_mutex_unlock(&G);
  return ok ? 0 : -1;
}

EXPORT int braid_mock_ib_write_log(unsigned long i, braid_mock_ib_write_t *out);
EXPORT int braid_mock_ib_write_log(unsigned long i, braid_mock_ib_write_t *out) {
  int rc = -1;
  pthread_mutex_lock(&G);
  if (i > 0 && wlog_seq[(i - 1) % WLOG] == i) {
    *out = wlog[(i - 1) % WLOG];
    rc = 0;
  }
  pthread_mutex_unlock(&G);
  return rc;
}

EXPORT int braid_mock_ib_release(int n);
EXPORT int braid_mock_ib_release(int n) {
  int done = 0;
  while (done < n) {
    pthread_mutex_lock(&G);
    held_t *h = held_head;
    if (h != NULL) {
      held_head = h->next;
      if (held_head == NULL) held_tail = &held_head;
    }
    pthread_mutex_unlock(&G);
    if (h == NULL) break;
    uint32_t st = wire_write(&h->rq, h->data);
    pthread_mutex_lock(&G);
    if (st != IBV_WC_SUCCESS) {
      qp_error(h->q);
      complete(h->q, h->wr_id, (enum ibv_wc_status)st, IBV_WC_RDMA_WRITE);
    } else if (h->signaled) {
      complete(h->q, h->wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
    }
    pthread_mutex_unlock(&G);
    free(h->data);
    free(h);
    done++;
  }
  return done;
}

EXPORT unsigned long braid_mock_ib_writes(void);
EXPORT unsigned long braid_mock_ib_writes(void) { return atomic_load(&writes); }

EXPORT unsigned long braid_mock_ib_reads(void);
EXPORT unsigned long braid_mock_ib_reads(void) { return atomic_load(&reads); }

EXPORT int braid_mock_ib_last_read(braid_mock_ib_write_t *out);
EXPORT int braid_mock_ib_last_read(braid_mock_ib_write_t *out) {
  if (atomic_load(&reads) == 0) return -1;
  pthread_mutex_lock(&G);
  *out = last_read;
  pthread_mutex_unlock(&G);
  return 0;
}

EXPORT unsigned long braid_mock_ib_dmabuf_regs(void);
EXPORT unsigned long braid_mock_ib_dmabuf_regs(void) { return atomic_load(&dmabuf_regs); }
