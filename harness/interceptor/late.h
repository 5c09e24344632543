/*
 * late.h - the end of a call that could not take its seqlock (held by this very thread, interrupted
 * by our signal handler, or stuck) is kept in private memory and applied late, by the next call of
 * any thread or when the socket closes (late.c): no socket is left showing a call in progress that
 * ended. The end itself (end_apply) is written once, here.
 */
#ifndef NEST_LATE_H
#define NEST_LATE_H

#include "internal.h"

#pragma GCC visibility push(hidden)

struct nest_late {
    uint32_t n;                        /* ends waiting to be applied (read on every call) */
};

extern struct nest_late g_late;

void late_end(struct nest_slot *s, struct nest_dir *d, uint64_t gen, uint64_t t0, uint64_t t1, long r, int e,
              int is_call);
void late_flush(void);
void late_apply_slot(struct nest_slot *s);
void late_forget(void);

static inline int is_error(int e) {
    return !(e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == EINPROGRESS || e == EALREADY ||
             e == EISCONN);
}

/* The end of a call or wait: it is no longer in progress; a call is a message or an error. */
static inline void end_apply(struct nest_slot *s, struct nest_dir *d, uint64_t gen, uint64_t t0,
                             uint64_t t1, long r, int e, int is_call) {
    if (LIKELY(s->gen == gen && s->state == NEST_OPEN)) {
        d->pend_n--;
        d->pend_sum -= t0;
        d->wait_ns += t1 - t0;
        if (is_call) {
            if (r >= 0) {
                d->msgs++;
                d->bytes += (uint64_t)r;
            } else if (is_error(e)) {
                d->errors++;
            }
            d->last_ns = t1;
        }
    }
}

/* Apply the ends waiting, if any (after every call). */
static inline void late_poll(void) {
    if (UNLIKELY(__atomic_load_n(&g_late.n, RELAXED)))
        late_flush();
}

#pragma GCC visibility pop

#endif
