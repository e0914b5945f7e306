/*
 * Bootstrap sockets: NCCL_SOCKET_IFNAME matching and NCCL's default
 * interface order (against tables worked out by hand from NCCL's rules),
 * address parsing and printing, and transfers, deadlines, aborts and dead
 * peers on IPv4 and IPv6 loopback.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/debug.h"
#include "base/param.h"
#include "base/socket.h"

#define SEC 1000000000LL

/* A deadline ms from now with no limit stated, timeouts WARNed here. */
static brd_sock_ctl_t ctl_for(int64_t ms, _Atomic int *abort, const char *who) {
  brd_sock_ctl_t c = {.deadline_ns = brd_time_now_ns() + ms * 1000000LL,
                      .abort = {abort, NULL},
                      .who = who,
                      .limit_s = 0,
                      .limit_name = NULL,
                      .caller_reports = 0};
  return c;
}

static void expect_last_error(const char *needle) {
  const char *msg = brd_log_last_error();
  if (strstr(msg, needle) == NULL)
    fail_msg("last error \"%s\" does not mention \"%s\"", msg, needle);
}

/* ---- NCCL_SOCKET_IFNAME matching ------------------------------------- */

static void test_ifname_match(void **state) {
  (void)state;
  static const struct {
    const char *spec, *name;
    int want;
  } cases[] = {
      {NULL, "eth0", 1},      {"", "eth0", 1},          {"eth", "eth0", 1},
      {"eth", "ib0", 0},      {"^eth", "eth0", 0},      {"^eth", "ib0", 1},
      {"=eth0", "eth0", 1},   {"=eth0", "eth01", 0},    {"=eth", "eth0", 0},
      {"^=eth0", "eth0", 0},  {"^=eth0", "eth01", 1},   {"ib,eth", "eth3", 1},
      {"ib,eth", "lo", 0},    {"ib,,eth", "eth3", 1},   {"eth0:1234", "eth0", 1},
      {"^docker,lo,virbr", "lo", 0},                    {"^docker,lo,virbr", "enp1s0", 1},
      {"^docker,lo,virbr", "virbr0", 0},                {"^", "eth0", 0},
      {"e", "enp1s0", 1},     {"=enp1s0,eth0", "eth0", 1},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    int got = brd_sock_ifname_match(cases[i].spec, cases[i].name);
    if (got != cases[i].want)
      fail_msg("spec \"%s\" name \"%s\": got %d, want %d",
               cases[i].spec ? cases[i].spec : "(null)", cases[i].name, got,
               cases[i].want);
  }
}

static brd_sock_iface_t v4(const char *name, const char *ip, const char *mask, int up) {
  brd_sock_iface_t it;
  memset(&it, 0, sizeof(it));
  snprintf(it.name, sizeof(it.name), "%s", name);
  it.addr.sin.sin_family = AF_INET;
  inet_pton(AF_INET, ip, &it.addr.sin.sin_addr);
  it.mask.sin.sin_family = AF_INET;
  inet_pton(AF_INET, mask, &it.mask.sin.sin_addr);
  it.running = up;
  return it;
}

static brd_sock_iface_t v6(const char *name, const char *ip, int up) {
  brd_sock_iface_t it;
  memset(&it, 0, sizeof(it));
  snprintf(it.name, sizeof(it.name), "%s", name);
  it.addr.sin6.sin6_family = AF_INET6;
  inet_pton(AF_INET6, ip, &it.addr.sin6.sin6_addr);
  it.mask.sin6.sin6_family = AF_INET6;
  memset(&it.mask.sin6.sin6_addr, 0xff, 8);
  it.running = up;
  return it;
}

/* Names chosen from `all`, comma-joined, for comparison with a hand list. */
static void chosen(const brd_sock_iface_t *all, int n_all, const char *spec, int family,
                   const char *comm_id, char *out, size_t len) {
  brd_sock_iface_t got[BRD_SOCK_MAX_IFS];
  union brd_sock_addr id;
  int n = 0;
  if (comm_id) assert_int_equal(brd_sock_addr_parse(comm_id, &id), ncclSuccess);
  brd_sock_ifaces_select(all, n_all, spec, family, comm_id ? &id : NULL, got,
                         BRD_SOCK_MAX_IFS, &n);
  out[0] = '\0';
  for (int i = 0; i < n; i++) {
    char line[BRD_SOCK_ADDR_STRLEN];
    size_t off = strlen(out);
    snprintf(out + off, len - off, "%s%s=%s", i ? "," : "", got[i].name,
             brd_sock_addr_str(&got[i].addr, line));
  }
}

static void test_default_order(void **state) {
  (void)state;
  char got[512];
  /* getifaddrs order: loopback first, as on Linux. */
  brd_sock_iface_t all[] = {
      v4("lo", "127.0.0.1", "255.0.0.0", 1),
      v4("docker0", "172.17.0.1", "255.255.0.0", 1),
      v4("eth1", "192.168.7.3", "255.255.255.0", 1),
      v4("eth0", "10.1.0.5", "255.255.0.0", 1),
      v6("eth0", "fd00::5", 1),
      v4("ib0", "10.200.0.9", "255.255.0.0", 1),
      v4("virbr0", "192.168.122.1", "255.255.255.0", 1),
      v6("lo", "::1", 1),
      v4("eth2", "10.9.9.9", "255.0.0.0", 0),
  };
  int n = (int)(sizeof(all) / sizeof(all[0]));

  /* ib first, whatever else exists. */
  chosen(all, n, NULL, AF_UNSPEC, NULL, got, sizeof(got));
  assert_string_equal(got, "ib0=10.200.0.9<0>");
  /* Without ib: everything but docker, lo and virbr; one entry per name
   * (eth0's IPv4 address, listed first); eth2 is down. */
  chosen(all, 5, NULL, AF_UNSPEC, NULL, got, sizeof(got));
  assert_string_equal(got, "eth1=192.168.7.3<0>,eth0=10.1.0.5<0>");
  /* NCCL_COMM_ID's subnet wins over the plain order. */
  chosen(all, 5, NULL, AF_UNSPEC, "10.1.44.2:9999", got, sizeof(got));
  assert_string_equal(got, "eth0=10.1.0.5<0>");
  /* Family forced to IPv6. */
  chosen(all, 5, NULL, AF_INET6, NULL, got, sizeof(got));
  assert_string_equal(got, "eth0=fd00::5<0>");
  /* Only docker and loopback: docker before lo. */
  chosen(all, 2, NULL, AF_UNSPEC, NULL, got, sizeof(got));
  assert_string_equal(got, "docker0=172.17.0.1<0>");
  /* Only loopback: IPv4 lo; IPv6 loopback is never chosen. */
  {
    brd_sock_iface_t lo_only[] = {v6("lo", "::1", 1), v4("lo", "127.0.0.1", "255.0.0.0", 1)};
    chosen(lo_only, 2, NULL, AF_UNSPEC, NULL, got, sizeof(got));
    assert_string_equal(got, "lo=127.0.0.1<0>");
    chosen(lo_only, 1, NULL, AF_UNSPEC, NULL, got, sizeof(got));
    assert_string_equal(got, "");
  }
  /* virbr last of all. */
  chosen(&all[6], 1, NULL, AF_UNSPEC, NULL, got, sizeof(got));
  assert_string_equal(got, "virbr0=192.168.122.1<0>");
  /* A user spec replaces the order entirely. */
  chosen(all, n, "^ib,eth", AF_UNSPEC, NULL, got, sizeof(got));
  assert_string_equal(got, "lo=127.0.0.1<0>,docker0=172.17.0.1<0>,virbr0=192.168.122.1<0>");
  chosen(all, n, "=eth", AF_UNSPEC, NULL, got, sizeof(got));
  assert_string_equal(got, "");
  chosen(all, n, "eth2", AF_UNSPEC, NULL, got, sizeof(got));
  assert_string_equal(got, "");
}

/* ---- addresses --------------------------------------------------------- */

static void test_addr_parse(void **state) {
  (void)state;
  union brd_sock_addr a;
  char line[BRD_SOCK_ADDR_STRLEN];
  static const char *bad[] = {"1.2.3.4", "[::1]80", "[::1]:", "1.2.3.4:99999",
                              ":12", "127.0.0.1:12x", "fe80::1:80", "[]:5",
                              "[zz::1]:80", "", "127.0.0.1:-1"};

  assert_int_equal(brd_sock_addr_parse("127.0.0.1:1234", &a), ncclSuccess);
  assert_int_equal(a.sa.sa_family, AF_INET);
  assert_int_equal(brd_sock_addr_port(&a), 1234);
  assert_string_equal(brd_sock_addr_str(&a, line), "127.0.0.1<1234>");

  assert_int_equal(brd_sock_addr_parse("[::1]:4242", &a), ncclSuccess);
  assert_int_equal(a.sa.sa_family, AF_INET6);
  assert_int_equal(brd_sock_addr_port(&a), 4242);
  assert_string_equal(brd_sock_addr_str(&a, line), "::1<4242>");

  assert_int_equal(brd_sock_addr_parse("[fd00:1::7%lo]:9", &a), ncclSuccess);
  assert_int_not_equal(a.sin6.sin6_scope_id, 0);

  assert_int_equal(brd_sock_addr_parse("localhost:5", &a), ncclSuccess);
  assert_int_equal(brd_sock_addr_port(&a), 5);

  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    if (brd_sock_addr_parse(bad[i], &a) != ncclInvalidArgument)
      fail_msg("\"%s\" should be rejected", bad[i]);
  }
  assert_int_equal(brd_sock_addr_parse("[fd00::1%nosuchif0]:9", &a), ncclInvalidArgument);
  expect_last_error("nosuchif0");
}

/* ---- transfers --------------------------------------------------------- */

static int have_ipv6_loopback(void) {
  union brd_sock_addr a;
  struct brd_sock s;
  if (brd_sock_addr_parse("[::1]:0", &a) != ncclSuccess) return 0;
  if (brd_sock_listen(&a, &s) != ncclSuccess) return 0;
  brd_sock_close(&s);
  return 1;
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)((i * 131u + seed * 7u + (i >> 9)) | 1u);
}

/* Connects a pair over loopback of the given family. */
static void pair(const char *local, struct brd_sock *l, struct brd_sock *a, struct brd_sock *b) {
  union brd_sock_addr addr;
  brd_sock_ctl_t c = ctl_for(2000, NULL, "test peer");
  assert_int_equal(brd_sock_addr_parse(local, &addr), ncclSuccess);
  assert_int_equal(brd_sock_listen(&addr, l), ncclSuccess);
  assert_int_not_equal(brd_sock_addr_port(&l->addr), 0);
  assert_int_equal(brd_sock_connect(&l->addr, 0, &c, a), ncclSuccess);
  assert_int_equal(brd_sock_accept(l, &c, b), ncclSuccess);
}

/* Both sides send 3 MB (more than the socket buffers) at the same time:
 * only progressing both directions together completes. */
static void exchange(const char *local) {
  const size_t n = 3 * 1000 * 1000 + 7;
  unsigned char *s1 = malloc(n), *s2 = malloc(n), *r1 = malloc(n), *r2 = malloc(n);
  unsigned char *want1 = malloc(n), *want2 = malloc(n);
  struct brd_sock l, a, b;
  brd_sock_ctl_t c = ctl_for(10000, NULL, "test peer");
  pid_t pid;
  int status;

  assert_non_null(s1);
  assert_non_null(want2);
  fill(s1, n, 1);
  fill(s2, n, 2);
  memcpy(want1, s1, n);
  memcpy(want2, s2, n);
  pair(local, &l, &a, &b);
  pid = fork();
  assert_true(pid >= 0);
  if (pid == 0) {
    brd_sock_op_t ops[2] = {{&b, 1, s2, n, 0, "a"}, {&b, 0, r2, n, 0, "a"}};
    int ok = brd_sock_multi(ops, 2, &c) == ncclSuccess && memcmp(r2, want1, n) == 0;
    _exit(ok ? 0 : 1);
  }
  {
    brd_sock_op_t ops[2] = {{&a, 1, s1, n, 0, "b"}, {&a, 0, r1, n, 0, "b"}};
    assert_int_equal(brd_sock_multi(ops, 2, &c), ncclSuccess);
  }
  assert_memory_equal(r1, want2, n);
  assert_int_equal(waitpid(pid, &status, 0), pid);
  assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  brd_sock_close(&a);
  brd_sock_close(&b);
  brd_sock_close(&l);
  free(s1);
  free(s2);
  free(r1);
  free(r2);
  free(want1);
  free(want2);
}

static void test_exchange_ipv4(void **state) {
  (void)state;
  exchange("127.0.0.1:0");
}

static void test_exchange_ipv6(void **state) {
  (void)state;
  if (!have_ipv6_loopback()) {
    printf("SKIP: IPv6 loopback (::1) is not available on this machine\n");
    skip();
  }
  exchange("[::1]:0");
}

static void test_refused(void **state) {
  (void)state;
  union brd_sock_addr addr;
  struct brd_sock l, s;
  brd_sock_ctl_t c = ctl_for(2000, NULL, "rank 7");
  int64_t t0;
  assert_int_equal(brd_sock_addr_parse("127.0.0.1:0", &addr), ncclSuccess);
  assert_int_equal(brd_sock_listen(&addr, &l), ncclSuccess);
  addr = l.addr;
  brd_sock_close(&l);
  t0 = brd_time_now_ns();
  assert_int_equal(brd_sock_connect(&addr, 0, &c, &s), ncclRemoteError);
  assert_true(brd_time_now_ns() - t0 < SEC / 2);
  expect_last_error("rank 7");
  expect_last_error("refused");
}

struct late_listener {
  union brd_sock_addr addr;
  struct brd_sock l;
  int ok;
};

static void *listen_late(void *arg) {
  struct late_listener *ll = arg;
  struct timespec ts = {0, 200 * 1000000L};
  nanosleep(&ts, NULL);
  ll->ok = brd_sock_listen(&ll->addr, &ll->l) == ncclSuccess;
  return NULL;
}

static void test_retry_until_listener(void **state) {
  (void)state;
  struct late_listener ll;
  struct brd_sock l, s;
  pthread_t t;
  brd_sock_ctl_t c = ctl_for(3000, NULL, "the bootstrap root");
  assert_int_equal(brd_sock_addr_parse("127.0.0.1:0", &ll.addr), ncclSuccess);
  /* A port that was free a moment ago; SO_REUSEADDR lets the thread take it. */
  assert_int_equal(brd_sock_listen(&ll.addr, &l), ncclSuccess);
  ll.addr = l.addr;
  brd_sock_close(&l);
  assert_int_equal(pthread_create(&t, NULL, listen_late, &ll), 0);
  assert_int_equal(brd_sock_connect(&ll.addr, 1, &c, &s), ncclSuccess);
  pthread_join(t, NULL);
  assert_true(ll.ok);
  brd_sock_close(&s);
  brd_sock_close(&ll.l);
}

static void test_timeout_names_peer(void **state) {
  (void)state;
  struct brd_sock l, a, b;
  char buf[16];
  brd_sock_ctl_t c;
  int64_t t0;
  pair("127.0.0.1:0", &l, &a, &b);
  c = ctl_for(300, NULL, "rank 5");
  t0 = brd_time_now_ns();
  assert_int_equal(brd_sock_recv(&a, buf, sizeof(buf), &c), ncclRemoteError);
  assert_true(brd_time_now_ns() - t0 >= 290 * 1000000LL);
  assert_true(brd_time_now_ns() - t0 < SEC);
  expect_last_error("timed out");
  expect_last_error("rank 5");
  expect_last_error("127.0.0.1<");
  /* No limit stated: how long it waited, and no setting it did not use. */
  expect_last_error("(the caller's deadline)");
  if (strstr(brd_log_last_error(), "BRAID_BOOTSTRAP_TIMEOUT") != NULL)
    fail_msg("quotes a limit that did not apply: %s", brd_log_last_error());
  brd_sock_close(&a);
  brd_sock_close(&b);
  brd_sock_close(&l);
}

/* The message quotes the limit the caller stated and the setting behind
 * it, not BRAID_BOOTSTRAP_TIMEOUT (30 s here) that governs other waits. */
static void test_timeout_quotes_callers_limit(void **state) {
  (void)state;
  struct brd_sock l, a, b;
  char buf[16];
  brd_sock_ctl_t c;
  const char *msg;
  setenv("BRAID_BOOTSTRAP_TIMEOUT", "30", 1);
  brd_param_reload();
  pair("127.0.0.1:0", &l, &a, &b);
  c = ctl_for(1000, NULL, "rank 4");
  c.limit_s = 1;
  c.limit_name = "BRAID_TIMEOUT";
  assert_int_equal(brd_sock_recv(&a, buf, sizeof(buf), &c), ncclRemoteError);
  msg = brd_log_last_error();
  expect_last_error("timed out after 1 s (BRAID_TIMEOUT)");
  expect_last_error("raise BRAID_TIMEOUT");
  expect_last_error("rank 4");
  if (strstr(msg, "BRAID_BOOTSTRAP_TIMEOUT") != NULL || strstr(msg, "30 s") != NULL)
    fail_msg("quotes a limit that did not apply: %s", msg);
  /* A limit without a setting: the seconds, and no setting to raise. */
  c = ctl_for(1000, NULL, "rank 4");
  c.limit_s = 1;
  assert_int_equal(brd_sock_recv(&a, buf, sizeof(buf), &c), ncclRemoteError);
  msg = brd_log_last_error();
  expect_last_error("timed out after 1 s (the caller's limit)");
  if (strstr(msg, "raise") != NULL || strstr(msg, "BRAID_") != NULL)
    fail_msg("names a setting for a limit without one: %s", msg);
  unsetenv("BRAID_BOOTSTRAP_TIMEOUT");
  brd_param_reload();
  brd_sock_close(&a);
  brd_sock_close(&b);
  brd_sock_close(&l);
}

/* caller_reports: a timeout does not become the last error (the caller
 * WARNs it), but any other failure under the same ctl still does. */
static void test_caller_reports_timeout(void **state) {
  (void)state;
  struct brd_sock l, a, b;
  char buf[64];
  brd_sock_ctl_t c;
  int64_t t0;
  pair("127.0.0.1:0", &l, &a, &b);
  brd_log_set_last_error("caller's own message");
  c = ctl_for(200, NULL, "rank 6");
  c.limit_s = 1;
  c.limit_name = "BRAID_TIMEOUT";
  c.caller_reports = 1;
  t0 = brd_time_now_ns();
  assert_int_equal(brd_sock_recv(&a, buf, sizeof(buf), &c), ncclRemoteError);
  assert_true(brd_time_now_ns() - t0 >= 190 * 1000000LL);
  if (strcmp(brd_log_last_error(), "caller's own message") != 0)
    fail_msg("a timeout the caller reports became the last error: %s", brd_log_last_error());
  c = ctl_for(5000, NULL, "rank 6");
  c.caller_reports = 1;
  assert_int_equal(brd_sock_send(&b, "xy", 2, &c), ncclSuccess);
  brd_sock_close(&b);
  assert_int_equal(brd_sock_recv(&a, buf, sizeof(buf), &c), ncclRemoteError);
  expect_last_error("closed by the peer");
  expect_last_error("rank 6");
  brd_sock_close(&a);
  brd_sock_close(&l);
}

struct setter {
  _Atomic int *flag;
  int delay_ms;
};

static void *set_later(void *arg) {
  struct setter *s = arg;
  struct timespec ts = {0, s->delay_ms * 1000000L};
  nanosleep(&ts, NULL);
  atomic_store(s->flag, 1);
  return NULL;
}

static void test_abort_from_other_thread(void **state) {
  (void)state;
  struct brd_sock l, a, b, x;
  _Atomic int flag = 0;
  struct setter st = {&flag, 100};
  pthread_t t;
  char buf[4];
  brd_sock_ctl_t c;
  int64_t t0;
  pair("127.0.0.1:0", &l, &a, &b);
  c = ctl_for(10000, &flag, "rank 1");
  t0 = brd_time_now_ns();
  assert_int_equal(pthread_create(&t, NULL, set_later, &st), 0);
  assert_int_equal(brd_sock_recv(&a, buf, sizeof(buf), &c), ncclInternalError);
  assert_true(brd_time_now_ns() - t0 < SEC / 2);
  pthread_join(t, NULL);
  /* Accept waits poll the flag too (already set: returns at once). */
  assert_int_equal(brd_sock_accept(&l, &c, &x), ncclInternalError);
  brd_sock_close(&a);
  brd_sock_close(&b);
  brd_sock_close(&l);
}

static void test_peer_closed(void **state) {
  (void)state;
  struct brd_sock l, a, b;
  char buf[64];
  brd_sock_ctl_t c = ctl_for(5000, NULL, "rank 3");
  pair("127.0.0.1:0", &l, &a, &b);
  assert_int_equal(brd_sock_send(&b, "abc", 3, &c), ncclSuccess);
  brd_sock_close(&b);
  assert_int_equal(brd_sock_recv(&a, buf, sizeof(buf), &c), ncclRemoteError);
  expect_last_error("closed by the peer");
  expect_last_error("rank 3");
  expect_last_error("3 of 64 bytes");
  brd_sock_close(&a);
  brd_sock_close(&l);
}

static void test_probe(void **state) {
  (void)state;
  union brd_sock_addr addr;
  struct brd_sock l;
  int refused = -1;
  assert_int_equal(brd_sock_addr_parse("127.0.0.1:0", &addr), ncclSuccess);
  assert_int_equal(brd_sock_listen(&addr, &l), ncclSuccess);
  brd_sock_probe(&l.addr, 200, &refused);
  assert_int_equal(refused, 0);
  addr = l.addr;
  brd_sock_close(&l);
  brd_sock_probe(&addr, 200, &refused);
  assert_int_equal(refused, 1);
}

/* The bootstrap interface follows NCCL_SOCKET_IFNAME, NCCL_SOCKET_FAMILY
 * and NCCL_COMM_ID; the choice is cached per process, so each case runs in
 * a child. */
static int boot_iface_in_child(const char *ifname, const char *family, const char *comm_id,
                               const char *want_prefix, ncclResult_t want_res) {
  pid_t pid = fork();
  int status;
  if (pid == 0) {
    union brd_sock_addr a;
    char name[BRD_SOCK_IFNAME_LEN], line[BRD_SOCK_ADDR_STRLEN];
    ncclResult_t r;
    unsetenv("NCCL_SOCKET_IFNAME");
    unsetenv("NCCL_SOCKET_FAMILY");
    unsetenv("NCCL_COMM_ID");
    if (ifname) setenv("NCCL_SOCKET_IFNAME", ifname, 1);
    if (family) setenv("NCCL_SOCKET_FAMILY", family, 1);
    if (comm_id) setenv("NCCL_COMM_ID", comm_id, 1);
    brd_param_reload();
    r = brd_sock_boot_iface(&a, name);
    if (r != want_res) {
      fprintf(stderr, "boot iface: got %d, want %d\n", r, want_res);
      _exit(1);
    }
    if (r == ncclSuccess && strncmp(brd_sock_addr_str(&a, line), want_prefix,
                                    strlen(want_prefix)) != 0) {
      fprintf(stderr, "boot iface: got %s:%s, want %s...\n", name, line, want_prefix);
      _exit(1);
    }
    _exit(0);
  }
  if (waitpid(pid, &status, 0) != pid) return 0;
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void test_boot_iface_env(void **state) {
  (void)state;
  assert_true(boot_iface_in_child("=lo", NULL, NULL, "127.0.0.1<0>", ncclSuccess));
  assert_true(boot_iface_in_child("lo", "AF_INET", NULL, "127.0.0.1<0>", ncclSuccess));
  assert_true(boot_iface_in_child("=nosuchif9", NULL, NULL, "", ncclInvalidUsage));
  assert_true(boot_iface_in_child(NULL, NULL, "127.0.0.1:4000", "127.0.0.1<0>", ncclSuccess));
  assert_true(boot_iface_in_child(NULL, NULL, "not-an-address", "", ncclInvalidArgument));
  if (have_ipv6_loopback())
    assert_true(boot_iface_in_child(NULL, NULL, "[::1]:4000", "::1<0>", ncclSuccess));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ifname_match),
      cmocka_unit_test(test_default_order),
      cmocka_unit_test(test_addr_parse),
      cmocka_unit_test(test_boot_iface_env),
      cmocka_unit_test(test_exchange_ipv4),
      cmocka_unit_test(test_exchange_ipv6),
      cmocka_unit_test(test_refused),
      cmocka_unit_test(test_retry_until_listener),
      cmocka_unit_test(test_timeout_names_peer),
      cmocka_unit_test(test_timeout_quotes_callers_limit),
      cmocka_unit_test(test_caller_reports_timeout),
      cmocka_unit_test(test_abort_from_other_thread),
      cmocka_unit_test(test_peer_closed),
      cmocka_unit_test(test_probe),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
