/*
 * Braid: the env plugin (ncclEnvPlugin_v1 / _v2), through which every
 * parameter is read.
 *
 * NCCL_ENV_PLUGIN is read from the process environment (then the conf
 * files) once per process, on the first parameter read: unset tries
 * libnccl-env.so quietly; a name X loads X, then libnccl-env-X.so; a path
 * that file; none no plugin. The newest of ncclEnvPlugin_v2, _v1 wins;
 * its init runs once (v2 gets the logger), its finalize at exit. From then
 * on brd_env_get asks the plugin's getEnv instead of getenv. The loader's
 * own messages are held back and logged once loading is over (the logger
 * itself reads parameters).
 */
#ifndef BRD_BASE_ENV_PLUGIN_H
#define BRD_BASE_ENV_PLUGIN_H

/* Loads the plugin if that was not tried yet. Idempotent; any thread;
 * blocks on dlopen and the plugin's init. Called by the logger before it
 * takes its own lock, so the plugin's first messages find it free. */
void brd_env_plugin_init(void);

/* The value of variable name: the plugin's getEnv when a plugin is loaded,
 * else getenv. NULL when unset. The string belongs to the plugin (valid
 * until its next getEnv of name) or to the environment. Any thread. */
const char *brd_env_get(const char *name);

/* The loaded plugin's name and version (1, 2), or NULL and 0. */
const char *brd_env_plugin_name(void);
int brd_env_plugin_version(void);

/* Finalizes and closes the plugin and forgets the load, so the next read
 * loads again. For tests: no string from the plugin may still be used. */
void brd_env_plugin_reset(void);

#endif /* BRD_BASE_ENV_PLUGIN_H */
