/*
 * Braid parameters: the table from param_table.h, conf-file loading and the
 * lazily resolved value of each knob.
 *
 * Conf files follow NCCL's rules: NCCL_CONF_FILE when set and non-empty,
 * otherwise ~/.nccl.conf, and then /etc/nccl.conf. The process environment
 * wins over both files and the user file wins over the system one; within a
 * file the first line naming a variable wins. Lines are NAME=VALUE, with
 * '#' comment lines; blanks around the name and the value are trimmed.
 *
 * Memory: strings handed out (conf values, copies of environment values)
 * are never freed, only retired on brd_param_reload, so a pointer returned
 * before a reload stays readable by a thread that still holds it. Reloads
 * are rare (tests, ncclResetDebugInit), so what is retired stays small.
 *
 * Locking: one mutex guards loading and resolving. Nothing here logs while
 * holding it, and brd_param_getenv never logs at all: the logger calls it
 * from inside its own lock.
 */
#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/debug.h"
#include "base/env_plugin.h"
#include "base/param.h"

#define SYS_CONF_DEFAULT "/etc/nccl.conf"
#define CONF_PATH_MAX 4096

const brd_param_info_t brd_param_table[BRD_P_COUNT] = {
#define BRD_PARAM(id, name, kind, def, desc) [BRD_P_##id] = {name, kind, def, desc},
#include "base/param_table.h"
#undef BRD_PARAM
};

/* One NAME=VALUE line of a conf file. */
struct conf_entry {
  struct conf_entry *next;
  const char *path;   /* the file it came from, owned by its conf_set */
  char *name;         /* owned */
  char *value;        /* owned */
};

/* The contents of the conf files as read by one load. */
struct conf_set {
  struct conf_set *older;      /* the set it replaced, kept alive */
  struct conf_entry *entries;  /* owned, in file order */
  char user_path[CONF_PATH_MAX];
  char sys_path[CONF_PATH_MAX];
};

/* A copy of an environment value, kept for the life of the process. */
struct kept_str {
  struct kept_str *next;
  char text[];
};

typedef enum { SRC_DEFAULT = 0, SRC_ENV, SRC_FILE } param_src_t;

struct param_slot {
  int resolved;        /* atomic; 1 once the fields below are set */
  param_src_t src;
  const char *from;    /* conf file path when src == SRC_FILE */
  const char *text;    /* value text in force; NULL when unset */
  int64_t value;       /* integer in force (int kinds) */
  int bad;             /* the set text is not an integer */
};

static pthread_mutex_t param_mutex = PTHREAD_MUTEX_INITIALIZER;
static int conf_loaded;                 /* atomic */
static struct conf_set *conf_current;   /* atomic pointer; read after conf_loaded */
static struct conf_set *conf_retired;   /* sets replaced by reloads */
static struct kept_str *kept_strs;      /* environment copies */
static struct param_slot slots[BRD_P_COUNT];
static char sys_conf_path[CONF_PATH_MAX] = SYS_CONF_DEFAULT;

static char *trim(char *s) {
  while (*s != '\0' && isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) s[--n] = '\0';
  return s;
}

static const struct conf_entry *conf_find(const struct conf_set *set,
                                          const char *name) {
  if (set == NULL) return NULL;
  for (const struct conf_entry *e = set->entries; e != NULL; e = e->next) {
    if (strcmp(e->name, name) == 0) return e;
  }
  return NULL;
}

/* Appends the new lines of one file to set. A file that cannot be opened is
 * skipped silently, as NCCL does; so is a line when memory runs out (nothing
 * may log here). */
static void conf_read_file(struct conf_set *set, struct conf_entry **tail,
                           const char *path) {
  FILE *f = fopen(path, "r");
  if (f == NULL) return;
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, f) != -1) {
    char *s = trim(line);
    if (s[0] == '#' || s[0] == '\0') continue;
    char *eq = strchr(s, '=');
    if (eq == NULL) continue;
    *eq = '\0';
    char *name = trim(s);
    char *value = trim(eq + 1);
    if (name[0] == '\0' || conf_find(set, name) != NULL) continue;
    struct conf_entry *e = calloc(1, sizeof(*e));
    if (e == NULL) continue;
    e->name = strdup(name);
    e->value = strdup(value);
    if (e->name == NULL || e->value == NULL) {
      free(e->name);
      free(e->value);
      free(e);
      continue;
    }
    e->path = path;
    *tail = e;
    tail = &e->next;
  }
  free(line);
  fclose(f);
}

/* Home directory: $HOME, else the password database. */
static const char *home_dir(char *buf, size_t len) {
  const char *home = getenv("HOME");
  if (home != NULL && home[0] != '\0') return home;
  struct passwd pw, *res = NULL;
  if (getpwuid_r(getuid(), &pw, buf, len, &res) != 0 || res == NULL) return NULL;
  return res->pw_dir;
}

/* Loads the conf files once (again after a reload). Called without
 * param_mutex held. */
static void conf_ensure_loaded(void) {
  if (__atomic_load_n(&conf_loaded, __ATOMIC_ACQUIRE)) return;
  pthread_mutex_lock(&param_mutex);
  if (!conf_loaded) {
    struct conf_set *set = calloc(1, sizeof(*set));
    if (set != NULL) {
      struct conf_entry **tail = &set->entries;
      const char *user = getenv("NCCL_CONF_FILE");
      char pwbuf[1024];
      if (user != NULL && user[0] != '\0') {
        snprintf(set->user_path, sizeof(set->user_path), "%s", user);
      } else {
        const char *home = home_dir(pwbuf, sizeof(pwbuf));
        if (home != NULL)
          snprintf(set->user_path, sizeof(set->user_path), "%s/.nccl.conf", home);
      }
      snprintf(set->sys_path, sizeof(set->sys_path), "%s", sys_conf_path);
      if (set->user_path[0] != '\0') conf_read_file(set, tail, set->user_path);
      while (*tail != NULL) tail = &(*tail)->next;
      conf_read_file(set, tail, set->sys_path);
    }
    /* Without memory the files are simply absent; values fall back to the
     * environment and the defaults. */
    __atomic_store_n(&conf_current, set, __ATOMIC_RELEASE);
    __atomic_store_n(&conf_loaded, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&param_mutex);
}

/* See param.h. */
const char *brd_param_getenv(const char *name) {
  const char *v = brd_env_get(name);
  if (v != NULL) return v;
  conf_ensure_loaded();
  const struct conf_entry *e =
      conf_find(__atomic_load_n(&conf_current, __ATOMIC_ACQUIRE), name);
  return e == NULL ? NULL : e->value;
}

/* strtoll with base 0 that must consume the whole text (trailing blanks
 * allowed). Returns 1 and sets *value_out on success. */
static int parse_int(const char *text, int64_t *value_out) {
  int saved_errno = errno;
  char *end = NULL;
  errno = 0;
  long long v = strtoll(text, &end, 0);
  int ok = end != text && errno != ERANGE;
  while (ok && *end != '\0' && isspace((unsigned char)*end)) end++;
  ok = ok && *end == '\0';
  if (ok) *value_out = (int64_t)v;
  errno = saved_errno;
  return ok;
}

static int64_t default_int(const brd_param_info_t *info) {
  int64_t v = BRD_PARAM_UNSET;
  if (info->def != NULL && !parse_int(info->def, &v)) v = BRD_PARAM_UNSET;
  return v;
}

/* Copies an environment value so later setenv/unsetenv cannot pull it away.
 * Called with param_mutex held; NULL when out of memory. */
static const char *keep_copy(const char *text) {
  size_t n = strlen(text) + 1;
  struct kept_str *k = malloc(sizeof(*k) + n);
  if (k == NULL) return NULL;
  memcpy(k->text, text, n);
  k->next = kept_strs;
  kept_strs = k;
  return k->text;
}

/* Resolves one slot; WARNs, after unlocking, if its value is malformed. */
static void slot_resolve(brd_param_id_t id) {
  const brd_param_info_t *info = &brd_param_table[id];
  struct param_slot *s = &slots[id];
  const char *env = brd_env_get(info->name);
  const struct conf_entry *e = NULL;
  if (env == NULL) {
    conf_ensure_loaded();
    e = conf_find(__atomic_load_n(&conf_current, __ATOMIC_ACQUIRE), info->name);
  }
  int warn = 0;
  char bad_text[128] = "";
  const char *bad_from = NULL;

  pthread_mutex_lock(&param_mutex);
  if (!s->resolved) {
    const char *text = NULL;
    s->src = SRC_DEFAULT;
    s->from = NULL;
    if (env != NULL) {
      text = keep_copy(env);
      if (text != NULL) s->src = SRC_ENV;
    } else if (e != NULL) {
      text = e->value;
      s->src = SRC_FILE;
      s->from = e->path;
    }
    /* NCCL treats an empty value as not set at all. */
    if (text != NULL && text[0] == '\0' && info->kind == BRD_PARAM_INT) {
      text = NULL;
      s->src = SRC_DEFAULT;
      s->from = NULL;
    }
    s->bad = 0;
    int64_t v = default_int(info);
    if (text != NULL && info->kind == BRD_PARAM_INT && !parse_int(text, &v)) {
      s->bad = 1;
      v = default_int(info);
      warn = 1;
      snprintf(bad_text, sizeof(bad_text), "%s", text);
      bad_from = s->src == SRC_FILE ? s->from : "the environment";
    }
    if (s->bad || text == NULL) {
      /* The default is what is in force. */
      if (text == NULL) s->src = SRC_DEFAULT;
      text = info->def;
    }
    __atomic_store_n(&s->text, text, __ATOMIC_RELAXED);
    __atomic_store_n(&s->value, v, __ATOMIC_RELAXED);
    __atomic_store_n(&s->resolved, 1, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&param_mutex);

  if (warn) {
    WARN("Invalid value \"%s\" for %s (from %s): not a 64-bit integer; using "
         "the default %s. Use a decimal or 0x-prefixed hexadecimal integer, or "
         "unset the variable.",
         bad_text, info->name, bad_from,
         info->def != NULL ? info->def : "(automatic)");
  }
}

static struct param_slot *slot_get(brd_param_id_t id) {
  struct param_slot *s = &slots[id];
  if (!__atomic_load_n(&s->resolved, __ATOMIC_ACQUIRE)) slot_resolve(id);
  return s;
}

/* See param.h. */
int64_t brd_param_int(brd_param_id_t id) {
  return __atomic_load_n(&slot_get(id)->value, __ATOMIC_RELAXED);
}

/* See param.h. */
const char *brd_param_str(brd_param_id_t id) {
  return __atomic_load_n(&slot_get(id)->text, __ATOMIC_RELAXED);
}

/* See param.h. */
void brd_param_reload(void) {
  pthread_mutex_lock(&param_mutex);
  for (int i = 0; i < BRD_P_COUNT; i++)
    __atomic_store_n(&slots[i].resolved, 0, __ATOMIC_RELEASE);
  struct conf_set *set = conf_current;
  if (set != NULL) {
    set->older = conf_retired;
    conf_retired = set;
  }
  __atomic_store_n(&conf_current, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&conf_loaded, 0, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&param_mutex);
}

/* See param.h. */
void brd_param_sysconf_set(const char *path) {
  pthread_mutex_lock(&param_mutex);
  snprintf(sys_conf_path, sizeof(sys_conf_path), "%s",
           path != NULL ? path : SYS_CONF_DEFAULT);
  pthread_mutex_unlock(&param_mutex);
}

/* See param.h. */
void brd_param_log_all(void) {
  if (!brd_log_on(BRD_LOG_INFO, BRD_SUBSYS_ENV)) return;
  for (int i = 0; i < BRD_P_COUNT; i++) {
    const brd_param_info_t *info = &brd_param_table[i];
    const struct param_slot *s = slot_get((brd_param_id_t)i);
    /* A malformed value already WARNed; the default it fell back to was
     * not set by anyone. */
    if (s->src == SRC_DEFAULT || s->bad) continue;
    if (info->kind == BRD_PARAM_INT) {
      INFO(BRD_SUBSYS_ENV, "%s set by environment to %lld.", info->name,
           (long long)s->value);
    } else {
      INFO(BRD_SUBSYS_ENV, "%s set by environment to %s", info->name, s->text);
    }
  }
}

/* See param.h. */
void brd_param_table_print(FILE *f) {
  fprintf(f, "%-40s %-20s %-20s %-22s %s\n", "NAME", "DEFAULT", "VALUE",
          "SOURCE", "DESCRIPTION");
  for (int i = 0; i < BRD_P_COUNT; i++) {
    const brd_param_info_t *info = &brd_param_table[i];
    const struct param_slot *s = slot_get((brd_param_id_t)i);
    const char *src = s->src == SRC_ENV    ? "environment"
                      : s->src == SRC_FILE ? s->from
                                           : "default";
    char value[64];
    if (s->text == NULL) {
      snprintf(value, sizeof(value), "(unset)");
    } else if (info->kind == BRD_PARAM_INT) {
      snprintf(value, sizeof(value), "%lld", (long long)s->value);
    } else {
      snprintf(value, sizeof(value), "\"%s\"", s->text);
    }
    char def[64];
    if (info->def == NULL) {
      snprintf(def, sizeof(def), "(unset)");
    } else if (info->kind == BRD_PARAM_INT) {
      snprintf(def, sizeof(def), "%s", info->def);
    } else {
      snprintf(def, sizeof(def), "\"%s\"", info->def);
    }
    fprintf(f, "%-40s %-20s %-20s %-22s %s%s\n", info->name, def, value, src,
            info->desc, s->bad ? " [set value is not an integer]" : "");
  }
}
