/*
 * Allocation failure injection for unit tests that check constructors
 * unwind without leaks. Include it in exactly one file of a test program:
 * it replaces the program's malloc family with wrappers around glibc's.
 * While `armed`, the allocation that brings `alloc_calls` to `fail_at`
 * fails, and `live` counts allocations not yet freed.
 */
#ifndef BRD_TESTS_FAILALLOC_H
#define BRD_TESTS_FAILALLOC_H

#include <stddef.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void __libc_free(void *);

static int armed;
static long alloc_calls, fail_at = -1, live;

static int should_fail(void) {
  if (!armed) return 0;
  return alloc_calls++ == fail_at;
}

void *malloc(size_t n) {
  if (should_fail()) return NULL;
  void *p = __libc_malloc(n);
  if (armed && p) live++;
  return p;
}

void *calloc(size_t n, size_t m) {
  if (should_fail()) return NULL;
  void *p = __libc_calloc(n, m);
  if (armed && p) live++;
  return p;
}

void *realloc(void *old, size_t n) {
  if (should_fail()) return NULL;
  void *p = __libc_realloc(old, n);
  if (armed && p && old == NULL) live++;
  return p;
}

void free(void *p) {
  if (armed && p) live--;
  __libc_free(p);
}

#endif /* BRD_TESTS_FAILALLOC_H */
