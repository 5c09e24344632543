/*
 * env.h - the process as the library knows it: its pid (updated in a fork child) and what the
 * constructor read from the environment for the core (NESTLAB_SHM_DIR, NESTLAB_MAX_FDS,
 * NESTLAB_LOCK_WAIT_MS). Each part reads its own variables (its *_configure function).
 */
#ifndef NEST_ENV_H
#define NEST_ENV_H

#include "internal.h"

#pragma GCC visibility push(hidden)

struct nest_env {
    pid_t pid;
    uint32_t want_slots;               /* slots asked for (NESTLAB_MAX_FDS): the private tables' size */
    uint64_t lock_wait_ns;             /* NESTLAB_LOCK_WAIT_MS */
    char dir[PATH_MAX - 32];           /* NESTLAB_SHM_DIR */
};

extern struct nest_env g_env;

/* Closes made by a vfork()/posix_spawn child share our memory but not our fd table. */
static inline int same_process(void) { return (pid_t)syscall(SYS_getpid) == g_env.pid; }

#pragma GCC visibility pop

#endif
