/*
 * waits.c - poll, ppoll, select, pselect, epoll_wait, epoll_pwait, epoll_pwait2: the time spent
 * waiting goes to every socket waited on, by direction of interest (POLLIN/readfds/EPOLLIN -> in,
 * POLLOUT/writefds/EPOLLOUT -> out; epoll sets are followed from epoll_ctl). Not restarted by
 * SA_RESTART: when our signal interrupts one it goes on here, for what is left of its timeout
 * (measured on CLOCK_MONOTONIC from the first start).
 */
#include "call.h"

/* Poll-type waits: the elapsed time goes to every socket in the set, by direction of interest. */
struct nest_wait_ent {
    struct nest_slot *s;
    uint64_t gen;
    uint8_t dir, ok;
};

struct nest_waits {
    struct nest_wait_ent *e;
    size_t n, cap;
    uint64_t t0;
    struct nest_wait_ent local[32];
    int heap;
};

static void waits_init(struct nest_waits *w) {
    w->e = w->local;
    w->n = 0;
    w->cap = sizeof w->local / sizeof w->local[0];
    w->heap = 0;
}

static void waits_add(struct nest_waits *w, int fd, int dir) {
    struct nest_slot *s = tracked(fd);
    if (!s)
        return;
    if (w->n == w->cap) {
        size_t cap = w->cap * 4;
        struct nest_wait_ent *e = malloc(cap * sizeof *e);
        if (!e)
            return;
        memcpy(e, w->e, w->n * sizeof *e);
        if (w->heap)
            free(w->e);
        w->e = e;
        w->cap = cap;
        w->heap = 1;
    }
    struct nest_wait_ent *x = &w->e[w->n++];
    x->s = s;
    x->dir = (uint8_t)dir;
    x->ok = 0;
}

static void waits_begin(struct nest_waits *w) {
    w->t0 = now_ns();
    for (size_t i = 0; i < w->n; i++) {
        struct nest_wait_ent *x = &w->e[i];
        struct nest_dir *d = &x->s->dir[x->dir];
        uint64_t q = seq_lock(&d->seq);
        if (!q) {
            lost_call();
            continue;
        }
        if (x->s->state == NEST_OPEN) {
            x->gen = x->s->gen;
            d->pend_n++;
            d->pend_sum += w->t0;
            x->ok = 1;
        }
        seq_unlock(&d->seq, q);
    }
}

static void waits_end(struct nest_waits *w) {
    uint64_t t1 = w->n ? now_ns() : 0;
    for (size_t i = 0; i < w->n; i++) {
        struct nest_wait_ent *x = &w->e[i];
        if (!x->ok)
            continue;
        struct nest_dir *d = &x->s->dir[x->dir];
        uint64_t q = seq_lock(&d->seq);
        if (q) {
            end_apply(x->s, d, x->gen, w->t0, t1, 0, 0, 0);
            seq_unlock(&d->seq, q);
        } else {
            late_end(x->s, d, x->gen, w->t0, t1, 0, 0, 0);
        }
        x->ok = 0;
    }
    if (w->heap)
        free(w->e);
    w->heap = 0;
    w->n = 0;
    late_poll();
}

static void waits_cleanup(struct nest_waits *w) {
    if (w->n)
        waits_end(w);
}

/* The program's array of n bytes at p may be read before the real call: not NULL or a small number,
 * not beyond user space, no wrap (a cheap check, no system call: an unmapped address inside user space
 * is still read). Else the wait is not counted and the real call says EFAULT, as without us. */
static inline int plausible(const void *p, size_t n) {
    uintptr_t a = (uintptr_t)p;
    return a >= 4096 && n <= (1ull << 40) && a + n >= a && a + n <= 0x7ffffffff000ull;
}

static void waits_from_pollfds(struct nest_waits *w, const struct pollfd *fds, nfds_t n) {
    if (n > (1u << 20) || !plausible(fds, n * sizeof *fds))
        return;
    for (nfds_t i = 0; i < n; i++) {
        if (fds[i].fd < 0)
            continue;
        if (fds[i].events & (POLLIN | POLLPRI | POLLRDHUP | POLLRDNORM | POLLRDBAND))
            waits_add(w, fds[i].fd, NEST_IN);
        if (fds[i].events & (POLLOUT | POLLWRNORM | POLLWRBAND))
            waits_add(w, fds[i].fd, NEST_OUT);
    }
}

static void waits_from_fdsets(struct nest_waits *w, int nfds, const fd_set *r, const fd_set *wr) {
    if (nfds > FD_SETSIZE)
        nfds = FD_SETSIZE;
    if (nfds <= 0 || (r && !plausible(r, (size_t)(nfds + 7) / 8)) || (wr && !plausible(wr, (size_t)(nfds + 7) / 8)))
        return;
    for (int fd = 0; fd < nfds; fd++) {
        if (r && FD_ISSET(fd, r))
            waits_add(w, fd, NEST_IN);
        if (wr && FD_ISSET(fd, wr))
            waits_add(w, fd, NEST_OUT);
    }
}

static void waits_from_epoll(struct nest_waits *w, int epfd) {
    if ((unsigned)epfd >= g_core.nslots)
        return;
    uint32_t m = __atomic_load_n(&g_core.hdr->max_fd, RELAXED);
    for (uint32_t fd = 0; fd < m && fd < g_core.nslots; fd++) {
        if (__atomic_load_n(&g_fds.ep_owner[fd], RELAXED) != epfd + 1 || g_fds.kind[fd] != K_SOCK)
            continue;
        uint32_t ev = __atomic_load_n(&g_fds.ep_events[fd], RELAXED);
        if (ev & (EPOLLIN | EPOLLPRI | EPOLLRDHUP))
            waits_add(w, (int)fd, NEST_IN);
        if (ev & EPOLLOUT)
            waits_add(w, (int)fd, NEST_OUT);
    }
}

/* The whole body of a wait wrapper: the real function `name`, and the sockets `fill` puts in w_
 * waiting during expr. */
#define WAIT(name, rtype, fill, expr) \
    do { \
        REAL(name, rtype); \
        if (!g_core.on) \
            return expr; \
        struct nest_waits w_ __attribute__((cleanup(waits_cleanup))); \
        waits_init(&w_); \
        fill; \
        if (!w_.n) \
            return expr; \
        waits_begin(&w_); \
        rtype r_ = expr; \
        int e_ = errno; \
        waits_end(&w_); \
        errno = e_; \
        return r_; \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* Restarted after our signal                                                                 */

static int ppoll_r(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask) {
    int r;
    const struct timespec *cur;
    TS_RESTART(r, real_ppoll(fds, n, cur, mask), tmo, cur);
    return r;
}

/* select: Linux leaves the time not slept in *tmo, and the sets as they were after EINTR. */
static int select_r(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tmo) {
    uint32_t k = t_sigs;
    struct timespec full, left;
    if (tmo) {
        full.tv_sec = tmo->tv_sec;
        full.tv_nsec = tmo->tv_usec * 1000;
    }
    uint64_t t0 = retry_clock(tmo != NULL);
    int r;
    while ((r = real_select(nfds, rd, wr, ex, tmo)) < 0 && UNLIKELY(t_sigs != k) && ours_since(&k)) {
        if (tmo) {
            ts_left(&full, t0, &left);
            tmo->tv_sec = left.tv_sec;
            tmo->tv_usec = (left.tv_nsec + 999) / 1000;
        }
    }
    return r;
}

static int pselect_r(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *tmo,
                     const sigset_t *mask) {
    int r;
    const struct timespec *cur;
    TS_RESTART(r, real_pselect(nfds, rd, wr, ex, cur, mask), tmo, cur);
    return r;
}

static int epoll_wait_r(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask,
                        int pwait) {
    int r, cur;
    MS_RESTART(r, pwait ? real_epoll_pwait(epfd, ev, max, cur, mask) : real_epoll_wait(epfd, ev, max, cur), timeout,
               cur);
    return r;
}

static int epoll_pwait2_r(int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
                          const sigset_t *mask) {
    int r;
    const struct timespec *cur;
    TS_RESTART(r, real_epoll_pwait2(epfd, ev, max, cur, mask), tmo, cur);
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* The waits                                                                                  */

EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout) {
    WAIT(poll, int, waits_from_pollfds(&w_, fds, n), poll_r(fds, n, timeout));
}

EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen) {
    ENSURE(__poll_chk);
    if (fdslen / sizeof *fds < n && real___poll_chk)
        return real___poll_chk(fds, n, timeout, fdslen);
    return poll(fds, n, timeout);
}

EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask) {
    WAIT(ppoll, int, waits_from_pollfds(&w_, fds, n), ppoll_r(fds, n, tmo, mask));
}

EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *tmo,
                       const sigset_t *mask, size_t fdslen) {
    ENSURE(__ppoll_chk);
    if (fdslen / sizeof *fds < n && real___ppoll_chk)
        return real___ppoll_chk(fds, n, tmo, mask, fdslen);
    return ppoll(fds, n, tmo, mask);
}

EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *x, struct timeval *tmo) {
    WAIT(select, int, waits_from_fdsets(&w_, nfds, r, w), select_r(nfds, r, w, x, tmo));
}

EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *x, const struct timespec *tmo,
                   const sigset_t *mask) {
    WAIT(pselect, int, waits_from_fdsets(&w_, nfds, r, w), pselect_r(nfds, r, w, x, tmo, mask));
}

EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout) {
    WAIT(epoll_wait, int, waits_from_epoll(&w_, epfd), epoll_wait_r(epfd, ev, max, timeout, NULL, 0));
}

EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask) {
    WAIT(epoll_pwait, int, waits_from_epoll(&w_, epfd), epoll_wait_r(epfd, ev, max, timeout, mask, 1));
}

EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
                        const sigset_t *mask) {
    WAIT(epoll_pwait2, int, waits_from_epoll(&w_, epfd), epoll_pwait2_r(epfd, ev, max, tmo, mask));
}

/* ------------------------------------------------------------------------------------------ */
/* epoll sets                                                                                 */

EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) {
    REAL(epoll_ctl, int);
    int r = real_epoll_ctl(epfd, op, fd, ev);
    if (r != 0 || !g_core.on || (unsigned)fd >= g_core.nslots || (unsigned)epfd >= g_core.nslots)
        return r;
    int e = errno;
    uint32_t k = K_OTHER;
    __atomic_compare_exchange_n(&g_fds.kind[epfd], &k, K_EPOLL, 0, RELAXED, RELAXED);
    k = K_UNKNOWN;
    __atomic_compare_exchange_n(&g_fds.kind[epfd], &k, K_EPOLL, 0, RELAXED, RELAXED);
    if (op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) {
        if (tracked(fd)) {
            __atomic_store_n(&g_fds.ep_events[fd], ev ? ev->events : 0, RELAXED);
            __atomic_store_n(&g_fds.ep_owner[fd], epfd + 1, RELAXED);
        }
    } else if (op == EPOLL_CTL_DEL) {
        int32_t o = epfd + 1;
        __atomic_compare_exchange_n(&g_fds.ep_owner[fd], &o, 0, 0, RELAXED, RELAXED);
    }
    errno = e;
    return r;
}

static int new_epoll_fd(int r) {
    if (r >= 0 && g_core.on && (unsigned)r < g_core.nslots) {
        int e = errno;
        fresh_fd(r);
        __atomic_store_n(&g_fds.kind[r], K_EPOLL, __ATOMIC_RELEASE);
        errno = e;
    }
    return r;
}

EXPORT int epoll_create(int size) {
    REAL(epoll_create, int);
    return new_epoll_fd(real_epoll_create(size));
}

EXPORT int epoll_create1(int flags) {
    REAL(epoll_create1, int);
    return new_epoll_fd(real_epoll_create1(flags));
}
