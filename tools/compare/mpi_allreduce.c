/*
 * mpi_allreduce: MPI_Allreduce timed the way all_reduce_perf times
 * ncclAllReduce, for side-by-side tables (tools/bench-net.sh).
 *
 *   mpirun -np N mpi_allreduce [-b minbytes] [-e maxbytes] [-f factor]
 *                              [-n iters] [-w warmup] [-N iters_large]
 *
 * Float sum, out of place. Each size: -w untimed calls, a barrier, then -n
 * calls timed together (-N from 1 MiB up, when given); the time of one call
 * is averaged over ranks, as all_reduce_perf's default (-a 1). Before the
 * timing, one call is checked: rank r's element j is (r + 1) * (j % 7 + 1),
 * so element j of the sum is N(N+1)/2 * (j % 7 + 1), exact in float. Rows
 * follow nccl-tests' columns (size, count, type, redop, root, time, algbw,
 * busbw, #wrong), so the same parser reads both.
 *
 * Exit status: 0 when every value checked, 1 when one did not or MPI
 * failed, 2 for bad arguments.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static size_t parse_size(const char *s) {
  char *end = NULL;
  double v = strtod(s, &end);
  if (end != NULL && (*end == 'K' || *end == 'k')) v *= 1024.0;
  else if (end != NULL && (*end == 'M' || *end == 'm')) v *= 1024.0 * 1024;
  else if (end != NULL && (*end == 'G' || *end == 'g')) v *= 1024.0 * 1024 * 1024;
  return v < 0 ? 0 : (size_t)v;
}

/* Runs the sweep; returns the exit status. */
int main(int argc, char **argv) {
  size_t minb = 8, maxb = 64u << 20, factor = 2;
  int iters = 20, warmup = 5, iters_large = 0, c;
  MPI_Init(&argc, &argv);
  int rank = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  while ((c = getopt(argc, argv, "b:e:f:n:w:N:")) != -1) {
    switch (c) {
    case 'b': minb = parse_size(optarg); break;
    case 'e': maxb = parse_size(optarg); break;
    case 'f': factor = (size_t)atol(optarg); break;
    case 'n': iters = atoi(optarg); break;
    case 'w': warmup = atoi(optarg); break;
    case 'N': iters_large = atoi(optarg); break;
    default:
      if (rank == 0)
        fprintf(stderr, "usage: %s [-b min] [-e max] [-f factor] [-n iters] [-w warmup] "
                        "[-N iters from 1 MiB]\n", argv[0]);
      MPI_Finalize();
      return 2;
    }
  }
  if (minb < 4 || maxb < minb || factor < 2 || iters < 1 || warmup < 0) {
    if (rank == 0) fprintf(stderr, "invalid options\n");
    MPI_Finalize();
    return 2;
  }
  size_t maxcount = maxb / sizeof(float);
  float *in = malloc(maxcount * sizeof(float));
  float *out = malloc(maxcount * sizeof(float));
  if (in == NULL || out == NULL) {
    fprintf(stderr, "rank %d: out of memory for %zu bytes\n", rank, 2 * maxb);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  for (size_t j = 0; j < maxcount; j++) in[j] = (float)((rank + 1) * (int)(j % 7 + 1));
  memset(out, 0, maxcount * sizeof(float));
  if (rank == 0) {
    char host[256] = "";
    gethostname(host, sizeof(host) - 1);
    printf("# mpi_allreduce: MPI_Allreduce float sum out of place, %d ranks on %s\n", n, host);
    printf("#       size         count      type   redop    root     time   algbw   busbw  #wrong\n");
    printf("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)\n");
  }
  long long wrong_total = 0;
  for (size_t bytes = minb; bytes <= maxb; bytes *= factor) {
    size_t count = bytes / sizeof(float);
    int it = (iters_large > 0 && bytes >= (1u << 20)) ? iters_large : iters;
    /* Checked call. */
    MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    long long wrong = 0;
    float tri = (float)(n * (n + 1) / 2);
    for (size_t j = 0; j < count; j++)
      if (out[j] != tri * (float)(j % 7 + 1)) wrong++;
    for (int w = 0; w < warmup; w++)
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < it; i++)
      MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double sec = (MPI_Wtime() - t0) / it, sum = 0;
    long long wsum = 0;
    MPI_Allreduce(&sec, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&wrong, &wsum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
    wrong_total += wsum;
    sec = sum / n;
    double algbw = (double)bytes / sec / 1e9;
    double busbw = algbw * 2.0 * (n - 1) / n;
    if (rank == 0)
      printf("%12zu  %12zu     float     sum      -1  %7.6g  %6.2f  %6.2f  %6lld\n", bytes,
             count, sec * 1e6, algbw, busbw, wsum);
    if (bytes > maxb / factor) break;
  }
  if (rank == 0) printf("# Out of bounds values : %lld %s\n", wrong_total,
                        wrong_total == 0 ? "OK" : "FAILED");
  free(in);
  free(out);
  MPI_Finalize();
  return wrong_total == 0 ? 0 : 1;
}
