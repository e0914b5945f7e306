/*
 * Braid: external net plugins (ncclNetPlugin_v6 .. v12) adapted to the
 * net interface, brd_net_ops_t (net.h). brd_net_get uses these to pick the
 * process's net; tests use them to load several plugins in one process.
 *
 * Each loaded plugin owns one of a few adapter slots, whose table calls
 * the plugin with its own version's arguments: refcounted init for v6 ..
 * v10 (the plugin's own init runs once per load), a ncclNetCommConfig_v10_t
 * as v10's connect config, property structs converted per version, int
 * sizes (1 GiB cap) for v6 .. v8 transfers. The plugin's function pointers
 * are read only after its init returned (some plugins fill them in init).
 */
#ifndef BRD_TRANSPORT_NET_PLUGIN_H
#define BRD_TRANSPORT_NET_PLUGIN_H

#include <limits.h>

#include "transport/net.h"

/* Adapter slots: plugins loaded at once in one process. */
#define BRD_NET_PLUGIN_SLOTS 8

typedef struct brd_net_plugin brd_net_plugin_t;

/* Opens one plugin library by NCCL's rules: spec NULL or "" means
 * libnccl-net.so; otherwise spec as given (a file name searched like any
 * dlopen, or a path), then, for a bare name that is not lib*.so,
 * libnccl-net-<spec>.so; "STATIC_PLUGIN" searches the executable. Takes
 * the newest ncclNetPlugin_vN (N = 12 .. 6) and notes the newest
 * ncclCollNetPlugin_vN. Does not call the plugin's init. On success
 * *out holds the adapter (unload with brd_net_plugin_unload). Errors,
 * each WARNed with the dlerror text and what to do: ncclSystemError when
 * no file opens, ncclInvalidUsage when the library exports no net (or is
 * loaded already), ncclInternalError when every slot is taken. Any
 * thread; blocks on dlopen. */
ncclResult_t brd_net_plugin_load(const char *spec, brd_net_plugin_t **out);

/* Closes the library and frees the slot. Every context from the table's
 * init must be finalized first, every comm closed. NULL is a no-op. */
void brd_net_plugin_unload(brd_net_plugin_t *p);

/* The adapted table (v12 semantics). name and init are set on load; the
 * other mandatory members fail with ncclInternalError until an init has
 * succeeded; the optional ones (regMrDmaBuf, iflush, getDeviceMr,
 * irecvConsumed, makeVDevice, setNetAttr) are NULL until then, and stay
 * NULL where the plugin lacks them. Owned by p. */
const brd_net_ops_t *brd_net_plugin_ops(const brd_net_plugin_t *p);

/* The ABI version loaded (6 .. 12), and the collnet version (0: none). */
int brd_net_plugin_version(const brd_net_plugin_t *p);
int brd_net_plugin_collnet_version(const brd_net_plugin_t *p);

/* The file dlopen found (from the link map), or the name given. */
const char *brd_net_plugin_path(const brd_net_plugin_t *p);

/* A new dlopen reference (RTLD_NOW | RTLD_LOCAL) to the net plugin
 * library, for other plugin types to look inside (NCCL finds a tuner
 * there when none is named): the library of the process's net when
 * brd_net_get chose a plugin; before that, the first NCCL_NET_PLUGIN entry
 * (libnccl-net.so when unset) that opens, by the loader's naming rules.
 * NULL when NCCL_NET_PLUGIN is none or nothing opens. Logs nothing. The
 * caller dlcloses it; *path_out (n bytes) gets the file's path. Any
 * thread; blocks on dlopen. */
void *brd_net_plugin_lib_open(char *path_out, size_t n);

/* What brd_net_plugin_open_other opened, or why it opened nothing. */
typedef struct brd_plugin_found {
  char path[PATH_MAX];        /* the file opened */
  char missing[2 * PATH_MAX]; /* the names tried and not found */
  char err[512];              /* the last other loader error */
  int in_net;                 /* 1: it is the net plugin's library */
} brd_plugin_found_t;

/* Opens the library of a plugin of another kind ("tuner", "profiler") as
 * NCCL does: spec by brd_plugin_open's rules (NULL: libnccl-<kind>.so),
 * else the net plugin's library (brd_net_plugin_lib_open), which may hold
 * one too. What the first step did not find is logged under subsys, each
 * line starting with prefix ("TUNER/Plugin"). Returns the handle (the
 * caller dlcloses it) with f->path and f->in_net set, or NULL with
 * f->missing and f->err for the caller's message. Any thread; blocks on
 * dlopen. */
void *brd_net_plugin_open_other(const char *spec, const char *kind, const char *prefix,
                                unsigned long subsys, brd_plugin_found_t *f);

/* Forgets brd_net_get's choice and unloads the plugin it kept, so the next
 * call reads NCCL_NET_PLUGIN and NCCL_NET again. For tests: nothing may
 * still use the old net. */
void brd_net_reset(void);

#endif /* BRD_TRANSPORT_NET_PLUGIN_H */
