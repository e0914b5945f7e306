/* Braid: the one monotonic clock.
 *
 * Every deadline in the library (bootstrap, transports, executors, hang
 * reports) is measured on CLOCK_MONOTONIC through these two helpers, so a
 * deadline computed in one layer means the same thing in another. Any thread
 * may call them; they never block and never fail.
 */
#ifndef BRD_BASE_TIME_H
#define BRD_BASE_TIME_H

#include <stdint.h>
#include <time.h>

/* Nanoseconds on CLOCK_MONOTONIC. */
static inline int64_t brd_time_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Seconds on CLOCK_MONOTONIC, as a double (for timings and reports). */
static inline double brd_time_now_s(void) {
  return (double)brd_time_now_ns() * 1e-9;
}

#endif
