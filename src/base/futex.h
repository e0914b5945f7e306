/* Braid: sleeping on a 32-bit word of this process (Linux futex).
 *
 * Waits that would otherwise poll and nap (the host executor waiting for
 * what the proxy lays into its window, the proxy waiting for puts) sleep
 * here instead, so that on a machine with fewer cores than busy threads
 * the CPU goes to a thread that can progress, and the sleeper wakes as
 * soon as its word changes rather than after a nap plus the kernel's timer
 * slack. Words are private to the process (FUTEX_PRIVATE_FLAG). Any
 * thread may call these.
 */
#ifndef BRD_BASE_FUTEX_H
#define BRD_BASE_FUTEX_H

#include <linux/futex.h>
#include <stdint.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Sleeps while *word == expected, at most timeout_ns (> 0). Returns at
 * once when *word differs (the comparison is atomic with going to sleep),
 * on a wake, a signal or the timeout; the caller re-checks its condition
 * either way. Blocks up to timeout_ns. */
static inline void brd_futex_wait(uint32_t *word, uint32_t expected, int64_t timeout_ns) {
  struct timespec ts = {(time_t)(timeout_ns / 1000000000LL), (long)(timeout_ns % 1000000000LL)};
  (void)syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, expected, &ts, NULL, 0);
}

/* Wakes every thread sleeping on word. Never blocks. */
static inline void brd_futex_wake_all(uint32_t *word) {
  (void)syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT32_MAX, NULL, NULL, 0);
}

#endif
