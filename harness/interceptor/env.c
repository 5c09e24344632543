/*
 * env.c - the process's pid and the core's settings (env.h), written by the constructor (init.c)
 * and the fork child.
 */
#include "env.h"

struct nest_env g_env = {.lock_wait_ns = 1000000000ull};
