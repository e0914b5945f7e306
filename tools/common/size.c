/*
 * Braid tools: byte sizes on the command line (size.h).
 */
#include <stdlib.h>

#include "size.h"

int brd_tool_size_parse(const char *s, size_t *bytes_out) {
  char *end;
  unsigned long long v = strtoull(s, &end, 10);
  int shift = 0;
  if (end == s) return 0;
  if (*end == 'K' || *end == 'k') shift = 10;
  else if (*end == 'M' || *end == 'm') shift = 20;
  else if (*end == 'G' || *end == 'g') shift = 30;
  else if (*end != '\0') return 0;
  size_t bytes = (size_t)(v << shift);
  if (bytes == 0) return 0;
  *bytes_out = bytes;
  return 1;
}
