/*
 * Braid IPC: file descriptors and fixed-size requests between processes of
 * one host and one user, over abstract Unix sockets (ipc.c). Used by the
 * P2P transport (cuMem descriptors) and by core (host-memory ncclMemAlloc
 * blocks, the registration service).
 */
#ifndef BRD_TRANSPORT_IPC_H
#define BRD_TRANSPORT_IPC_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* Descriptor passing: a server hands a duplicate of one file descriptor to
 * every process of the same user that connects to the abstract Unix socket
 * "braid-ipc-<pid>-<serial>" (SCM_RIGHTS), from a thread of its own, until
 * destroyed. */
typedef struct brd_ipc_fdsrv brd_ipc_fdsrv_t;

/* Starts serving a duplicate of fd (the caller keeps fd). ncclSystemError
 * (WARN) when the socket or the thread cannot be made. Any thread. */
ncclResult_t brd_ipc_fdsrv_create(int fd, brd_ipc_fdsrv_t **srv_out);

/* The serial naming the server's socket (with this process's pid). */
uint32_t brd_ipc_fdsrv_serial(const brd_ipc_fdsrv_t *srv);

/* Stops the thread (within about 100 ms), closes the socket and the
 * duplicate. NULL is a no-op. Blocks until the thread has exited. */
void brd_ipc_fdsrv_destroy(brd_ipc_fdsrv_t *srv);

/* Writes the socket name for (pid, serial), without the leading NUL of the
 * abstract namespace, into buf (n bytes). */
void brd_ipc_sockname_format(uint32_t pid, uint32_t serial, char *buf, size_t n);

/* Connects to the server (pid, serial) and receives its descriptor into
 * *fd_out (close-on-exec; the caller closes it). Waits at most timeout_s
 * seconds and leaves early, with ncclSystemError and no WARN, when
 * *abort_flag (may be NULL) becomes non-zero. ncclRemoteError (WARN) when
 * nothing listens under that name (the creator exited or sealed its
 * segment), the deadline passes, or the server closes without a
 * descriptor; ncclSystemError (WARN) for a local socket failure. Blocks;
 * any thread. */
ncclResult_t brd_ipc_fd_fetch(uint32_t pid, uint32_t serial, double timeout_s,
                              _Atomic int *abort_flag, int *fd_out);

/* A request service: a thread answering fixed-size requests on the
 * abstract Unix socket "braid-ipc-<pid>-<serial>", one connection at a
 * time, from processes of the same user. fn(ctx, req, rep) fills the reply
 * (zeroed) for each request, on the service thread. */
typedef struct brd_ipc_svc brd_ipc_svc_t;
typedef void (*brd_ipc_svc_fn_t)(void *ctx, const void *req, void *rep);

/* Starts a service for requests of req_len bytes and replies of rep_len.
 * ncclSystemError (WARN) when the socket or the thread cannot be made.
 * Any thread. */
ncclResult_t brd_ipc_svc_create(size_t req_len, size_t rep_len, brd_ipc_svc_fn_t fn,
                                void *ctx, brd_ipc_svc_t **svc_out);

/* The serial naming the service's socket (with this process's pid). */
uint32_t brd_ipc_svc_serial(const brd_ipc_svc_t *svc);

/* Stops the thread at once (after the request it is answering), closes the
 * socket. NULL is a no-op. Blocks until the thread has exited. */
void brd_ipc_svc_destroy(brd_ipc_svc_t *svc);

/* Sends req to the service (pid, serial) and receives its reply into rep.
 * Waits at most timeout_s seconds; ncclSystemError without a WARN when
 * *abort_flag (may be NULL) becomes non-zero; ncclRemoteError (WARN) when
 * nothing listens under that name, the deadline passes or the connection
 * closes early; ncclSystemError (WARN) for a local socket failure.
 * Blocks; any thread. */
ncclResult_t brd_ipc_svc_call(uint32_t pid, uint32_t serial, const void *req,
                              size_t req_len, void *rep, size_t rep_len, double timeout_s,
                              _Atomic int *abort_flag);

#endif /* BRD_TRANSPORT_IPC_H */
