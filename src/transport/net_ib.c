/*
 * Braid's built-in IB verbs net ("IB"): RC queue pairs over InfiniBand or
 * RoCE, reached through the dlopen'ed verbs table (ibverbs.h), with
 * NCCL's device choice, GID choice and QP parameters (nvls-ib.md §2).
 *
 * Devices. Every ACTIVE port whose link layer is InfiniBand or Ethernet
 * (RoCE) and that NCCL_IB_HCA keeps is one net device, with its own verbs
 * context, protection domain and registration cache. NCCL_IB_DISABLE=1,
 * a missing libibverbs or no active port leaves the net with no device,
 * and the net choice falls back to the socket net.
 *
 * Connections. listen binds a TCP socket on the bootstrap interface; the
 * handle carries its address and a random magic. connect dials it,
 * creates the CQ, NCCL_IB_QPS_PER_CONNECTION RC QPs and the CTS FIFO and
 * returns the comm once its metadata (QPNs, LID, GID, MTU, FIFO address
 * and rkey) is written: it never needs the peer's accept. accept reads
 * that metadata, brings its QPs to RTS against the sender's, and answers
 * with its own. The sender finishes (its QPs to RTS, then one "ready"
 * byte) the first time isend or test runs; the receiver posts nothing
 * before that byte, so no RDMA ever reaches a QP that is not ready.
 * Everything is non-blocking; connect and accept are retried.
 *
 * Data: the receiver-driven CTS protocol NCCL uses. An irecv takes up to
 * maxRecvs = 8 buffers (a group, NCCL_NET_IB_MAX_RECVS); group k uses
 * slot k mod 32 on both sides. irecv posts one receive WR with no SGE on
 * each QP the group uses, and stages one 32-byte CTS entry per buffer
 * {address, size, rkey, tag, (k+1) << 8 | n} for slot k of the sender's
 * FIFO; they go out in one RDMA write, with those of other groups held
 * before them (cts_flush: BRAID_IB_CTS_AHEAD). isend returns NULL
 * ("later") until the slot's first and last entries carry k+1; it then
 * takes the first unmatched entry with its tag, and once all n buffers
 * are matched posts the group. Each buffer's bytes are cut into one
 * contiguous share per QP the group uses, ceil(size / nq) rounded up to
 * 128 bytes (so LL and LL128 lines are never torn); a message smaller
 * than 128 x nq carries data on fewer QPs. On every QP used, the last WR
 * is an RDMA_WRITE_WITH_IMM (signalled; a zero-byte one where the QP got
 * no data): for one buffer it is the share itself and imm is the size;
 * for several, the shares go as plain RDMA_WRITEs and the last WR writes
 * the n sizes into the receiver's size records. The receiver completes
 * the group when every QP's immediate has arrived (an RC QP places its
 * writes in order, so each immediate follows its QP's share) and the CTS
 * write carrying its entries completed; test() reports the size of each
 * buffer. NCCL_IB_SPLIT_DATA_ON_QPS=1 splits
 * every message over all NCCL_IB_QPS_PER_CONNECTION QPs; 0 (NCCL's
 * default) sends each group whole on QP k mod nqps. The sender's choice
 * travels in its metadata, so both sides agree. This gives flow control
 * (nothing is sent before the receiver has a buffer), in-order matching,
 * and no copy on either side. A send larger than its receive is an
 * error. Chosen over NCCL's separate RDMA_WRITE + zero-byte WRITE_WITH_IMM
 * for one buffer because without adaptive routing one WR per QP gives the
 * same guarantee; over the MSCCL++ put+signal because the proxy's buffers
 * are not symmetric.
 *
 * Sleeping. Each comm's CQ has a completion channel; poll_fd gives its
 * descriptor, armed, while a request waits for a completion (not while an
 * isend waits for its clear-to-send: that is a write into memory).
 *
 * Errors. A completion in error WARNs once with the QP number, the
 * operation, the status, and both GIDs, and fails the comm
 * (ncclRemoteError for remote and transport errors, ncclSystemError for
 * local ones); an async event that takes the port down (or a fatal
 * device event) fails every comm on that port. The peer closing its TCP
 * socket fails waiting requests with ncclRemoteError (logged at INFO: a
 * peer that is done closes too; the caller decides).
 *
 * GPU memory (GPUDirect RDMA). ptrSupport carries NCCL's bits: CUDA when
 * nvidia-peermem is loaded, DMA-BUF when NCCL's probe says the NIC takes
 * it (and NCCL_DMABUF_ENABLE). regMr of CUDA memory chooses per device,
 * GPU and direction, as NCCL does, and says why at INFO once: the GPU-NIC
 * PCI path type against NCCL_NET_GDR_LEVEL, NCCL_NET_GDR_READ for sends,
 * then DMA-BUF (cuMemGetHandleForAddressRange through cudrv.c, then
 * ibv_reg_dmabuf_mr), then peermem (ibv_reg_mr of the device address),
 * else a refusal: the caller stages through host memory. iflush reads 1
 * byte of the received GPU buffer over a loopback QP where NCCL needs a
 * flush (compute capability < 9.0 or NCCL_NET_FORCE_FLUSH).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <ctype.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "base/check.h"
#include "base/debug.h"
#include "base/param.h"
#include "base/socket.h"
#include "transport/ibverbs.h"
#include "transport/net_ib.h"

#if BRAID_CUDA
#include <cuda_runtime.h>

#include "transport/cudrv.h"
#endif

#define IB_MAX_DEVS 16
#define IB_NREQ BRD_NET_MAX_REQUESTS /* requests and FIFO slots per comm */
#define IB_MAX_QPS 128
#define IB_NGID_MAX 256
#define IB_MAX_MSG ((size_t)1 << 30)
#define IB_MAX_RECVS 8 /* buffers per irecv (NCCL_NET_IB_MAX_RECVS) */
#define IB_SPLIT_ALIGN 128 /* a QP's share of a message is a multiple of this */
#define IB_NCTS (IB_NREQ * IB_MAX_RECVS)
#define IB_GDR_GPUS 64 /* GPUs whose GPUDirect choice is remembered per device */
#define IB_MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

/* How a registration reaches its memory. */
enum { IB_MEM_HOST = 0, IB_MEM_PEERMEM = 1, IB_MEM_DMABUF = 2 };

/* ---- pure pieces (net_ib.h) --------------------------------------------- */

/* See net_ib.h. */
int brd_ib_hca_match(const char *spec, const char *dev, int port) {
  if (spec == NULL || spec[0] == '\0') return 1;
  int exclude = 0, exact = 0, hit = 0;
  if (*spec == '^') {
    exclude = 1;
    spec++;
  }
  if (*spec == '=') {
    exact = 1;
    spec++;
  }
  while (*spec != '\0' && !hit) {
    const char *end = strchr(spec, ',');
    size_t len = end != NULL ? (size_t)(end - spec) : strlen(spec);
    char entry[128];
    snprintf(entry, sizeof(entry), "%.*s", (int)(len < sizeof(entry) ? len : sizeof(entry) - 1),
             spec);
    int want_port = -1;
    char *colon = strchr(entry, ':');
    if (colon != NULL) {
      *colon = '\0';
      want_port = atoi(colon + 1); /* a rail or plane after it is ignored */
    }
    if (entry[0] != '\0') {
      int name_ok = exact ? strcmp(entry, dev) == 0 : strncmp(entry, dev, strlen(entry)) == 0;
      if (name_ok && (want_port < 0 || want_port == port)) hit = 1;
    }
    spec += len;
    if (*spec == ',') spec++;
  }
  return exclude ? !hit : hit;
}

static int gid_family(const union ibv_gid *g) {
  static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g->raw, v4mapped, sizeof(v4mapped)) == 0 ? AF_INET : AF_INET6;
}

static int gid_valid(const union ibv_gid *g) {
  for (int i = 0; i < 16; i++)
    if (g->raw[i] != 0) return 1;
  return 0;
}

/* See net_ib.h. */
int brd_ib_gid_select(const brd_ib_gid_t *table, int n, int family, int roce_version) {
  int cur = 0;
  for (int c = 1; c < n; c++) {
    int fc = gid_family(&table[c].gid), fcur = gid_family(&table[cur].gid);
    if (fc != fcur && fc == family && gid_valid(&table[c].gid)) {
      cur = c;
      continue;
    }
    if (fc != family || !gid_valid(&table[c].gid)) continue;
    if (table[c].roce_version == roce_version && table[cur].roce_version != roce_version)
      cur = c;
  }
  return cur;
}

/* ---- devices ------------------------------------------------------------------ */

/* One registration of the cache: a page range of host memory or of one
 * GPU's memory, shared by every regMr that falls inside it. */
typedef struct {
  uintptr_t addr;  /* page-aligned start */
  size_t pages;
  int refs;
  int mem;         /* IB_MEM_*: host memory, or GPU memory by peermem or DMA-BUF */
  int flush;       /* GPU memory whose receives need a flush (iflush) */
  struct ibv_mr *mr;
} ib_mr_entry_t;

typedef struct {
  char name[64];
  int port;
  int link;                   /* IBV_LINK_LAYER_* */
  struct ibv_context *ctx;    /* owned */
  struct ibv_pd *pd;          /* owned */
  struct ibv_port_attr attr;
  int gid_index;
  union ibv_gid gid;
  uint64_t guid;
  int speed;                  /* Mbit/s */
  char *pci_path;             /* realpath of the sysfs device, or NULL; owned */
  pthread_mutex_t mu;         /* the cache, the failure and the async fd */
  ib_mr_entry_t *mrs;         /* registration cache; owned */
  int nmr, mr_cap;
  int failed;                 /* the port went down: every comm fails
                               * (__atomic; fail_why is written first) */
  char fail_why[160];
  int dmabuf;                 /* ibv_reg_dmabuf_mr works here (NCCL's probe) */
  char dmabuf_why[160];       /* why it does not */
  uint8_t gdr_logged[IB_GDR_GPUS][2]; /* the choice for (GPU, send) was said */
} ib_dev_t;

typedef struct {
  uint64_t comm_id;
  int tc;                     /* traffic class for RoCE */
} ib_ctx_t;

static const brd_ibv_ops_t *ibv;
static pthread_mutex_t ib_lock = PTHREAD_MUTEX_INITIALIZER;
static int ib_refs;                 /* inits without finalize */
static int ib_ndev = -1;
static ib_dev_t ib_devs[IB_MAX_DEVS];
static union brd_sock_addr ib_oob;  /* the out-of-band interface's address */
static char ib_oob_name[BRD_SOCK_IFNAME_LEN];

static const char *link_name(int link) {
  return link == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB";
}

static int lane_mbps(int speed) {
  switch (speed) {
  case 1: return 2500;
  case 2: return 5000;
  case 4: case 8: return 10000;
  case 16: return 14000;
  case 32: return 25000;
  case 64: return 50000;
  case 128: return 100000;
  case 256: return 200000;
  default: return 10000;
  }
}

static int width_lanes(int width) {
  switch (width) {
  case 1: return 1;
  case 2: return 4;
  case 4: return 8;
  case 8: return 12;
  case 16: return 2;
  default: return 1;
  }
}

/* RoCE version of GID idx: from the library when it says, else from
 * sysfs (NCCL's source); 0 when neither knows. */
static int gid_roce_version(struct ibv_context *ctx, const char *dev, int port, int idx) {
  if (ibv->query_gid_ex != NULL) {
    struct ibv_gid_entry e;
    if (ibv->query_gid_ex(ctx, (uint32_t)port, (uint32_t)idx, &e, 0, sizeof(e)) == 0)
      return e.gid_type == IBV_GID_TYPE_ROCE_V2 ? 2 : 1;
  }
  char path[PATH_MAX], text[32] = {0};
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%d/gid_attrs/types/%d", dev,
           port, idx);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  if (n <= 0) return 0;
  if (strncmp(text, "RoCE v2", 7) == 0) return 2;
  if (strncmp(text, "IB/RoCE v1", 10) == 0 || strncmp(text, "RoCE v1", 7) == 0) return 1;
  return 0;
}

/* The GID index a port uses: 0 on IB; on RoCE NCCL_IB_GID_INDEX or the
 * automatic choice. */
static int pick_gid(ib_dev_t *d) {
  if (d->link != IBV_LINK_LAYER_ETHERNET) return 0;
  int64_t forced = brd_param_int(BRD_P_IB_GID_INDEX);
  if (forced >= 0) return (int)forced;
  const char *fam = brd_param_str(BRD_P_IB_ADDR_FAMILY);
  int family = fam != NULL && strcmp(fam, "AF_INET6") == 0 ? AF_INET6 : AF_INET;
  int n = d->attr.gid_tbl_len < IB_NGID_MAX ? d->attr.gid_tbl_len : IB_NGID_MAX;
  brd_ib_gid_t *t = calloc(n > 0 ? (size_t)n : 1, sizeof(*t));
  if (t == NULL) return 0;
  for (int i = 0; i < n; i++) {
    if (ibv->query_gid(d->ctx, (uint8_t)d->port, i, &t[i].gid) != 0) memset(&t[i].gid, 0, 16);
    t[i].roce_version = gid_valid(&t[i].gid) ? gid_roce_version(d->ctx, d->name, d->port, i) : 0;
  }
  int idx = brd_ib_gid_select(t, n, family, (int)brd_param_int(BRD_P_IB_ROCE_VERSION_NUM));
  free(t);
  return idx;
}

/* ---- GPUDirect RDMA: what the NIC and the host allow ----------------------------- */

/* NCCL's DMA-BUF probe: a registration of fd -1 fails with EBADF where
 * the kernel and provider take DMA-BUF, EOPNOTSUPP or EPROTONOSUPPORT
 * where they do not. */
static void dmabuf_probe(ib_dev_t *d) {
  d->dmabuf = 0;
  if (ibv->reg_dmabuf_mr == NULL) {
    snprintf(d->dmabuf_why, sizeof(d->dmabuf_why), "libibverbs has no ibv_reg_dmabuf_mr "
             "(rdma-core 34 or later has it)");
    return;
  }
  errno = 0;
  struct ibv_mr *mr = ibv->reg_dmabuf_mr(d->pd, 0, 0, 0, -1, 0);
  if (mr != NULL) {
    (void)ibv->dereg_mr(mr);
  } else if (errno == EOPNOTSUPP || errno == EPROTONOSUPPORT) {
    snprintf(d->dmabuf_why, sizeof(d->dmabuf_why), "the device refuses DMA-BUF registrations "
             "(%s: the kernel or the provider is too old)", strerror(errno));
    return;
  }
  d->dmabuf = 1;
}

#if BRAID_CUDA
/* Whether nvidia-peermem (or the older nv_peer_mem) is loaded, as NCCL
 * checks it; BRAID_IB_PEERMEM=0/1 overrides (containers may hide sysfs).
 * why says what was found. */
static int peermem_present(char *why, size_t n) {
  static const char *const files[] = {"/sys/kernel/mm/memory_peers/nv_mem/version",
                                      "/sys/kernel/mm/memory_peers/nv_mem_nc/version",
                                      "/sys/module/nvidia_peermem/version"};
  int64_t forced = brd_param_int(BRD_P_IB_PEERMEM);
  if (forced != BRD_PARAM_UNSET) {
    snprintf(why, n, "BRAID_IB_PEERMEM=%d", forced != 0);
    return forced != 0;
  }
  for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
    if (access(files[i], F_OK) == 0) {
      snprintf(why, n, "%s exists", files[i]);
      return 1;
    }
  }
  snprintf(why, n, "the nvidia_peermem module is not loaded (modprobe nvidia_peermem)");
  return 0;
}
#endif

/* NCCL's path types, in NCCL's order (NCCL_NET_GDR_LEVEL names one). */
static const char *const ib_path_names[BRD_IB_PATH_COUNT] = {
    "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"};

/* See net_ib.h. */
const char *brd_ib_path_name(int path) {
  return path >= 0 && path < BRD_IB_PATH_COUNT ? ib_path_names[path] : "?";
}

/* See net_ib.h. */
int brd_ib_gdr_level_parse(const char *s) {
  /* NCCL's numbers from before path names: 0 LOC .. 4 SYS, 5 SYS. */
  static const int old_levels[] = {BRD_IB_PATH_LOC, BRD_IB_PATH_PIX, BRD_IB_PATH_PXB,
                                   BRD_IB_PATH_PHB, BRD_IB_PATH_SYS, BRD_IB_PATH_SYS};
  if (s == NULL || s[0] == '\0') return -1;
  for (int i = 0; i < BRD_IB_PATH_COUNT; i++)
    if (strcasecmp(s, ib_path_names[i]) == 0) return i;
  char *end = NULL;
  long v = strtol(s, &end, 10);
  if (end == s || *end != '\0' || v < 0) return -1;
  return old_levels[v > 5 ? 5 : v];
}

/* The bus ids ("DDDD:BB:DD.F") of a sysfs device path below its root
 * "/sys/devices/pciDDDD:BB/"; 0 when the path is not one. */
static int pci_components(const char *path, char root[16], const char *bdf[16]) {
  static const char pre[] = "/sys/devices/";
  if (path == NULL || strncmp(path, pre, sizeof(pre) - 1) != 0) return 0;
  const char *p = path + sizeof(pre) - 1;
  size_t len = strcspn(p, "/");
  if (len < 4 || len >= 16 || strncmp(p, "pci", 3) != 0) return 0;
  memcpy(root, p, len);
  root[len] = '\0';
  int n = 0;
  for (p += len; *p == '/' && n < 16;) {
    p++;
    len = strcspn(p, "/");
    if (len != 12 || p[4] != ':' || p[7] != ':' || p[10] != '.') break;
    bdf[n++] = p;
    p += len;
  }
  return n;
}

/* See net_ib.h. */
int brd_ib_pci_distance(const char *a_path, int a_numa, const char *b_path, int b_numa) {
  char ra[16], rb[16];
  const char *ca[16], *cb[16];
  int na = pci_components(a_path, ra, ca), nb = pci_components(b_path, rb, cb);
  if (na == 0 || nb == 0) return BRD_IB_PATH_SYS;
  if (strcmp(ra, rb) != 0)
    return a_numa >= 0 && a_numa == b_numa ? BRD_IB_PATH_PHB : BRD_IB_PATH_SYS;
  int m = 0;
  while (m < na && m < nb && strncasecmp(ca[m], cb[m], 12) == 0) m++;
  if (m == na && m == nb) return BRD_IB_PATH_LOC;
  if (m == 0) return BRD_IB_PATH_PHB;
  /* Below the last shared bridge a switch is two levels (its downstream
   * port, then the device or the next switch's upstream port). */
  return na - m <= 2 && nb - m <= 2 ? BRD_IB_PATH_PIX : BRD_IB_PATH_PXB;
}

static void gid_str(const union ibv_gid *g, char *buf, size_t n) {
  if (inet_ntop(AF_INET6, g->raw, buf, (socklen_t)n) == NULL) snprintf(buf, n, "?");
}

static void dev_close(ib_dev_t *d) {
  for (int i = 0; i < d->nmr; i++) (void)ibv->dereg_mr(d->mrs[i].mr);
  free(d->mrs);
  d->mrs = NULL;
  d->nmr = d->mr_cap = 0;
  if (d->pd != NULL) (void)ibv->dealloc_pd(d->pd);
  if (d->ctx != NULL) (void)ibv->close_device(d->ctx);
  free(d->pci_path);
  pthread_mutex_destroy(&d->mu);
  memset(d, 0, sizeof(*d));
}

/* Opens port `port` of dev as net device slot d; 0 when it is usable. */
static int dev_open(struct ibv_device *dev, int port, ib_dev_t *d) {
  memset(d, 0, sizeof(*d));
  pthread_mutex_init(&d->mu, NULL);
  snprintf(d->name, sizeof(d->name), "%s", ibv->get_device_name(dev));
  d->port = port;
  d->ctx = ibv->open_device(dev);
  if (d->ctx == NULL) goto fail;
  struct ibv_device_attr da;
  if (ibv->query_device(d->ctx, &da) != 0) goto fail;
  d->guid = da.node_guid;
  memset(&d->attr, 0, sizeof(d->attr));
  if (ibv->query_port(d->ctx, (uint8_t)port, &d->attr) != 0) goto fail;
  d->link = d->attr.link_layer == IBV_LINK_LAYER_ETHERNET ? IBV_LINK_LAYER_ETHERNET
                                                          : IBV_LINK_LAYER_INFINIBAND;
  d->gid_index = pick_gid(d);
  if (ibv->query_gid(d->ctx, (uint8_t)port, d->gid_index, &d->gid) != 0 ||
      (d->link == IBV_LINK_LAYER_ETHERNET && !gid_valid(&d->gid))) {
    INFO(BRD_SUBSYS_NET, "NET/IB : %s:%d has no usable GID at index %d; skipping it (check "
         "NCCL_IB_GID_INDEX and 'show_gids')", d->name, port, d->gid_index);
    goto fail;
  }
  d->pd = ibv->alloc_pd(d->ctx);
  if (d->pd == NULL) goto fail;
  dmabuf_probe(d);
  /* Async events are read without waiting, from whoever progresses. */
  int fl = fcntl(d->ctx->async_fd, F_GETFL);
  if (fl >= 0) (void)fcntl(d->ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
  d->speed = lane_mbps(d->attr.active_speed) * width_lanes(d->attr.active_width);
  char path[PATH_MAX];
  snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device", d->name);
  d->pci_path = realpath(path, NULL);
  return 0;
fail:
  dev_close(d);
  return -1;
}

/* Fills ib_devs with the usable ports. ib_lock held. */
static void scan_devices(void) {
  ib_ndev = 0;
  if (brd_param_int(BRD_P_IB_DISABLE) != 0) {
    INFO(BRD_SUBSYS_NET, "NET/IB : disabled by NCCL_IB_DISABLE");
    return;
  }
  if (brd_ibv_load(&ibv) != ncclSuccess) return; /* its INFO says why */
  int n = 0;
  struct ibv_device **list = ibv->get_device_list(&n);
  if (list == NULL || n == 0) {
    INFO(BRD_SUBSYS_NET, "NET/IB : No device found.");
    if (list != NULL) ibv->free_device_list(list);
    return;
  }
  const char *hca = brd_param_str(BRD_P_IB_HCA);
  char line[1024] = "";
  for (int i = 0; i < n && ib_ndev < IB_MAX_DEVS; i++) {
    const char *name = ibv->get_device_name(list[i]);
    struct ibv_context *probe = ibv->open_device(list[i]);
    struct ibv_device_attr da;
    if (probe == NULL || ibv->query_device(probe, &da) != 0) {
      INFO(BRD_SUBSYS_NET, "NET/IB : cannot open or query %s (%s); skipping it", name,
           strerror(errno));
      if (probe != NULL) (void)ibv->close_device(probe);
      continue;
    }
    for (int port = 1; port <= da.phys_port_cnt && ib_ndev < IB_MAX_DEVS; port++) {
      struct ibv_port_attr pa;
      memset(&pa, 0, sizeof(pa));
      if (ibv->query_port(probe, (uint8_t)port, &pa) != 0) continue;
      if (pa.state != IBV_PORT_ACTIVE) {
        INFO(BRD_SUBSYS_NET, "NET/IB : %s:%d is not active; skipping it", name, port);
        continue;
      }
      if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND &&
          pa.link_layer != IBV_LINK_LAYER_ETHERNET)
        continue;
      if (!brd_ib_hca_match(hca, name, port)) {
        INFO(BRD_SUBSYS_NET, "NET/IB : %s:%d is not selected by NCCL_IB_HCA=%s", name, port,
             hca);
        continue;
      }
      ib_dev_t *d = &ib_devs[ib_ndev];
      if (dev_open(list[i], port, d) != 0) continue;
      char gid[INET6_ADDRSTRLEN];
      size_t len = strlen(line);
      gid_str(&d->gid, gid, sizeof(gid));
      snprintf(line + len, sizeof(line) - len, " [%d]%s:%d/%s", ib_ndev, d->name, port,
               link_name(d->link));
      INFO(BRD_SUBSYS_NET, "NET/IB : %s:%d %s, GID index %d (%s), LID %u, %d Mb/s", d->name,
           port, link_name(d->link), d->gid_index, gid, d->attr.lid, d->speed);
      ib_ndev++;
    }
    (void)ibv->close_device(probe);
  }
  ibv->free_device_list(list);
  if (ib_ndev == 0) {
    INFO(BRD_SUBSYS_NET, "NET/IB : No active port found%s%s.", hca != NULL ? " in NCCL_IB_HCA=" : "",
         hca != NULL ? hca : "");
    return;
  }
  if (brd_sock_boot_iface(&ib_oob, ib_oob_name) != ncclSuccess) {
    INFO(BRD_SUBSYS_NET, "NET/IB : no interface for the out-of-band socket; IB net off");
    for (int i = 0; i < ib_ndev; i++) dev_close(&ib_devs[i]);
    ib_ndev = 0;
    return;
  }
  char addr[BRD_SOCK_ADDR_STRLEN];
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NET, "NET/IB : Using%s ; OOB %s:%s", line, ib_oob_name,
       brd_sock_addr_str(&ib_oob, addr));
}

static int dev_valid(int dev) { return dev >= 0 && dev < __atomic_load_n(&ib_ndev, __ATOMIC_ACQUIRE); }

static const char *event_name(enum ibv_event_type t) {
  switch (t) {
  case IBV_EVENT_PORT_ERR: return "IBV_EVENT_PORT_ERR (port down)";
  case IBV_EVENT_DEVICE_FATAL: return "IBV_EVENT_DEVICE_FATAL";
  case IBV_EVENT_QP_FATAL: return "IBV_EVENT_QP_FATAL";
  case IBV_EVENT_QP_REQ_ERR: return "IBV_EVENT_QP_REQ_ERR";
  case IBV_EVENT_QP_ACCESS_ERR: return "IBV_EVENT_QP_ACCESS_ERR";
  case IBV_EVENT_CQ_ERR: return "IBV_EVENT_CQ_ERR";
  case IBV_EVENT_PORT_ACTIVE: return "IBV_EVENT_PORT_ACTIVE";
  case IBV_EVENT_LID_CHANGE: return "IBV_EVENT_LID_CHANGE";
  case IBV_EVENT_GID_CHANGE: return "IBV_EVENT_GID_CHANGE";
  default: return "async event";
  }
}

/* Brings a new RC QP of device d to INIT with the configured P_Key and the
 * given remote access. 0, or the errno ibv_modify_qp returned. */
static int qp_to_init(const ib_dev_t *d, struct ibv_qp *qp, int access) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = (uint16_t)brd_param_int(BRD_P_IB_PKEY);
  a.port_num = (uint8_t)d->port;
  a.qp_access_flags = (unsigned)access;
  return ibv->modify_qp(qp, &a,
                        IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

/* A comm reads its device's async events once per IB_EVENT_CHECK_POLLS of
 * its progress calls, and peeks its TCP socket for a closed peer once per
 * IB_CLOSE_CHECK_POLLS of its unfinished tests and waiting isends: each is
 * a system call, too dear for every poll, and so is a clock read where the
 * clock source is not the TSC (1.7 us under TCG's HPET), so they count
 * calls. A waiting caller polls in a loop, or at least every millisecond
 * from the proxy's sleep, so both are seen within about a second. */
#define IB_EVENT_CHECK_POLLS 1024
#define IB_CLOSE_CHECK_POLLS 1024

/* Reads the device's pending async events without waiting (callers: once
 * per IB_EVENT_CHECK_POLLS); a port-down or fatal one marks the device
 * failed. Returns d->failed. Any thread. */
static int dev_check_events(ib_dev_t *d) {
  pthread_mutex_lock(&d->mu);
  struct pollfd pfd = {d->ctx->async_fd, POLLIN, 0};
  while (!d->failed && poll(&pfd, 1, 0) > 0 && (pfd.revents & POLLIN)) {
    struct ibv_async_event ev;
    if (ibv->get_async_event(d->ctx, &ev) != 0) break;
    enum ibv_event_type t = ev.event_type;
    int port = ev.element.port_num;
    ibv->ack_async_event(&ev);
    int fatal = t == IBV_EVENT_DEVICE_FATAL || t == IBV_EVENT_CQ_ERR ||
                (t == IBV_EVENT_PORT_ERR && port == d->port);
    if (fatal) {
      snprintf(d->fail_why, sizeof(d->fail_why), "%s on %s:%d", event_name(t), d->name, d->port);
      __atomic_store_n(&d->failed, 1, __ATOMIC_RELEASE);
    } else {
      INFO(BRD_SUBSYS_NET, "NET/IB : %s:%d got %s", d->name, d->port, event_name(t));
    }
    pfd.revents = 0;
  }
  int failed = d->failed;
  pthread_mutex_unlock(&d->mu);
  return failed;
}

/* ---- init, devices, properties ------------------------------------------------------- */

static ncclResult_t ib_init(void **ctx, uint64_t comm_id, brd_net_config_t *config,
                            brd_net_logger_t log, brd_net_prof_cb_t prof) {
  (void)log;
  (void)prof;
  if (ctx == NULL) return ncclInternalError;
  ib_ctx_t *c = calloc(1, sizeof(*c));
  if (c == NULL) return ncclSystemError;
  c->comm_id = comm_id;
  c->tc = config != NULL && config->trafficClass != BRD_NET_TRAFFIC_CLASS_UNDEF
              ? config->trafficClass
              : (int)brd_param_int(BRD_P_IB_TC);
  pthread_mutex_lock(&ib_lock);
  if (ib_refs++ == 0) scan_devices();
  pthread_mutex_unlock(&ib_lock);
  *ctx = c;
  return ncclSuccess;
}

static ncclResult_t ib_finalize(void *ctx) {
  pthread_mutex_lock(&ib_lock);
  if (ib_refs > 0 && --ib_refs == 0) {
    for (int i = 0; i < ib_ndev; i++) dev_close(&ib_devs[i]);
    __atomic_store_n(&ib_ndev, -1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&ib_lock);
  free(ctx);
  return ncclSuccess;
}

static ncclResult_t ib_devices(int *ndev) {
  int n = __atomic_load_n(&ib_ndev, __ATOMIC_ACQUIRE);
  *ndev = n > 0 ? n : 0;
  return ncclSuccess;
}

static ncclResult_t ib_get_properties(int dev, brd_net_props_t *props) {
  if (!dev_valid(dev)) {
    WARN("NET/IB : getProperties of device %d, but there are %d", dev, ib_ndev);
    return ncclInternalError;
  }
  ib_dev_t *d = &ib_devs[dev];
  memset(props, 0, sizeof(*props));
  props->name = d->name;
  props->pciPath = d->pci_path;
  props->guid = d->guid;
  /* NCCL's bits: CUDA with nvidia-peermem, DMA-BUF where the probe took
   * it. regMr of BRD_NET_PTR_CUDA works with either (DMA-BUF first). */
  props->ptrSupport = BRD_NET_PTR_HOST;
#if BRAID_CUDA
  char why[160];
  if (peermem_present(why, sizeof(why))) props->ptrSupport |= BRD_NET_PTR_CUDA;
  if (d->dmabuf && brd_param_int(BRD_P_DMABUF_ENABLE) != 0)
    props->ptrSupport |= BRD_NET_PTR_DMABUF;
#endif
  props->regIsGlobal = 1;
  props->forceFlush = 0;
  props->speed = d->speed;
  props->port = d->port;
  props->latency = 0;
  props->maxComms = 65536;
  props->maxRecvs = IB_MAX_RECVS;
  props->netDeviceType = 0;
  props->netDeviceVersion = 0;
  props->vProps.ndevs = 1;
  props->vProps.devs[0] = dev;
  props->maxP2pBytes = IB_MAX_MSG;
  props->maxCollBytes = (size_t)512 << 20;
  props->maxMultiRequestSize = 1;
  props->railId = -1;
  props->planeId = -1;
  return ncclSuccess;
}

/* ---- wire formats ------------------------------------------------------------------------ */

typedef struct ib_comm ib_comm_t;

/* What listen writes into the caller's 128-byte handle; `stage` is the
 * connecting side's comm in progress (NULL in the copy the peer gets). */
typedef struct {
  union brd_sock_addr addr;
  uint64_t magic;
  ib_comm_t *stage;
} ib_handle_t;
_Static_assert(sizeof(ib_handle_t) <= BRD_NET_HANDLE_BYTES, "IB handle too large");

/* One clear-to-send entry: the receiver's buffer r of group k. `word` is
 * (k+1) << 8 | n, the same in every entry of the group; the sender reads
 * the words (the first entry's, then the last's, written last) before
 * the rest. */
typedef struct {
  uint64_t addr;
  uint64_t size;
  uint32_t rkey;
  int32_t tag;
  uint64_t word;
} ib_cts_t;
_Static_assert(sizeof(ib_cts_t) == 32, "a CTS entry is 32 bytes");

/* The FIFO region of a comm, one allocation and one MR: IB_NCTS CTS
 * entries (the sender's FIFO; the receiver's staged copies), then IB_NCTS
 * sizes (the receiver's size records, written by the sender for groups
 * of several buffers; the sender's staged copies). */
#define IB_FIFO_BYTES (IB_NCTS * sizeof(ib_cts_t) + IB_NCTS * sizeof(int32_t))

/* Each side's connection metadata, sent once over the TCP socket. */
typedef struct {
  uint64_t magic;
  uint32_t nqps;
  uint32_t link;
  uint32_t mtu;
  uint32_t lid;
  uint8_t gid[16];
  uint64_t fifo_addr;   /* sender: its CTS FIFO; receiver: its size records */
  uint32_t fifo_rkey;
  uint32_t split;       /* sender: NCCL_IB_SPLIT_DATA_ON_QPS (the receiver follows) */
  uint32_t qpn[IB_MAX_QPS];
} ib_meta_t;

/* ---- comms ------------------------------------------------------------------------------- */

enum { REQ_FREE = 0, REQ_BUSY };
enum { WR_SEND = 1, WR_RECV = 2, WR_CTS = 3, WR_FLUSH = 4 };

typedef struct {
  ib_dev_t *dev;
  struct ibv_mr *mr;  /* the cache's */
  int mem;            /* IB_MEM_* */
  int flush;          /* GPU memory whose receives need a flush */
} ib_mh_t;

/* One request: a receive is a whole group (reqs[slot * IB_MAX_RECVS]);
 * a send is one buffer r of a group (reqs[slot * IB_MAX_RECVS + r]). */
typedef struct ib_req {
  ib_comm_t *comm;
  int state;
  int flush;          /* a flush (iflush): done when its read completed */
  int pending;        /* flush: completions still to come */
  unsigned slot;
  uint64_t seq;       /* the group */
  void *data;         /* send */
  size_t size;        /* send size */
  uint32_t lkey;      /* send */
} ib_req_t;

/* Group k's state in slot k mod IB_NREQ. */
typedef struct {
  uint64_t seq;       /* k; UINT64_MAX before the first */
  int n;              /* buffers */
  unsigned matched;   /* sender: bit r set once an isend took buffer r */
  int posted;         /* sender: the group's WRs are posted */
  int live;           /* requests handed out and not yet done */
  int pending;        /* completions still to come */
  int imm_size;       /* receiver, one buffer: the size from the immediate */
  int imm_left;       /* receiver: immediates still to come (0: the data is in) */
} ib_grp_t;

enum { ST_DIAL, ST_SEND_META, ST_RECV_META, ST_SEND_READY, ST_WAIT_READY, ST_READY };

struct ib_comm {
  int is_send;
  int state;
  ib_dev_t *dev;
  int tc;
  struct brd_sock sock;       /* the out-of-band TCP connection */
  ib_meta_t mine, peer;
  size_t io_done;             /* bytes of the current handshake step */
  struct ibv_cq *cq;          /* owned */
  struct ibv_comp_channel *chan; /* owned: cq's events (poll_fd), NULL: none */
  int cts_wait;               /* sender: the last isend found no clear-to-send */
  int nqps;
  struct ibv_qp *qps[IB_MAX_QPS]; /* owned */
  ib_cts_t *fifo;             /* IB_FIFO_BYTES (see there); owned */
  int32_t *sizes;             /* the sizes part of fifo */
  struct ibv_mr *fifo_mr;     /* owned */
  int split;                  /* split each message over every QP */
  uint64_t post_seq;          /* next group */
  uint64_t cts_seq;           /* receiver: the first group whose CTS is held
                               * (groups [cts_seq, post_seq) wait: cts_flush) */
  int cts_ahead;              /* receiver: BRAID_IB_CTS_AHEAD */
  _Atomic int error;          /* sticky ncclResult_t */
  int fail_claimed;
  uint32_t polls;             /* progress calls (IB_EVENT_CHECK_POLLS) */
  uint32_t close_polls;       /* check_peer_closed calls (IB_CLOSE_CHECK_POLLS) */
  char why[512];              /* the failure's WARN ("" when quiet) */
  char peer_name[BRD_SOCK_ADDR_STRLEN];
  ib_grp_t grp[IB_NREQ];
  ib_req_t reqs[IB_NCTS];
  /* Receiver, GPUDirect flushes: a QP connected to itself, and the 4-byte
   * host target its RDMA reads land in; made at the first flush. */
  struct ibv_qp *flush_qp;    /* owned */
  struct ibv_mr *flush_mr;    /* owned */
  uint32_t flush_dummy;
  ib_req_t freqs[IB_NREQ];
};

typedef struct {
  struct brd_sock sock;
  uint64_t magic;
  int dev;
  int tc;
  ib_comm_t *pend;            /* an accept in progress; owned */
} ib_listen_t;

static uint64_t random_u64(void) {
  uint64_t v = 0;
  if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v)) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    v = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)ts.tv_sec ^ ((uint64_t)getpid() << 40);
  }
  return v;
}

static ncclResult_t comm_fail(ib_comm_t *c, ncclResult_t res, int quiet, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static ncclResult_t comm_fail(ib_comm_t *c, ncclResult_t res, int quiet, const char *fmt, ...) {
  if (!c->fail_claimed) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    (void)vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->fail_claimed = 1;
    if (quiet) {
      INFO(BRD_SUBSYS_NET, "%s", msg);
    } else {
      WARN("%s", msg);
      if (snprintf(c->why, sizeof(c->why), "%s", msg) < 0) c->why[0] = '\0'; /* cut to fit */
    }
    atomic_store(&c->error, (int)res);
    return res;
  }
  int err = atomic_load(&c->error);
  return err != ncclSuccess ? (ncclResult_t)err : res;
}

static void comm_destroy(ib_comm_t *c) {
  if (c == NULL) return;
  /* The TCP close first: a peer whose RDMA then fails sees why. */
  brd_sock_close(&c->sock);
  for (int i = 0; i < c->nqps; i++)
    if (c->qps[i] != NULL) (void)ibv->destroy_qp(c->qps[i]);
  if (c->flush_qp != NULL) (void)ibv->destroy_qp(c->flush_qp);
  if (c->flush_mr != NULL) (void)ibv->dereg_mr(c->flush_mr);
  if (c->cq != NULL) (void)ibv->destroy_cq(c->cq);
  if (c->chan != NULL) (void)ibv->destroy_comp_channel(c->chan);
  if (c->fifo_mr != NULL) (void)ibv->dereg_mr(c->fifo_mr);
  free(c->fifo);
  free(c);
}

static int qp_count(void) {
  int64_t n = brd_param_int(BRD_P_IB_QPS_PER_CONNECTION);
  return n < 1 ? 1 : n > IB_MAX_QPS ? IB_MAX_QPS : (int)n;
}

/* A completion channel for a comm's CQ, its descriptor non-blocking, or
 * NULL (the library has none, or it failed: poll_fd then says -1 and the
 * caller keeps polling). */
static struct ibv_comp_channel *comp_channel_create(ib_dev_t *d) {
  if (ibv->create_comp_channel == NULL || ibv->destroy_comp_channel == NULL ||
      ibv->get_cq_event == NULL || ibv->ack_cq_events == NULL)
    return NULL;
  struct ibv_comp_channel *ch = ibv->create_comp_channel(d->ctx);
  if (ch == NULL) {
    INFO(BRD_SUBSYS_NET, "NET/IB : ibv_create_comp_channel on %s failed: %s; the proxy polls "
         "this connection instead of sleeping on it", d->name, strerror(errno));
    return NULL;
  }
  int fl = fcntl(ch->fd, F_GETFL);
  if (fl < 0 || fcntl(ch->fd, F_SETFL, fl | O_NONBLOCK) != 0) {
    INFO(BRD_SUBSYS_NET, "NET/IB : a completion channel's descriptor on %s cannot be made "
         "non-blocking: %s; the proxy polls this connection", d->name, strerror(errno));
    (void)ibv->destroy_comp_channel(ch);
    return NULL;
  }
  return ch;
}

/* CQ (with its completion channel), QPs in INIT, the FIFO and its MR;
 * fills c->mine. */
static ncclResult_t comm_verbs_create(ib_comm_t *c, int nqps) {
  ib_dev_t *d = c->dev;
  c->nqps = nqps;
  c->chan = comp_channel_create(d);
  c->cq = ibv->create_cq(d->ctx, 4 * IB_NREQ * nqps + IB_NREQ, NULL, c->chan, 0);
  if (c->cq == NULL) {
    WARN("NET/IB : ibv_create_cq on %s failed: %s", d->name, strerror(errno));
    return ncclSystemError;
  }
  for (int i = 0; i < nqps; i++) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof(ia));
    ia.send_cq = c->cq;
    ia.recv_cq = c->cq;
    ia.qp_type = IBV_QPT_RC;
    /* A group takes up to IB_MAX_RECVS + 1 WRs per QP. */
    ia.cap.max_send_wr = (IB_MAX_RECVS + 1) * IB_NREQ;
    ia.cap.max_recv_wr = IB_NREQ;
    ia.cap.max_send_sge = 1;
    ia.cap.max_recv_sge = 1;
    c->qps[i] = ibv->create_qp(d->pd, &ia);
    if (c->qps[i] == NULL) {
      WARN("NET/IB : ibv_create_qp on %s failed: %s", d->name, strerror(errno));
      return ncclSystemError;
    }
    int rc = qp_to_init(d, c->qps[i], IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    if (rc != 0) {
      WARN("NET/IB : QP %u on %s:%d to INIT failed: %s", c->qps[i]->qp_num, d->name, d->port,
           strerror(rc));
      return ncclSystemError;
    }
  }
  if (posix_memalign((void **)&c->fifo, 4096, IB_FIFO_BYTES) != 0) {
    c->fifo = NULL;
    WARN("NET/IB : out of host memory for a CTS FIFO");
    return ncclSystemError;
  }
  memset(c->fifo, 0, IB_FIFO_BYTES);
  c->sizes = (int32_t *)(void *)(c->fifo + IB_NCTS);
  c->fifo_mr = ibv->reg_mr(d->pd, c->fifo, IB_FIFO_BYTES,
                           IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (c->fifo_mr == NULL) {
    WARN("NET/IB : registering the %zu-byte CTS FIFO on %s failed: %s (raise the locked-memory "
         "limit, ulimit -l)", IB_FIFO_BYTES, d->name, strerror(errno));
    return ncclSystemError;
  }
  memset(&c->mine, 0, sizeof(c->mine));
  c->mine.nqps = (uint32_t)nqps;
  c->mine.link = (uint32_t)d->link;
  c->mine.mtu = (uint32_t)d->attr.active_mtu;
  c->mine.lid = d->attr.lid;
  memcpy(c->mine.gid, d->gid.raw, 16);
  c->mine.fifo_addr = c->is_send ? (uint64_t)(uintptr_t)c->fifo : (uint64_t)(uintptr_t)c->sizes;
  c->mine.fifo_rkey = c->fifo_mr->rkey;
  c->mine.split = c->is_send ? (uint32_t)c->split : 0;
  for (int i = 0; i < nqps; i++) c->mine.qpn[i] = c->qps[i]->qp_num;
  return ncclSuccess;
}

/* One QP to RTR then RTS against a remote QP (number, LID, GID, MTU). */
static ncclResult_t qp_connect(ib_comm_t *c, struct ibv_qp *qp, uint32_t rqpn, uint32_t rlid,
                               const uint8_t *rgid, uint32_t rmtu) {
  ib_dev_t *d = c->dev;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = (enum ibv_mtu)(rmtu < (uint32_t)d->attr.active_mtu ? rmtu : d->attr.active_mtu);
  a.dest_qp_num = rqpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  if (d->link == IBV_LINK_LAYER_ETHERNET) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, rgid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)d->gid_index;
    a.ah_attr.grh.hop_limit = 255;
    a.ah_attr.grh.traffic_class = (uint8_t)c->tc;
  } else {
    a.ah_attr.is_global = 0;
    a.ah_attr.dlid = (uint16_t)rlid;
  }
  a.ah_attr.sl = (uint8_t)brd_param_int(BRD_P_IB_SL);
  a.ah_attr.port_num = (uint8_t)d->port;
  int rc = ibv->modify_qp(qp, &a,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
  if (rc != 0) {
    WARN("NET/IB : QP %u on %s:%d to RTR (remote QP %u, LID %u) failed: %s", qp->qp_num,
         d->name, d->port, rqpn, rlid, strerror(rc));
    return ncclSystemError;
  }
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = (uint8_t)brd_param_int(BRD_P_IB_TIMEOUT);
  a.retry_cnt = (uint8_t)brd_param_int(BRD_P_IB_RETRY_CNT);
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  rc = ibv->modify_qp(qp, &a,
                      IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
  if (rc != 0) {
    WARN("NET/IB : QP %u on %s:%d to RTS failed: %s", qp->qp_num, d->name, d->port,
         strerror(rc));
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* Every QP to RTR then RTS against the peer's metadata. */
static ncclResult_t comm_verbs_connect(ib_comm_t *c) {
  ib_dev_t *d = c->dev;
  if (c->peer.nqps != (uint32_t)c->nqps || c->peer.link != (uint32_t)d->link) {
    WARN("NET/IB : peer %s has %u QPs on %s, this side %d on %s; set NCCL_IB_QPS_PER_CONNECTION "
         "alike on every rank and connect IB to IB, RoCE to RoCE",
         c->peer_name, c->peer.nqps, link_name((int)c->peer.link), c->nqps, link_name(d->link));
    return ncclInvalidUsage;
  }
  for (int i = 0; i < c->nqps; i++)
    CHECK(qp_connect(c, c->qps[i], c->peer.qpn[i], c->peer.lid, c->peer.gid, c->peer.mtu));
  return ncclSuccess;
}

enum { IO_DONE, IO_AGAIN, IO_CLOSED, IO_ERROR };

/* Moves bytes of buf[0..n) from *done on without waiting. */
static int io_step(int fd, int is_send, void *buf, size_t n, size_t *done) {
  while (*done < n) {
    ssize_t r = is_send ? send(fd, (char *)buf + *done, n - *done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, (char *)buf + *done, n - *done, MSG_DONTWAIT);
    if (r > 0) {
      *done += (size_t)r;
      continue;
    }
    if (r == 0) return is_send ? IO_AGAIN : IO_CLOSED;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) return IO_AGAIN;
    if (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN) return IO_CLOSED;
    return IO_ERROR;
  }
  return IO_DONE;
}

static ncclResult_t io_fail(ib_comm_t *c, int rc, const char *what) {
  if (rc == IO_CLOSED)
    return comm_fail(c, ncclRemoteError, 0,
                     "NET/IB : connection with %s closed while %s; the remote process may have "
                     "exited or closed its communicator", c->peer_name, what);
  return comm_fail(c, ncclSystemError, 0, "NET/IB : %s with %s failed: %s", what, c->peer_name,
                   strerror(errno));
}

/* The handshake steps after the comm was handed out, without waiting. */
static ncclResult_t comm_progress_setup(ib_comm_t *c) {
  int rc;
  if (c->state == ST_RECV_META) {
    rc = io_step(c->sock.fd, 0, &c->peer, sizeof(c->peer), &c->io_done);
    if (rc == IO_AGAIN) return ncclSuccess;
    if (rc != IO_DONE) return io_fail(c, rc, "receiving the receiver's QP numbers");
    if (c->peer.magic != c->mine.magic)
      return comm_fail(c, ncclInternalError, 0, "NET/IB : bad metadata from %s", c->peer_name);
    ncclResult_t res = comm_verbs_connect(c);
    if (res != ncclSuccess) return comm_fail(c, res, 1, "NET/IB : connecting to %s failed",
                                             c->peer_name);
    c->state = ST_SEND_READY;
    c->io_done = 0;
  }
  if (c->state == ST_SEND_READY) {
    uint8_t one = 1;
    rc = io_step(c->sock.fd, 1, &one, 1, &c->io_done);
    if (rc == IO_AGAIN) return ncclSuccess;
    if (rc != IO_DONE) return io_fail(c, rc, "sending the ready flag");
    c->state = ST_READY;
  }
  if (c->state == ST_WAIT_READY) {
    uint8_t one = 0;
    size_t done = 0;
    rc = io_step(c->sock.fd, 0, &one, 1, &done);
    if (rc == IO_AGAIN) return ncclSuccess;
    if (rc != IO_DONE) return io_fail(c, rc, "waiting for the sender's ready flag");
    c->state = ST_READY;
  }
  return ncclSuccess;
}

/* A peer that closed the TCP connection after the handshake: its comm is
 * gone. Quiet (the caller decides whether that is a failure). The socket
 * is peeked once per IB_CLOSE_CHECK_POLLS calls: every test of an
 * unfinished request and every isend still waiting for its clear-to-send
 * lands here, and a system call each time costs more than the data path. */
static ncclResult_t check_peer_closed(ib_comm_t *c) {
  if (++c->close_polls % IB_CLOSE_CHECK_POLLS != 0) return ncclSuccess;
  char b;
  ssize_t r = recv(c->sock.fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
  if (r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE)))
    return comm_fail(c, ncclRemoteError, 1,
                     "NET/IB : %s closed its connection; the remote process may have exited or "
                     "closed its communicator", c->peer_name);
  return ncclSuccess;
}

static const char *wc_status_name(enum ibv_wc_status s) {
  switch (s) {
  case IBV_WC_SUCCESS: return "IBV_WC_SUCCESS";
  case IBV_WC_LOC_LEN_ERR: return "IBV_WC_LOC_LEN_ERR";
  case IBV_WC_LOC_QP_OP_ERR: return "IBV_WC_LOC_QP_OP_ERR";
  case IBV_WC_LOC_PROT_ERR: return "IBV_WC_LOC_PROT_ERR";
  case IBV_WC_WR_FLUSH_ERR: return "IBV_WC_WR_FLUSH_ERR";
  case IBV_WC_REM_INV_REQ_ERR: return "IBV_WC_REM_INV_REQ_ERR";
  case IBV_WC_REM_ACCESS_ERR: return "IBV_WC_REM_ACCESS_ERR";
  case IBV_WC_REM_OP_ERR: return "IBV_WC_REM_OP_ERR";
  case IBV_WC_RETRY_EXC_ERR: return "IBV_WC_RETRY_EXC_ERR";
  case IBV_WC_RNR_RETRY_EXC_ERR: return "IBV_WC_RNR_RETRY_EXC_ERR";
  case IBV_WC_FATAL_ERR: return "IBV_WC_FATAL_ERR";
  default: return "an error";
  }
}

static const char *wr_kind_name(int kind) {
  return kind == WR_SEND    ? "RDMA_WRITE_WITH_IMM (data)"
         : kind == WR_CTS   ? "RDMA_WRITE (clear-to-send)"
         : kind == WR_FLUSH ? "RDMA_READ (GPUDirect flush)"
                            : "RECV (immediate)";
}

/* 1 when the peer has closed the TCP connection (its comm is gone). */
static int peer_gone(ib_comm_t *c) {
  char b;
  if (c->sock.fd < 0) return 0;
  ssize_t r = recv(c->sock.fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
  return r == 0 || (r < 0 && (errno == ECONNRESET || errno == EPIPE));
}

/* Takes every completion of c's CQ, counting them into *count_out. */
static ncclResult_t comm_poll_count(ib_comm_t *c, int *count_out) {
  struct ibv_wc wc[16];
  *count_out = 0;
  for (;;) {
    int n = brd_ibv_poll_cq(c->cq, 16, wc);
    if (n > 0) *count_out += n;
    if (n < 0)
      return comm_fail(c, ncclSystemError, 0, "NET/IB : ibv_poll_cq on %s failed (%d); the CQ "
                       "may have overflowed", c->dev->name, n);
    for (int i = 0; i < n; i++) {
      int kind = (int)(wc[i].wr_id >> 56);
      unsigned slot = (unsigned)(wc[i].wr_id & 0xffff);
      if (wc[i].status != IBV_WC_SUCCESS) {
        char lg[INET6_ADDRSTRLEN], rg[INET6_ADDRSTRLEN];
        union ibv_gid pg;
        memcpy(pg.raw, c->peer.gid, 16);
        gid_str(&c->dev->gid, lg, sizeof(lg));
        gid_str(&pg, rg, sizeof(rg));
        int remote = wc[i].status == IBV_WC_REM_ACCESS_ERR ||
                     wc[i].status == IBV_WC_REM_INV_REQ_ERR || wc[i].status == IBV_WC_REM_OP_ERR ||
                     wc[i].status == IBV_WC_RETRY_EXC_ERR ||
                     wc[i].status == IBV_WC_RNR_RETRY_EXC_ERR;
        /* A peer that closed its comm (its TCP side is shut) is likely
         * done, not broken: INFO, and the caller decides. */
        (void)comm_fail(c, remote ? ncclRemoteError : ncclSystemError, remote && peer_gone(c),
                        "NET/IB : %s:%d, QP %u, %s to %s (request %u): got completion with "
                        "status %s (%d), vendor error %u; local GID %s, remote GID %s. %s",
                        c->dev->name, c->dev->port, wc[i].qp_num, wr_kind_name(kind),
                        c->peer_name, slot, wc_status_name(wc[i].status), (int)wc[i].status,
                        wc[i].vendor_err, lg, rg,
                        wc[i].status == IBV_WC_RETRY_EXC_ERR
                            ? "The peer did not answer: it may have exited, or the fabric "
                              "between the two ports is down (check NCCL_IB_GID_INDEX on RoCE)"
                            : "The peer refused or lost the operation; check that every rank "
                              "runs the same version with the same settings");
        continue;
      }
      if (slot >= IB_NREQ) continue;
      if (kind == WR_FLUSH) {
        if (c->freqs[slot].pending > 0) c->freqs[slot].pending--;
        continue;
      }
      if (kind == WR_CTS) {
        /* One write carries the CTS of count groups from slot on. */
        unsigned count = (unsigned)(wc[i].wr_id >> 16 & 0xffff);
        for (unsigned j = 0; j < count && j < IB_NREQ; j++) {
          ib_grp_t *cg = &c->grp[(slot + j) % IB_NREQ];
          if (cg->pending > 0) cg->pending--;
        }
        continue;
      }
      ib_grp_t *g = &c->grp[slot];
      if (g->pending > 0) g->pending--;
      if (kind == WR_RECV) {
        if (g->imm_left > 0) g->imm_left--;
        if (g->n == 1) g->imm_size = (int)ntohl(wc[i].imm_data);
      }
    }
    if (n < 16) return ncclSuccess;
  }
}

/* Takes every completion of c's CQ. */
static ncclResult_t comm_poll(ib_comm_t *c) {
  int count;
  return comm_poll_count(c, &count);
}

/* Receiver: posts the held clear-to-send entries of groups [cts_seq,
 * post_seq) once fewer than `below` groups whose CTS went out still wait
 * for their data (the sender then has fewer than that many buffers left to
 * write into): in one RDMA write per run of slots (two where the ring
 * wraps), so a receiver that posts its receives one at a time, as a
 * ping-pong or the proxy's reposting does, sends a CTS packet (and gets a
 * completion) per few messages rather than per message. irecv asks with
 * cts_ahead; progress (at every test) only with 1, when the sender has
 * no entry left: posting there would put the write ahead of whatever the
 * caller does on receiving (a ping-pong's answer), where irecv's comes
 * after it. The sender's view is unchanged: each group's entries are
 * whole in its slot before its words say so. */
static ncclResult_t cts_flush(ib_comm_t *c, int below) {
  if (c->cts_seq == c->post_seq) return ncclSuccess;
  int out = 0;
  uint64_t from = c->cts_seq > IB_NREQ ? c->cts_seq - IB_NREQ : 0;
  for (uint64_t k = from; k < c->cts_seq; k++) {
    const ib_grp_t *g = &c->grp[k % IB_NREQ];
    if (g->seq == k && g->live > 0 && g->imm_left > 0) out++;
  }
  if (out >= below) return ncclSuccess;
  while (c->cts_seq < c->post_seq) {
    uint64_t k0 = c->cts_seq;
    unsigned s0 = (unsigned)(k0 % IB_NREQ);
    uint64_t count = c->post_seq - k0;
    if (s0 + count > IB_NREQ) count = IB_NREQ - s0;
    int n_last = c->grp[(s0 + count - 1) % IB_NREQ].n;
    ib_cts_t *e = &c->fifo[s0 * IB_MAX_RECVS];
    uint32_t bytes = (uint32_t)(((count - 1) * IB_MAX_RECVS + (uint64_t)n_last) * sizeof(*e));
    struct ibv_sge sge = {(uint64_t)(uintptr_t)e, bytes, c->fifo_mr->lkey};
    struct ibv_send_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id = ((uint64_t)WR_CTS << 56) | count << 16 | s0;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = c->peer.fifo_addr + s0 * IB_MAX_RECVS * sizeof(ib_cts_t);
    wr.wr.rdma.rkey = c->peer.fifo_rkey;
    struct ibv_qp *qp = c->qps[k0 % (uint64_t)c->nqps];
    int rc = brd_ibv_post_send(qp, &wr, &bad);
    if (rc != 0)
      return comm_fail(c, ncclSystemError, 0, "NET/IB : ibv_post_send of a CTS on QP %u (%s) "
                       "failed: %s", qp->qp_num, c->dev->name, strerror(rc));
    c->cts_seq = k0 + count;
  }
  return ncclSuccess;
}

/* Progress shared by isend, irecv and test: the handshake, the port's
 * events, the CQ. */
static ncclResult_t comm_progress(ib_comm_t *c) {
  if (atomic_load(&c->error) != ncclSuccess) return (ncclResult_t)atomic_load(&c->error);
  CHECK(comm_progress_setup(c));
  int down = ++c->polls % IB_EVENT_CHECK_POLLS == 0
                 ? dev_check_events(c->dev)
                 : __atomic_load_n(&c->dev->failed, __ATOMIC_ACQUIRE);
  if (down)
    return comm_fail(c, ncclSystemError, 0,
                     "NET/IB : %s; every connection on it fails (peer %s). Check the cable, the "
                     "switch and 'ibstat', or exclude the port with NCCL_IB_HCA",
                     c->dev->fail_why, c->peer_name);
  if (c->state == ST_READY) {
    CHECK(comm_poll(c));
    if (!c->is_send) CHECK(cts_flush(c, 1));
  }
  return ncclSuccess;
}

/* ---- listen / connect / accept -------------------------------------------------------- */

static ncclResult_t comm_alloc(int is_send, int dev, int tc, ib_comm_t **out) {
  ib_comm_t *c = calloc(1, sizeof(*c));
  if (c == NULL) {
    WARN("NET/IB : out of host memory allocating a comm (%zu bytes)", sizeof(*c));
    return ncclSystemError;
  }
  c->is_send = is_send;
  c->dev = &ib_devs[dev];
  c->tc = tc;
  c->sock.fd = -1;
  for (int i = 0; i < IB_NCTS; i++) c->reqs[i].comm = c;
  for (int i = 0; i < IB_NREQ; i++) {
    c->freqs[i].comm = c;
    c->freqs[i].flush = 1;
  }
  for (int i = 0; i < IB_NREQ; i++) c->grp[i].seq = UINT64_MAX;
  *out = c;
  return ncclSuccess;
}

static ncclResult_t ib_listen(void *ctx, int dev, void *handle, void **listen_comm) {
  ib_ctx_t *x = ctx;
  if (!dev_valid(dev)) {
    WARN("NET/IB : listen on device %d, but there are %d", dev, ib_ndev);
    return ncclInternalError;
  }
  ib_listen_t *l = calloc(1, sizeof(*l));
  if (l == NULL) {
    WARN("NET/IB : out of host memory allocating a listen comm");
    return ncclSystemError;
  }
  union brd_sock_addr addr = ib_oob;
  if (addr.sa.sa_family == AF_INET) addr.sin.sin_port = 0;
  else addr.sin6.sin6_port = 0;
  ncclResult_t res = brd_sock_listen(&addr, &l->sock);
  if (res != ncclSuccess) {
    free(l);
    return res;
  }
  l->dev = dev;
  l->tc = x != NULL ? x->tc : 0;
  l->magic = random_u64();
  ib_handle_t hd;
  memset(&hd, 0, sizeof(hd));
  hd.addr = l->sock.addr;
  hd.magic = l->magic;
  memset(handle, 0, BRD_NET_HANDLE_BYTES);
  memcpy(handle, &hd, sizeof(hd));
  *listen_comm = l;
  return ncclSuccess;
}

static void set_stage(void *handle, ib_comm_t *c) {
  memcpy((char *)handle + offsetof(ib_handle_t, stage), &c, sizeof(c));
}

static ncclResult_t ib_connect(void *ctx, int dev, void *handle, void **send_comm,
                               void **send_dev_comm) {
  ib_ctx_t *x = ctx;
  ib_handle_t hd;
  ncclResult_t res = ncclSuccess;
  *send_comm = NULL;
  if (send_dev_comm != NULL) *send_dev_comm = NULL;
  if (!dev_valid(dev)) {
    WARN("NET/IB : connect on device %d, but there are %d", dev, ib_ndev);
    return ncclInternalError;
  }
  memcpy(&hd, handle, sizeof(hd));
  ib_comm_t *c = hd.stage;
  if (c == NULL) {
    socklen_t len = brd_sock_addr_len(&hd.addr);
    if (len == 0) {
      WARN("NET/IB : connect with a handle that is not an IB net handle (family %d)",
           hd.addr.sa.sa_family);
      return ncclInternalError;
    }
    CHECK(comm_alloc(1, dev, x != NULL ? x->tc : 0, &c));
    brd_sock_addr_str(&hd.addr, c->peer_name);
    c->state = ST_DIAL;
    c->sock.addr = hd.addr;
    c->sock.fd = socket(hd.addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->sock.fd < 0) {
      WARN("NET/IB : socket() failed: %s", strerror(errno));
      res = ncclSystemError;
      goto fail;
    }
    if (connect(c->sock.fd, &hd.addr.sa, len) != 0 && errno != EINPROGRESS && errno != EINTR) {
      WARN("NET/IB : cannot connect to %s: %s", c->peer_name, strerror(errno));
      res = errno == ECONNREFUSED ? ncclRemoteError : ncclSystemError;
      goto fail;
    }
    set_stage(handle, c);
  }
  if (c->state == ST_DIAL) {
    struct pollfd pfd = {c->sock.fd, POLLOUT, 0};
    if (poll(&pfd, 1, 0) <= 0) return ncclSuccess;
    int err = 0;
    socklen_t elen = sizeof(err);
    if (getsockopt(c->sock.fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
    if (err != 0) {
      WARN("NET/IB : cannot connect to %s: %s; the remote process may have exited or closed "
           "its communicator", c->peer_name, strerror(err));
      res = ncclRemoteError;
      goto fail;
    }
    c->split = brd_param_int(BRD_P_IB_SPLIT_DATA_ON_QPS) != 0;
    CHECK_GOTO(comm_verbs_create(c, qp_count()), res, fail);
    c->mine.magic = hd.magic;
    c->state = ST_SEND_META;
    c->io_done = 0;
  }
  if (c->state == ST_SEND_META) {
    int rc = io_step(c->sock.fd, 1, &c->mine, sizeof(c->mine), &c->io_done);
    if (rc == IO_AGAIN) return ncclSuccess;
    if (rc != IO_DONE) {
      WARN("NET/IB : sending the connection metadata to %s failed: %s", c->peer_name,
           rc == IO_CLOSED ? "connection closed" : strerror(errno));
      res = ncclRemoteError;
      goto fail;
    }
    c->state = ST_RECV_META;
    c->io_done = 0;
  }
  set_stage(handle, NULL);
  *send_comm = c;
  return ncclSuccess;
fail:
  set_stage(handle, NULL);
  comm_destroy(c);
  return res;
}

static ncclResult_t ib_accept(void *listen_comm, void **recv_comm, void **recv_dev_comm) {
  ib_listen_t *l = listen_comm;
  ncclResult_t res = ncclSuccess;
  *recv_comm = NULL;
  if (recv_dev_comm != NULL) *recv_dev_comm = NULL;
  if (l->pend == NULL) {
    struct brd_sock s;
    int got = 0;
    CHECK(brd_sock_accept_try(&l->sock, &s, &got));
    if (!got) return ncclSuccess;
    CHECK(comm_alloc(0, l->dev, l->tc, &l->pend));
    l->pend->sock = s;
    l->pend->state = ST_RECV_META;
    brd_sock_addr_str(&s.addr, l->pend->peer_name);
  }
  ib_comm_t *c = l->pend;
  if (c->state == ST_RECV_META) {
    int rc = io_step(c->sock.fd, 0, &c->peer, sizeof(c->peer), &c->io_done);
    if (rc == IO_AGAIN) return ncclSuccess;
    if (rc != IO_DONE || c->peer.magic != l->magic || c->peer.nqps < 1 ||
        c->peer.nqps > IB_MAX_QPS) {
      /* Not a peer of this listener (or one that gave up): drop it. */
      INFO(BRD_SUBSYS_NET, "NET/IB : dropped a connection from %s: %s", c->peer_name,
           rc != IO_DONE ? "closed before its metadata" : "not a peer of this listener");
      comm_destroy(c);
      l->pend = NULL;
      return ncclSuccess;
    }
    c->split = c->peer.split != 0;
    CHECK_GOTO(comm_verbs_create(c, (int)c->peer.nqps), res, fail);
    c->mine.magic = l->magic;
    CHECK_GOTO(comm_verbs_connect(c), res, fail);
    c->state = ST_SEND_META;
    c->io_done = 0;
  }
  if (c->state == ST_SEND_META) {
    int rc = io_step(c->sock.fd, 1, &c->mine, sizeof(c->mine), &c->io_done);
    if (rc == IO_AGAIN) return ncclSuccess;
    if (rc != IO_DONE) {
      WARN("NET/IB : sending the connection metadata to %s failed: %s", c->peer_name,
           rc == IO_CLOSED ? "connection closed" : strerror(errno));
      res = ncclRemoteError;
      goto fail;
    }
    c->state = ST_WAIT_READY;
    c->io_done = 0;
  }
  l->pend = NULL;
  *recv_comm = c;
  return ncclSuccess;
fail:
  l->pend = NULL;
  comm_destroy(c);
  return res;
}

/* ---- registration ---------------------------------------------------------------------- */

/* What regMr of GPU memory does for one GPU and device (gdr_choose). */
typedef struct {
  int gpu;          /* CUDA ordinal */
  int cc;           /* compute capability x 10 */
  int mem;          /* IB_MEM_*: HOST is "no GPUDirect: stage through host memory" */
  int flush;        /* receives into it need iflush */
  char why[384];
} ib_gdr_t;

#if BRAID_CUDA
/* The CUDA device holding data and its compute capability; 0 when data is
 * not device memory. */
static int gpu_of(const void *data, int *gpu_out, int *cc_out) {
  struct cudaPointerAttributes a;
  int major = 0, minor = 0;
  if (cudaPointerGetAttributes(&a, data) != cudaSuccess || a.type != cudaMemoryTypeDevice) {
    (void)cudaGetLastError();
    return 0;
  }
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, a.device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, a.device) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  *gpu_out = a.device;
  *cc_out = major * 10 + minor;
  return 1;
}

static int numa_of(const char *dir) {
  char path[PATH_MAX + 16], text[16] = {0};
  snprintf(path, sizeof(path), "%s/numa_node", dir);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, text, sizeof(text) - 1);
  close(fd);
  return n > 0 ? atoi(text) : -1;
}

/* The PCI path type between GPU `gpu` and d's NIC, from sysfs; SYS when
 * either has no PCI path there. detail says what was compared. */
static int gpu_nic_distance(const ib_dev_t *d, int gpu, char *detail, size_t n) {
  char bus[32], link[64];
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), gpu) != cudaSuccess) {
    (void)cudaGetLastError();
    snprintf(detail, n, "GPU %d has no PCI bus id", gpu);
    return BRD_IB_PATH_SYS;
  }
  for (char *p = bus; *p != '\0'; p++) *p = (char)tolower((unsigned char)*p);
  snprintf(link, sizeof(link), "/sys/bus/pci/devices/%s", bus);
  char *gpu_path = realpath(link, NULL);
  if (gpu_path == NULL || d->pci_path == NULL) {
    snprintf(detail, n, "PCI path unknown: no sysfs entry for %s", gpu_path == NULL ? bus : d->name);
    free(gpu_path);
    return BRD_IB_PATH_SYS;
  }
  int path = brd_ib_pci_distance(gpu_path, numa_of(gpu_path), d->pci_path, numa_of(d->pci_path));
  snprintf(detail, n, "GPU %s, NIC %.160s", bus, d->pci_path);
  free(gpu_path);
  return path;
}
#endif

/* Whether receives into GPU memory of compute capability cc (x 10; -1
 * unknown) need a flush: NCCL's ncclTopoNeedFlush without C2C. */
static int flush_rule(int cc) {
  if (brd_param_int(BRD_P_GDR_FLUSH_DISABLE) != 0) return 0;
  return brd_param_int(BRD_P_NET_FORCE_FLUSH) != 0 || (cc >= 0 && cc < 90);
}

/* NCCL's choice for GPU memory at data on d, for sends (the NIC reads
 * it) or receives: host staging when NCCL_NET_GDR_LEVEL puts the GPU too
 * far from the NIC or NCCL_NET_GDR_READ keeps sends off it; else DMA-BUF
 * when NCCL_DMABUF_ENABLE, the NIC and the driver allow it; else peermem
 * when it is loaded; else host staging. Said at INFO once per (device,
 * GPU, direction). d->mu held. Returns 0 when data is not GPU memory. */
static int gdr_choose(ib_dev_t *d, const void *data, int is_send, ib_gdr_t *g) {
  memset(g, 0, sizeof(*g));
#if !BRAID_CUDA
  (void)d;
  (void)data;
  (void)is_send;
  return 0;
#else
  if (!gpu_of(data, &g->gpu, &g->cc)) return 0;
  char detail[256], dm[256] = "", pm[160] = "";
  const char *level_s = brd_param_str(BRD_P_NET_GDR_LEVEL);
  int level = brd_ib_gdr_level_parse(level_s);
  if (level < 0) {
    if (level_s != NULL && level_s[0] != '\0')
      INFO(BRD_SUBSYS_NET | BRD_SUBSYS_ENV, "NCCL_NET_GDR_LEVEL=%s is not a path type (LOC, "
           "PIX, PXB, PHB, SYS or 0-5); PXB is used", level_s);
    level = BRD_IB_PATH_PXB;
  }
  int dist = gpu_nic_distance(d, g->gpu, detail, sizeof(detail));
  int64_t rd = brd_param_int(BRD_P_NET_GDR_READ);
  g->mem = IB_MEM_HOST;
  if (dist > level) {
    snprintf(g->why, sizeof(g->why), "GPU %d and %s are %s apart (%.200s), beyond "
             "NCCL_NET_GDR_LEVEL=%s", g->gpu, d->name, brd_ib_path_name(dist), detail,
             brd_ib_path_name(level));
  } else if (is_send && rd == 0) {
    snprintf(g->why, sizeof(g->why), "NCCL_NET_GDR_READ=0 keeps sends off GPU memory");
  } else if (is_send && rd < 0 && g->cc < 80) {
    snprintf(g->why, sizeof(g->why), "GPU %d has compute capability %d.%d: sends from GPU "
             "memory start at 8.0 (NCCL_NET_GDR_READ=1 forces them)", g->gpu, g->cc / 10,
             g->cc % 10);
  } else {
    if (brd_param_int(BRD_P_DMABUF_ENABLE) == 0)
      snprintf(dm, sizeof(dm), "NCCL_DMABUF_ENABLE=0");
    else if (!d->dmabuf)
      snprintf(dm, sizeof(dm), "%s", d->dmabuf_why);
    else if (brd_cudrv_dmabuf_supported(g->gpu, dm, sizeof(dm)))
      g->mem = IB_MEM_DMABUF;
    if (g->mem == IB_MEM_HOST && peermem_present(pm, sizeof(pm))) g->mem = IB_MEM_PEERMEM;
    if (g->mem == IB_MEM_DMABUF)
      snprintf(g->why, sizeof(g->why), "DMA-BUF");
    else if (g->mem == IB_MEM_PEERMEM)
      snprintf(g->why, sizeof(g->why), "nvidia-peermem (%.120s); no DMA-BUF: %.200s", pm, dm);
    else
      snprintf(g->why, sizeof(g->why), "no DMA-BUF (%.200s) and no nvidia-peermem (%.120s)", dm,
               pm);
  }
  if (g->mem != IB_MEM_HOST) g->flush = flush_rule(g->cc);
  if (g->gpu >= 0 && g->gpu < IB_GDR_GPUS && !d->gdr_logged[g->gpu][is_send != 0]) {
    d->gdr_logged[g->gpu][is_send != 0] = 1;
    if (g->mem == IB_MEM_HOST)
      INFO(BRD_SUBSYS_NET | BRD_SUBSYS_INIT, "NET/IB : GPU Direct RDMA off for GPU %d and %s "
           "(%s): %s; GPU buffers are staged through host memory", g->gpu, d->name,
           is_send ? "send" : "receive", g->why);
    else
      INFO(BRD_SUBSYS_NET | BRD_SUBSYS_INIT, "NET/IB : GPU Direct RDMA on for GPU %d and %s "
           "(%s) through %s; path %s (%.200s), NCCL_NET_GDR_LEVEL %s%s", g->gpu, d->name,
           is_send ? "send" : "receive", g->why, brd_ib_path_name(dist), detail,
           brd_ib_path_name(level),
           is_send ? ""
           : g->flush ? "; receives are flushed (compute capability below 9.0, or "
                        "NCCL_NET_FORCE_FLUSH)"
                      : "; receives need no flush");
  }
  return 1;
#endif
}

/* The cache entry holding [lo, hi) of kind host (mem 0) or GPU (mem != 0),
 * or NULL. d->mu held. */
static ib_mr_entry_t *cache_find(ib_dev_t *d, uintptr_t lo, uintptr_t hi, int gpu_mem) {
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  for (int i = 0; i < d->nmr; i++) {
    ib_mr_entry_t *e = &d->mrs[i];
    if ((e->mem != IB_MEM_HOST) == gpu_mem && lo >= e->addr && hi <= e->addr + e->pages * page)
      return e;
  }
  return NULL;
}

/* Adds a registration to the cache (room made first). d->mu held. */
static ncclResult_t cache_room(ib_dev_t *d) {
  if (d->nmr < d->mr_cap) return ncclSuccess;
  int cap = d->mr_cap ? 2 * d->mr_cap : 32;
  ib_mr_entry_t *n = realloc(d->mrs, (size_t)cap * sizeof(*n));
  if (n == NULL) {
    WARN("NET/IB : out of host memory for the registration cache");
    return ncclSystemError;
  }
  d->mrs = n;
  d->mr_cap = cap;
  return ncclSuccess;
}

/* The page range [lo, hi) holding [data, data + size), one page at least. */
static void page_range(const void *data, size_t size, uintptr_t *lo, uintptr_t *hi) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  *lo = (uintptr_t)data & ~(page - 1);
  *hi = ((uintptr_t)data + size + page - 1) & ~(page - 1);
  if (*hi == *lo) *hi = *lo + page;
}

#if BRAID_CUDA
/* GPU memory [lo, hi) through DMA-BUF: a handle from the driver for the
 * allocation from its base to hi (page-aligned, as the driver wants it),
 * registered at lo's offset in it; the fd is closed once the MR holds it. */
static struct ibv_mr *reg_dmabuf_range(ib_dev_t *d, uintptr_t lo, uintptr_t hi, char *err,
                                       size_t n) {
  const brd_cudrv_dmabuf_t *t = brd_cudrv_dmabuf();
  brd_cudrv_addr_range_fn_t range = brd_cudrv_addr_range();
  CUdeviceptr base = (CUdeviceptr)lo;
  size_t alloc = 0;
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  if (range != NULL && range(&base, &alloc, (CUdeviceptr)lo) == CUDA_SUCCESS &&
      (base & (page - 1)) == 0 && base <= lo) {
    /* from the allocation's base */
  } else {
    base = (CUdeviceptr)lo;
  }
  int fd = -1;
  CUresult r = t->range_handle(&fd, base, hi - (uintptr_t)base,
                               CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0);
  if (r != CUDA_SUCCESS) {
    snprintf(err, n, "cuMemGetHandleForAddressRange of %zu bytes at 0x%llx failed: %s (%d)",
             (size_t)(hi - (uintptr_t)base), (unsigned long long)base, brd_cudrv_errstr(r),
             (int)r);
    return NULL;
  }
  struct ibv_mr *mr = ibv->reg_dmabuf_mr(d->pd, lo - (uintptr_t)base, hi - lo, lo, fd,
                                         IB_MR_ACCESS);
  if (mr == NULL)
    snprintf(err, n, "ibv_reg_dmabuf_mr of %zu bytes at %p (offset %zu of DMA-BUF fd %d) on "
             "%s failed: %s", (size_t)(hi - lo), (void *)lo, (size_t)(lo - (uintptr_t)base), fd,
             d->name, strerror(errno));
  close(fd);
  return mr;
}
#endif

static ncclResult_t mh_new(ib_dev_t *d, ib_mr_entry_t *e, void **mhandle) {
  ib_mh_t *mh = malloc(sizeof(*mh));
  if (mh == NULL) {
    WARN("NET/IB : out of host memory");
    return ncclSystemError;
  }
  mh->dev = d;
  mh->mr = e->mr;
  mh->mem = e->mem;
  mh->flush = e->flush;
  e->refs++;
  *mhandle = mh;
  return ncclSuccess;
}

/* regMr: host memory (BRD_NET_PTR_HOST) with ibv_reg_mr; GPU memory
 * (BRD_NET_PTR_CUDA) through DMA-BUF or peermem as gdr_choose says, or
 * refused (ncclInvalidUsage: the caller stages through host memory) when
 * GPUDirect RDMA is off for this GPU and NIC. Registrations are cached by
 * page range, per device: a range inside a registered one shares it. */
static ncclResult_t ib_reg_mr(void *comm, void *data, size_t size, int type, void **mhandle) {
  ib_comm_t *c = comm;
  ib_dev_t *d = c->dev;
  ncclResult_t res = ncclSuccess;
  *mhandle = NULL;
  if (type != BRD_NET_PTR_HOST && type != BRD_NET_PTR_CUDA) {
    WARN("NET/IB : regMr of memory type %d (host %d or CUDA %d); DMA-BUF goes through "
         "regMrDmaBuf", type, BRD_NET_PTR_HOST, BRD_NET_PTR_CUDA);
    return ncclInternalError;
  }
  uintptr_t lo, hi;
  page_range(data, size, &lo, &hi);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  int gpu_mem = type == BRD_NET_PTR_CUDA;
  pthread_mutex_lock(&d->mu);
  ib_mr_entry_t *e = cache_find(d, lo, hi, gpu_mem);
  if (e != NULL) {
    res = mh_new(d, e, mhandle);
    goto out;
  }
  CHECK_GOTO(cache_room(d), res, out);
  ib_mr_entry_t n = {lo, (hi - lo) / page, 0, IB_MEM_HOST, 0, NULL};
  if (!gpu_mem) {
    n.mr = ibv->reg_mr(d->pd, (void *)lo, hi - lo, IB_MR_ACCESS);
    if (n.mr == NULL) {
      int err = errno;
      WARN("NET/IB : ibv_reg_mr of %zu bytes at %p on %s failed: %s%s", (size_t)(hi - lo),
           (void *)lo, d->name, strerror(err),
           err == ENOMEM ? " (raise the locked-memory limit: ulimit -l unlimited)" : "");
      res = ncclSystemError;
      goto out;
    }
  } else {
    ib_gdr_t g;
    if (!gdr_choose(d, data, c->is_send, &g)) {
      WARN("NET/IB : regMr of CUDA memory at %p on %s, but %s", data, d->name,
           BRAID_CUDA ? "it is not device memory of a CUDA device"
                      : "this library was built without CUDA (CUDA=0)");
      res = ncclInvalidUsage;
      goto out;
    }
    if (g.mem == IB_MEM_HOST) {
      WARN("NET/IB : cannot register GPU %d memory at %p on %s: GPU Direct RDMA is off (%s). "
           "Stage GPU buffers through host memory", g.gpu, data, d->name, g.why);
      res = ncclInvalidUsage;
      goto out;
    }
    char err[512] = "";
#if BRAID_CUDA
    if (g.mem == IB_MEM_DMABUF) {
      n.mr = reg_dmabuf_range(d, lo, hi, err, sizeof(err));
      char pm[160];
      if (n.mr == NULL && peermem_present(pm, sizeof(pm))) {
        INFO(BRD_SUBSYS_NET, "NET/IB : %s; registering through nvidia-peermem instead", err);
        g.mem = IB_MEM_PEERMEM;
      }
    }
#endif
    if (g.mem == IB_MEM_PEERMEM) {
      n.mr = ibv->reg_mr(d->pd, (void *)lo, hi - lo, IB_MR_ACCESS);
      if (n.mr == NULL)
        snprintf(err, sizeof(err), "ibv_reg_mr of GPU %d memory (%zu bytes at %p, through "
                 "nvidia-peermem) on %s failed: %s", g.gpu, (size_t)(hi - lo), (void *)lo,
                 d->name, strerror(errno));
    }
    if (n.mr == NULL) {
      WARN("NET/IB : %s. Check that the GPU memory is a cudaMalloc or cuMem allocation, or set "
           "NCCL_NET_GDR_LEVEL=LOC to stage GPU buffers through host memory", err);
      res = ncclSystemError;
      goto out;
    }
    n.mem = g.mem;
    n.flush = g.flush;
  }
  d->mrs[d->nmr] = n;
  res = mh_new(d, &d->mrs[d->nmr], mhandle);
  if (res != ncclSuccess) (void)ibv->dereg_mr(n.mr);
  else d->nmr++;
out:
  pthread_mutex_unlock(&d->mu);
  return res;
}

/* regMrDmaBuf (NCCL's semantics): the caller's DMA-BUF fd, whose byte
 * `offset` is data; the fd stays the caller's. Cached with the GPU
 * registrations. */
static ncclResult_t ib_reg_mr_dmabuf(void *comm, void *data, size_t size, int type,
                                     uint64_t offset, int fd, void **mhandle) {
  ib_comm_t *c = comm;
  ib_dev_t *d = c->dev;
  ncclResult_t res = ncclSuccess;
  *mhandle = NULL;
  if (ibv->reg_dmabuf_mr == NULL || !d->dmabuf) {
    WARN("NET/IB : regMrDmaBuf on %s, which takes no DMA-BUF (%s); check ptrSupport first",
         d->name, d->dmabuf_why);
    return ncclInvalidUsage;
  }
  uintptr_t lo, hi;
  page_range(data, size, &lo, &hi);
  size_t page = (size_t)sysconf(_SC_PAGESIZE);
  if ((uintptr_t)data - lo > offset) {
    WARN("NET/IB : regMrDmaBuf of %p at offset %llu of fd %d: the page start %p would lie "
         "before the DMA-BUF", data, (unsigned long long)offset, fd, (void *)lo);
    return ncclInvalidUsage;
  }
  pthread_mutex_lock(&d->mu);
  ib_mr_entry_t *e = cache_find(d, lo, hi, 1);
  if (e != NULL) {
    res = mh_new(d, e, mhandle);
    goto out;
  }
  CHECK_GOTO(cache_room(d), res, out);
  ib_mr_entry_t n = {lo, (hi - lo) / page, 0, IB_MEM_DMABUF, 0, NULL};
  int gpu = -1, cc = -1;
#if BRAID_CUDA
  if (type != BRD_NET_PTR_CUDA || !gpu_of(data, &gpu, &cc)) cc = -1;
#else
  (void)type;
#endif
  (void)gpu;
  n.flush = flush_rule(cc);
  n.mr = ibv->reg_dmabuf_mr(d->pd, offset - ((uintptr_t)data - lo), hi - lo, lo, fd,
                            IB_MR_ACCESS);
  if (n.mr == NULL) {
    WARN("NET/IB : ibv_reg_dmabuf_mr of %zu bytes at %p (fd %d, offset %llu) on %s failed: %s",
         (size_t)(hi - lo), (void *)lo, fd, (unsigned long long)offset, d->name, strerror(errno));
    res = ncclSystemError;
    goto out;
  }
  d->mrs[d->nmr] = n;
  res = mh_new(d, &d->mrs[d->nmr], mhandle);
  if (res != ncclSuccess) (void)ibv->dereg_mr(n.mr);
  else d->nmr++;
out:
  pthread_mutex_unlock(&d->mu);
  return res;
}

static ncclResult_t ib_dereg_mr(void *comm, void *mhandle) {
  ib_mh_t *mh = mhandle;
  (void)comm;
  if (mh == NULL) return ncclSuccess;
  ib_dev_t *d = mh->dev;
  pthread_mutex_lock(&d->mu);
  for (int i = 0; i < d->nmr; i++) {
    if (d->mrs[i].mr != mh->mr) continue;
    if (--d->mrs[i].refs == 0) {
      (void)ibv->dereg_mr(d->mrs[i].mr);
      d->mrs[i] = d->mrs[--d->nmr];
    }
    break;
  }
  pthread_mutex_unlock(&d->mu);
  free(mh);
  return ncclSuccess;
}

/* ---- data path ------------------------------------------------------------------------------ */

static int mh_covers(const ib_mh_t *mh, const void *data, size_t size) {
  uintptr_t lo = (uintptr_t)mh->mr->addr, p = (uintptr_t)data;
  return p >= lo && size <= mh->mr->length && p - lo <= mh->mr->length - size;
}

/* See net_ib.h. */
size_t brd_ib_split_chunk(size_t size, int nq) {
  if (nq < 1) nq = 1;
  size_t share = (size + (size_t)nq - 1) / (size_t)nq;
  return (share + IB_SPLIT_ALIGN - 1) / IB_SPLIT_ALIGN * IB_SPLIT_ALIGN;
}

/* QPs a group uses, and the one carrying part i of group seq. */
static int group_nqps(const ib_comm_t *c) { return c->split ? c->nqps : 1; }

static struct ibv_qp *group_qp(const ib_comm_t *c, uint64_t seq, int i) {
  return c->split ? c->qps[i] : c->qps[seq % (uint64_t)c->nqps];
}

/* Posts the WRs of the sender's group in slot (every buffer matched):
 * per QP, each buffer's share, then the WRITE_WITH_IMM that completes it
 * on the receiver. */
static ncclResult_t post_group(ib_comm_t *c, unsigned slot) {
  ib_grp_t *g = &c->grp[slot];
  const volatile ib_cts_t *cts = &c->fifo[slot * IB_MAX_RECVS];
  ib_req_t *reqs = &c->reqs[slot * IB_MAX_RECVS];
  int n = g->n, nq = group_nqps(c);
  size_t chunk[IB_MAX_RECVS], off[IB_MAX_RECVS];
  for (int r = 0; r < n; r++) {
    chunk[r] = brd_ib_split_chunk(reqs[r].size, nq);
    off[r] = 0;
    c->sizes[slot * IB_MAX_RECVS + r] = (int32_t)reqs[r].size;
  }
  uint64_t wr_id = ((uint64_t)WR_SEND << 56) | slot;
  for (int i = 0; i < nq; i++) {
    struct ibv_send_wr wrs[IB_MAX_RECVS + 1], *bad = NULL;
    struct ibv_sge sges[IB_MAX_RECVS + 1];
    int nw = 0;
    for (int r = 0; r < n; r++) {
      size_t left = reqs[r].size - off[r];
      size_t len = left < chunk[r] ? left : chunk[r];
      if (n > 1 && len == 0) continue; /* nothing of this buffer on this QP */
      struct ibv_send_wr *w = &wrs[nw];
      memset(w, 0, sizeof(*w));
      sges[nw] = (struct ibv_sge){(uint64_t)(uintptr_t)reqs[r].data + off[r], (uint32_t)len,
                                  reqs[r].lkey};
      w->wr_id = wr_id;
      w->sg_list = len > 0 ? &sges[nw] : NULL;
      w->num_sge = len > 0 ? 1 : 0;
      w->wr.rdma.remote_addr = cts[r].addr + off[r];
      w->wr.rdma.rkey = cts[r].rkey;
      if (n == 1) {
        w->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
        w->imm_data = htonl((uint32_t)reqs[r].size);
        w->send_flags = IBV_SEND_SIGNALED;
      } else {
        w->opcode = IBV_WR_RDMA_WRITE;
      }
      off[r] += len;
      nw++;
    }
    if (n > 1) {
      struct ibv_send_wr *w = &wrs[nw];
      memset(w, 0, sizeof(*w));
      sges[nw] = (struct ibv_sge){(uint64_t)(uintptr_t)&c->sizes[slot * IB_MAX_RECVS],
                                  (uint32_t)(n * sizeof(int32_t)), c->fifo_mr->lkey};
      w->wr_id = wr_id;
      w->sg_list = &sges[nw];
      w->num_sge = 1;
      w->opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      w->imm_data = 0;
      w->send_flags = IBV_SEND_SIGNALED;
      w->wr.rdma.remote_addr = c->peer.fifo_addr + slot * IB_MAX_RECVS * sizeof(int32_t);
      w->wr.rdma.rkey = c->peer.fifo_rkey;
      nw++;
    }
    for (int w = 0; w + 1 < nw; w++) wrs[w].next = &wrs[w + 1];
    wrs[nw - 1].next = NULL;
    struct ibv_qp *qp = group_qp(c, g->seq, i);
    int rc = brd_ibv_post_send(qp, wrs, &bad);
    if (rc != 0)
      return comm_fail(c, ncclSystemError, 0, "NET/IB : ibv_post_send on QP %u (%s) failed: %s",
                       qp->qp_num, c->dev->name, strerror(rc));
    g->pending++; /* its signalled last WR */
  }
  g->posted = 1;
  return ncclSuccess;
}

static ncclResult_t ib_isend(void *send_comm, void *data, size_t size, int tag, void *mhandle,
                             void *phandle, void **request) {
  ib_comm_t *c = send_comm;
  ib_mh_t *mh = mhandle;
  (void)phandle;
  *request = NULL;
  CHECK(comm_progress(c));
  if (c->state != ST_READY) return ncclSuccess;
  if (mh == NULL || !mh_covers(mh, data, size) || size > IB_MAX_MSG) {
    WARN("NET/IB : isend of %zu bytes at %p to %s outside its registration (%s)", size, data,
         c->peer_name, mh == NULL ? "no memory handle" : "range");
    return ncclInternalError;
  }
  uint64_t k = c->post_seq;
  unsigned slot = (unsigned)(k % IB_NREQ);
  ib_grp_t *g = &c->grp[slot];
  volatile ib_cts_t *cts = &c->fifo[slot * IB_MAX_RECVS];
  c->cts_wait = 0;
  if (g->seq != k) {
    if (g->live > 0) return ncclSuccess; /* the slot's previous group is still held */
    uint64_t word = __atomic_load_n(&cts[0].word, __ATOMIC_ACQUIRE);
    /* No buffer from the receiver yet; a receiver that is gone says so. */
    if (word >> 8 != k + 1) {
      c->cts_wait = 1; /* an RDMA write into the FIFO: no completion event */
      return check_peer_closed(c);
    }
    int n = (int)(word & 0xff);
    if (n < 1 || n > IB_MAX_RECVS)
      return comm_fail(c, ncclInternalError, 0, "NET/IB : %s posted a receive of %d buffers "
                       "(at most %d)", c->peer_name, n, IB_MAX_RECVS);
    if (__atomic_load_n(&cts[n - 1].word, __ATOMIC_ACQUIRE) != word) {
      c->cts_wait = 1; /* the rest of the entries are on their way */
      return ncclSuccess;
    }
    g->seq = k;
    g->n = n;
    g->matched = 0;
    g->posted = 0;
    g->pending = 0;
  }
  int r = 0;
  while (r < g->n && ((g->matched >> r & 1u) || cts[r].tag != tag)) r++;
  if (r == g->n) return ncclSuccess; /* no buffer of this group for the tag */
  if (size > cts[r].size)
    return comm_fail(c, ncclInvalidUsage, 0,
                     "NET/IB : message truncated : sending %zu bytes to %s, which posted a "
                     "receive of %llu. The ranks may disagree on collective sizes or settings",
                     size, c->peer_name, (unsigned long long)cts[r].size);
  ib_req_t *q = &c->reqs[slot * IB_MAX_RECVS + r];
  q->state = REQ_BUSY;
  q->slot = slot;
  q->seq = k;
  q->data = data;
  q->size = size;
  q->lkey = mh->mr->lkey;
  g->matched |= 1u << r;
  g->live++;
  if (__builtin_popcount(g->matched) == g->n) {
    CHECK(post_group(c, slot));
    c->post_seq++;
  }
  *request = q;
  return ncclSuccess;
}

static ncclResult_t ib_irecv(void *recv_comm, int n, void **data, size_t *sizes, int *tags,
                             void **mhandles, void **phandles, void **request) {
  ib_comm_t *c = recv_comm;
  (void)phandles;
  *request = NULL;
  if (n < 1 || n > IB_MAX_RECVS) {
    WARN("NET/IB : irecv of %d buffers; this net takes 1 to %d (maxRecvs)", n, IB_MAX_RECVS);
    return ncclInternalError;
  }
  CHECK(comm_progress(c));
  if (c->state != ST_READY) return ncclSuccess;
  for (int i = 0; i < n; i++) {
    ib_mh_t *mh = mhandles != NULL ? mhandles[i] : NULL;
    if (mh == NULL || !mh_covers(mh, data[i], sizes[i])) {
      WARN("NET/IB : irecv of %zu bytes at %p (buffer %d of %d) from %s outside its "
           "registration (%s)", sizes[i], data[i], i, n, c->peer_name,
           mh == NULL ? "no memory handle" : "range");
      return ncclInternalError;
    }
  }
  uint64_t k = c->post_seq;
  unsigned slot = (unsigned)(k % IB_NREQ);
  ib_grp_t *g = &c->grp[slot];
  if (g->live > 0) return ncclSuccess;
  int nq = group_nqps(c);
  for (int i = 0; i < nq; i++) {
    struct ibv_qp *qp = group_qp(c, k, i);
    struct ibv_recv_wr rw, *rbad = NULL;
    memset(&rw, 0, sizeof(rw));
    rw.wr_id = ((uint64_t)WR_RECV << 56) | slot;
    int rc = brd_ibv_post_recv(qp, &rw, &rbad);
    if (rc != 0)
      return comm_fail(c, ncclSystemError, 0, "NET/IB : ibv_post_recv on QP %u (%s) failed: %s",
                       qp->qp_num, c->dev->name, strerror(rc));
  }
  ib_cts_t *e = &c->fifo[slot * IB_MAX_RECVS];
  for (int i = 0; i < n; i++) {
    e[i].addr = (uint64_t)(uintptr_t)data[i];
    e[i].size = sizes[i];
    e[i].rkey = ((ib_mh_t *)mhandles[i])->mr->rkey;
    e[i].tag = tags != NULL ? tags[i] : 0;
    e[i].word = (k + 1) << 8 | (uint64_t)n;
  }
  g->seq = k;
  g->n = n;
  g->live = 1;
  g->pending = nq + 1; /* every QP's immediate and the CTS write */
  g->imm_size = 0;
  g->imm_left = nq;
  ib_req_t *q = &c->reqs[slot * IB_MAX_RECVS];
  q->state = REQ_BUSY;
  q->slot = slot;
  q->seq = k;
  q->size = 0;
  c->post_seq++;
  *request = q;
  /* The entries go out now, or with later ones (cts_flush). */
  if (c->cts_ahead <= 0) {
    int64_t a = brd_param_int(BRD_P_BRAID_IB_CTS_AHEAD);
    c->cts_ahead = a < 1 ? 1 : a > IB_NREQ ? IB_NREQ : (int)a;
  }
  return cts_flush(c, c->cts_ahead);
}

/* The receiver's flush QP: an RC QP connected to itself on the comm's
 * CQ, and the host word its reads land in (NCCL's loopback flush). */
static ncclResult_t flush_setup(ib_comm_t *c) {
  ib_dev_t *d = c->dev;
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof(ia));
  ia.send_cq = c->cq;
  ia.recv_cq = c->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = IB_NREQ;
  ia.cap.max_recv_wr = 1;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  c->flush_mr = ibv->reg_mr(d->pd, &c->flush_dummy, sizeof(c->flush_dummy),
                            IBV_ACCESS_LOCAL_WRITE);
  if (c->flush_mr == NULL) {
    WARN("NET/IB : registering the flush target on %s failed: %s", d->name, strerror(errno));
    return ncclSystemError;
  }
  c->flush_qp = ibv->create_qp(d->pd, &ia);
  if (c->flush_qp == NULL) {
    WARN("NET/IB : ibv_create_qp of the flush QP on %s failed: %s", d->name, strerror(errno));
    return ncclSystemError;
  }
  int rc = qp_to_init(d, c->flush_qp, IBV_ACCESS_REMOTE_READ);
  if (rc != 0) {
    WARN("NET/IB : the flush QP %u on %s:%d to INIT failed: %s", c->flush_qp->qp_num, d->name,
         d->port, strerror(rc));
    return ncclSystemError;
  }
  return qp_connect(c, c->flush_qp, c->flush_qp->qp_num, d->attr.lid, d->gid.raw,
                    (uint32_t)d->attr.active_mtu);
}

/* iflush, as NCCL: where the last non-empty buffer of a completed receive
 * is GPU memory that needs it (compute capability < 9.0, or
 * NCCL_NET_FORCE_FLUSH; never with NCCL_GDR_FLUSH_DISABLE), a signalled
 * RDMA read of 1 byte of it into a host word, over the loopback QP: its
 * completion means the NIC's earlier PCIe writes into the GPU are visible.
 * Otherwise *request is NULL: nothing to wait for. */
static ncclResult_t ib_iflush(void *recv_comm, int n, void **data, int *sizes, void **mhandles,
                              void **request) {
  ib_comm_t *c = recv_comm;
  *request = NULL;
  int last = -1;
  for (int i = 0; i < n; i++)
    if (sizes != NULL && sizes[i] > 0) last = i;
  if (last < 0 || mhandles == NULL || mhandles[last] == NULL) return ncclSuccess;
  ib_mh_t *mh = mhandles[last];
  if (mh->mem == IB_MEM_HOST || !mh->flush) return ncclSuccess;
  CHECK(comm_progress(c));
  if (c->flush_qp == NULL) {
    ncclResult_t res = flush_setup(c);
    if (res != ncclSuccess) return comm_fail(c, res, 1, "NET/IB : no flush QP on %s",
                                             c->dev->name);
  }
  int k = 0;
  while (k < IB_NREQ && c->freqs[k].state != REQ_FREE) k++;
  if (k == IB_NREQ) return ncclSuccess; /* every flush in flight: later */
  ib_req_t *q = &c->freqs[k];
  struct ibv_sge sge = {(uint64_t)(uintptr_t)&c->flush_dummy, 1, c->flush_mr->lkey};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = ((uint64_t)WR_FLUSH << 56) | (uint64_t)k;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_READ;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = (uint64_t)(uintptr_t)data[last];
  wr.wr.rdma.rkey = mh->mr->rkey;
  int rc = brd_ibv_post_send(c->flush_qp, &wr, &bad);
  if (rc != 0)
    return comm_fail(c, ncclSystemError, 0, "NET/IB : ibv_post_send of a flush on QP %u (%s) "
                     "failed: %s", c->flush_qp->qp_num, c->dev->name, strerror(rc));
  q->state = REQ_BUSY;
  q->pending = 1;
  *request = q;
  return ncclSuccess;
}

/* 1 when every completion of the request's group is in (a send's group
 * also posted). */
static int group_done(const ib_comm_t *c, const ib_grp_t *g) {
  return g->pending == 0 && (!c->is_send || g->posted);
}

static ncclResult_t ib_test(void *request, int *done, int *sizes) {
  ib_req_t *r = request;
  *done = 0;
  if (r == NULL || r->state != REQ_BUSY) {
    WARN("NET/IB : test called with a %s request", r == NULL ? "NULL" : "finished");
    return ncclInternalError;
  }
  ib_comm_t *c = r->comm;
  if (r->flush) {
    CHECK(comm_progress(c));
    if (r->pending > 0) return ncclSuccess;
    *done = 1;
    r->state = REQ_FREE;
    return ncclSuccess;
  }
  ib_grp_t *g = &c->grp[r->slot];
  /* Completions first: a request whose bytes moved is done even when the
   * connection failed right after it. */
  ncclResult_t pr = comm_progress(c);
  if (!group_done(c, g) && pr == ncclSuccess && c->state == ST_READY) {
    pr = check_peer_closed(c);
    /* Bytes that landed before the close count: look once more. */
    if (pr != ncclSuccess) (void)comm_poll(c);
  }
  if (!group_done(c, g)) return pr;
  *done = 1;
  if (sizes != NULL) {
    if (c->is_send) {
      sizes[0] = r->size > (size_t)INT_MAX ? INT_MAX : (int)r->size;
    } else if (g->n == 1) {
      sizes[0] = g->imm_size;
    } else {
      /* Written by the sender's last WRs, before their immediates. */
      const volatile int32_t *rec = &c->sizes[r->slot * IB_MAX_RECVS];
      for (int i = 0; i < g->n; i++) sizes[i] = rec[i];
    }
  }
  r->state = REQ_FREE;
  g->live--;
  return ncclSuccess;
}

/* The why member: the comm's WARN once it failed. The caller's thread is
 * the one that made the failing call (comms fail only inside calls). */
static size_t ib_why(void *comm, char *buf, size_t n) {
  ib_comm_t *c = comm;
  if (c == NULL || n == 0 || atomic_load(&c->error) == ncclSuccess) return 0;
  snprintf(buf, n, "%s", c->why);
  return strlen(buf);
}

static ncclResult_t ib_close(void *comm) {
  comm_destroy(comm);
  return ncclSuccess;
}

static ncclResult_t ib_close_listen(void *listen_comm) {
  ib_listen_t *l = listen_comm;
  if (l == NULL) return ncclSuccess;
  comm_destroy(l->pend);
  brd_sock_close(&l->sock);
  free(l);
  return ncclSuccess;
}


/* The poll_fd member: the completion channel's descriptor while a request
 * of comm waits for a completion, armed (ibv_req_notify_cq) after the
 * events already raised were taken, and the CQ looked at once more, since
 * a completion before the arming raises nothing: if that finds one,
 * BRD_NET_POLL_READY. -1 without a channel, before the connection is
 * ready, and while an isend waits for its clear-to-send, which the
 * receiver RDMA-writes into memory and which raises no event. */
static int ib_poll_fd(void *comm, short *events_out) {
  ib_comm_t *c = comm;
  *events_out = 0;
  if (c == NULL) return -1;
  if (atomic_load(&c->error) != ncclSuccess) return BRD_NET_POLL_READY; /* test reports it */
  if (c->chan == NULL || c->state != ST_READY || c->cts_wait) return -1;
  int waiting = 0;
  for (int i = 0; i < IB_NREQ && !waiting; i++)
    waiting = c->grp[i].pending > 0 || c->freqs[i].pending > 0;
  if (!waiting) return c->chan->fd;
  struct ibv_cq *cq;
  void *cq_ctx;
  while (ibv->get_cq_event(c->chan, &cq, &cq_ctx) == 0) ibv->ack_cq_events(cq, 1);
  if (brd_ibv_req_notify_cq(c->cq, 0) != 0) return -1;
  int got = 0;
  if (comm_poll_count(c, &got) != ncclSuccess || got > 0) return BRD_NET_POLL_READY;
  *events_out = POLLIN;
  return c->chan->fd;
}

/* See net_ib.h. */
const brd_net_ops_t brd_net_ib = {
    .name = "IB",
    .init = ib_init,
    .devices = ib_devices,
    .getProperties = ib_get_properties,
    .listen = ib_listen,
    .connect = ib_connect,
    .accept = ib_accept,
    .regMr = ib_reg_mr,
    .regMrDmaBuf = ib_reg_mr_dmabuf,
    .deregMr = ib_dereg_mr,
    .isend = ib_isend,
    .irecv = ib_irecv,
    .iflush = ib_iflush,
    .test = ib_test,
    .closeSend = ib_close,
    .closeRecv = ib_close,
    .closeListen = ib_close_listen,
    .getDeviceMr = NULL,
    .irecvConsumed = NULL,
    .makeVDevice = NULL,
    .finalize = ib_finalize,
    .setNetAttr = NULL,
    .why = ib_why,
    .poll_fd = ib_poll_fd,
};
