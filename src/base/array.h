/* Braid: growable arrays, one way.
 *
 * A growable array is three variables, a pointer, a length and a capacity.
 * brd_array_grow makes room for one more element: it doubles the capacity
 * when the array is full (`first` elements the first time). Any thread that
 * owns the array; never blocks.
 */
#ifndef BRD_BASE_ARRAY_H
#define BRD_BASE_ARRAY_H

#include <stdlib.h>

/* Returns the array with room for element n (items itself when there is
 * room already, else the reallocated array, *cap updated), or NULL when out
 * of memory, leaving items and *cap as they were (the caller WARNs: it
 * knows what the array holds). */
static inline void *brd_array_grow(void *items, int n, int *cap, size_t elem, int first) {
  if (n < *cap) return items;
  int want = *cap > 0 ? 2 * *cap : first;
  void *p = realloc(items, (size_t)want * elem);
  if (p != NULL) *cap = want;
  return p;
}

#endif
