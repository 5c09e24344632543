/*
 * seqlock.h - the seqlocks that guard every counter block (nestintercept.h, "Concurrency"), which are
 * also the writers' lock: the fast path (one compare-and-swap, inline) and the slow paths of
 * seqlock.c (waiting for a live holder, taking over from a dead one, never waiting for itself).
 */
#ifndef NEST_SEQLOCK_H
#define NEST_SEQLOCK_H

#include "internal.h"

#pragma GCC visibility push(hidden)

extern TLS uint32_t t_tid;             /* this thread's id (0: not known yet; reset after fork) */

uint64_t seq_lock_slow(uint64_t *seq, uint32_t tid, int *why);
uint64_t seq_force(uint64_t *seq);
void seq_heal(uint64_t *seq);
int thread_gone(uint32_t tid);
void nap(unsigned i);
void seqlock_attach(struct nest_header *h);   /* where `forced` is counted (NULL: nowhere) */
void seqlock_after_fork(void);

static inline uint32_t my_tid(void) {
    uint32_t t = t_tid;
    if (UNLIKELY(!t))
        t_tid = t = (uint32_t)syscall(SYS_gettid) & 0x7fffffffu;
    return t;
}

#define SEQ_LOW 0xffffffffull

static inline uint64_t seq_mine(uint64_t s, uint32_t tid) {   /* the held value, from s */
    return (s & ~SEQ_LOW) | ((uint64_t)tid << 1) | 1u;
}

/* One attempt: the odd value held, or 0 if it is held by someone. */
static inline uint64_t seq_trylock(uint64_t *seq, uint32_t tid) {
    uint64_t s = __atomic_load_n(seq, RELAXED);
    if (s & 1)
        return 0;
    uint64_t h = seq_mine(s, tid);
    return __atomic_compare_exchange_n(seq, &s, h, 0, __ATOMIC_ACQUIRE, RELAXED) ? h : 0;
}

static inline void seq_unlock(uint64_t *seq, uint64_t held) {
    __atomic_store_n(seq, (held & ~SEQ_LOW) + (1ull << 32), __ATOMIC_RELEASE);
}


/* Take *seq (even -> odd, naming this thread). Returns the odd value held, or 0 (seq_lock_slow). */
static inline uint64_t seq_lock(uint64_t *seq) {
    uint32_t tid = my_tid();
    uint64_t h = seq_trylock(seq, tid);
    if (LIKELY(h))
        return h;
    int why = 0;
    return seq_lock_slow(seq, tid, &why);
}

static inline void seq_release(uint64_t *seq, uint64_t held) {
    if (held)
        seq_unlock(seq, held);
}

#pragma GCC visibility pop

#endif
