/*
 * slots.h - the counting core's view of fds: what each fd is (private memory, per fd: a socket, not
 * one, an epoll set, being made or closed) and the slot in the shared memory of each socket: made on
 * first sight or when a call hands out a socket, looked up (the hot path, tracked(), inline here),
 * closed with its counters added to the header's retired totals (slots.c).
 */
#ifndef NEST_SLOTS_H
#define NEST_SLOTS_H

#include "internal.h"
#include "shm.h"

#pragma GCC visibility push(hidden)

/* What an fd is (private, per fd): the kind in bits 0..2; K_BUSY and K_CLOSING also name the thread
 * doing it (tid << 3), so that nobody waits for itself. K_BUSY: a slot is being made for it (others
 * wait, then count the call); K_CLOSING: it is being closed (a call on it is the program's race). */
enum { K_UNKNOWN = 0, K_SOCK = 1, K_OTHER = 2, K_BUSY = 3, K_EPOLL = 4, K_CLOSING = 5 };
#define KIND(v) ((v) & 7u)
#define KOWNER(v) ((v) >> 3)

struct nest_fds {                      /* private, per fd (env.want_slots entries) */
    uint32_t *kind;                    /* K_* | owner << 3 */
    int32_t *ep_owner;                 /* the epoll fd + 1 it is registered in, 0 none */
    uint32_t *ep_events;               /* its epoll events */
};

extern struct nest_fds g_fds;

int slots_init(uint32_t want);         /* the private tables; -1: no memory */
void slots_free(uint32_t want);
void slots_after_exec(void);
void set_endpoint(const struct sockaddr *sa, uint8_t *addr, uint16_t *port);
int sock_endpoints(int fd, uint8_t *la, uint16_t *lp, uint8_t *ra, uint16_t *rp);
void retire_slot(int fd);
void untracked_fd(int fd);
void adopt_socket(int fd, uint32_t extra);
void fresh_fd(int fd);
struct nest_slot *tracked_slow(int fd, uint32_t k);
uint32_t forget_begin(int fd);
void forget_end(int fd);

/* The slot of fd if fd is a socket we count, else NULL. The hot path. */
static inline struct nest_slot *tracked(int fd) {
    if (UNLIKELY(!g_core.on) || (unsigned)fd >= g_core.nslots)
        return NULL;
    uint32_t k = __atomic_load_n(&g_fds.kind[fd], __ATOMIC_ACQUIRE);
    if (LIKELY(k == K_SOCK))
        return &g_core.slots[fd];
    return tracked_slow(fd, k);
}

/* A send on s starts a reply: an accepted socket whose last completed call is a receive. */
static inline int reply_starts(struct nest_slot *s) {
    return (s->flags & NEST_SF_ACCEPTED) &&
           __atomic_load_n(&s->dir[NEST_IN].last_ns, RELAXED) >= __atomic_load_n(&s->dir[NEST_OUT].last_ns, RELAXED);
}

#pragma GCC visibility pop

#endif
