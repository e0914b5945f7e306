/*
 * Braid: bootstrap sockets. Every socket is non-blocking; a blocking call is
 * a loop of one non-blocking attempt and a poll() of at most POLL_SLICE_MS,
 * so an abort flag is seen within that slice and a deadline is never
 * overshot by more than it.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/check.h"
#include "base/param.h"
#include "base/socket.h"

#define POLL_SLICE_MS 20
#define RETRY_FIRST_MS 5
#define RETRY_MAX_MS 100

/* See socket.h. */
/* See socket.h. */
int64_t brd_sock_deadline(int64_t seconds) {
  if (seconds <= 0) return brd_time_now_ns() + 1000000LL;
  if (seconds > (INT64_MAX / 2) / 1000000000LL) return INT64_MAX;
  return brd_time_now_ns() + seconds * 1000000000LL;
}

/* See socket.h. */
int brd_sock_aborted(const brd_sock_ctl_t *ctl) {
  for (int i = 0; i < 2; i++) {
    if (ctl->abort[i] != NULL &&
        atomic_load_explicit(ctl->abort[i], memory_order_acquire) != 0)
      return 1;
  }
  return 0;
}

/* See socket.h. */
socklen_t brd_sock_addr_len(const union brd_sock_addr *addr) {
  if (addr->sa.sa_family == AF_INET) return sizeof(struct sockaddr_in);
  if (addr->sa.sa_family == AF_INET6) return sizeof(struct sockaddr_in6);
  return 0;
}

/* See socket.h. */
int brd_sock_addr_port(const union brd_sock_addr *addr) {
  if (addr->sa.sa_family == AF_INET) return ntohs(addr->sin.sin_port);
  if (addr->sa.sa_family == AF_INET6) return ntohs(addr->sin6.sin6_port);
  return 0;
}

const char *brd_sock_addr_str(const union brd_sock_addr *addr, char *buf) {
  char host[INET6_ADDRSTRLEN + IF_NAMESIZE + 2], serv[8];
  socklen_t len = brd_sock_addr_len(addr);
  buf[0] = '\0';
  if (len == 0) return buf;
  if (getnameinfo(&addr->sa, len, host, sizeof(host), serv, sizeof(serv),
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return buf;
  snprintf(buf, BRD_SOCK_ADDR_STRLEN, "%s<%s>", host, serv);
  return buf;
}

/* Milliseconds to the deadline, capped at one poll slice; 0 when passed. */
static int slice_ms(const brd_sock_ctl_t *ctl) {
  int64_t left = ctl->deadline_ns - brd_time_now_ns();
  if (left <= 0) return 0;
  if (left >= (int64_t)POLL_SLICE_MS * 1000000LL) return POLL_SLICE_MS;
  return (int)((left + 999999) / 1000000);
}

/* what: "connect to", "send to", "receive from" (addr is the peer's) or
 * "accept a connection from" (addr is our listener's); t0_ns: when this
 * call began waiting. Quotes the limit the caller stated (ctl->limit_s and
 * the setting behind it), or, when it stated none, how long this call
 * waited: never a setting that did not govern this deadline. */
static ncclResult_t timed_out(const brd_sock_ctl_t *ctl, const char *what,
                              const union brd_sock_addr *addr, int64_t t0_ns) {
  char line[BRD_SOCK_ADDR_STRLEN], limit[96], fix[96];
  int local = strncmp(what, "accept", 6) == 0;
  if (ctl->limit_s > 0 && ctl->limit_name != NULL) {
    snprintf(limit, sizeof(limit), "%lld s (%s)", (long long)ctl->limit_s, ctl->limit_name);
    snprintf(fix, sizeof(fix), " (raise %s if it is only slow)", ctl->limit_name);
  } else if (ctl->limit_s > 0) {
    snprintf(limit, sizeof(limit), "%lld s (the caller's limit)", (long long)ctl->limit_s);
    fix[0] = '\0';
  } else {
    snprintf(limit, sizeof(limit), "%.1f s (the caller's deadline)",
             (double)(brd_time_now_ns() - t0_ns) / 1e9);
    fix[0] = '\0';
  }
  if (ctl->caller_reports)
    INFO(BRD_SUBSYS_BOOTSTRAP, "bootstrap: timed out after %s waiting to %s %s %s %s; "
         "the caller reports it", limit, what, ctl->who ? ctl->who : "peer",
         local ? "on" : "at", brd_sock_addr_str(addr, line));
  else
    WARN("bootstrap: timed out after %s waiting to %s %s %s %s; the peer may have "
         "died or be stuck%s", limit, what, ctl->who ? ctl->who : "peer",
         local ? "on" : "at", brd_sock_addr_str(addr, line), fix);
  return ncclRemoteError;
}

/* Checks abort and deadline between attempts (t0_ns: see timed_out). */
static ncclResult_t wait_check(const brd_sock_ctl_t *ctl, const char *what,
                               const union brd_sock_addr *addr, int64_t t0_ns) {
  if (brd_sock_aborted(ctl)) {
    INFO(BRD_SUBSYS_BOOTSTRAP, "bootstrap: abort requested while waiting to "
         "%s %s", what, ctl->who ? ctl->who : "peer");
    return ncclInternalError;
  }
  if (brd_time_now_ns() >= ctl->deadline_ns) return timed_out(ctl, what, addr, t0_ns);
  return ncclSuccess;
}

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
  }
}

/* Sleeps up to ms, in poll slices, stopping early on abort or deadline. */
static void backoff(const brd_sock_ctl_t *ctl, int ms) {
  while (ms > 0 && !brd_sock_aborted(ctl) && brd_time_now_ns() < ctl->deadline_ns) {
    int s = ms < POLL_SLICE_MS ? ms : POLL_SLICE_MS;
    sleep_ms(s);
    ms -= s;
  }
}

/* See socket.h. */
ncclResult_t brd_sock_addr_parse(const char *text, union brd_sock_addr *addr_out) {
  char host[NI_MAXHOST];
  const char *port_text;
  union brd_sock_addr addr;
  char *end;
  long port;

  memset(&addr, 0, sizeof(addr));
  if (text == NULL || text[0] == '\0') {
    WARN("bootstrap: empty address; use <ipv4>:<port>, [<ipv6>]:<port> or "
         "<hostname>:<port>");
    return ncclInvalidArgument;
  }
  if (text[0] == '[') {
    const char *close = strchr(text, ']');
    size_t len;
    if (close == NULL || close[1] != ':') goto bad;
    len = (size_t)(close - text - 1);
    if (len == 0 || len >= sizeof(host)) goto bad;
    memcpy(host, text + 1, len);
    host[len] = '\0';
    port_text = close + 2;
  } else {
    const char *colon = strrchr(text, ':');
    size_t len;
    if (colon == NULL || strchr(text, ':') != colon) goto bad;
    len = (size_t)(colon - text);
    if (len == 0 || len >= sizeof(host)) goto bad;
    memcpy(host, text, len);
    host[len] = '\0';
    port_text = colon + 1;
  }
  errno = 0;
  port = strtol(port_text, &end, 10);
  if (port_text[0] == '\0' || *end != '\0' || errno != 0 || port < 0 || port > 65535)
    goto bad;

  if (text[0] == '[') {
    char *scope = strchr(host, '%');
    if (scope != NULL) *scope++ = '\0';
    addr.sin6.sin6_family = AF_INET6;
    if (inet_pton(AF_INET6, host, &addr.sin6.sin6_addr) != 1) goto bad;
    addr.sin6.sin6_port = htons((uint16_t)port);
    if (scope != NULL) {
      addr.sin6.sin6_scope_id = if_nametoindex(scope);
      if (addr.sin6.sin6_scope_id == 0) {
        WARN("bootstrap: address '%s' names interface '%s', which does not "
             "exist here", text, scope);
        return ncclInvalidArgument;
      }
    }
  } else {
    struct addrinfo hints, *res = NULL;
    int rv;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rv = getaddrinfo(host, NULL, &hints, &res);
    if (rv != 0 || res == NULL) {
      WARN("bootstrap: cannot resolve '%s' in '%s': %s", host, text,
           gai_strerror(rv));
      if (res) freeaddrinfo(res);
      return ncclInvalidArgument;
    }
    if (res->ai_family == AF_INET) {
      memcpy(&addr.sin, res->ai_addr, sizeof(addr.sin));
      addr.sin.sin_port = htons((uint16_t)port);
    } else if (res->ai_family == AF_INET6) {
      memcpy(&addr.sin6, res->ai_addr, sizeof(addr.sin6));
      addr.sin6.sin6_port = htons((uint16_t)port);
      addr.sin6.sin6_flowinfo = 0;
      addr.sin6.sin6_scope_id = 0;
    } else {
      freeaddrinfo(res);
      goto bad;
    }
    freeaddrinfo(res);
  }
  *addr_out = addr;
  return ncclSuccess;
bad:
  WARN("bootstrap: cannot parse address '%s'; use <ipv4>:<port>, "
       "[<ipv6>]:<port> or <hostname>:<port>", text);
  return ncclInvalidArgument;
}

/* See socket.h. */
int brd_sock_ifname_match(const char *spec, const char *ifname) {
  int negate = 0, exact = 0, matched = 0;
  const char *p;
  if (spec == NULL || spec[0] == '\0') return 1;
  if (spec[0] == '^') {
    negate = 1;
    spec++;
  }
  if (spec[0] == '=') {
    exact = 1;
    spec++;
  }
  /* Entries may carry ":port" (NCCL accepts it for HCAs); a name has none. */
  p = spec;
  while (*p != '\0' && !matched) {
    size_t len = strcspn(p, ",");
    size_t name_len = strcspn(p, ",:");
    if (name_len > len) name_len = len;
    if (name_len > 0) {
      if (exact)
        matched = strlen(ifname) == name_len && strncmp(ifname, p, name_len) == 0;
      else
        matched = strncmp(ifname, p, name_len) == 0;
    }
    p += len;
    if (*p == ',') p++;
  }
  /* An empty list matches every name, so "^" alone matches none (NCCL). */
  if (spec[0] == '\0') matched = 1;
  return matched ^ negate;
}

static int same_subnet(const brd_sock_iface_t *iface, const union brd_sock_addr *remote) {
  int family = iface->addr.sa.sa_family;
  if (family != remote->sa.sa_family || iface->mask.sa.sa_family != family) return 0;
  if (family == AF_INET) {
    uint32_t m = iface->mask.sin.sin_addr.s_addr;
    return (iface->addr.sin.sin_addr.s_addr & m) == (remote->sin.sin_addr.s_addr & m);
  }
  for (int i = 0; i < 16; i++) {
    uint8_t m = iface->mask.sin6.sin6_addr.s6_addr[i];
    if ((iface->addr.sin6.sin6_addr.s6_addr[i] & m) !=
        (remote->sin6.sin6_addr.s6_addr[i] & m))
      return 0;
  }
  return iface->addr.sin6.sin6_scope_id == remote->sin6.sin6_scope_id;
}

static void select_step(const brd_sock_iface_t *all, int n_all, const char *spec,
                        int family, brd_sock_iface_t *out, int max, int *n) {
  for (int i = 0; i < n_all && *n < max; i++) {
    const brd_sock_iface_t *it = &all[i];
    int f = it->addr.sa.sa_family, dup = 0;
    if (f != AF_INET && f != AF_INET6) continue;
    if (!it->running) continue;
    if (family != AF_UNSPEC && f != family) continue;
    if (f == AF_INET6 && IN6_IS_ADDR_LOOPBACK(&it->addr.sin6.sin6_addr)) continue;
    if (!brd_sock_ifname_match(spec, it->name)) continue;
    for (int j = 0; j < *n; j++) dup |= strcmp(out[j].name, it->name) == 0;
    if (dup) continue;
    out[(*n)++] = *it;
  }
}

/* See socket.h. */
void brd_sock_ifaces_select(const brd_sock_iface_t *all, int n_all,
                            const char *spec, int family,
                            const union brd_sock_addr *comm_id_addr,
                            brd_sock_iface_t *out, int max, int *n_out) {
  int n = 0;
  if (spec != NULL) {
    select_step(all, n_all, spec, family, out, max, &n);
    *n_out = n;
    return;
  }
  select_step(all, n_all, "ib", family, out, max, &n);
  if (n == 0 && comm_id_addr != NULL) {
    for (int i = 0; i < n_all && n == 0 && max > 0; i++)
      if (same_subnet(&all[i], comm_id_addr)) out[n++] = all[i];
  }
  if (n == 0) select_step(all, n_all, "^docker,lo,virbr", family, out, max, &n);
  if (n == 0) select_step(all, n_all, "docker", family, out, max, &n);
  if (n == 0) select_step(all, n_all, "lo", family, out, max, &n);
  if (n == 0) select_step(all, n_all, "virbr", family, out, max, &n);
  *n_out = n;
}

/* See socket.h. */
ncclResult_t brd_sock_ifaces_list(brd_sock_iface_t **all_out, int *n_out) {
  struct ifaddrs *ifs = NULL, *it;
  brd_sock_iface_t *all = NULL;
  int n = 0, cap = 0;
  ncclResult_t res = ncclSuccess;

  if (getifaddrs(&ifs) != 0) {
    WARN("bootstrap: getifaddrs failed: %s", strerror(errno));
    return ncclSystemError;
  }
  for (it = ifs; it != NULL; it = it->ifa_next) {
    int f;
    if (it->ifa_addr == NULL) continue;
    f = it->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6) continue;
    cap++;
  }
  all = calloc(cap > 0 ? (size_t)cap : 1, sizeof(*all));
  if (all == NULL) {
    WARN("out of host memory listing %d network interfaces", cap);
    res = ncclSystemError;
    goto out_free_ifs;
  }
  for (it = ifs; it != NULL; it = it->ifa_next) {
    brd_sock_iface_t *e;
    size_t len;
    int f;
    if (it->ifa_addr == NULL) continue;
    f = it->ifa_addr->sa_family;
    if (f != AF_INET && f != AF_INET6) continue;
    e = &all[n++];
    snprintf(e->name, sizeof(e->name), "%s", it->ifa_name);
    len = f == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
    memcpy(&e->addr, it->ifa_addr, len);
    if (it->ifa_netmask != NULL && it->ifa_netmask->sa_family == f)
      memcpy(&e->mask, it->ifa_netmask, len);
    e->running = (it->ifa_flags & IFF_RUNNING) != 0;
  }
  *all_out = all;
  *n_out = n;
out_free_ifs:
  freeifaddrs(ifs);
  return res;
}

static pthread_mutex_t boot_iface_lock = PTHREAD_MUTEX_INITIALIZER;
static int boot_iface_done;
static union brd_sock_addr boot_iface_addr;
static char boot_iface_name[BRD_SOCK_IFNAME_LEN];

static ncclResult_t socket_family(int *family_out) {
  const char *env = brd_param_str(BRD_P_SOCKET_FAMILY);
  *family_out = AF_UNSPEC;
  if (env == NULL || env[0] == '\0') return ncclSuccess;
  INFO(BRD_SUBSYS_ENV, "NCCL_SOCKET_FAMILY set by environment to %s", env);
  if (strcmp(env, "AF_INET") == 0) {
    *family_out = AF_INET;
  } else if (strcmp(env, "AF_INET6") == 0) {
    *family_out = AF_INET6;
  } else {
    /* NCCL ignores other values; say so rather than guess. */
    INFO(BRD_SUBSYS_ENV, "NCCL_SOCKET_FAMILY=%s is neither AF_INET nor "
         "AF_INET6; using any family", env);
  }
  return ncclSuccess;
}

static ncclResult_t choose_boot_iface(union brd_sock_addr *addr_out, char *name_out) {
  brd_sock_iface_t *all = NULL, found[1];
  int n_all = 0, n = 0, family;
  const char *comm_id = brd_param_str(BRD_P_COMM_ID);
  const char *ifname = brd_param_str(BRD_P_SOCKET_IFNAME);
  ncclResult_t res;

  CHECK(socket_family(&family));
  CHECK(brd_sock_ifaces_list(&all, &n_all));
  if (comm_id != NULL && comm_id[0] != '\0') {
    union brd_sock_addr remote;
    INFO(BRD_SUBSYS_ENV, "NCCL_COMM_ID set by environment to %s", comm_id);
    CHECK_GOTO(brd_sock_addr_parse(comm_id, &remote), res, out_free);
    for (int i = 0; i < n_all && n == 0; i++)
      if (same_subnet(&all[i], &remote)) found[n++] = all[i];
    if (n == 0) {
      char line[BRD_SOCK_ADDR_STRLEN];
      WARN("bootstrap: no local interface is on the subnet of NCCL_COMM_ID=%s "
           "(%s); the rendezvous address must be reachable from this host",
           comm_id, brd_sock_addr_str(&remote, line));
      res = ncclSystemError;
      goto out_free;
    }
  } else {
    /* NCCL ignores a one-character spec ("^" or "="). */
    if (ifname != NULL && strlen(ifname) > 1) {
      INFO(BRD_SUBSYS_ENV, "NCCL_SOCKET_IFNAME set by environment to %s", ifname);
    } else {
      ifname = NULL;
    }
    brd_sock_ifaces_select(all, n_all, ifname, family, NULL, found, 1, &n);
    if (n == 0) {
      WARN("bootstrap: no usable network interface found (NCCL_SOCKET_IFNAME=%s, "
           "NCCL_SOCKET_FAMILY=%s); check that an interface is up and matches",
           ifname ? ifname : "unset",
           brd_param_str(BRD_P_SOCKET_FAMILY) ? brd_param_str(BRD_P_SOCKET_FAMILY) : "unset");
      res = ncclInvalidUsage;
      goto out_free;
    }
  }
  *addr_out = found[0].addr;
  if (addr_out->sa.sa_family == AF_INET) addr_out->sin.sin_port = 0;
  else addr_out->sin6.sin6_port = 0;
  snprintf(name_out, BRD_SOCK_IFNAME_LEN, "%s", found[0].name);
  res = ncclSuccess;
out_free:
  free(all);
  return res;
}

/* See socket.h. */
ncclResult_t brd_sock_boot_iface(union brd_sock_addr *addr_out,
                                 char name_out[BRD_SOCK_IFNAME_LEN]) {
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&boot_iface_lock);
  if (!boot_iface_done) {
    char line[BRD_SOCK_ADDR_STRLEN];
    CHECK_GOTO(choose_boot_iface(&boot_iface_addr, boot_iface_name), res, out_unlock);
    INFO(BRD_SUBSYS_BOOTSTRAP | BRD_SUBSYS_NET, "Bootstrap: Using %s:%s",
         boot_iface_name, brd_sock_addr_str(&boot_iface_addr, line));
    boot_iface_done = 1;
  }
  *addr_out = boot_iface_addr;
  snprintf(name_out, BRD_SOCK_IFNAME_LEN, "%s", boot_iface_name);
out_unlock:
  pthread_mutex_unlock(&boot_iface_lock);
  return res;
}

static ncclResult_t set_nodelay(int fd) {
  int one = 1;
  if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0) {
    WARN("bootstrap: setsockopt(TCP_NODELAY) failed: %s", strerror(errno));
    return ncclSystemError;
  }
  return ncclSuccess;
}

/* See socket.h. */
ncclResult_t brd_sock_listen(const union brd_sock_addr *local, struct brd_sock *sock_out) {
  union brd_sock_addr addr = *local;
  socklen_t len = brd_sock_addr_len(&addr);
  char line[BRD_SOCK_ADDR_STRLEN];
  ncclResult_t res = ncclSuccess;
  int fd;

  if (len == 0) {
    WARN("bootstrap: cannot listen on an address of family %d", addr.sa.sa_family);
    return ncclInternalError;
  }
  fd = socket(addr.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    WARN("bootstrap: socket() failed: %s", strerror(errno));
    return ncclSystemError;
  }
  if (brd_sock_addr_port(&addr) != 0) {
    int one = 1;
    SYS_CHECK_GOTO(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)),
                   "setsockopt(SO_REUSEADDR)", res, fail_close);
  }
  if (bind(fd, &addr.sa, len) != 0) {
    WARN("bootstrap: cannot bind to %s: %s%s", brd_sock_addr_str(&addr, line),
         strerror(errno),
         errno == EADDRINUSE ? " (another process holds the port; pick another "
                               "in NCCL_COMM_ID)" : "");
    res = ncclSystemError;
    goto fail_close;
  }
  SYS_CHECK_GOTO(getsockname(fd, &addr.sa, &len), "getsockname", res, fail_close);
  /* The kernel caps the backlog at net.core.somaxconn. */
  SYS_CHECK_GOTO(listen(fd, 16384), "listen", res, fail_close);
  sock_out->fd = fd;
  sock_out->addr = addr;
  return ncclSuccess;
fail_close:
  close(fd);
  return res;
}

/* Waits for events on one fd for at most one slice. */
static int poll_one(int fd, short events, const brd_sock_ctl_t *ctl) {
  struct pollfd pfd = {fd, events, 0};
  int ms = slice_ms(ctl);
  int rc = poll(&pfd, 1, ms);
  if (rc < 0 && errno != EINTR) return -1;
  return 0;
}

/* See socket.h. */
ncclResult_t brd_sock_connect(const union brd_sock_addr *to, int retry_refused,
                              const brd_sock_ctl_t *ctl, struct brd_sock *sock_out) {
  char line[BRD_SOCK_ADDR_STRLEN];
  socklen_t len = brd_sock_addr_len(to);
  int delay_ms = RETRY_FIRST_MS;
  int64_t t0 = brd_time_now_ns();
  ncclResult_t res;

  if (len == 0) {
    WARN("bootstrap: address of %s has family %d, neither IPv4 nor IPv6",
         ctl->who ? ctl->who : "peer", to->sa.sa_family);
    return ncclInternalError;
  }
  for (;;) {
    int fd, err = 0;
    CHECK(wait_check(ctl, "connect to", to, t0));
    fd = socket(to->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      WARN("bootstrap: socket() failed: %s", strerror(errno));
      return ncclSystemError;
    }
    if (connect(fd, &to->sa, len) != 0) err = errno;
    if (err == EINPROGRESS || err == EINTR) {
      socklen_t elen = sizeof(err);
      for (;;) {
        struct pollfd pfd = {fd, POLLOUT, 0};
        int rc;
        res = wait_check(ctl, "connect to", to, t0);
        if (res != ncclSuccess) {
          close(fd);
          return res;
        }
        rc = poll(&pfd, 1, slice_ms(ctl));
        if (rc > 0) break;
        if (rc < 0 && errno != EINTR) {
          err = errno;
          break;
        }
      }
      if (err == EINPROGRESS || err == EINTR) {
        err = 0;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0) err = errno;
      }
    }
    if (err == 0) {
      res = set_nodelay(fd);
      if (res != ncclSuccess) {
        close(fd);
        return res;
      }
      sock_out->fd = fd;
      sock_out->addr = *to;
      return ncclSuccess;
    }
    close(fd);
    CHECK(wait_check(ctl, "connect to", to, t0));
    if (err == ECONNREFUSED && !retry_refused) {
      WARN("bootstrap: connection to %s at %s refused: its process has exited "
           "or closed the communicator",
           ctl->who ? ctl->who : "peer", brd_sock_addr_str(to, line));
      return ncclRemoteError;
    }
    if (err != ECONNREFUSED && err != ETIMEDOUT && err != EHOSTUNREACH &&
        err != ENETUNREACH && err != EAGAIN && err != ECONNRESET &&
        err != ECONNABORTED && err != EADDRNOTAVAIL) {
      WARN("bootstrap: connect to %s at %s failed: %s",
           ctl->who ? ctl->who : "peer", brd_sock_addr_str(to, line), strerror(err));
      return ncclSystemError;
    }
    TRACE(BRD_SUBSYS_BOOTSTRAP, "connect to %s at %s: %s, retrying in %d ms",
          ctl->who ? ctl->who : "peer", brd_sock_addr_str(to, line),
          strerror(err), delay_ms);
    backoff(ctl, delay_ms);
    delay_ms = delay_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : delay_ms * 2;
  }
}

/* See socket.h. */
ncclResult_t brd_sock_accept_try(struct brd_sock *listener, struct brd_sock *sock_out,
                                 int *got_out) {
  *got_out = 0;
  for (;;) {
    union brd_sock_addr peer;
    socklen_t len = sizeof(peer);
    int fd;
    memset(&peer, 0, sizeof(peer));
    fd = accept4(listener->fd, &peer.sa, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) {
      ncclResult_t res = set_nodelay(fd);
      if (res != ncclSuccess) {
        close(fd);
        return res;
      }
      sock_out->fd = fd;
      sock_out->addr = peer;
      *got_out = 1;
      return ncclSuccess;
    }
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ncclSuccess;
    /* Errors of a connection that died in the queue are retried (accept(2)). */
    if (errno == EINTR || errno == ECONNABORTED || errno == EPROTO ||
        errno == ENETDOWN || errno == ENOPROTOOPT || errno == EHOSTDOWN ||
        errno == ENONET || errno == EHOSTUNREACH || errno == EOPNOTSUPP ||
        errno == ENETUNREACH)
      continue;
    {
      char line[BRD_SOCK_ADDR_STRLEN];
      WARN("bootstrap: accept on %s failed: %s%s",
           brd_sock_addr_str(&listener->addr, line), strerror(errno),
           errno == EMFILE ? " (raise the open-files limit, ulimit -n)" : "");
    }
    return ncclSystemError;
  }
}

/* See socket.h. */
int brd_sock_wait_readable(int fd, int ms) {
  struct pollfd pfd = {fd, POLLIN, 0};
  if (poll(&pfd, 1, ms) < 0 && errno != EINTR) return -1;
  return 0;
}

/* See socket.h. */
ncclResult_t brd_sock_accept(struct brd_sock *listener, const brd_sock_ctl_t *ctl,
                             struct brd_sock *sock_out) {
  int64_t t0 = brd_time_now_ns();
  for (;;) {
    int got;
    CHECK(brd_sock_accept_try(listener, sock_out, &got));
    if (got) return ncclSuccess;
    CHECK(wait_check(ctl, "accept a connection from", &listener->addr, t0));
    if (poll_one(listener->fd, POLLIN, ctl) != 0) {
      WARN("bootstrap: poll failed: %s", strerror(errno));
      return ncclSystemError;
    }
  }
}

/* See socket.h. */
void brd_sock_probe(const union brd_sock_addr *to, int timeout_ms, int *refused_out) {
  socklen_t len = brd_sock_addr_len(to);
  int fd, err = 0;
  *refused_out = 0;
  if (len == 0) return;
  fd = socket(to->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  if (connect(fd, &to->sa, len) != 0) err = errno;
  if (err == EINPROGRESS) {
    struct pollfd pfd = {fd, POLLOUT, 0};
    socklen_t elen = sizeof(err);
    err = 0;
    if (poll(&pfd, 1, timeout_ms) > 0 &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) != 0)
      err = 0;
  }
  *refused_out = err == ECONNREFUSED;
  close(fd);
}

/* One non-blocking step of op; sets *closed on an orderly close or reset. */
static ncclResult_t op_step(brd_sock_op_t *op, int *closed) {
  while (op->done < op->size) {
    ssize_t n;
    char *p = (char *)op->buf + op->done;
    if (op->is_send)
      n = send(op->sock->fd, p, op->size - op->done, MSG_NOSIGNAL | MSG_DONTWAIT);
    else
      n = recv(op->sock->fd, p, op->size - op->done, MSG_DONTWAIT);
    if (n > 0) {
      op->done += (size_t)n;
      continue;
    }
    if (n == 0 && !op->is_send) {
      *closed = 1;
      return ncclSuccess;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET || errno == ENOTCONN)) {
      *closed = 1;
      return ncclSuccess;
    }
    {
      char line[BRD_SOCK_ADDR_STRLEN];
      WARN("bootstrap: %s %s at %s failed: %s", op->is_send ? "send to" : "recv from",
           op->who ? op->who : "peer", brd_sock_addr_str(&op->sock->addr, line),
           strerror(errno));
    }
    return ncclRemoteError;
  }
  return ncclSuccess;
}

/* See socket.h. */
ncclResult_t brd_sock_multi(brd_sock_op_t *ops, int n, const brd_sock_ctl_t *ctl) {
  struct pollfd pfds[8];
  int64_t t0 = brd_time_now_ns();
  if (n > 8) {
    WARN("bootstrap: internal limit of 8 concurrent socket operations exceeded (%d)", n);
    return ncclInternalError;
  }
  for (;;) {
    int pending = 0, np = 0;
    for (int i = 0; i < n; i++) {
      int closed = 0;
      if (ops[i].done >= ops[i].size) continue;
      CHECK(op_step(&ops[i], &closed));
      if (closed && brd_sock_aborted(ctl)) {
        /* Peers of an aborting job close on us: report the abort. */
        INFO(BRD_SUBSYS_BOOTSTRAP, "bootstrap: abort requested; %s closed its "
             "connection meanwhile", ops[i].who ? ops[i].who : "peer");
        return ncclInternalError;
      }
      if (closed) {
        char line[BRD_SOCK_ADDR_STRLEN];
        WARN("bootstrap: connection to %s at %s was closed by the peer "
             "(%zu of %zu bytes %s); that process has probably exited or aborted",
             ops[i].who ? ops[i].who : "peer",
             brd_sock_addr_str(&ops[i].sock->addr, line), ops[i].done,
             ops[i].size, ops[i].is_send ? "sent" : "received");
        return ncclRemoteError;
      }
      if (ops[i].done < ops[i].size) {
        pfds[np].fd = ops[i].sock->fd;
        pfds[np].events = ops[i].is_send ? POLLOUT : POLLIN;
        pfds[np].revents = 0;
        np++;
        pending = i + 1;
      }
    }
    if (np == 0) return ncclSuccess;
    {
      brd_sock_ctl_t c = *ctl;
      if (c.who == NULL) c.who = ops[pending - 1].who;
      CHECK(wait_check(&c, ops[pending - 1].is_send ? "send to" : "receive from",
                       &ops[pending - 1].sock->addr, t0));
    }
    if (poll(pfds, (nfds_t)np, slice_ms(ctl)) < 0 && errno != EINTR) {
      WARN("bootstrap: poll failed: %s", strerror(errno));
      return ncclSystemError;
    }
  }
}

/* See socket.h. */
ncclResult_t brd_sock_send(struct brd_sock *sock, const void *buf, size_t size,
                           const brd_sock_ctl_t *ctl) {
  brd_sock_op_t op = {sock, 1, (void *)(uintptr_t)buf, size, 0, ctl->who};
  return brd_sock_multi(&op, 1, ctl);
}

/* See socket.h. */
ncclResult_t brd_sock_recv(struct brd_sock *sock, void *buf, size_t size,
                           const brd_sock_ctl_t *ctl) {
  brd_sock_op_t op = {sock, 0, buf, size, 0, ctl->who};
  return brd_sock_multi(&op, 1, ctl);
}

/* See socket.h. */
ncclResult_t brd_sock_try_recv(struct brd_sock *sock, void *buf, size_t size,
                               size_t *done_inout, int *closed_out) {
  brd_sock_op_t op = {sock, 0, buf, size, *done_inout, NULL};
  int closed = 0;
  CHECK(op_step(&op, &closed));
  *done_inout = op.done;
  *closed_out = closed;
  return ncclSuccess;
}

/* See socket.h. */
void brd_sock_close(struct brd_sock *sock) {
  if (sock == NULL || sock->fd < 0) return;
  /* shutdown() sends the FIN even when a forked child still holds the fd. */
  (void)shutdown(sock->fd, SHUT_RDWR);
  (void)close(sock->fd);
  sock->fd = -1;
}
