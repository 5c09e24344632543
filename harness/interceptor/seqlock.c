/*
 * seqlock.c - the seqlocks' slow paths. The fast path (one compare-and-swap) is inline in
 * seqlock.h; here a writer that found the lock held waits for a live holder, takes it over from a
 * dead one and never waits for itself (nestintercept.h, Concurrency).
 */
#include "seqlock.h"

#include "env.h"
#include "reals.h"

static uint64_t *g_stuck_seq;          /* a seqlock that outlasted the wait (and its value then): */
static uint64_t g_stuck_val;           /* later writers give up on it at once while it stays so */
static uint64_t *g_forced;             /* the header's `forced` */
TLS uint32_t t_tid;

void seqlock_attach(struct nest_header *h) { g_forced = h ? &h->forced : NULL; }

void seqlock_after_fork(void) {
    t_tid = 0;   /* this thread has another id in the child */
    g_stuck_seq = NULL;
}

static void count_forced(void) {
    uint64_t *f = g_forced;
    if (f)
        __atomic_fetch_add(f, 1, RELAXED);
}

int thread_gone(uint32_t tid) {   /* tid is no thread of this process any more */
    if (!tid || !g_env.pid)
        return 0;
    return syscall(SYS_tgkill, g_env.pid, tid, 0) != 0 && errno == ESRCH;
}

void nap(unsigned i) {            /* back off: 20 us, doubling to 1 ms */
    unsigned sh = i > 6 ? 6 : i;
    struct timespec ts = {0, (long)(20000u << sh) > 1000000 ? 1000000 : (long)(20000u << sh)};
    ENSURE(clock_nanosleep);
    if (real_clock_nanosleep)
        real_clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
    else
        sched_yield();
}

enum { SEQ_SELF = 1, SEQ_STUCK = 2 };

/* Wait for *seq: the odd value held, or 0 with *why = SEQ_SELF (this thread holds it: a signal
 * handler that interrupted its own thread inside the library; waiting would never end) or SEQ_STUCK
 * (a live holder kept the same value for g_lock_wait_ns; or an earlier writer found it so and it has
 * not changed since). A holder that is not a thread of ours any more is taken over (forced). */
uint64_t seq_lock_slow(uint64_t *seq, uint32_t tid, int *why) {
    int saved = errno;
    uint64_t last = 0, since = 0, h = 0;
    for (unsigned i = 0;; i++) {
        uint64_t s = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (!(s & 1)) {
            h = seq_mine(s, tid);
            if (__atomic_compare_exchange_n(seq, &s, h, 0, __ATOMIC_ACQUIRE, RELAXED))
                break;
            continue;
        }
        uint32_t owner = NEST_SEQ_OWNER(s);
        if (owner == tid) {
            *why = SEQ_SELF;
            h = 0;
            break;
        }
        if (seq == __atomic_load_n(&g_stuck_seq, RELAXED) && s == __atomic_load_n(&g_stuck_val, RELAXED)) {
            *why = SEQ_STUCK;
            h = 0;
            break;
        }
        if (s != last) {                  /* it changed hands: whoever holds it now is new */
            last = s;
            since = 0;
        }
        if (i < 64) {
            cpu_relax();
            continue;
        }
        if (i < 128) {
            sched_yield();
            continue;
        }
        uint64_t t = now_ns();
        if (!since)
            since = t;
        if ((i & 3) == 0 && thread_gone(owner)) {
            h = seq_mine(s, tid);
            if (__atomic_compare_exchange_n(seq, &s, h, 0, __ATOMIC_ACQUIRE, RELAXED)) {
                count_forced();
                break;
            }
            continue;
        }
        if (t - since >= g_env.lock_wait_ns) {
            __atomic_store_n(&g_stuck_val, s, RELAXED);
            __atomic_store_n(&g_stuck_seq, seq, RELAXED);
            *why = SEQ_STUCK;
            h = 0;
            break;
        }
        nap(i - 128);
    }
    errno = saved;
    return h;
}

/* For the rare paths that must change a slot (install, retire, endpoints): take it, or, when it is
 * this thread's own (we interrupted it) or stuck, go ahead without it: returns 0 then, and the
 * caller must not release it. Going ahead past a live holder is counted in `forced`. */
uint64_t seq_force(uint64_t *seq) {
    uint32_t tid = my_tid();
    uint64_t h = seq_trylock(seq, tid);
    if (LIKELY(h))
        return h;
    int why = 0;
    h = seq_lock_slow(seq, tid, &why);
    if (!h && why == SEQ_STUCK)
        count_forced();
    return h;
}

/* Release a lock we went ahead without (install_slot): a new socket starts with a usable lock. */
void seq_heal(uint64_t *seq) {
    __atomic_store_n(seq, (__atomic_load_n(seq, RELAXED) & ~SEQ_LOW) + (1ull << 32), __ATOMIC_RELEASE);
}
