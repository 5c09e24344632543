/*
 * defer.h - part: the delay fault (header.reply_delay_ns and reply_delay_mode, written by the
 * injector): a send that starts a reply is held (NEST_DELAY_HOLD: the thread sleeps first) or
 * deferred (NEST_DELAY_DEFER: its bytes queued and written later by a thread of ours, defer.c). Its
 * state is its own (g_defer: sockets with something queued, the memory it may take); the hot path
 * asks it only when it is armed (reply_gate, defer_armed: a load or two).
 */
#ifndef NEST_DEFER_H
#define NEST_DEFER_H

#include "internal.h"
#include "shm.h"
#include "slots.h"

#pragma GCC visibility push(hidden)

struct nest_defer_state {
    uint32_t pend_n;                   /* sockets with data queued or a close waiting (read on every send) */
    uint64_t cap;                      /* NESTLAB_DEFER_MAX_BYTES */
};

extern struct nest_defer_state g_defer;

void defer_configure(const char *max_bytes);
void reply_hold(uint64_t ns);
long defer_send(int fd, const struct iovec *iov, long cnt, int can, int call, int flags);
long defer_sendmsg(int fd, const struct msghdr *m, int flags, int call);
long defer_sendfile(int out, int in, off64_t *off, size_t n, int call);
int defer_close(int fd, int how);
void defer_settle(unsigned lo, unsigned hi);
void defer_after_fork(void);
void defer_drain_at_exit(void);

/* The delay fault (header.reply_delay_ns, set by the injector), NEST_DELAY_HOLD: a send that starts
 * a reply is held before it is made, as if the process took that much longer to answer; the rest of
 * the reply's sends go at once. (NEST_DELAY_DEFER: defer.c, before the call, defer_armed.) */
static inline void reply_gate(struct nest_slot *s) {
    uint64_t d = __atomic_load_n(&g_core.hdr->reply_delay_ns, RELAXED);
    if (UNLIKELY(d) && __atomic_load_n(&g_core.hdr->reply_delay_mode, RELAXED) == NEST_DELAY_HOLD && reply_starts(s))
        reply_hold(d);
}

/* A send wrapper asks defer.c first when a deferral may concern it: the fault is armed in defer mode,
 * or some socket has data queued (its later sends must queue behind it). Off: a load or two. */
static inline int defer_armed(void) {
    if (UNLIKELY(__atomic_load_n(&g_defer.pend_n, RELAXED)))
        return 1;
    struct nest_header *h = g_core.hdr;
    return h && g_core.on && UNLIKELY(__atomic_load_n(&h->reply_delay_mode, RELAXED) == NEST_DELAY_DEFER) &&
           __atomic_load_n(&h->reply_delay_ns, RELAXED);
}

/* What a deferral made of a send (defer_send, defer_sendmsg, defer_sendfile: `expr`): its bytes
 * queued, their count returned to the program; -2: it would have to wait behind the socket's queue and
 * must not (non-blocking): EAGAIN; -1: on to the real call. */
#define DEFERRED(expr) \
    do { \
        if (UNLIKELY(defer_armed())) { \
            long d_ = (expr); \
            if (d_ >= 0) \
                return d_; \
            if (d_ == -2) { \
                errno = EAGAIN; \
                return -1; \
            } \
        } \
    } while (0)

/* In a send wrapper, before its COUNTED: the call's bytes (iov, cnt) queued by defer.c. `can`: the
 * call may be copied; flags: the call's (MSG_DONTWAIT: it must not wait). */
#define DEFERRABLE(fd, iov, cnt, can, code, flags) DEFERRED(defer_send((fd), (iov), (cnt), (can), (code), (flags)))

#pragma GCC visibility pop

#endif
