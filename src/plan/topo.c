/*
 * Braid host topology through hwloc (see topo.h): cores and NUMA nodes,
 * the NICs near a rank with NCCL's path types, and the XML dump.
 */
#include <ctype.h>
#include <errno.h>
#include <hwloc.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/check.h"
#include "base/param.h"
#include "plan/topo.h"
#include "transport/cudrv.h"
#include "transport/net.h"

static pthread_once_t topo_once = PTHREAD_ONCE_INIT;
static brd_topo_host_t topo_cached;

static int count_type(hwloc_topology_t t, hwloc_obj_type_t type) {
  int n = hwloc_get_nbobjs_by_type(t, type);
  return n > 0 ? n : 0;
}

static void topo_discover(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  brd_topo_host_t h = {.cores = online > 0 ? (int)online : 1,
                       .pus = online > 0 ? (int)online : 1,
                       .numa_nodes = 1};
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0) {
    INFO(BRD_SUBSYS_GRAPH, "hwloc could not start; assuming %d cores, one "
         "NUMA node", h.cores);
    topo_cached = h;
    return;
  }
  if (hwloc_topology_load(t) == 0) {
    int cores = count_type(t, HWLOC_OBJ_CORE);
    int pus = count_type(t, HWLOC_OBJ_PU);
    int numa = count_type(t, HWLOC_OBJ_NUMANODE);
    if (pus > 0) h.pus = pus;
    if (cores > 0) h.cores = cores;
    if (h.cores > h.pus) h.cores = h.pus;
    if (numa > 0) h.numa_nodes = numa;
  } else {
    INFO(BRD_SUBSYS_GRAPH, "hwloc could not load this host's topology; "
         "assuming %d cores, one NUMA node", h.cores);
  }
  hwloc_topology_destroy(t);
  INFO(BRD_SUBSYS_GRAPH, "Topology: %d cores, %d hardware threads, %d NUMA "
       "node(s)", h.cores, h.pus, h.numa_nodes);
  topo_cached = h;
}

void brd_topo_host(brd_topo_host_t *out) {
  pthread_once(&topo_once, topo_discover);
  *out = topo_cached;
}

/* ---- path types ---------------------------------------------------------- */

static const char *const path_names[BRD_TOPO_PATH_COUNT] = {
    [BRD_TOPO_PATH_LOC] = "LOC",   [BRD_TOPO_PATH_PIX] = "PIX",
    [BRD_TOPO_PATH_PXB] = "PXB",   [BRD_TOPO_PATH_PHB] = "PHB",
    [BRD_TOPO_PATH_NODE] = "NODE", [BRD_TOPO_PATH_SYS] = "SYS",
};

/* See topo.h. */
const char *brd_topo_path_name(brd_topo_path_t p) {
  return (unsigned)p < BRD_TOPO_PATH_COUNT ? path_names[p] : "?";
}

#define PCI_DEPTH_MAX 16
#define BDF_LEN 12 /* "DDDD:BB:DD.F" */

/* 1 when s[0..len) reads "DDDD:BB:DD.F" (hex digits). */
static int is_bdf(const char *s, size_t len) {
  if (len != BDF_LEN) return 0;
  for (size_t i = 0; i < len; i++) {
    char c = s[i];
    if (i == 4 || i == 7) {
      if (c != ':') return 0;
    } else if (i == 10) {
      if (c != '.') return 0;
    } else if (!isxdigit((unsigned char)c)) {
      return 0;
    }
  }
  return 1;
}

/* A PCI path cut into its root ("pciDDDD:BB") and the bus ids below it, up
 * to the first component that is neither (a "virtio2" or "net/eth0" tail). */
typedef struct {
  char root[16];
  int depth;
  const char *bdf[PCI_DEPTH_MAX]; /* into the caller's string, BDF_LEN each */
} pci_chain_t;

static int pci_chain(const char *path, pci_chain_t *c) {
  c->depth = 0;
  c->root[0] = '\0';
  if (path == NULL) return 0;
  for (const char *p = path; *p != '\0';) {
    while (*p == '/') p++;
    size_t len = strcspn(p, "/");
    if (len == 0) break;
    if (c->root[0] == '\0') {
      if (len > 3 && len < sizeof(c->root) && strncmp(p, "pci", 3) == 0) {
        memcpy(c->root, p, len);
        c->root[len] = '\0';
      }
    } else if (is_bdf(p, len) && c->depth < PCI_DEPTH_MAX) {
      c->bdf[c->depth++] = p;
    } else {
      break;
    }
    p += len;
  }
  return c->root[0] != '\0' && c->depth > 0;
}

/* See topo.h. */
brd_topo_path_t brd_topo_path_classify(const char *a_path, int a_numa,
                                       const char *b_path, int b_numa) {
  pci_chain_t a, b;
  int same_numa = a_numa < 0 || b_numa < 0 || a_numa == b_numa;
  int a_pci = pci_chain(a_path, &a), b_pci = pci_chain(b_path, &b);
  if (!a_pci || !b_pci) return same_numa ? BRD_TOPO_PATH_PHB : BRD_TOPO_PATH_SYS;
  if (strcmp(a.root, b.root) != 0) return same_numa ? BRD_TOPO_PATH_NODE : BRD_TOPO_PATH_SYS;
  int common = 0;
  while (common < a.depth && common < b.depth &&
         strncasecmp(a.bdf[common], b.bdf[common], BDF_LEN) == 0)
    common++;
  if (common == a.depth && common == b.depth) return BRD_TOPO_PATH_LOC;
  /* Under one root port at most: both hang off the host bridge. */
  if (common == 0) return BRD_TOPO_PATH_PHB;
  /* Below the last shared bridge a switch is two levels (its downstream
   * port, then the device or the next switch's upstream port); more than
   * that on either side crosses a second switch. */
  int ha = a.depth - common, hb = b.depth - common;
  return ha <= 2 && hb <= 2 ? BRD_TOPO_PATH_PIX : BRD_TOPO_PATH_PXB;
}

/* ---- discovery ----------------------------------------------------------- */

/* The first line of a small sysfs file, or "" (trailing newline cut). */
static void read_line(const char *path, char *buf, size_t size) {
  FILE *f = fopen(path, "re");
  buf[0] = '\0';
  if (f == NULL) return;
  if (fgets(buf, (int)size, f) == NULL) buf[0] = '\0';
  fclose(f);
  buf[strcspn(buf, "\n")] = '\0';
}

/* NUMA node of the PCI device at a sysfs path (the deepest bus id of it),
 * or -1. */
static int pci_numa(const char *path) {
  pci_chain_t c;
  char file[PATH_MAX], text[16];
  if (!pci_chain(path, &c)) return -1;
  const char *end = c.bdf[c.depth - 1] + BDF_LEN;
  snprintf(file, sizeof(file), "%.*s/numa_node", (int)(end - path), path);
  read_line(file, text, sizeof(text));
  if (text[0] == '\0') return -1;
  int n = atoi(text);
  return n >= 0 ? n : -1;
}

/* The deepest bus id of a sysfs path, lower-case, or "". */
static void pci_busid(const char *path, char out[16]) {
  pci_chain_t c;
  out[0] = '\0';
  if (!pci_chain(path, &c)) return;
  snprintf(out, 16, "%.*s", BDF_LEN, c.bdf[c.depth - 1]);
}

/* The sysfs path of a bus id ("0000:19:00.0", any case) or "". */
static void busid_path(const char *busid, char *out, size_t size) {
  char link[64], lower[16];
  size_t i;
  out[0] = '\0';
  for (i = 0; busid[i] != '\0' && i + 1 < sizeof(lower); i++)
    lower[i] = (char)tolower((unsigned char)busid[i]);
  lower[i] = '\0';
  snprintf(link, sizeof(link), "/sys/bus/pci/devices/%s", lower);
  char *real = realpath(link, NULL);
  if (real == NULL) return;
  snprintf(out, size, "%s", real);
  free(real);
}

static void copy_str(char *dst, size_t size, const char *src) {
  snprintf(dst, size, "%s", src != NULL ? src : "");
}

/* NUMA node and cpulist of this process, from hwloc (and sched_getcpu). */
static void cpu_discover(brd_topo_rank_t *r, hwloc_topology_t t, int loaded) {
  int cpu = sched_getcpu();
  r->numa = -1;
  r->numa_nodes = 1;
  r->cpu_affinity[0] = '\0';
  if (!loaded) return;
  int nn = hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE);
  if (nn > 0) r->numa_nodes = nn;
  for (int i = 0; i < nn; i++) {
    hwloc_obj_t node = hwloc_get_obj_by_type(t, HWLOC_OBJ_NUMANODE, (unsigned)i);
    if (node == NULL || node->cpuset == NULL) continue;
    if (cpu >= 0 && !hwloc_bitmap_isset(node->cpuset, (unsigned)cpu)) continue;
    r->numa = (int)node->os_index;
    hwloc_bitmap_list_snprintf(r->cpu_affinity, sizeof(r->cpu_affinity), node->cpuset);
    break;
  }
}

/* See topo.h. As NCCL's topology does: peermem, or DMA-BUF where the
 * communicator can use it. */
int brd_topo_nic_gdr(int ptr_support, int dmabuf_ok) {
  return (ptr_support & BRD_NET_PTR_CUDA) != 0 ||
         (dmabuf_ok && (ptr_support & BRD_NET_PTR_DMABUF) != 0);
}

/* Whether DMA-BUF is usable for r's GPU with net (NCCL's dmaBufSupport):
 * NCCL_DMABUF_ENABLE, the net registers DMA-BUF, and the CUDA device with
 * r's bus id exports it (brd_cudrv_dmabuf_supported). 0 in host mode and
 * in builds without CUDA. */
static int dmabuf_usable(const brd_topo_rank_t *r, const brd_net_ops_t *net) {
  if (!r->has_gpu || net->regMrDmaBuf == NULL || brd_param_int(BRD_P_DMABUF_ENABLE) == 0)
    return 0;
#if BRAID_CUDA
  unsigned dom, bus, dev, fn;
  if (sscanf(r->gpu_busid, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) return 0;
  const brd_cudrv_dmabuf_t *t = brd_cudrv_dmabuf();
  if (t->device_get == NULL || t->device_get_attribute == NULL) return 0;
  /* The ordinal of the GPU with that bus id (as this process numbers
   * its devices). */
  for (int ord = 0; ord < 256; ord++) {
    CUdevice d;
    int a_dom = -1, a_bus = -1, a_dev = -1;
    if (t->device_get(&d, ord) != CUDA_SUCCESS) break;
    if (t->device_get_attribute(&a_dom, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, d) != CUDA_SUCCESS ||
        t->device_get_attribute(&a_bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, d) != CUDA_SUCCESS ||
        t->device_get_attribute(&a_dev, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, d) != CUDA_SUCCESS)
      continue;
    if ((unsigned)a_dom == dom && (unsigned)a_bus == bus && (unsigned)a_dev == dev) {
      char why[256];
      int ok = brd_cudrv_dmabuf_supported(ord, why, sizeof(why));
      if (!ok) INFO(BRD_SUBSYS_GRAPH, "Topology: no DMA-BUF for GPU %s: %s", r->gpu_busid, why);
      return ok;
    }
  }
#endif
  return 0;
}

/* Adds the chosen net's devices. */
static void net_discover(brd_topo_rank_t *r, uint64_t host_hash) {
  char why[256] = "";
  const brd_net_ops_t *net = brd_net_get(why, sizeof(why));
  void *ctx = NULL;
  int ndev = 0;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  if (net == NULL) {
    INFO(BRD_SUBSYS_GRAPH, "Topology: no net to list NICs from (%s)", why);
    return;
  }
  copy_str(r->net_name, sizeof(r->net_name), net->name);
  if (net->init(&ctx, host_hash, &cfg, brd_net_log, NULL) != ncclSuccess) {
    INFO(BRD_SUBSYS_GRAPH, "Topology: net %s did not start; its NICs are not listed",
         net->name);
    return;
  }
  if (net->devices(&ndev) != ncclSuccess) ndev = 0;
  int dmabuf_ok = ndev > 0 && dmabuf_usable(r, net);
  for (int d = 0; d < ndev && r->nnics < BRD_TOPO_NICS_MAX; d++) {
    brd_net_props_t p;
    if (net->getProperties(d, &p) != ncclSuccess) continue;
    brd_topo_nic_t *n = &r->nics[r->nnics++];
    memset(n, 0, sizeof(*n));
    copy_str(n->name, sizeof(n->name), p.name);
    copy_str(n->pci_path, sizeof(n->pci_path), p.pciPath);
    pci_busid(n->pci_path, n->busid);
    n->numa = pci_numa(n->pci_path);
    n->dev = d;
    n->speed_mbps = p.speed;
    n->port = p.port;
    n->guid = p.guid;
    n->maxconn = p.maxComms;
    n->gdr = brd_topo_nic_gdr(p.ptrSupport, dmabuf_ok);
  }
  if (net->finalize != NULL) (void)net->finalize(ctx);
}

/* Adds the network and OpenFabrics devices hwloc sees on PCI that the net
 * did not list (same bus id). */
static void hwloc_nics(brd_topo_rank_t *r, hwloc_topology_t t) {
  for (hwloc_obj_t o = hwloc_get_next_osdev(t, NULL); o != NULL; o = hwloc_get_next_osdev(t, o)) {
    if (o->attr->osdev.type != HWLOC_OBJ_OSDEV_NETWORK &&
        o->attr->osdev.type != HWLOC_OBJ_OSDEV_OPENFABRICS)
      continue;
    hwloc_obj_t pci = o->parent;
    while (pci != NULL && pci->type != HWLOC_OBJ_PCI_DEVICE) pci = pci->parent;
    if (pci == NULL || r->nnics >= BRD_TOPO_NICS_MAX) continue;
    char busid[16];
    snprintf(busid, sizeof(busid), "%04x:%02x:%02x.%01x", pci->attr->pcidev.domain,
             pci->attr->pcidev.bus, pci->attr->pcidev.dev, pci->attr->pcidev.func);
    /* One PCI function holds both mlx5_0 (OpenFabrics) and its ib0 or
     * eth2 (network): list it once. */
    int known = 0;
    for (int i = 0; i < r->nnics && !known; i++)
      known = strcasecmp(r->nics[i].busid, busid) == 0 || strcmp(r->nics[i].name, o->name) == 0;
    if (known) continue;
    brd_topo_nic_t *n = &r->nics[r->nnics++];
    memset(n, 0, sizeof(*n));
    copy_str(n->name, sizeof(n->name), o->name);
    copy_str(n->busid, sizeof(n->busid), busid);
    busid_path(busid, n->pci_path, sizeof(n->pci_path));
    n->numa = pci_numa(n->pci_path);
    n->dev = -1;
    n->port = -1;
  }
}

/* See topo.h. */
void brd_topo_rank_discover(uint64_t host_hash, const char *gpu_busid, brd_topo_rank_t *out) {
  hwloc_topology_t t;
  int inited = hwloc_topology_init(&t) == 0, loaded = 0;
  memset(out, 0, sizeof(*out));
  out->host_hash = host_hash;
  if (inited) {
    (void)hwloc_topology_set_io_types_filter(t, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    loaded = hwloc_topology_load(t) == 0;
  }
  if (!loaded)
    INFO(BRD_SUBSYS_GRAPH, "Topology: hwloc could not load this host; NUMA and NICs "
         "come from sysfs and the net only");
  cpu_discover(out, t, loaded);
  if (gpu_busid != NULL && gpu_busid[0] != '\0') {
    out->has_gpu = 1;
    copy_str(out->gpu_busid, sizeof(out->gpu_busid), gpu_busid);
    busid_path(gpu_busid, out->gpu_pci_path, sizeof(out->gpu_pci_path));
    out->gpu_numa = pci_numa(out->gpu_pci_path);
  }
  net_discover(out, host_hash);
  if (loaded) hwloc_nics(out, t);
  if (inited) hwloc_topology_destroy(t);

  const char *from = out->has_gpu ? out->gpu_pci_path : NULL;
  int from_numa = out->has_gpu ? out->gpu_numa : out->numa;
  char where[64];
  if (out->has_gpu)
    snprintf(where, sizeof(where), "GPU %s", out->gpu_busid);
  else
    snprintf(where, sizeof(where), "the CPU of NUMA node %d (host mode: no GPU)", out->numa);
  for (int i = 0; i < out->nnics; i++) {
    brd_topo_nic_t *n = &out->nics[i];
    n->path = brd_topo_path_classify(from, from_numa, n->pci_path, n->numa);
    INFO(BRD_SUBSYS_GRAPH, "Topology: NIC %s (%s%s%s) is %s from %s", n->name,
         n->dev >= 0 ? "net " : "hwloc only", n->dev >= 0 ? out->net_name : "",
         n->busid[0] ? "" : ", virtual", brd_topo_path_name(n->path), where);
  }
}

/* See topo.h. */
int brd_topo_rank_nearest_nic(const brd_topo_rank_t *r) {
  int best = -1;
  for (int i = 0; i < r->nnics; i++) {
    const brd_topo_nic_t *n = &r->nics[i];
    if (best < 0 || (n->dev >= 0 && r->nics[best].dev < 0) ||
        ((n->dev >= 0) == (r->nics[best].dev >= 0) && n->path < r->nics[best].path))
      best = i;
  }
  return best;
}

/* ---- the XML dump -------------------------------------------------------- */

/* s with XML's five special characters escaped, into buf. */
static const char *xml_esc(const char *s, char *buf, size_t size) {
  size_t len = 0;
  for (; *s != '\0' && len + 7 < size; s++) {
    const char *rep = NULL;
    switch (*s) {
      case '&': rep = "&amp;"; break;
      case '<': rep = "&lt;"; break;
      case '>': rep = "&gt;"; break;
      case '"': rep = "&quot;"; break;
      case '\'': rep = "&apos;"; break;
      default: break;
    }
    if (rep != NULL) {
      memcpy(buf + len, rep, strlen(rep));
      len += strlen(rep);
    } else {
      buf[len++] = *s;
    }
  }
  buf[len] = '\0';
  return buf;
}

static void dump_nic(FILE *f, const brd_topo_rank_t *r, const brd_topo_nic_t *n,
                     const char *indent) {
  char e1[BRD_TOPO_STR_MAX * 2], e2[BRD_TOPO_STR_MAX * 2];
  fprintf(f, "%s<nic>\n", indent);
  fprintf(f, "%s  <net name=\"%s\" dev=\"%d\" speed=\"%d\" port=\"%d\" latency=\"0\" "
          "guid=\"0x%llx\" maxconn=\"%d\" gdr=\"%d\" numaid=\"%d\" pciPath=\"%s\" "
          "source=\"%s\">\n", indent, xml_esc(n->name, e1, sizeof(e1)), n->dev,
          n->speed_mbps, n->port, (unsigned long long)n->guid, n->maxconn, n->gdr, n->numa,
          xml_esc(n->pci_path, e2, sizeof(e2)), n->dev >= 0 ? r->net_name : "hwloc");
  fprintf(f, "%s    <path from=\"%s\" busid=\"%s\" type=\"%s\"/>\n", indent,
          r->has_gpu ? "gpu" : "cpu", r->has_gpu ? r->gpu_busid : "",
          brd_topo_path_name(n->path));
  fprintf(f, "%s  </net>\n%s</nic>\n", indent, indent);
}

/* See topo.h. */
ncclResult_t brd_topo_dump_write(const char *path, int rank, const brd_topo_rank_t *r,
                                 const brd_topo_host_ref_t *hosts, int nhosts) {
  char tmp[PATH_MAX];
  char e1[BRD_TOPO_STR_MAX * 2];
  if (snprintf(tmp, sizeof(tmp), "%s.tmp%ld", path, (long)getpid()) >= (int)sizeof(tmp)) {
    WARN("NCCL_TOPO_DUMP_FILE=%s: the path is too long; choose a shorter one", path);
    return ncclInvalidUsage;
  }
  FILE *f = fopen(tmp, "we");
  if (f == NULL) {
    WARN("NCCL_TOPO_DUMP_FILE=%s: cannot create %s: %s; point it at a writable "
         "directory", path, tmp, strerror(errno));
    return ncclSystemError;
  }
  fprintf(f, "<system version=\"1\" rank=\"%d\" host_hash=\"0x%llx\" nhosts=\"%d\">\n", rank,
          (unsigned long long)r->host_hash, nhosts);
  for (int h = 0; h < nhosts; h++)
    fprintf(f, "  <host hash=\"0x%llx\" nranks=\"%d\" first_rank=\"%d\"/>\n",
            (unsigned long long)hosts[h].hash, hosts[h].nranks, hosts[h].first_rank);
  fprintf(f, "  <cpu host_hash=\"0x%llx\" numaid=\"%d\" numa_nodes=\"%d\" affinity=\"%s\" "
          "mode=\"%s\">\n", (unsigned long long)r->host_hash, r->numa, r->numa_nodes,
          xml_esc(r->cpu_affinity, e1, sizeof(e1)), r->has_gpu ? "gpu" : "host");
  if (r->has_gpu) {
    fprintf(f, "    <pci busid=\"%s\" path=\"%s\" numaid=\"%d\">\n", r->gpu_busid,
            xml_esc(r->gpu_pci_path, e1, sizeof(e1)), r->gpu_numa);
    fprintf(f, "      <gpu rank=\"%d\" busid=\"%s\"/>\n    </pci>\n", rank, r->gpu_busid);
  } else {
    fprintf(f, "    <!-- host mode: no GPU; NIC paths start at this CPU -->\n");
  }
  for (int i = 0; i < r->nnics; i++) {
    const brd_topo_nic_t *n = &r->nics[i];
    if (n->busid[0] != '\0') {
      fprintf(f, "    <pci busid=\"%s\" path=\"%s\" numaid=\"%d\">\n", n->busid,
              xml_esc(n->pci_path, e1, sizeof(e1)), n->numa);
      dump_nic(f, r, n, "      ");
      fprintf(f, "    </pci>\n");
    } else {
      dump_nic(f, r, n, "    "); /* virtual: on the CPU, as NCCL places it */
    }
  }
  fprintf(f, "  </cpu>\n</system>\n");
  int bad = ferror(f);
  if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
    WARN("NCCL_TOPO_DUMP_FILE=%s: writing it failed: %s; check the disk and the "
         "directory's permissions", path, strerror(errno ? errno : EIO));
    unlink(tmp);
    return ncclSystemError;
  }
  INFO(BRD_SUBSYS_ENV | BRD_SUBSYS_GRAPH, "NCCL_TOPO_DUMP_FILE set by environment to %s",
       path);
  return ncclSuccess;
}
