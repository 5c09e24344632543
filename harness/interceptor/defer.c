/*
 * defer.c - the delay fault at an event loop (header.reply_delay_mode NEST_DELAY_DEFER; nginx and
 * memcached, where one thread answers many connections and the hold of call.c would stop them all).
 *
 * A send that starts a reply (reply_starts, call.h: an accepted socket whose last completed call is a
 * receive), and every send after it on that socket while anything is queued there, is copied into the
 * socket's queue and reported to the program as sent in full; the library's own thread (one per
 * process, started at the first deferral, again in a fork child) writes each chunk `reply_delay_ns`
 * after the program's call, in order, waiting for POLLOUT when the socket is full. The sends are
 * counted, and traced, when that thread completes them (with the program thread's id), so the
 * counters and the message trace show the reply leaving late, as they do for a hold.
 *
 * A close() or shutdown(SHUT_WR) of a socket with queued data is done by that thread once the queue
 * is drained; the close takes the socket out of the program's epoll set at once (a close would), and
 * the fd number stays taken until then. Memory: at most NESTLAB_DEFER_MAX_BYTES queued in a process
 * (default 64 MiB): past that a new reply is sent at once, and a send behind queued data waits until
 * its socket's queue is drained (the order of a stream is kept); both are counted in
 * header.replies_undeferred. A process that exits (exit(), not _exit()) with replies queued waits for
 * them, at most until the last one is due and 1 s more; killed, it loses them, as if it crashed.
 */
#include "call.h"

#include <sys/eventfd.h>

struct chunk {
    struct chunk *next;
    uint64_t due, gen;
    uint32_t tid;
    int call;
    size_t len, off;
    char data[];
};

struct pend {
    struct chunk *head, *tail;
    uint8_t close_after, shut_after;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_drained = PTHREAD_COND_INITIALIZER;
static struct pend *g_pend;          /* per fd, g_nslots entries, made at the first deferral */
static struct pollfd *g_pfd;         /* the thread's poll set: the wake-up fd, then full sockets */
static int g_wake = -1;              /* eventfd: a socket got its first chunk */
static int g_thread_on;
static uint32_t g_hi;                /* fds below this may have a queue */
static uint64_t g_bytes;
uint64_t g_defer_cap = 64ull << 20;  /* init.c: NESTLAB_DEFER_MAX_BYTES */
uint32_t g_pend_n;                   /* sockets with data queued or a close waiting (read on every send) */

static int active(const struct pend *p) { return p->head || p->close_after || p->shut_after; }

/* A completed (r >= 0) or failed send of a chunk, counted and traced as the program's call, at `t`:
 * when its last write was called (the peer may have its bytes, and answer, before that write returns;
 * a later stamp would make the next request look older than this reply: reply_starts). */
static void account(int fd, const struct chunk *c, long r, int e, uint64_t t) {
    struct nest_slot *s = &g_slots[fd];
    struct nest_dir *d = &s->dir[NEST_OUT];
    uint64_t q = seq_lock(&d->seq);
    if (!q) {
        lost_call();
        return;
    }
    int mine = s->gen == c->gen && s->state == NEST_OPEN;
    if (mine) {
        if (r >= 0) {
            d->msgs++;
            d->bytes += (uint64_t)r;
        } else if (is_error(e)) {
            d->errors++;
        }
        d->last_ns = t;
    }
    seq_unlock(&d->seq, q);
    struct nest_ring *g = g_ring;
    if (mine && g && r >= 0 && c->call)
        trace_put_tid(g, s, fd, c->call, r, t, c->tid);
}

static void pop(struct pend *p) {
    struct chunk *c = p->head;
    p->head = c->next;
    if (!p->head)
        p->tail = NULL;
    g_bytes -= c->len;
    __atomic_store_n(&g_hdr->deferred_bytes, g_bytes, RELAXED);
    free(c);
}

/* Under g_mu: write fd's chunks that are due; 1 when the socket is full (wait for POLLOUT). */
static int drain_fd(int fd, struct pend *p, uint64_t now) {
    struct chunk *c;
    while ((c = p->head) && c->due <= now) {
        uint64_t t = now_ns();
        ssize_t r = real_send(fd, c->data + c->off, c->len - c->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 1;
        if (r < 0) {                   /* the peer is gone: the rest of the stream goes nowhere */
            account(fd, c, -1, errno, t);
            while (p->head)
                pop(p);
            return 0;
        }
        c->off += (size_t)r;
        if (c->off == c->len) {
            account(fd, c, (long)c->len, 0, t);
            pop(p);
        }
    }
    return 0;
}

/* Under g_mu: fd's queue is empty; the close or shutdown the program asked for meanwhile. */
static void finish(int fd, struct pend *p) {
    if (p->shut_after)
        real_shutdown(fd, SHUT_WR);
    if (p->close_after) {
        forget_begin(fd);
        real_close(fd);
        forget_end(fd);
    }
    p->close_after = p->shut_after = 0;
    __atomic_fetch_sub(&g_pend_n, 1, RELAXED);
    pthread_cond_broadcast(&g_drained);
}

static void *drainer(void *arg) {
    (void)arg;
    my_tid();
    pthread_mutex_lock(&g_mu);
    for (;;) {
        uint64_t now = now_ns(), next = UINT64_MAX;
        nfds_t np = 1;
        int emptied = 0;
        for (uint32_t fd = 0; fd < g_hi; fd++) {
            struct pend *p = &g_pend[fd];
            if (!active(p))
                continue;
            if (drain_fd((int)fd, p, now))
                g_pfd[np++] = (struct pollfd){(int)fd, POLLOUT, 0};
            else if (p->head)
                next = p->head->due < next ? p->head->due : next;
            else {
                finish((int)fd, p);
                emptied = 1;
            }
        }
        if (emptied)
            pthread_cond_broadcast(&g_drained);
        g_pfd[0] = (struct pollfd){g_wake, POLLIN, 0};
        pthread_mutex_unlock(&g_mu);
        struct timespec ts, *tp = NULL;
        if (next != UINT64_MAX) {
            uint64_t w = next > now ? next - now : 0;
            ts.tv_sec = (time_t)(w / 1000000000ull);
            ts.tv_nsec = (long)(w % 1000000000ull);
            tp = &ts;
        }
        real_ppoll(g_pfd, np, tp, NULL);
        if (g_pfd[0].revents & POLLIN) {
            uint64_t v;
            while (real_read(g_wake, &v, sizeof v) < 0 && errno == EINTR)
                ;
        }
        pthread_mutex_lock(&g_mu);
    }
    return NULL;
}

/* Under g_mu: the queues and the thread exist (made once per process); 0 if they cannot be. */
static int ready(void) {
    if (LIKELY(g_thread_on))
        return 1;
    ENSURE(send);
    ENSURE(ppoll);
    ENSURE(shutdown);
    if (!real_send || !real_ppoll || !real_read || !real_close)
        return 0;
    if (!g_pend)
        g_pend = calloc(g_nslots, sizeof *g_pend);
    if (!g_pfd)
        g_pfd = calloc((size_t)g_nslots + 1, sizeof *g_pfd);
    if (g_wake < 0)
        g_wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (!g_pend || !g_pfd || g_wake < 0)
        return 0;
    sigset_t all, old;
    sigfillset(&all);
    real_pthread_sigmask(SIG_SETMASK, &all, &old);   /* the thread takes no signal, ours neither */
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_t th;
    g_thread_on = pthread_create(&th, &a, drainer, NULL) == 0;
    pthread_attr_destroy(&a);
    real_pthread_sigmask(SIG_SETMASK, &old, NULL);
    return g_thread_on;
}

/* Under g_mu: 1 = queue this send of len bytes on fd, due at *due; 0 = the caller makes it now
 * (after fd's queue drained, so that the stream keeps its order). `can`: the call can be copied. */
static int decide(int fd, struct nest_slot *s, size_t len, int can, uint64_t *due) {
    struct pend *p = &g_pend[fd];
    uint64_t d = __atomic_load_n(&g_hdr->reply_delay_ns, RELAXED);
    int defer = d && __atomic_load_n(&g_hdr->reply_delay_mode, RELAXED) == NEST_DELAY_DEFER;
    if (!p->head) {
        if (!defer || !reply_starts(s))
            return 0;
        if (!can || g_bytes + len > g_defer_cap) {
            HCOUNT(replies_undeferred);
            return 0;
        }
        HCOUNT(replies_delayed);
    } else if (!can || g_bytes + len > g_defer_cap) {
        HCOUNT(replies_undeferred);
        while (p->head)
            pthread_cond_wait(&g_drained, &g_mu);
        return 0;
    }
    *due = now_ns() + (defer ? d : 0);
    return 1;
}

/* Under g_mu: c (its data filled) at the end of fd's queue. */
static void enqueue(int fd, struct nest_slot *s, struct chunk *c, int call, uint64_t due) {
    struct pend *p = &g_pend[fd];
    c->next = NULL;
    c->due = due;
    c->gen = s->gen;
    c->tid = my_tid();
    c->call = call;
    c->off = 0;
    g_bytes += c->len;
    __atomic_store_n(&g_hdr->deferred_bytes, g_bytes, RELAXED);
    int was = active(p);
    if (p->tail)
        p->tail->next = c;
    else
        p->head = c;
    p->tail = c;
    if (!was) {
        __atomic_fetch_add(&g_pend_n, 1, RELAXED);
        if ((uint32_t)fd >= g_hi)
            g_hi = (uint32_t)fd + 1;
        uint64_t one = 1;
        real_write(g_wake, &one, sizeof one);
    }
}

/* The send wrappers (io.c) while a deferral is armed (defer_armed, call.h): the call's bytes queued
 * and their count returned, or -1: not deferred, the caller makes the call. errno is kept. */
long defer_send(int fd, const struct iovec *iov, int cnt, int can, int call) {
    struct nest_slot *s = tracked(fd);
    if (!s || !g_hdr)
        return -1;
    int saved = errno;
    size_t len = 0;
    for (int i = 0; i < cnt; i++)
        len += iov[i].iov_len;
    long r = -1;
    uint64_t due;
    pthread_mutex_lock(&g_mu);
    if (!ready()) {
        if (__atomic_load_n(&g_hdr->reply_delay_mode, RELAXED) == NEST_DELAY_DEFER)
            HCOUNT(replies_undeferred);
    } else if (decide(fd, s, len, can && len > 0 && cnt >= 0, &due)) {
        struct chunk *c = malloc(sizeof *c + len);
        if (c) {
            c->len = len;
            size_t at = 0;
            for (int i = 0; i < cnt; i++) {
                memcpy(c->data + at, iov[i].iov_base, iov[i].iov_len);
                at += iov[i].iov_len;
            }
            enqueue(fd, s, c, call, due);
            r = (long)len;
        } else {                       /* no memory: in order, after what is queued */
            HCOUNT(replies_undeferred);
            while (g_pend[fd].head)
                pthread_cond_wait(&g_drained, &g_mu);
        }
    }
    pthread_mutex_unlock(&g_mu);
    errno = saved;
    return r;
}

/* sendfile: the file's bytes read now (at most 1 MiB, as a sendfile may send less than asked) and
 * queued like a send. -1: not deferred. */
long defer_sendfile(int out, int in, off64_t *off, size_t n, int call) {
    struct nest_slot *s = tracked(out);
    if (!s || !g_hdr)
        return -1;
    int saved = errno;
    if (n > (1u << 20))
        n = 1u << 20;
    long r = -1;
    uint64_t due;
    pthread_mutex_lock(&g_mu);
    if (ready() && decide(out, s, n, n > 0, &due)) {
        struct chunk *c = malloc(sizeof *c + n);
        ssize_t got = -1;
        if (c)
            got = off ? pread64(in, c->data, n, *off) : real_read(in, c->data, n);
        if (got > 0) {
            c->len = (size_t)got;
            if (off)
                *off += got;
            enqueue(out, s, c, call, due);
            r = got;
        } else {                       /* nothing to queue: the real call says why */
            free(c);
            while (g_pend[out].head)
                pthread_cond_wait(&g_drained, &g_mu);
        }
    }
    pthread_mutex_unlock(&g_mu);
    errno = saved;
    return r;
}

/* close() (how < 0) or shutdown(how) of fd with data queued: done by the thread once it is sent;
 * 1 when so (the caller returns 0), 0 when the caller makes the call itself. */
int defer_close(int fd, int how) {
    if ((unsigned)fd >= g_nslots || !same_process())
        return 0;
    int r = 0;
    pthread_mutex_lock(&g_mu);
    struct pend *p = g_pend ? &g_pend[fd] : NULL;
    if (p && p->head) {
        if (how < 0) {
            int32_t o = __atomic_load_n(&g_ep_owner[fd], RELAXED);
            if (o > 0)
                real_epoll_ctl(o - 1, EPOLL_CTL_DEL, fd, NULL);   /* no event for a closed fd */
            p->close_after = 1;
            r = 1;
        } else if (how == SHUT_WR || how == SHUT_RDWR) {
            if (how == SHUT_RDWR)
                real_shutdown(fd, SHUT_RD);
            p->shut_after = 1;
            r = 1;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return r;
}

/* The fork child: the parent's queues and thread are not its own; it starts afresh. */
void defer_after_fork(void) {
    pthread_mutex_init(&g_mu, NULL);
    pthread_cond_init(&g_drained, NULL);
    if (g_wake >= 0 && real_close)
        real_close(g_wake);
    g_wake = -1;
    g_pend = NULL;                     /* the parent's chunks, copied: left (their sockets are the parent's) */
    g_pfd = NULL;
    g_thread_on = 0;
    g_hi = 0;
    g_bytes = 0;
    g_pend_n = 0;
}

/* The destructor (init.c): the replies still queued are sent before the process goes, within reason. */
void defer_drain_at_exit(void) {
    if (!__atomic_load_n(&g_pend_n, RELAXED) || !g_thread_on || !same_process())
        return;
    pthread_mutex_lock(&g_mu);
    uint64_t last = now_ns();
    for (uint32_t fd = 0; fd < g_hi; fd++)
        if (g_pend[fd].tail && g_pend[fd].tail->due > last)
            last = g_pend[fd].tail->due;
    uint64_t left = last + 1000000000ull - now_ns();
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    uint64_t ns = (uint64_t)until.tv_nsec + left % 1000000000ull;
    until.tv_sec += (time_t)(left / 1000000000ull + ns / 1000000000ull);
    until.tv_nsec = (long)(ns % 1000000000ull);
    while (__atomic_load_n(&g_pend_n, RELAXED))
        if (pthread_cond_timedwait(&g_drained, &g_mu, &until) == ETIMEDOUT)
            break;
    pthread_mutex_unlock(&g_mu);
}
