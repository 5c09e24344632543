/*
 * late.c - call ends applied late (late.h).
 */
#include "late.h"

#include "seqlock.h"
#include "shm.h"

/* Ends that could not take their seqlock (this thread's own, interrupted by the signal handler we
 * run in, or stuck) wait here, in private memory, and are applied as soon as the lock is free: by
 * the next call of any thread (call_end, waits_end) or when the socket closes (retire_slot). So no
 * socket is left showing a call in progress that ended. Only when all NEST_NDEFER places are taken
 * is an end given up (`unended`; the socket shows the call in progress until it closes). */
#define NEST_NDEFER 64
enum { DF_FREE = 0, DF_FILLING, DF_READY, DF_TAKEN };

struct nest_lateend {
    uint32_t st;
    int32_t e;
    int is_call;
    struct nest_slot *s;
    struct nest_dir *d;
    uint64_t gen, t0, t1;
    long r;
};

static struct nest_lateend g_ends[NEST_NDEFER];
struct nest_late g_late;               /* n: entries DF_READY or DF_TAKEN */

void late_end(struct nest_slot *s, struct nest_dir *d, uint64_t gen, uint64_t t0, uint64_t t1,
               long r, int e, int is_call) {
    for (int i = 0; i < NEST_NDEFER; i++) {
        struct nest_lateend *x = &g_ends[i];
        uint32_t f = DF_FREE;
        if (!__atomic_compare_exchange_n(&x->st, &f, DF_FILLING, 0, __ATOMIC_ACQUIRE, RELAXED))
            continue;
        x->s = s;
        x->d = d;
        x->gen = gen;
        x->t0 = t0;
        x->t1 = t1;
        x->r = r;
        x->e = e;
        x->is_call = is_call;
        __atomic_fetch_add(&g_late.n, 1, RELAXED);
        __atomic_store_n(&x->st, DF_READY, __ATOMIC_RELEASE);
        HCOUNT(deferred);
        return;
    }
    HCOUNT(unended);
}

void late_flush(void) {
    uint32_t tid = my_tid();
    for (int i = 0; i < NEST_NDEFER; i++) {
        struct nest_lateend *x = &g_ends[i];
        uint32_t r = DF_READY;
        if (!__atomic_compare_exchange_n(&x->st, &r, DF_TAKEN, 0, __ATOMIC_ACQUIRE, RELAXED))
            continue;
        uint64_t q = seq_trylock(&x->d->seq, tid);
        if (!q) {
            __atomic_store_n(&x->st, DF_READY, __ATOMIC_RELEASE);
            continue;
        }
        end_apply(x->s, x->d, x->gen, x->t0, x->t1, x->r, x->e, x->is_call);
        seq_unlock(&x->d->seq, q);
        __atomic_fetch_sub(&g_late.n, 1, RELAXED);
        __atomic_store_n(&x->st, DF_FREE, __ATOMIC_RELEASE);
    }
}

/* retire_slot, holding the slot's locks: apply its waiting ends before it is closed. */
void late_apply_slot(struct nest_slot *s) {
    if (!__atomic_load_n(&g_late.n, RELAXED))
        return;
    for (int i = 0; i < NEST_NDEFER; i++) {
        struct nest_lateend *x = &g_ends[i];
        if (__atomic_load_n(&x->st, __ATOMIC_ACQUIRE) != DF_READY || x->s != s)
            continue;
        uint32_t r = DF_READY;
        if (!__atomic_compare_exchange_n(&x->st, &r, DF_TAKEN, 0, __ATOMIC_ACQUIRE, RELAXED))
            continue;
        end_apply(x->s, x->d, x->gen, x->t0, x->t1, x->r, x->e, x->is_call);
        __atomic_fetch_sub(&g_late.n, 1, RELAXED);
        __atomic_store_n(&x->st, DF_FREE, __ATOMIC_RELEASE);
    }
}

void late_forget(void) {
    memset(g_ends, 0, sizeof g_ends);
    g_late.n = 0;
}
