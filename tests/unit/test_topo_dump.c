/*
 * The NICs near a rank and NCCL_TOPO_DUMP_FILE (src/plan/topo.c): the path
 * type of hand-built PCI paths against NCCL's definitions; a dump written
 * in host mode, parsed back by a small XML reader here and compared with
 * what this test reads itself from /sys/class/net; the dump written by the
 * rank NCCL_TOPO_DUMP_FILE_RANK of a real communicator.
 */
#include <dirent.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "nccl.h"
#include "base/debug.h"
#include "base/param.h"
#include "plan/topo.h"

/* ---- path types ---- */

#define ROOT17 "/sys/devices/pci0000:17/0000:17:01.0"
/* A GPU behind a PCIe switch (18:00.0 up, 19:08.0 down) under root port 17:01.0. */
#define GPU ROOT17 "/0000:18:00.0/0000:19:08.0/0000:1a:00.0"

static void check_path(const char *a, int an, const char *b, int bn, brd_topo_path_t want) {
  brd_topo_path_t got = brd_topo_path_classify(a, an, b, bn);
  brd_topo_path_t back = brd_topo_path_classify(b, bn, a, an);
  if (got != want || back != want)
    fail_msg("%s (numa %d) to %s (numa %d): got %s / %s back, want %s", a ? a : "CPU", an,
             b ? b : "CPU", bn, brd_topo_path_name(got), brd_topo_path_name(back),
             brd_topo_path_name(want));
}

static void test_path_classify(void **state) {
  (void)state;
  /* The same switch's other downstream port: one switch crossed. */
  check_path(GPU, 0, ROOT17 "/0000:18:00.0/0000:19:10.0/0000:1b:00.0", 0, BRD_TOPO_PATH_PIX);
  /* Another function of the same device. */
  check_path(GPU, 0, ROOT17 "/0000:18:00.0/0000:19:08.0/0000:1a:00.1", 0, BRD_TOPO_PATH_PIX);
  /* A second switch below the first one's other port. */
  check_path(GPU, 0,
             ROOT17 "/0000:18:00.0/0000:19:00.0/0000:1c:00.0/0000:1d:04.0/0000:1e:00.0", 0,
             BRD_TOPO_PATH_PXB);
  /* Another root port of the same root complex. */
  check_path(GPU, 0, "/sys/devices/pci0000:17/0000:17:02.0/0000:20:00.0", 0, BRD_TOPO_PATH_PHB);
  /* Another root complex: same NUMA node, then the other socket. */
  check_path(GPU, 0, "/sys/devices/pci0000:3a/0000:3a:01.0/0000:3b:00.0", 0, BRD_TOPO_PATH_NODE);
  check_path(GPU, 0, "/sys/devices/pci0000:ae/0000:ae:01.0/0000:af:00.0", 1, BRD_TOPO_PATH_SYS);
  /* An unknown NUMA node does not make the path longer. */
  check_path(GPU, -1, "/sys/devices/pci0000:3a/0000:3a:01.0/0000:3b:00.0", 1, BRD_TOPO_PATH_NODE);
  /* The same device, named in another case and with a tail below it. */
  check_path(GPU, 0, ROOT17 "/0000:18:00.0/0000:19:08.0/0000:1A:00.0/net/eth4", 0,
             BRD_TOPO_PATH_LOC);
  /* Host mode: the CPU itself (no PCI path) to a NIC of its node / the other. */
  check_path(NULL, 0, GPU, 0, BRD_TOPO_PATH_PHB);
  check_path(NULL, 0, GPU, 1, BRD_TOPO_PATH_SYS);
  /* A virtual NIC hangs off the CPU. */
  check_path(NULL, 0, "/sys/devices/virtual/net/lo", -1, BRD_TOPO_PATH_PHB);
  check_path(GPU, 1, "", 0, BRD_TOPO_PATH_SYS);
  /* Garbage is not a PCI path. */
  check_path("/sys/devices/pci0000:17/zz:17:01.0", 0, GPU, 0, BRD_TOPO_PATH_PHB);
  assert_string_equal(brd_topo_path_name(BRD_TOPO_PATH_PXB), "PXB");
  assert_string_equal(brd_topo_path_name(BRD_TOPO_PATH_COUNT), "?");
}

/* ---- a minimal XML reader ---- */

#define ELEMS_MAX 256
#define ATTRS_MAX 16

typedef struct {
  char name[32];
  int depth;
  int parent;                  /* index, -1 for the root */
  int nattrs;
  char key[ATTRS_MAX][32];
  char val[ATTRS_MAX][PATH_MAX];
} elem_t;

typedef struct {
  int n;
  elem_t e[ELEMS_MAX];
} doc_t;

/* Parses text (elements, attributes in double quotes, comments); fails the
 * test on anything not well-formed: a close tag that does not match, an
 * element left open, text outside the root, a second root. */
static void xml_parse(const char *text, doc_t *d) {
  int stack[64], top = 0, roots = 0;
  const char *p = text;
  d->n = 0;
  while (*p != '\0') {
    if (*p != '<') {
      if (*p != ' ' && *p != '\n' && *p != '\t') fail_msg("text outside tags at \"%.20s\"", p);
      p++;
      continue;
    }
    if (strncmp(p, "<!--", 4) == 0) {
      const char *end = strstr(p, "-->");
      assert_non_null(end);
      p = end + 3;
      continue;
    }
    if (p[1] == '/') {
      size_t len = strcspn(p + 2, ">");
      assert_true(top > 0);
      elem_t *open = &d->e[stack[--top]];
      if (strlen(open->name) != len || strncmp(open->name, p + 2, len) != 0)
        fail_msg("</%.*s> closes <%s>", (int)len, p + 2, open->name);
      p += len + 3;
      continue;
    }
    assert_true(d->n < ELEMS_MAX);
    elem_t *e = &d->e[d->n];
    memset(e, 0, sizeof(*e));
    p++;
    size_t nlen = strcspn(p, " />");
    assert_true(nlen > 0 && nlen < sizeof(e->name));
    memcpy(e->name, p, nlen);
    p += nlen;
    e->depth = top;
    e->parent = top > 0 ? stack[top - 1] : -1;
    if (top == 0 && ++roots > 1) fail_msg("a second root <%s>", e->name);
    for (;;) {
      while (*p == ' ') p++;
      if (*p == '>' || (p[0] == '/' && p[1] == '>')) break;
      size_t klen = strcspn(p, "=");
      assert_true(klen > 0 && klen < 32 && p[klen] == '=' && p[klen + 1] == '"');
      assert_true(e->nattrs < ATTRS_MAX);
      memcpy(e->key[e->nattrs], p, klen);
      p += klen + 2;
      size_t vlen = strcspn(p, "\"");
      assert_true(p[vlen] == '"' && vlen < PATH_MAX);
      memcpy(e->val[e->nattrs], p, vlen);
      assert_null(memchr(p, '<', vlen));
      e->nattrs++;
      p += vlen + 1;
    }
    if (*p == '/') {
      p += 2;
    } else {
      assert_true(top < 64);
      stack[top++] = d->n;
      p++;
    }
    d->n++;
  }
  if (top != 0) fail_msg("<%s> never closed", d->e[stack[top - 1]].name);
  assert_int_equal(roots, 1);
}

static const char *attr(const elem_t *e, const char *key) {
  for (int i = 0; i < e->nattrs; i++)
    if (strcmp(e->key[i], key) == 0) return e->val[i];
  fail_msg("<%s> has no attribute %s", e->name, key);
  return NULL;
}

static int count(const doc_t *d, const char *name) {
  int n = 0;
  for (int i = 0; i < d->n; i++) n += strcmp(d->e[i].name, name) == 0;
  return n;
}

static const elem_t *find(const doc_t *d, const char *name, const char *key, const char *val) {
  for (int i = 0; i < d->n; i++) {
    if (strcmp(d->e[i].name, name) != 0) continue;
    if (key == NULL || strcmp(attr(&d->e[i], key), val) == 0) return &d->e[i];
  }
  return NULL;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return NULL;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  fclose(f);
  buf[n] = '\0';
  return buf;
}

/* ---- what this test reads itself ---- */

/* The first interface that is neither loopback nor virtual-only-by-name
 * ("lo", "docker", as the socket net skips), or "" when there is none. */
static void pick_iface(char *out, size_t size) {
  DIR *dir = opendir("/sys/class/net");
  struct dirent *de;
  out[0] = '\0';
  if (dir == NULL) return;
  while ((de = readdir(dir)) != NULL) {
    if (de->d_name[0] == '.' || strncmp(de->d_name, "lo", 2) == 0 ||
        strncmp(de->d_name, "docker", 6) == 0)
      continue;
    if ((out[0] == '\0' || strcmp(de->d_name, out) < 0) && strlen(de->d_name) < size)
      memcpy(out, de->d_name, strlen(de->d_name) + 1);
  }
  closedir(dir);
}

/* /sys/class/net/<if>/speed, or 10000 (NCCL's socket default) when the
 * kernel gives none. */
static int sys_speed(const char *ifname) {
  char path[256];
  int speed = -1;
  snprintf(path, sizeof(path), "/sys/class/net/%s/speed", ifname);
  FILE *f = fopen(path, "r");
  if (f != NULL) {
    if (fscanf(f, "%d", &speed) != 1) speed = -1;
    fclose(f);
  }
  return speed > 0 ? speed : 10000;
}

static int sys_numa_nodes(void) {
  DIR *dir = opendir("/sys/devices/system/node");
  struct dirent *de;
  int n = 0;
  if (dir == NULL) return 1;
  while ((de = readdir(dir)) != NULL)
    n += strncmp(de->d_name, "node", 4) == 0 && de->d_name[4] >= '0' && de->d_name[4] <= '9';
  closedir(dir);
  return n > 0 ? n : 1;
}

/* ---- the dump ---- */

static void test_dump_host_mode(void **state) {
  (void)state;
  char ifname[64], want_pci[PATH_MAX] = "", link[PATH_MAX], dir[] = "/tmp/test_topo_dump.XXXXXX";
  char file[PATH_MAX + 16], sel[80];
  pick_iface(ifname, sizeof(ifname));
  if (ifname[0] == '\0') {
    print_message("SKIP: no network interface other than loopback on this host\n");
    skip();
  }
  snprintf(sel, sizeof(sel), "=%s", ifname);
  setenv("NCCL_SOCKET_IFNAME", sel, 1);
  setenv("NCCL_NET", "Socket", 1);
  setenv("NCCL_NET_PLUGIN", "none", 1);
  brd_param_reload();
  snprintf(link, sizeof(link), "/sys/class/net/%s/device", ifname);
  char *real = realpath(link, NULL);
  if (real != NULL) {
    snprintf(want_pci, sizeof(want_pci), "%s", real);
    free(real);
  }

  brd_topo_rank_t *r = calloc(1, sizeof(*r));
  assert_non_null(r);
  brd_topo_rank_discover(0xabc123ull, NULL, r);
  assert_int_equal(r->has_gpu, 0);
  assert_string_equal(r->net_name, "Socket");
  int nearest = brd_topo_rank_nearest_nic(r);
  assert_true(nearest >= 0);
  assert_string_equal(r->nics[nearest].name, ifname);

  assert_non_null(mkdtemp(dir));
  snprintf(file, sizeof(file), "%s/topo.xml", dir);
  brd_topo_host_ref_t hosts[2] = {{0xabc123ull, 2, 0}, {0xdef456ull, 1, 2}};
  assert_int_equal(brd_topo_dump_write(file, 1, r, hosts, 2), ncclSuccess);
  free(r);

  static doc_t d;
  char *text = slurp(file);
  assert_non_null(text);
  xml_parse(text, &d);
  assert_string_equal(d.e[0].name, "system");
  assert_string_equal(attr(&d.e[0], "version"), "1");
  assert_string_equal(attr(&d.e[0], "rank"), "1");
  assert_int_equal(count(&d, "host"), 2);
  assert_string_equal(attr(find(&d, "host", "hash", "0xdef456"), "first_rank"), "2");
  assert_string_equal(attr(find(&d, "host", "hash", "0xabc123"), "nranks"), "2");
  assert_int_equal(count(&d, "cpu"), 1);
  const elem_t *cpu = find(&d, "cpu", NULL, NULL);
  assert_string_equal(attr(cpu, "mode"), "host");
  assert_string_equal(attr(cpu, "host_hash"), "0xabc123");
  assert_int_equal(count(&d, "gpu"), 0);
  assert_string_equal(attr(cpu, "numa_nodes"),
                      (snprintf(sel, sizeof(sel), "%d", sys_numa_nodes()), sel));

  const elem_t *net = find(&d, "net", "name", ifname);
  if (net == NULL) fail_msg("no <net name=\"%s\"> in\n%s", ifname, text);
  assert_string_equal(attr(net, "source"), "Socket");
  assert_string_equal(attr(net, "dev"), "0"); /* the only interface allowed */
  snprintf(sel, sizeof(sel), "%d", sys_speed(ifname));
  assert_string_equal(attr(net, "speed"), sel);
  assert_string_equal(attr(net, "pciPath"), want_pci);
  /* <nic> holds it; under <pci busid=...> when the device is on PCI. */
  const elem_t *nic = &d.e[net->parent];
  assert_string_equal(nic->name, "nic");
  const elem_t *above = &d.e[nic->parent];
  if (strstr(want_pci, "/pci") != NULL) {
    assert_string_equal(above->name, "pci");
    assert_non_null(strstr(want_pci, attr(above, "busid")));
  } else {
    assert_string_equal(above->name, "cpu");
  }
  /* Its path from the CPU: PHB on a host of one NUMA node. */
  const elem_t *path = NULL;
  for (int i = 0; i < d.n; i++)
    if (strcmp(d.e[i].name, "path") == 0 && &d.e[d.e[i].parent] == net) path = &d.e[i];
  assert_non_null(path);
  assert_string_equal(attr(path, "from"), "cpu");
  if (sys_numa_nodes() == 1)
    assert_string_equal(attr(path, "type"), "PHB");
  else
    assert_true(strcmp(attr(path, "type"), "PHB") == 0 || strcmp(attr(path, "type"), "SYS") == 0);

  unlink(file);
  rmdir(dir);
  unsetenv("NCCL_SOCKET_IFNAME");
  unsetenv("NCCL_NET");
  unsetenv("NCCL_NET_PLUGIN");
  brd_param_reload();
}

/* A file that cannot be written is refused with NCCL_TOPO_DUMP_FILE named. */
static void test_dump_unwritable(void **state) {
  (void)state;
  brd_topo_rank_t r;
  memset(&r, 0, sizeof(r));
  brd_topo_host_ref_t h = {1, 1, 0};
  brd_log_set_last_error("%s", "");
  assert_int_equal(brd_topo_dump_write("/nonexistent-dir/x/topo.xml", 0, &r, &h, 1),
                   ncclSystemError);
  assert_non_null(strstr(brd_log_last_error(), "NCCL_TOPO_DUMP_FILE"));
}

/* Through a real communicator: the rank NCCL_TOPO_DUMP_FILE_RANK writes,
 * with this host holding every rank; a rank beyond the communicator means
 * no file. */
static void test_dump_at_init(void **state) {
  (void)state;
  char dir[] = "/tmp/test_topo_dump.XXXXXX", file[PATH_MAX];
  ncclComm_t comms[3];
  int devs[3] = {0, 1, 2};
  assert_non_null(mkdtemp(dir));
  snprintf(file, sizeof(file), "%s/t.xml", dir);
  setenv("BRAID_DEVICE", "host", 1);
  setenv("NCCL_TOPO_DUMP_FILE", file, 1);
  setenv("NCCL_TOPO_DUMP_FILE_RANK", "2", 1);
  brd_param_reload();
  assert_int_equal(ncclCommInitAll(comms, 3, devs), ncclSuccess);
  for (int i = 0; i < 3; i++) ncclCommDestroy(comms[i]);
  static doc_t d;
  char *text = slurp(file);
  if (text == NULL) fail_msg("rank 2 wrote no %s", file);
  xml_parse(text, &d);
  assert_string_equal(attr(&d.e[0], "rank"), "2");
  assert_int_equal(count(&d, "host"), 1);
  assert_string_equal(attr(find(&d, "host", NULL, NULL), "nranks"), "3");
  unlink(file);

  setenv("NCCL_TOPO_DUMP_FILE_RANK", "7", 1);
  brd_param_reload();
  assert_int_equal(ncclCommInitAll(comms, 3, devs), ncclSuccess);
  for (int i = 0; i < 3; i++) ncclCommDestroy(comms[i]);
  assert_int_equal(access(file, F_OK), -1);
  rmdir(dir);
  unsetenv("NCCL_TOPO_DUMP_FILE");
  unsetenv("NCCL_TOPO_DUMP_FILE_RANK");
  brd_param_reload();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_path_classify),
      cmocka_unit_test(test_dump_host_mode),
      cmocka_unit_test(test_dump_unwritable),
      cmocka_unit_test(test_dump_at_init),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
