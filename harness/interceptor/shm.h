/*
 * shm.h - the counting core's state: this process's shared-memory file ($NESTLAB_SHM_DIR/<pid>.nest,
 * nestintercept.h), its header and its slots, and whether the library is active; made with its space
 * or re-attached after exec by shm.c. The parts add to the file only what init.c tells it at
 * creation (the ring's size, the signals the header names).
 */
#ifndef NEST_SHM_H
#define NEST_SHM_H

#include "internal.h"

#pragma GCC visibility push(hidden)

struct nest_core {
    int on;                            /* the library is active (a file of ours exists) */
    uint32_t nslots;                   /* slots in our file (0: no space, nothing counted) */
    struct nest_header *hdr;
    struct nest_slot *slots;
    /* what a new file is made with (init.c, from the parts' settings) */
    uint32_t trace_cap;                /* ring events after the slots (0: none) */
    size_t ring_bytes;                 /* their bytes */
    int pause_sig, resume_sig;         /* named in the header for the harness */
};

extern struct nest_core g_core;

#define HCOUNT(field) do { if (g_core.hdr) __atomic_fetch_add(&g_core.hdr->field, 1, RELAXED); } while (0)

static inline void lost_call(void) {
    HCOUNT(lost);
}

uint64_t proc_starttime(pid_t *ppid);
size_t map_size(uint32_t nslots);
void shm_fill_cmdline(struct nest_header *h);
struct nest_header *shm_create(pid_t pid, pid_t ppid, uint64_t starttime, const struct nest_header *from,
                               uint32_t *nslots);
struct nest_header *shm_reattach(pid_t pid, uint64_t starttime, uint32_t *nslots);

#pragma GCC visibility pop

#endif
