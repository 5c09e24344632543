/*
 * call.h - the hot path every intercepted call shares, written once: the slot of the socket
 * (tracked), the application fault's gate (pause_gate), the call timed and counted under its
 * direction's seqlock (call_begin, call_end), its restart when our pause/resume signal interrupted it
 * (RESTART, SOCK_RESTART). COUNT puts them together, after the prologue every wrapper starts with
 * (REAL, reals.h), for the receive and send wrappers (io.c); waits.c does the same for waits.
 *
 * It puts the core and the parts together: the slot (slots.h), the seqlocks (seqlock.h), ends applied
 * late (late.h), the pause gate (pause.h), the message ring (trace.h), the delay fault (defer.h). It
 * is all static inline, in each file that wraps calls (io.c, waits.c), so the compiler inlines as much
 * of it as when the library was one file: no function call and no branch were added to the hot path
 * by the split. The rare paths (first sight of an fd, a busy seqlock, a paused process, a call
 * interrupted by our signal, call ends waiting to be applied) are calls into those files and call.c.
 */
#ifndef NEST_CALL_H
#define NEST_CALL_H

#include "internal.h"

#include "defer.h"
#include "late.h"
#include "pause.h"
#include "reals.h"
#include "seqlock.h"
#include "shm.h"
#include "slots.h"
#include "trace.h"

#pragma GCC visibility push(hidden)

/* call.c: restarting what our pause/resume signal interrupted */
int sock_wait_left(int fd, int dir, uint64_t *t0);
int ms_left(int timeout, uint64_t t0);
void ts_left(const struct timespec *full, uint64_t t0, struct timespec *out);
int poll_r(struct pollfd *fds, nfds_t n, int timeout);

/* ------------------------------------------------------------------------------------------ */
/* Call accounting                                                                            */

struct nest_call {
    struct nest_slot *s;
    struct nest_dir *d;
    uint64_t gen, t0;
    int ok;
};

static inline void call_begin(struct nest_call *c, struct nest_slot *s, int dir) {
    pause_gate();
    c->s = s;
    c->d = &s->dir[dir];
    c->ok = 0;
    c->t0 = now_ns();
    uint64_t q = seq_lock(&c->d->seq);
    if (LIKELY(q)) {
        if (LIKELY(s->state == NEST_OPEN)) {
            c->gen = s->gen;
            c->d->pend_n++;
            c->d->pend_sum += c->t0;
            c->ok = 1;
        }
        seq_unlock(&c->d->seq, q);
    } else {
        lost_call();
    }
}

/* always_inline: in a file of wrappers alone gcc made it a function of its own, 5 instructions more
 * per call than when the library was one file (callgrind, send() failing with EAGAIN); inlined, the
 * hot path is as long as it was. */
static inline __attribute__((always_inline)) void call_finish(struct nest_call *c, uint64_t t1, long r, int e, int is_call) {
    struct nest_dir *d = c->d;
    uint64_t q = seq_lock(&d->seq);
    if (LIKELY(q)) {
        end_apply(c->s, d, c->gen, c->t0, t1, r, e, is_call);
        seq_unlock(&d->seq, q);
    } else {
        late_end(c->s, d, c->gen, c->t0, t1, r, e, is_call);
    }
    c->ok = 0;
}

/* r >= 0: completed (a message of r bytes); r < 0: failed with errno e. */
static inline void call_end(struct nest_call *c, long r, int e) {
    if (LIKELY(c->ok))
        call_finish(c, now_ns(), r, e, 1);
    late_poll();
    pause_gate();
}

/* call_end of a counted receive or send (COUNT): the call also goes into the message ring when
 * tracing, before the pause gate. A receive is stamped when it returned, a send when it was called:
 * the receiver may have the bytes before send() returns (loopback delivers inside the call), and a
 * message must not arrive before it left. */
static inline __attribute__((always_inline)) void call_end_io(struct nest_call *c, long r, int e, int fd, int call) {
    uint64_t t1 = 0;
    if (LIKELY(c->ok)) {
        t1 = now_ns();
        call_finish(c, t1, r, e, 1);
    }
    late_poll();
    struct nest_ring *g = g_trace.ring;
    if (g && r >= 0 && call)
        trace_put(g, c->s, fd, call, r, call >= NEST_C_WRITE ? c->t0 : t1 ? t1 : now_ns());
    pause_gate();
}

/* Runs when a thread is cancelled inside the real call (forced unwind, -fexceptions). */
static inline void call_cleanup(struct nest_call *c) {
    if (UNLIKELY(c->ok))
        call_finish(c, now_ns(), 0, 0, 0);
}

/* Our pause/resume handler ran on this thread since *k (and the call failed with EINTR): restart
 * the call. The program would not have seen the signal without us. */
static inline int ours_since(uint32_t *k) {
    uint32_t now = t_sigs;
    if (now == *k || errno != EINTR)
        return 0;
    *k = now;
    HCOUNT(eintr_retried);
    return 1;
}

#define RESTART(r, expr) \
    do { \
        uint32_t k_ = t_sigs; \
        while (((r) = (expr)) < 0 && UNLIKELY(t_sigs != k_) && ours_since(&k_)) \
            ; \
    } while (0)

#define SOCK_RESTART(r, expr, fd, dir, t0) \
    do { \
        uint32_t k_ = t_sigs; \
        uint64_t t0_ = (t0); \
        while (((r) = (expr)) < 0 && UNLIKELY(t_sigs != k_) && ours_since(&k_) && sock_wait_left(fd, dir, &t0_)) \
            ; \
    } while (0)

/* The waits SA_RESTART does not restart are restarted for what is left of their timeout (waits.c,
 * sleeps.c): their start time, when a retry may need it. */
static inline uint64_t retry_clock(int timed) {
    return timed && g_pause.on ? now_ns() : 0;
}

/* r = expr, where expr waits with the timeout `cur`, restarted when our signal interrupted it with
 * cur set to what is left of the caller's timeout `tmo`: MS_RESTART an int of milliseconds (<= 0 kept
 * as it is), TS_RESTART a const struct timespec * (NULL: none). */
#define MS_RESTART(r, expr, tmo, cur) \
    do { \
        uint32_t k_ = t_sigs; \
        uint64_t t0_ = retry_clock((tmo) > 0); \
        (cur) = (tmo); \
        while (((r) = (expr)) < 0 && UNLIKELY(t_sigs != k_) && ours_since(&k_)) \
            (cur) = ms_left((tmo), t0_); \
    } while (0)

#define TS_RESTART(r, expr, tmo, cur) \
    do { \
        uint32_t k_ = t_sigs; \
        struct timespec full_, left_; \
        if (tmo) \
            full_ = *(tmo); \
        uint64_t t0_ = retry_clock((tmo) != NULL); \
        (cur) = (tmo); \
        while (((r) = (expr)) < 0 && UNLIKELY(t_sigs != k_) && ours_since(&k_)) \
            if (tmo) { \
                ts_left(&full_, t0_, &left_); \
                (cur) = &left_; \
            } \
    } while (0)

/* A counted receive or send call of the real function `name` on fd (dir NEST_IN or NEST_OUT):
 * r = expr, restarted when our signal interrupted it (SOCK_RESTART); when fd is a socket with a slot,
 * timed and counted, completed (`bytes`, an expression of r, >= 0: a message of that many bytes) or
 * failed (< 0: an error, unless errno says it would block). errno is the call's afterwards.
 * Tracing on (g_ring), a completed call is also an event in the message ring (call_end_io). */
#define COUNT(name, rtype, dir, fd, r, expr, bytes) COUNT_AS(name, TRC_##name, rtype, dir, fd, r, expr, bytes)

/* COUNT with the call's code in the message trace given (`code`: NEST_C_*, or 0: not traced, e.g. a
 * receive with MSG_PEEK, which leaves the bytes for the next one). */
#define COUNT_AS(name, code, rtype, dir, fd, r, expr, bytes) \
    do { \
        REAL(name, rtype); \
        struct nest_slot *s_ = tracked(fd); \
        if (!s_) { \
            SOCK_RESTART(r, expr, fd, dir, 0); \
            break; \
        } \
        if ((dir) == NEST_OUT) \
            reply_gate(s_); \
        struct nest_call c_ __attribute__((cleanup(call_cleanup))); \
        call_begin(&c_, s_, dir); \
        SOCK_RESTART(r, expr, fd, dir, c_.t0); \
        int e_ = errno; \
        call_end_io(&c_, (bytes), e_, fd, (code)); \
        errno = e_; \
    } while (0)

/* The whole body of a wrapper that is a counted call of its real function, returning what it did. */
#define COUNTED(name, rtype, dir, fd, expr) \
    do { \
        rtype r_; \
        COUNT(name, rtype, dir, fd, r_, expr, (long)r_); \
        return r_; \
    } while (0)

#pragma GCC visibility pop

#endif
