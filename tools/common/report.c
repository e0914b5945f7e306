/*
 * Braid benchmarks: text layout, tuner-log parsing and the JSON file
 * (report.h). Column widths and number formats are nccl-tests' so that
 * scripts written for nccl-tests read Braid's output unchanged.
 */
#include <ctype.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "data.h"
#include "report.h"

/* See report.h. */
void brd_perf_fmt_float(double v, int width, char *out) {
  size_t len = (size_t)width + 1;
  if (snprintf(out, len, "%*.2f", width, v) <= width) return;
  if (snprintf(out, len, "%*.1f", width, v) <= width) return;
  if (snprintf(out, len, "%*.0f", width, v) <= width) return;
  if (width >= 7) snprintf(out, len, "%*.1e", width, v);
  else snprintf(out, len, "%*.0e", width, v);
}

/* See report.h. */
void brd_perf_print_header(FILE *f, int cputime) {
  const char *t = cputime ? "cputime" : "time";
  fprintf(f, "#\n");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s           out-of-place                "
             "       in-place          \n", "", "", "", "", "");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n",
          "size", "count", "type", "redop", "root", t, "algbw", "busbw",
          "#wrong", t, "algbw", "busbw", "#wrong", 0, "");
  fprintf(f, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n",
          "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
          "(us)", "(GB/s)", "(GB/s)", "", 0, "");
}

/* See report.h. */
void brd_perf_print_row_start(FILE *f, const brd_perf_row_t *row) {
  char root[16];
  snprintf(root, sizeof(root), "%6i", row->root);
  fprintf(f, "%12zu  %12zu  %8s  %6s  %6s", row->size, row->count,
          brd_perf_type_names[row->type],
          row->op < 0 ? "none" : brd_perf_op_names[row->op], root);
}

/* See report.h. */
void brd_perf_print_half(FILE *f, const brd_perf_half_t *h) {
  if (!h->ran) {
    fprintf(f, "  %7s  %6s  %6s    N/A", "N/A", "N/A", "N/A");
    return;
  }
  char t[8], alg[7], bus[7];
  brd_perf_fmt_float(h->time_us, 7, t);
  brd_perf_fmt_float(h->algbw, 6, alg);
  brd_perf_fmt_float(h->busbw, 6, bus);
  if (h->checked) fprintf(f, "  %7s  %6s  %6s  %6g", t, alg, bus, (double)h->wrong);
  else fprintf(f, "  %7s  %6s  %6s    N/A", t, alg, bus);
}

/* ---- tuner log ---------------------------------------------------------- */

typedef struct {
  char coll[32];
  size_t bytes;
  char algo[32];
  char proto[32];
  long seen;
} choice_t;

struct brd_perf_tuning {
  choice_t *v;   /* owned */
  size_t n;
  size_t cap;
};

static ncclResult_t tuning_add(brd_perf_tuning_t *t, const choice_t *c) {
  for (size_t i = 0; i < t->n; i++) {
    choice_t *e = &t->v[i];
    if (e->bytes == c->bytes && strcmp(e->coll, c->coll) == 0 &&
        strcmp(e->algo, c->algo) == 0 && strcmp(e->proto, c->proto) == 0) {
      e->seen++;
      return ncclSuccess;
    }
  }
  if (t->n == t->cap) {
    size_t cap = t->cap ? 2 * t->cap : 64;
    choice_t *v = realloc(t->v, cap * sizeof(*v));
    if (v == NULL) {
      printf("# out of host memory reading the tuner log\n");
      return ncclSystemError;
    }
    t->v = v;
    t->cap = cap;
  }
  t->v[t->n] = *c;
  t->v[t->n].seen = 1;
  t->n++;
  return ncclSuccess;
}

/* One log line; lines that are not tuner choices are skipped. */
static ncclResult_t tuning_line(brd_perf_tuning_t *t, const char *line) {
  if (strstr(line, " Bytes -> Algo ") == NULL) return ncclSuccess;
  const char *p = strstr(line, "NCCL INFO ");
  p = p ? p + strlen("NCCL INFO ") : line;
  choice_t c;
  memset(&c, 0, sizeof(c));
  double us;
  if (sscanf(p, "%31[^:]: %zu Bytes -> Algo %31s proto %31s time %lf", c.coll,
             &c.bytes, c.algo, c.proto, &us) != 5)
    return ncclSuccess;
  return tuning_add(t, &c);
}

static int is_log_name(const char *name) {
  size_t n = strlen(name);
  return strncmp(name, "braid-tuning.", 13) == 0 && n > 17 &&
         strcmp(name + n - 4, ".log") == 0;
}

/* See report.h. */
ncclResult_t brd_perf_tuning_load(const char *dir, brd_perf_tuning_t **out) {
  ncclResult_t res = ncclSuccess;
  brd_perf_tuning_t *t = calloc(1, sizeof(*t));
  if (t == NULL) {
    printf("# out of host memory reading the tuner log\n");
    return ncclSystemError;
  }
  DIR *d = opendir(dir);
  if (d == NULL) goto done;
  char path[4096], line[2048];
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!is_log_name(e->d_name)) continue;
    snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
    FILE *f = fopen(path, "r");
    if (f == NULL) continue;
    while (res == ncclSuccess && fgets(line, sizeof(line), f) != NULL)
      res = tuning_line(t, line);
    fclose(f);
    if (res != ncclSuccess) goto fail_close;
  }
  closedir(d);
done:
  *out = t;
  return ncclSuccess;
fail_close:
  closedir(d);
  brd_perf_tuning_destroy(t);
  return res;
}

static int coll_matches(const char *want, const char *logged) {
  if (strcasecmp(want, logged) == 0) return 1;
  return strcasecmp(want, "SendRecv") == 0 &&
         (strcasecmp(logged, "Send") == 0 || strcasecmp(logged, "Recv") == 0);
}

/* See report.h. */
int brd_perf_tuning_find(const brd_perf_tuning_t *t, const char *coll,
                         size_t bytes, const char **algo, const char **proto) {
  const choice_t *best = NULL;
  for (size_t i = 0; t != NULL && i < t->n; i++) {
    const choice_t *c = &t->v[i];
    if (c->bytes == bytes && coll_matches(coll, c->coll) &&
        (best == NULL || c->seen > best->seen))
      best = c;
  }
  if (best == NULL) return 0;
  *algo = best->algo;
  *proto = best->proto;
  return 1;
}

/* See report.h. */
void brd_perf_tuning_destroy(brd_perf_tuning_t *t) {
  if (t == NULL) return;
  free(t->v);
  free(t);
}

/* ---- JSON ---------------------------------------------------------------- */

static void json_str(FILE *f, const char *s) {
  if (s == NULL) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    switch (*p) {
    case '"': fputs("\\\"", f); break;
    case '\\': fputs("\\\\", f); break;
    case '\n': fputs("\\n", f); break;
    case '\t': fputs("\\t", f); break;
    case '\r': fputs("\\r", f); break;
    default:
      if (*p < 0x20) fprintf(f, "\\u%04x", *p);
      else fputc(*p, f);
    }
  }
  fputc('"', f);
}

static void json_num(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.6f", v);
  else fputs("null", f);
}

static void json_half(FILE *f, const brd_perf_half_t *h, int cputime) {
  if (!h->ran) {
    fputs("null", f);
    return;
  }
  fprintf(f, "{\"%s\": ", cputime ? "cpu_time" : "time");
  json_num(f, h->time_us);
  fputs(", \"alg_bw\": ", f);
  json_num(f, h->algbw);
  fputs(", \"bus_bw\": ", f);
  json_num(f, h->busbw);
  if (h->checked) fprintf(f, ", \"nwrong\": %lld}", h->wrong);
  else fputs(", \"nwrong\": null}", f);
}

static void json_env(FILE *f) {
  extern char **environ;
  int first = 1;
  fputs("[", f);
  /* Only the variables that steer NCCL or Braid; the rest of the
   * environment is nobody's business. */
  for (char **e = environ; e != NULL && *e != NULL; e++) {
    if (strncmp(*e, "NCCL_", 5) != 0 && strncmp(*e, "BRAID_", 6) != 0 &&
        strncmp(*e, "CUDA_VISIBLE_DEVICES=", 21) != 0)
      continue;
    fputs(first ? "" : ", ", f);
    json_str(f, *e);
    first = 0;
  }
  fputs("]", f);
}

static void json_config(FILE *f, const brd_perf_json_t *j) {
  fprintf(f, "  \"config\": {\"nthreads\": %d, \"ngpus\": %d, \"nprocs\": %d, "
             "\"minimum_bytes\": %zu, \"maximum_bytes\": %zu, ",
          j->nthreads, j->ngpus, j->nprocs, j->minbytes, j->maxbytes);
  if (j->stepfactor > 1) fprintf(f, "\"step_factor\": %zu, ", j->stepfactor);
  else fprintf(f, "\"step_bytes\": %zu, ", j->stepbytes);
  fprintf(f, "\"warmup_iters\": %d, \"iterations\": %d, "
             "\"aggregated_iterations\": %d, \"validation\": %d, \"graph\": %d, "
             "\"blocking_collectives\": %d, \"average\": %d, "
             "\"report_cputime\": %d, \"local_register\": %d,\n    \"devices\": [",
          j->warmup, j->iters, j->agg, j->check, j->graph, j->blocking,
          j->average, j->cputime, j->reg);
  for (int r = 0; r < j->nranks; r++) {
    const brd_perf_rank_info_t *ri = &j->ranks[r];
    char hex[32];
    snprintf(hex, sizeof(hex), "%04x:%02x:%02x", ri->pci_domain, ri->pci_bus,
             ri->pci_dev);
    fprintf(f, "%s\n      {\"rank\": %d, \"group\": 0, \"pid\": %d, \"hostname\": ",
            r ? "," : "", ri->rank, ri->pid);
    json_str(f, ri->host);
    fprintf(f, ", \"device\": %d, \"device_hex\": ", ri->device);
    json_str(f, hex);
    fputs(", \"device_info\": ", f);
    json_str(f, ri->name);
    fputs("}", f);
  }
  fputs("]},\n", f);
}

static void json_row(FILE *f, const brd_perf_json_t *j, const brd_perf_row_t *r) {
  const char *op = r->op < 0 ? "none" : brd_perf_op_names[r->op];
  const char *algo = NULL, *proto = NULL;
  size_t esize = brd_perf_type_size((ncclDataType_t)r->type);
  /* The tuner may count the whole buffer or one rank's part. */
  if (!brd_perf_tuning_find(j->tuning, j->coll, r->size, &algo, &proto))
    brd_perf_tuning_find(j->tuning, j->coll, r->count * esize, &algo, &proto);
  fprintf(f, "    {\"size\": %zu, \"count\": %zu, \"type\": ", r->size, r->count);
  json_str(f, brd_perf_type_names[r->type]);
  fputs(", \"redop\": ", f);
  json_str(f, op);
  fputs(", \"op\": ", f);
  json_str(f, op);
  fprintf(f, ", \"root\": %d, \"algo\": ", r->root);
  json_str(f, algo);
  fputs(", \"proto\": ", f);
  json_str(f, proto);
  fputs(",\n     \"out_of_place\": ", f);
  json_half(f, &r->half[0], j->cputime);
  fputs(",\n     \"in_place\": ", f);
  json_half(f, &r->half[1], j->cputime);
  fprintf(f, ", \"actual_iterations\": %d, \"experiment_name\": \"\"}", j->iters);
}

/* See report.h. */
ncclResult_t brd_perf_json_write(FILE *f, const brd_perf_json_t *j) {
  const char *commit = getenv("BRAID_COMMIT");
  fprintf(f, "{\n  \"version\": 3,\n  \"tool\": ");
  json_str(f, j->tool);
  fputs(",\n  \"braid_version\": ", f);
  json_str(f, BRAID_VERSION);
  fputs(",\n  \"start_time\": ", f);
  json_str(f, j->start_time);
  fputs(",\n  \"date\": ", f);
  json_str(f, j->date);
  fputs(",\n  \"device\": ", f);
  json_str(f, j->nranks > 0 ? j->ranks[0].name : NULL);
  fprintf(f, ",\n  \"nranks\": %d,\n  \"mode\": \"%s\",\n  \"commit\": ",
          j->nranks, j->host_mode ? "host" : "cuda");
  json_str(f, commit != NULL && commit[0] != '\0' ? commit : NULL);
  fprintf(f, ",\n  \"nccl_version\": %d,\n  \"args\": [", j->library_version);
  for (int i = 0; i < j->argc; i++) {
    fputs(i ? ", " : "", f);
    json_str(f, j->argv[i]);
  }
  fputs("],\n  \"env\": ", f);
  json_env(f);
  fputs(",\n", f);
  json_config(f, j);
  fputs("  \"results\": [", f);
  for (size_t i = 0; i < j->nrows; i++) {
    fputs(i ? ",\n" : "\n", f);
    json_row(f, j, &j->rows[i]);
  }
  fprintf(f, "\n  ],\n  \"out_of_bounds\": {\"count\": %lld, \"okay\": %s},\n",
          j->errors, j->errors ? "false" : "true");
  fputs("  \"average_bus_bandwidth\": {\"bandwidth\": ", f);
  json_num(f, j->avg_busbw);
  fprintf(f, ", \"okay\": %s},\n  \"errors\": [",
          j->min_bw_state < 0 ? "\"unchecked\"" : j->min_bw_state ? "true" : "false");
  if (j->last_error != NULL && j->last_error[0] != '\0') json_str(f, j->last_error);
  fputs("],\n  \"end_time\": ", f);
  json_str(f, j->end_time);
  fputs("\n}\n", f);
  if (fflush(f) != 0 || ferror(f)) {
    printf("# writing the JSON file failed\n");
    return ncclSystemError;
  }
  return ncclSuccess;
}
