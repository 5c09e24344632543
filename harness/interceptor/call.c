/*
 * call.c - the rare paths of a counted call (the hot path is inline in call.h): call ends that
 * could not take their seqlock, applied late; calls our pause/resume signal interrupted that
 * SA_RESTART does not restart, restarted for what is left of their timeout.
 */
#include "call.h"

/* Ends that could not take their seqlock (this thread's own, interrupted by the signal handler we
 * run in, or stuck) wait here, in private memory, and are applied as soon as the lock is free: by
 * the next call of any thread (call_end, waits_end) or when the socket closes (retire_slot). So no
 * socket is left showing a call in progress that ended. Only when all NEST_NDEFER places are taken
 * is an end given up (`unended`; the socket shows the call in progress until it closes). */
#define NEST_NDEFER 64
enum { DF_FREE = 0, DF_FILLING, DF_READY, DF_TAKEN };

struct nest_defer {
    uint32_t st;
    int32_t e;
    int is_call;
    struct nest_slot *s;
    struct nest_dir *d;
    uint64_t gen, t0, t1;
    long r;
};

static struct nest_defer g_defer[NEST_NDEFER];
uint32_t g_defer_n;                    /* entries DF_READY or DF_TAKEN */

void defer_end(struct nest_slot *s, struct nest_dir *d, uint64_t gen, uint64_t t0, uint64_t t1,
               long r, int e, int is_call) {
    for (int i = 0; i < NEST_NDEFER; i++) {
        struct nest_defer *x = &g_defer[i];
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
        __atomic_fetch_add(&g_defer_n, 1, RELAXED);
        __atomic_store_n(&x->st, DF_READY, __ATOMIC_RELEASE);
        HCOUNT(deferred);
        return;
    }
    HCOUNT(unended);
}

void defer_flush(void) {
    uint32_t tid = my_tid();
    for (int i = 0; i < NEST_NDEFER; i++) {
        struct nest_defer *x = &g_defer[i];
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
        __atomic_fetch_sub(&g_defer_n, 1, RELAXED);
        __atomic_store_n(&x->st, DF_FREE, __ATOMIC_RELEASE);
    }
}

/* retire_slot, holding the slot's locks: apply its waiting ends before it is closed. */
void defer_apply_slot(struct nest_slot *s) {
    if (!__atomic_load_n(&g_defer_n, RELAXED))
        return;
    for (int i = 0; i < NEST_NDEFER; i++) {
        struct nest_defer *x = &g_defer[i];
        if (__atomic_load_n(&x->st, __ATOMIC_ACQUIRE) != DF_READY || x->s != s)
            continue;
        uint32_t r = DF_READY;
        if (!__atomic_compare_exchange_n(&x->st, &r, DF_TAKEN, 0, __ATOMIC_ACQUIRE, RELAXED))
            continue;
        end_apply(x->s, x->d, x->gen, x->t0, x->t1, x->r, x->e, x->is_call);
        __atomic_fetch_sub(&g_defer_n, 1, RELAXED);
        __atomic_store_n(&x->st, DF_FREE, __ATOMIC_RELEASE);
    }
}

void defer_forget(void) {
    memset(g_defer, 0, sizeof g_defer);
    g_defer_n = 0;
}

/* The delay fault's hold (reply_gate, call.h): `ns` from now, whatever signal comes meanwhile. */
void reply_hold(uint64_t ns) {
    int saved = errno;
    struct timespec ts;
    uint64_t until = now_ns() + ns;
    ts.tv_sec = (time_t)(until / 1000000000ull);
    ts.tv_nsec = (long)(until % 1000000000ull);
    while (syscall(SYS_clock_nanosleep, CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) != 0 && errno == EINTR)
        ;
    HCOUNT(replies_delayed);
    errno = saved;
}

/* ------------------------------------------------------------------------------------------ */
/* Restarting what our signal interrupted                                                     */

/* Our signal interrupted a call on fd that SA_RESTART did not restart: a socket with a receive or
 * send timeout (dir: which one). Wait for the socket to be ready for what is left of the timeout,
 * counted from *t0 (0: unknown, from now): 1 = call again, 0 = no (timed out: EAGAIN, as the call
 * would have; or the program's own signal came: EINTR). Not a socket, or no timeout: call again. */
int sock_wait_left(int fd, int dir, uint64_t *t0) {
    struct timeval tv = {0, 0};
    socklen_t l = sizeof tv;
    int saved = errno;
    if (getsockopt(fd, SOL_SOCKET, dir == NEST_IN ? SO_RCVTIMEO : SO_SNDTIMEO, &tv, &l) != 0 ||
        (!tv.tv_sec && !tv.tv_usec)) {
        errno = saved;
        return 1;
    }
    uint64_t t = now_ns();
    if (!*t0)
        *t0 = t;
    uint64_t total = (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull, el = t - *t0;
    if (el >= total) {
        errno = EAGAIN;
        return 0;
    }
    struct pollfd p = {fd, dir == NEST_IN ? POLLIN : POLLOUT, 0};
    int n = poll_r(&p, 1, (int)((total - el + 999999) / 1000000));
    if (n == 0)
        errno = EAGAIN;
    if (n <= 0)
        return 0;
    errno = saved;
    return 1;
}

int ms_left(int timeout, uint64_t t0) {
    if (timeout < 0)
        return timeout;
    uint64_t total = (uint64_t)timeout * 1000000ull, el = now_ns() - t0;
    return el >= total ? 0 : (int)((total - el + 999999) / 1000000);
}

void ts_left(const struct timespec *full, uint64_t t0, struct timespec *out) {
    uint64_t total = (uint64_t)full->tv_sec * 1000000000ull + (uint64_t)full->tv_nsec;
    uint64_t el = now_ns() - t0, left = el >= total ? 0 : total - el;
    out->tv_sec = (time_t)(left / 1000000000ull);
    out->tv_nsec = (long)(left % 1000000000ull);
}
