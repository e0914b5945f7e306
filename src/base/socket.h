/*
 * Braid: TCP sockets for the bootstrap (IPv4 and IPv6), interface choice by
 * NCCL_SOCKET_IFNAME / NCCL_SOCKET_FAMILY / NCCL_COMM_ID, and waits that
 * always end: every blocking call takes a brd_sock_ctl_t with a deadline and
 * up to two abort flags, polls in short slices, and names the peer (rank and
 * address) when it gives up.
 *
 * All sockets are non-blocking and close-on-exec. Nothing here keeps global
 * state except the cached bootstrap interface (brd_sock_boot_iface).
 */
#ifndef BRD_CORE_SOCKET_H
#define BRD_CORE_SOCKET_H

#include <netinet/in.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "nccl.h"
#include "base/time.h"

/* An IPv4 or IPv6 address; the layout NCCL stores in its unique id. */
union brd_sock_addr {
  struct sockaddr sa;
  struct sockaddr_in sin;
  struct sockaddr_in6 sin6;
};

/* Longest text brd_sock_addr_str writes: numeric IPv6, %scope, <port>. */
#define BRD_SOCK_ADDR_STRLEN 96
#define BRD_SOCK_IFNAME_LEN 16 /* IFNAMSIZ */
#define BRD_SOCK_MAX_IFS 16

/* One candidate interface: name, first address, and whether it is up. */
typedef struct {
  char name[BRD_SOCK_IFNAME_LEN];
  union brd_sock_addr addr;
  union brd_sock_addr mask;   /* netmask of addr, for subnet matching */
  int running;                /* IFF_RUNNING */
} brd_sock_iface_t;

/* How long a blocking call may wait and what may interrupt it. `who` names
 * the other side in messages ("rank 3", "the bootstrap root"); it and
 * `limit_name` are borrowed for the call. Every initialiser sets every
 * field (designated initialisers).
 *
 * When the deadline passes, the message quotes limit_s and limit_name, the
 * limit the caller chose and the setting behind it; limit_s 0 quotes how
 * long the call waited instead, naming no setting. With caller_reports
 * set, that timeout is logged at INFO, not WARNed: the caller WARNs the
 * cause itself (brd_boot_allgather_timed names the ranks never heard
 * from) or counts it as no error (the root's best-effort replies), and a
 * socket-layer WARN from one rank thread could otherwise be the process's
 * last error when another thread reads it. Every other failure still
 * WARNs. */
typedef struct {
  int64_t deadline_ns;        /* brd_time_now_ns() clock; INT64_MAX: none */
  _Atomic int *abort[2];      /* either one non-zero ends the wait; may be NULL */
  const char *who;
  int64_t limit_s;            /* seconds deadline_ns stands for; 0: not stated */
  const char *limit_name;     /* setting behind limit_s ("BRAID_TIMEOUT"); may be NULL */
  int caller_reports;         /* 1: a timeout is INFO here, the caller WARNs it */
} brd_sock_ctl_t;

/* A connected or listening socket. fd is -1 when closed. */
struct brd_sock {
  int fd;
  union brd_sock_addr addr;   /* peer (connected) or local (listening) */
};

/* Deadlines below are on brd_time_now_ns() (base/time.h). */

/* Deadline `seconds` from now (seconds <= 0 means 1 ms: expire at once). */
int64_t brd_sock_deadline(int64_t seconds);

/* True when either abort flag of ctl is set. */
int brd_sock_aborted(const brd_sock_ctl_t *ctl);

/* Writes "address<port>" (numeric) into buf, which must hold
 * BRD_SOCK_ADDR_STRLEN bytes; an unknown family gives "". Returns buf. */
const char *brd_sock_addr_str(const union brd_sock_addr *addr, char *buf);

/* Size of the sockaddr inside addr for its family (0 if neither family). */
socklen_t brd_sock_addr_len(const union brd_sock_addr *addr);

/* Port of addr in host order. */
int brd_sock_addr_port(const union brd_sock_addr *addr);

/* Parses "<ipv4 or hostname>:<port>", "[<ipv6>]:<port>" or
 * "[<ipv6>%<ifname>]:<port>" into addr_out. Bad text: ncclInvalidArgument
 * with a WARN quoting it. Resolves host names (may block on DNS). */
ncclResult_t brd_sock_addr_parse(const char *text, union brd_sock_addr *addr_out);

/* NCCL_SOCKET_IFNAME matching for one interface name: `spec` is a comma
 * list of prefixes, "^" in front excludes instead, "=" (after any "^") asks
 * for exact names. NULL or "" matches everything. Pure function. */
int brd_sock_ifname_match(const char *spec, const char *ifname);

/* Picks interfaces from `all` (n_all entries, in getifaddrs order) with
 * NCCL's rules: only running ones, only `family` unless it is AF_UNSPEC,
 * never IPv6 loopback, one entry per name (the first address).
 * spec != NULL: that spec alone. spec == NULL: NCCL's default order, the
 * first step that finds anything wins: "ib" prefixes; then (when
 * comm_id_addr is not NULL) the interface on comm_id_addr's subnet; then
 * anything but docker, lo and virbr; then docker; then lo; then virbr.
 * Writes at most max entries to out and their number to n_out. Pure. */
void brd_sock_ifaces_select(const brd_sock_iface_t *all, int n_all,
                            const char *spec, int family,
                            const union brd_sock_addr *comm_id_addr,
                            brd_sock_iface_t *out, int max, int *n_out);

/* Lists the machine's interfaces (getifaddrs) into a calloc'ed array the
 * caller frees. ncclSystemError when getifaddrs fails. */
ncclResult_t brd_sock_ifaces_list(brd_sock_iface_t **all_out, int *n_out);

/* The interface and address every bootstrap socket of this process binds
 * to, chosen once: with NCCL_COMM_ID, the interface on its subnet; else
 * brd_sock_ifaces_select with NCCL_SOCKET_IFNAME and NCCL_SOCKET_FAMILY.
 * Logs the choice at INFO (BOOTSTRAP|NET). The port of addr_out is 0.
 * ncclInvalidArgument for a malformed NCCL_COMM_ID, ncclSystemError when
 * no interface is on NCCL_COMM_ID's subnet, ncclInvalidUsage when no
 * interface matches at all (NCCL's codes). Any thread. */
ncclResult_t brd_sock_boot_iface(union brd_sock_addr *addr_out,
                                 char name_out[BRD_SOCK_IFNAME_LEN]);

/* Opens a listening socket bound to local (port 0: any). With a non-zero
 * port, SO_REUSEADDR is set so a rendezvous port can be reused at once.
 * sock_out->addr gets the bound address. Does not block. */
ncclResult_t brd_sock_listen(const union brd_sock_addr *local,
                             struct brd_sock *sock_out);

/* Connects to `to`. A refused connection is retried with backoff until the
 * deadline when retry_refused is set (a root that may not be up yet), and is
 * ncclRemoteError at once otherwise (a peer whose listener is gone).
 * Blocks until connected, the deadline (ncclRemoteError) or an abort
 * (ncclInternalError, no WARN). */
ncclResult_t brd_sock_connect(const union brd_sock_addr *to, int retry_refused,
                              const brd_sock_ctl_t *ctl, struct brd_sock *sock_out);

/* Accepts one connection on listener. Blocks like brd_sock_connect. */
ncclResult_t brd_sock_accept(struct brd_sock *listener, const brd_sock_ctl_t *ctl,
                             struct brd_sock *sock_out);

/* Accepts one queued connection if there is one (*got_out = 1, sock_out
 * filled), else *got_out = 0. Never blocks. */
ncclResult_t brd_sock_accept_try(struct brd_sock *listener, struct brd_sock *sock_out,
                                 int *got_out);

/* Liveness check: connects to `to` for at most timeout_ms and closes at
 * once. *refused_out = 1 when nothing listens there any more (the process
 * exited or closed its listener); 0 when it connected or the outcome is
 * unknown. Quiet: never WARNs. */
void brd_sock_probe(const union brd_sock_addr *to, int timeout_ms, int *refused_out);

/* Waits up to ms for fd to become readable (or hung up). 0 on success or
 * timeout, -1 when poll fails. */
int brd_sock_wait_readable(int fd, int ms);

/* Sends/receives exactly size bytes. A closed or reset connection is
 * ncclRemoteError naming ctl->who and the address. Blocks like
 * brd_sock_connect. */
ncclResult_t brd_sock_send(struct brd_sock *sock, const void *buf, size_t size,
                           const brd_sock_ctl_t *ctl);
ncclResult_t brd_sock_recv(struct brd_sock *sock, void *buf, size_t size,
                           const brd_sock_ctl_t *ctl);

/* One transfer of a brd_sock_multi batch. */
typedef struct {
  struct brd_sock *sock;
  int is_send;
  void *buf;
  size_t size;
  size_t done;                /* progress; set to 0 by the caller */
  const char *who;            /* peer named in messages */
} brd_sock_op_t;

/* Progresses all ops together (so two ranks exchanging both ways never wait
 * on each other) until every one is complete. Blocks like brd_sock_connect. */
ncclResult_t brd_sock_multi(brd_sock_op_t *ops, int n, const brd_sock_ctl_t *ctl);

/* Reads whatever is available without waiting; sets *closed_out when the
 * peer has closed. Used to watch held connections. */
ncclResult_t brd_sock_try_recv(struct brd_sock *sock, void *buf, size_t size,
                               size_t *done_inout, int *closed_out);

/* Closes the socket (fd becomes -1). NULL or closed: no-op. Never blocks. */
void brd_sock_close(struct brd_sock *sock);

#endif /* BRD_CORE_SOCKET_H */
