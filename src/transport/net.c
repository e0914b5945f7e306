/*
 * Braid nets: what every net shares. For now the logger Braid hands to
 * each net's init (NCCL's prototype, forwarding to base/debug.c), which
 * can also keep the first WARN of a call made on this thread.
 */
#include <stdarg.h>
#include <stdio.h>

#include "base/debug.h"
#include "base/plugin.h"
#include "transport/net.h"

/* NCCL's level numbers and subsystem bits are Braid's own (debug.h), so a
 * net's message passes through unchanged. */
_Static_assert(BRD_LOG_WARN == 2 && BRD_LOG_INFO == 3 && BRD_LOG_ABORT == 4 &&
                   BRD_LOG_TRACE == 5, "NCCL's ncclDebugLogLevel numbering");
_Static_assert(BRD_SUBSYS_INIT == 0x1 && BRD_SUBSYS_NET == 0x10 && BRD_SUBSYS_ENV == 0x80 &&
                   BRD_SUBSYS_PROXY == 0x400 && BRD_SUBSYS_BOOTSTRAP == 0x1000 &&
                   BRD_SUBSYS_RAS == 0x8000, "NCCL's subsystem bits");

/* This thread's capture (brd_net_log_capture): where its first WARN goes. */
static _Thread_local char *cap_buf;
static _Thread_local size_t cap_len;

/* See net.h. */
void brd_net_log_capture(char *buf, size_t n) {
  cap_buf = n > 0 ? buf : NULL;
  cap_len = n;
}

/* See net.h. */
void brd_net_log(int level, unsigned long flags, const char *file, int line,
                 const char *fmt, ...) {
  va_list ap;
  if (level == BRD_LOG_WARN && cap_buf != NULL && cap_buf[0] == '\0') {
    va_start(ap, fmt);
    (void)vsnprintf(cap_buf, cap_len, fmt, ap);
    va_end(ap);
  }
  va_start(ap, fmt);
  brd_plugin_vlog(level, flags, file, line, fmt, ap);
  va_end(ap);
}
