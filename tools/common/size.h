/*
 * Braid tools: the byte-size syntax of the command-line tools that take
 * sizes as whole numbers (calibrate-host, braid-simulate). The benchmarks
 * keep nccl-tests' own syntax (perf.c), which also takes fractions and 0.
 */
#ifndef BRD_TOOLS_SIZE_H
#define BRD_TOOLS_SIZE_H

#include <stddef.h>

/* Parses a decimal byte count with an optional K, M or G suffix (either
 * case, powers of 1024: "8", "64K", "64M", "1G"); whatever follows the
 * suffix is ignored. Returns 1 and writes *bytes_out when the text is a
 * number followed by nothing or a suffix and the size is above 0, else 0
 * and leaves *bytes_out alone. Pure; any thread. */
int brd_tool_size_parse(const char *s, size_t *bytes_out);

#endif
