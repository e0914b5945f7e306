/*
 * Braid logging: NCCL_DEBUG levels, NCCL_DEBUG_SUBSYS masks, NCCL's line
 * prefix ("host:pid:tid [dev] NCCL INFO ..."), NCCL_DEBUG_FILE, and the
 * last-error text behind ncclGetLastError.
 *
 * The level and mask are checked before any formatting: INFO/TRACE compile
 * to a load and a compare when the message is filtered out.
 */
#ifndef BRD_CORE_DEBUG_H
#define BRD_CORE_DEBUG_H

#include <stdint.h>

/* Levels, in NCCL's order (NCCL_DEBUG=VERSION|WARN|INFO|ABORT|TRACE). */
typedef enum {
  BRD_LOG_NONE = 0,
  BRD_LOG_VERSION = 1,
  BRD_LOG_WARN = 2,
  BRD_LOG_INFO = 3,
  BRD_LOG_ABORT = 4,
  BRD_LOG_TRACE = 5,
} brd_log_level_t;

/* Subsystem bits, NCCL's names and values (NCCL_DEBUG_SUBSYS). */
#define BRD_SUBSYS_INIT 0x1ul
#define BRD_SUBSYS_COLL 0x2ul
#define BRD_SUBSYS_P2P 0x4ul
#define BRD_SUBSYS_SHM 0x8ul
#define BRD_SUBSYS_NET 0x10ul
#define BRD_SUBSYS_GRAPH 0x20ul
#define BRD_SUBSYS_TUNING 0x40ul
#define BRD_SUBSYS_ENV 0x80ul
#define BRD_SUBSYS_ALLOC 0x100ul
#define BRD_SUBSYS_CALL 0x200ul
#define BRD_SUBSYS_PROXY 0x400ul
#define BRD_SUBSYS_NVLS 0x800ul
#define BRD_SUBSYS_BOOTSTRAP 0x1000ul
#define BRD_SUBSYS_REG 0x2000ul
#define BRD_SUBSYS_PROFILE 0x4000ul
#define BRD_SUBSYS_RAS 0x8000ul
#define BRD_SUBSYS_ALL (~0ul)

/* Current level and mask; level is -1 until the first message or query. */
extern volatile int brd_log_level_cur;
extern volatile unsigned long brd_log_mask_cur;

/* Reads NCCL_DEBUG, NCCL_DEBUG_SUBSYS and NCCL_DEBUG_FILE once (again after
 * brd_log_reset). Any thread; serialised internally. */
void brd_log_init(void);

/* Forgets the parsed settings so the next message re-reads the environment
 * (ncclResetDebugInit). Closes a NCCL_DEBUG_FILE it opened. */
void brd_log_reset(void);

/* Formats and writes one line if level/subsys pass the filter. A WARN always
 * becomes the last-error text, whatever the level. Any thread. */
void brd_log(brd_log_level_t level, unsigned long subsys, const char *file,
             int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Sets the CUDA device (or virtual device) printed in this thread's prefix;
 * -1 (the default) prints 0, which is what NCCL shows for a thread that never
 * selected a device. */
void brd_log_set_thread_dev(int dev);

/* Prints "NCCL version 2.30.7+braid<version>" once per process (a bare line
 * at NCCL_DEBUG=VERSION or WARN, an INFO line above that), then every
 * parameter set explicitly (brd_param_log_all). Init code calls it; any
 * thread; later calls do nothing. */
void brd_log_banner(void);

/* While a thread's no-warn mask is non-zero, its WARNs are logged as INFO
 * under that mask and do not become the last error (NCCL's NOWARN, for
 * probes whose failure is expected). Returns the previous mask. */
unsigned long brd_log_nowarn_swap(unsigned long subsys);

/* Copies the last WARN text into a per-thread buffer and returns it; never
 * NULL. Safe from any thread. */
const char *brd_log_last_error(void);

/* The last WARN this thread issued ("" when none), kept per thread, so
 * that what one thread (a communicator's proxy, a rank run as a thread)
 * failed on is not another thread's message. Valid until this thread's
 * next WARN; never NULL. */
const char *brd_log_thread_last_error(void);

/* Replaces the last-error text without printing (used by the
 * "not implemented" path, which also WARNs). */
void brd_log_set_last_error(const char *fmt, ...)
    __attribute__((format(printf, 1, 2)));

/* True when a message at (level, subsys) would be printed. */
static inline int brd_log_on(brd_log_level_t level, unsigned long subsys) {
  if (__atomic_load_n(&brd_log_level_cur, __ATOMIC_ACQUIRE) < 0) brd_log_init();
  return __atomic_load_n(&brd_log_level_cur, __ATOMIC_ACQUIRE) >= (int)level &&
         (__atomic_load_n(&brd_log_mask_cur, __ATOMIC_RELAXED) & subsys) != 0;
}

#define WARN(...) \
  brd_log(BRD_LOG_WARN, BRD_SUBSYS_ALL, __FILE__, __LINE__, __VA_ARGS__)

#define INFO(subsys, ...)                                                     \
  do {                                                                        \
    if (brd_log_on(BRD_LOG_INFO, (subsys)))                                   \
      brd_log(BRD_LOG_INFO, (subsys), __FILE__, __LINE__, __VA_ARGS__);       \
  } while (0)

#define TRACE(subsys, ...)                                                    \
  do {                                                                        \
    if (brd_log_on(BRD_LOG_TRACE, (subsys)))                                  \
      brd_log(BRD_LOG_TRACE, (subsys), __FILE__, __LINE__, __VA_ARGS__);      \
  } while (0)

/* API call tracing: "NCCL CALL <msg>" at NCCL_DEBUG=TRACE with CALL. */
#define TRACE_CALL(...)                                                       \
  do {                                                                        \
    if (brd_log_on(BRD_LOG_TRACE, BRD_SUBSYS_CALL))                           \
      brd_log(BRD_LOG_TRACE, BRD_SUBSYS_CALL, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

/* Runs expr with this thread's WARNs downgraded to INFO under subsys. */
#define NOWARN(expr, subsys)                                                  \
  do {                                                                        \
    unsigned long nowarn_prev_ = brd_log_nowarn_swap(subsys);                 \
    (expr);                                                                   \
    (void)brd_log_nowarn_swap(nowarn_prev_);                                  \
  } while (0)

#endif /* BRD_CORE_DEBUG_H */
