/*
 * defer.c - the delay fault at an event loop (header.reply_delay_mode NEST_DELAY_DEFER; nginx and
 * memcached, where one thread answers many connections and the hold of call.c would stop them all).
 *
 * A send that starts a reply (reply_starts, slots.h: an accepted socket whose last completed call is a
 * receive), and every send after it on that socket while anything is queued there, is copied into the
 * socket's queue and reported to the program as sent; the library's own thread (one per process,
 * started at the first deferral, again in a fork child) writes each chunk `reply_delay_ns` after the
 * program's call, in order, waiting for POLLOUT when the socket is full. The sends are counted, and
 * traced, when that thread completes them (with the program thread's id), so the counters and the
 * message trace show the reply leaving late, as they do for a hold.
 *
 * Never misdelivered: each chunk carries its socket's identity (the slot's generation and the inode),
 * checked before every write and before a waiting close; a socket closed or replaced by a call that
 * cannot wait in the background (fclose, dup2/dup3 onto it, close_range, closefrom) has its queue
 * written first (defer_settle), and what cannot be written in time, or no longer has its socket, is
 * dropped and counted (header.replies_dropped), never written to another socket.
 *
 * Never why a program dies or blocks: the program's buffers, iovecs and msghdr are read with
 * process_vm_readv, so a bad pointer or length is not deferred and the real call fails as it would
 * (EFAULT, EINVAL); a non-blocking send (O_NONBLOCK, MSG_DONTWAIT) takes at most a socket buffer's
 * worth (a partial count, as the kernel would) and gets EAGAIN when that much is queued, never a
 * wait; a signal handler that sends while its thread is inside the deferral sends at once.
 *
 * A close() or shutdown(SHUT_WR) of a socket with queued data is done by that thread once the queue
 * is drained; the close takes the socket out of every epoll set of the program at once (a close
 * would), and the fd number stays taken until then (a fork child closes its copy at once). Memory: at
 * most NESTLAB_DEFER_MAX_BYTES queued in a process (default 64 MiB): past that a new reply is sent at
 * once, and a blocking send behind queued data waits until its socket's queue is drained (the order of
 * a stream is kept); both are counted in header.replies_undeferred. A process that exits (exit(), not
 * _exit()) with replies queued waits for them, at most until the last one is due and 1 s more; killed,
 * it loses them, as if it crashed.
 */
#include "defer.h"

#include "env.h"
#include "late.h"
#include "reals.h"
#include "seqlock.h"
#include "trace.h"
#include "usermem.h"

#include <sys/eventfd.h>

struct chunk {
    struct chunk *next;
    uint64_t due, gen, ino;
    uint32_t tid;
    int call;
    size_t len, off;
    char data[];
};

struct pend {
    struct chunk *head, *tail;
    uint64_t bytes;                  /* queued on this fd */
    uint8_t close_after, shut_after;
    uint8_t counted;                 /* in g_defer.pend_n */
};

#define NB_MIN_ROOM (64u << 10)      /* a non-blocking socket may queue at least this much */

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_drained = PTHREAD_COND_INITIALIZER;
static struct pend *g_pend;          /* per fd, g_core.nslots entries, made at the first deferral */
static struct pollfd *g_pfd;         /* the thread's poll set: the wake-up fd, then full sockets */
static int g_wake = -1;              /* eventfd: a socket got its first chunk */
static int g_thread_on;
static uint32_t g_hi;                /* fds below this may have a queue */
static uint64_t g_bytes;
static TLS int t_inside;             /* this thread holds or waits for g_mu: a signal handler's send
                                        must not wait for it (it would wait for itself) */
struct nest_defer_state g_defer = {.cap = 64ull << 20};

void defer_configure(const char *v) {   /* NESTLAB_DEFER_MAX_BYTES (unset: 64 MiB) */
    if (v && *v)
        g_defer.cap = strtoull(v, NULL, 10);
}

/* The delay fault's hold (reply_gate, defer.h): `ns` from now, whatever signal comes meanwhile. */
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


static int active(const struct pend *p) { return p->head || p->close_after || p->shut_after; }

/* Under g_mu, after any change to p: g_defer.pend_n counts the fds with something queued or waiting (a send
 * wrapper reads it on every call); 1 when p has just become active. */
static int update(struct pend *p) {
    int a = active(p);
    if (a == p->counted)
        return 0;
    p->counted = (uint8_t)a;
    if (a) {
        __atomic_fetch_add(&g_defer.pend_n, 1, RELAXED);
        return 1;
    }
    __atomic_fetch_sub(&g_defer.pend_n, 1, RELAXED);
    pthread_cond_broadcast(&g_drained);
    return 0;
}

static void lock(void) {
    t_inside = 1;
    pthread_mutex_lock(&g_mu);
}

static void unlock(void) {
    pthread_mutex_unlock(&g_mu);
    t_inside = 0;
}

/* A completed (r >= 0) or failed send of a chunk, counted and traced as the program's call, at `t`:
 * when its last write was called (the peer may have its bytes, and answer, before that write returns;
 * a later stamp would make the next request look older than this reply: reply_starts). */
static void account(int fd, const struct chunk *c, long r, int e, uint64_t t) {
    struct nest_slot *s = &g_core.slots[fd];
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
    struct nest_ring *g = g_trace.ring;
    if (mine && g && r >= 0 && c->call)
        trace_put_tid(g, s, fd, c->call, r, t, c->tid);
}

/* fd is still the socket the chunk was queued for: same slot generation, open, same inode. */
static int same_socket(int fd, uint64_t gen, uint64_t ino) {
    struct nest_slot *s = &g_core.slots[fd];
    if (__atomic_load_n(&s->gen, RELAXED) != gen || __atomic_load_n(&s->state, RELAXED) != NEST_OPEN)
        return 0;
    struct stat st;
    int saved = errno, ok = fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode) && (uint64_t)st.st_ino == ino;
    errno = saved;
    return ok;
}

static void pop(struct pend *p) {
    struct chunk *c = p->head;
    p->head = c->next;
    if (!p->head)
        p->tail = NULL;
    g_bytes -= c->len;
    p->bytes -= c->len;
    __atomic_store_n(&g_core.hdr->deferred_bytes, g_bytes, RELAXED);
    free(c);
}

/* Under g_mu: the queue given up (never written elsewhere), its close and shutdown with it. */
static void drop(struct pend *p) {
    while (p->head) {
        pop(p);
        HCOUNT(replies_dropped);
    }
}

/* Under g_mu: fd's queue is empty (or dropped); the close or shutdown the program asked for meanwhile,
 * on its own socket only (`ours`). */
static void finish(int fd, struct pend *p, int ours) {
    if (ours && p->shut_after)
        real_shutdown(fd, SHUT_WR);
    if (ours && p->close_after) {
        forget_begin(fd);
        real_close(fd);
        forget_end(fd);
    }
    p->close_after = p->shut_after = 0;
    update(p);
}

/* Under g_mu: write fd's chunks that are due; 1 when the socket is full (wait for POLLOUT). */
static int drain_fd(int fd, struct pend *p, uint64_t now) {
    struct chunk *c;
    while ((c = p->head) && c->due <= now) {
        if (!same_socket(fd, c->gen, c->ino)) {   /* closed or replaced under us: not its bytes */
            drop(p);
            finish(fd, p, 0);          /* its close was done by whoever replaced it */
            return 0;
        }
        uint64_t t = now_ns();
        ssize_t r = real_send(fd, c->data + c->off, c->len - c->off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 1;
        if (r < 0) {                   /* the peer is gone: the rest of the stream goes nowhere */
            account(fd, c, -1, errno, t);
            drop(p);
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

static void *drainer(void *arg) {
    (void)arg;
    my_tid();
    pthread_mutex_lock(&g_mu);
    for (;;) {
        uint64_t now = now_ns(), next = UINT64_MAX;
        nfds_t np = 1;
        for (uint32_t fd = 0; fd < g_hi; fd++) {
            struct pend *p = &g_pend[fd];
            if (!active(p))
                continue;
            if (drain_fd((int)fd, p, now))
                g_pfd[np++] = (struct pollfd){(int)fd, POLLOUT, 0};
            else if (p->head)
                next = p->head->due < next ? p->head->due : next;
            else
                finish((int)fd, p, 1);
        }
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
        g_pend = calloc(g_core.nslots, sizeof *g_pend);
    if (!g_pfd)
        g_pfd = calloc((size_t)g_core.nslots + 1, sizeof *g_pfd);
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

/* Under g_mu: wait until fd's queue is drained (a blocking send behind it; never a non-blocking one). */
static void wait_drained(int fd) {
    while (g_pend[fd].head)
        pthread_cond_wait(&g_drained, &g_mu);
}

/* The send is not deferred: the caller makes the real call now (after fd's queue, when blocking). */
#define NOT_DEFERRED (-1)
/* The send would have to wait behind the queue, and it must not (non-blocking): -1 with EAGAIN. */
#define WOULD_BLOCK (-2)

/* Under g_mu: how much of a send of len bytes on fd to queue (into *take), due at *due; or
 * NOT_DEFERRED / WOULD_BLOCK. `can`: the call may be copied; `nb`: it must not wait. */
static long decide(int fd, struct nest_slot *s, size_t len, int can, int nb, size_t *take, uint64_t *due) {
    struct pend *p = &g_pend[fd];
    uint64_t d = __atomic_load_n(&g_core.hdr->reply_delay_ns, RELAXED);
    int defer = d && __atomic_load_n(&g_core.hdr->reply_delay_mode, RELAXED) == NEST_DELAY_DEFER;
    size_t n = len;
    if (nb && can) {                   /* at most a socket buffer's worth queued, as the kernel would take */
        int sb = 0;
        socklen_t l = sizeof sb;
        uint64_t room = getsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sb, &l) == 0 && sb > (int)NB_MIN_ROOM
                            ? (uint64_t)sb : NB_MIN_ROOM;
        if (p->bytes >= room)
            return p->head ? WOULD_BLOCK : NOT_DEFERRED;
        if (n > room - p->bytes)
            n = (size_t)(room - p->bytes);
    }
    if (!p->head) {
        if (!defer || !reply_starts(s))
            return NOT_DEFERRED;
        if (!can || g_bytes + n > g_defer.cap) {
            HCOUNT(replies_undeferred);
            return NOT_DEFERRED;
        }
        HCOUNT(replies_delayed);
    } else if (!can || g_bytes + n > g_defer.cap) {
        HCOUNT(replies_undeferred);
        if (nb)
            return WOULD_BLOCK;
        wait_drained(fd);
        return NOT_DEFERRED;
    }
    *take = n;
    *due = now_ns() + (defer ? d : 0);
    return 0;
}

/* Under g_mu: c (its data filled) at the end of fd's queue. */
static void enqueue(int fd, struct nest_slot *s, struct chunk *c, int call, uint64_t due) {
    struct pend *p = &g_pend[fd];
    c->next = NULL;
    c->due = due;
    c->gen = s->gen;
    c->ino = s->inode;
    c->tid = my_tid();
    c->call = call;
    c->off = 0;
    g_bytes += c->len;
    p->bytes += c->len;
    __atomic_store_n(&g_core.hdr->deferred_bytes, g_bytes, RELAXED);
    if (p->tail)
        p->tail->next = c;
    else
        p->head = c;
    p->tail = c;
    if (update(p)) {
        if ((uint32_t)fd >= g_hi)
            g_hi = (uint32_t)fd + 1;
        uint64_t one = 1;
        real_write(g_wake, &one, sizeof one);
    }
}

static int nonblocking(int fd, int flags) {
    if (flags & MSG_DONTWAIT)
        return 1;
    int saved = errno, fl = fcntl(fd, F_GETFL);
    errno = saved;
    return fl >= 0 && (fl & O_NONBLOCK);
}

/* The send wrappers (io.c) while a deferral is armed (defer_armed, defer.h): the call's bytes queued
 * and their count returned; NOT_DEFERRED: the caller makes the call; WOULD_BLOCK: the caller returns
 * -1 with EAGAIN. errno is kept. */
long defer_send(int fd, const struct iovec *iov, long cnt, int can, int call, int flags) {
    struct nest_slot *s = tracked(fd);
    if (!s || !g_core.hdr || t_inside)
        return NOT_DEFERRED;
    int saved = errno;
    struct iovec local[8], *v = NULL;
    size_t len = 0;
    if (user_iovecs(iov, cnt, local, 8, &v, &len) != 0 || len == 0) {
        if (v && v != local)
            free(v);
        errno = saved;
        return NOT_DEFERRED;           /* never waits: the real call fails, or sends nothing */
    }
    int nb = nonblocking(fd, flags);
    long r = NOT_DEFERRED;
    size_t take = 0;
    uint64_t due;
    lock();
    if (!ready()) {
        if (__atomic_load_n(&g_core.hdr->reply_delay_mode, RELAXED) == NEST_DELAY_DEFER)
            HCOUNT(replies_undeferred);
    } else if ((r = decide(fd, s, len, can, nb, &take, &due)) == 0) {
        struct chunk *c = malloc(sizeof *c + take);
        if (c && user_gather(c->data, v, cnt, take) == 0) {
            c->len = take;
            enqueue(fd, s, c, call, due);
            r = (long)take;
        } else if (c) {                /* unreadable bytes: not ours to judge, the real call fails */
            free(c);
            r = NOT_DEFERRED;
        } else {                       /* no memory: in order, after what is queued */
            HCOUNT(replies_undeferred);
            r = g_pend[fd].head && nb ? WOULD_BLOCK : NOT_DEFERRED;
            if (r == NOT_DEFERRED)
                wait_drained(fd);
        }
    }
    unlock();
    if (v != local)
        free(v);
    errno = saved;
    return r;
}

/* sendmsg: the header read safely first (NULL or a bad pointer: the real call says EFAULT). */
long defer_sendmsg(int fd, const struct msghdr *m, int flags, int call) {
    struct msghdr h;
    if (!m || t_inside || user_read(&h, m, sizeof h) != 0 || h.msg_iovlen > (size_t)IOV_MAX)
        return NOT_DEFERRED;
    return defer_send(fd, h.msg_iov, (long)h.msg_iovlen, !(flags & MSG_OOB) && !h.msg_controllen && !h.msg_name,
                      call, flags);
}

/* sendfile: the file's bytes read now (at most 1 MiB, as a sendfile may send less than asked) and
 * queued like a send. NOT_DEFERRED or WOULD_BLOCK as defer_send. */
long defer_sendfile(int out, int in, off64_t *off, size_t n, int call) {
    struct nest_slot *s = tracked(out);
    if (!s || !g_core.hdr || t_inside)
        return NOT_DEFERRED;
    int saved = errno;
    off64_t at = 0;
    if (off && user_read(&at, off, sizeof at) != 0)
        return NOT_DEFERRED;
    if (n > (1u << 20))
        n = 1u << 20;
    int nb = nonblocking(out, 0);
    long r = NOT_DEFERRED;
    size_t take = 0;
    uint64_t due;
    lock();
    if (ready() && (r = decide(out, s, n, n > 0, nb, &take, &due)) == 0) {
        struct chunk *c = malloc(sizeof *c + take);
        ssize_t got = -1;
        if (c)
            got = off ? pread64(in, c->data, take, at) : real_read(in, c->data, take);
        off64_t next = at + (got > 0 ? got : 0);
        if (got > 0 && (!off || user_write(off, &next, sizeof next) == 0)) {
            c->len = (size_t)got;
            enqueue(out, s, c, call, due);
            r = got;
        } else {                       /* nothing to queue: the real call says why */
            free(c);
            r = NOT_DEFERRED;
            if (g_pend[out].head && nb)
                r = WOULD_BLOCK;
            else
                wait_drained(out);
        }
    }
    unlock();
    errno = saved;
    return r;
}

/* A deferred close takes fd out of every epoll set of the program now, as the close would (the
 * socket stays open until its queue is written; its events must not reach the program). */
static void epoll_forget(int fd) {
    for (uint32_t e = 0; e < g_core.nslots; e++)
        if (KIND(__atomic_load_n(&g_fds.kind[e], RELAXED)) == K_EPOLL)
            real_epoll_ctl((int)e, EPOLL_CTL_DEL, fd, NULL);
}

/* close() (how < 0) or shutdown(how) of fd with data queued: done by the thread once it is sent;
 * 1 when so (the caller returns 0), 0 when the caller makes the call itself. */
int defer_close(int fd, int how) {
    if ((unsigned)fd >= g_core.nslots || !same_process() || t_inside)
        return 0;
    int r = 0;
    lock();
    struct pend *p = g_pend ? &g_pend[fd] : NULL;
    if (p && p->head) {
        int saved = errno;
        if (how < 0) {
            ENSURE(epoll_ctl);
            if (real_epoll_ctl)
                epoll_forget(fd);
            fcntl(fd, F_SETFD, FD_CLOEXEC);   /* closed for the program: an exec must not inherit it */
            p->close_after = 1;
            r = 1;
        } else if (how == SHUT_WR || how == SHUT_RDWR) {
            if (how == SHUT_RDWR)
                real_shutdown(fd, SHUT_RD);
            p->shut_after = 1;
            r = 1;
        }
        errno = saved;
    }
    unlock();
    return r;
}

/* fds lo..hi are about to be closed or replaced by a call that cannot be done later (fclose, dup2 or
 * dup3 onto one, close_range, closefrom): their queued sends are written first, waiting at most until
 * the last is due and 1 s more; what is left is dropped. A close or shutdown that was waiting for them
 * is done (close: by the caller's call, which closes the fd anyway). */
void defer_settle(unsigned lo, unsigned hi) {
    if (!__atomic_load_n(&g_defer.pend_n, RELAXED) || !g_pend || t_inside || !same_process())
        return;
    int saved = errno;
    lock();
    if (hi >= g_hi)
        hi = g_hi ? g_hi - 1 : 0;
    uint64_t last = now_ns();
    int any = 0;
    for (unsigned fd = lo; fd <= hi && fd < g_hi; fd++)
        if (active(&g_pend[fd])) {
            any = 1;
            if (g_pend[fd].tail && g_pend[fd].tail->due > last)
                last = g_pend[fd].tail->due;
        }
    if (any) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        uint64_t left = last + 1000000000ull - now_ns(), ns = (uint64_t)until.tv_nsec + left % 1000000000ull;
        until.tv_sec += (time_t)(left / 1000000000ull + ns / 1000000000ull);
        until.tv_nsec = (long)(ns % 1000000000ull);
        for (unsigned fd = lo; fd <= hi && fd < g_hi; fd++) {
            struct pend *p = &g_pend[fd];
            while (active(p) && pthread_cond_timedwait(&g_drained, &g_mu, &until) != ETIMEDOUT)
                ;
            if (active(p)) {           /* not written in time: given up, never sent elsewhere */
                drop(p);
                finish((int)fd, p, 0);
            }
        }
    }
    unlock();
    errno = saved;
}

/* The fork child (atfork_child, after its file is made): the parent's queues and thread are not its
 * own; the sockets the program closed while their replies were queued are closed in the child now
 * (it would hold them open for ever: the peer would never see the end of the stream). */
void defer_after_fork(void) {
    pthread_mutex_init(&g_mu, NULL);
    pthread_cond_init(&g_drained, NULL);
    if (g_wake >= 0 && real_close)
        real_close(g_wake);
    for (uint32_t fd = 0; g_pend && fd < g_hi; fd++) {
        if (!g_pend[fd].close_after || !real_close)
            continue;
        if (g_core.slots && fd < g_core.nslots) {
            forget_begin((int)fd);
            real_close((int)fd);
            forget_end((int)fd);
        } else {
            real_close((int)fd);
        }
    }
    g_wake = -1;
    g_pend = NULL;                     /* the parent's chunks, copied: left (their sockets are the parent's) */
    g_pfd = NULL;
    g_thread_on = 0;
    g_hi = 0;
    g_bytes = 0;
    g_defer.pend_n = 0;
    t_inside = 0;
}

/* The destructor (init.c): the replies still queued are sent before the process goes, within reason. */
void defer_drain_at_exit(void) {
    if (!__atomic_load_n(&g_defer.pend_n, RELAXED) || !g_thread_on || !same_process() || t_inside)
        return;
    defer_settle(0, UINT_MAX);
}
