/*
 * slots.c - what each fd is (private, per fd: g_fds.kind) and the slots of sockets in the shared
 * memory: made on first sight or when a call hands out a socket, looked up (the hot path, tracked(),
 * is inline in slots.h; tracked_slow() here), closed with their counters added to the header's
 * retired totals.
 */
#include "slots.h"

#include "env.h"
#include "hints.h"
#include "late.h"
#include "seqlock.h"
#include "text.h"

struct nest_fds g_fds;

/* The private tables: 12 bytes per fd, in one private mapping. */
int slots_init(uint32_t want) {
    size_t priv = (size_t)want * (4 + 4 + 4);
    void *p = mmap(NULL, priv, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return -1;
    g_fds.ep_owner = (int32_t *)p;
    g_fds.ep_events = (uint32_t *)((char *)p + (size_t)want * 4);
    g_fds.kind = (uint32_t *)((char *)p + (size_t)want * 8);
    return 0;
}

void slots_free(uint32_t want) {
    munmap(g_fds.ep_owner, (size_t)want * 12);
    g_fds.kind = NULL;
    g_fds.ep_owner = NULL;
    g_fds.ep_events = NULL;
}

void set_endpoint(const struct sockaddr *sa, uint8_t *addr, uint16_t *port) {
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        memset(addr, 0, 16);
        memcpy(addr, &in->sin_addr, 4);
        *port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        memcpy(addr, &in6->sin6_addr, 16);
        *port = ntohs(in6->sin6_port);
    }
}

/* An AF_INET/AF_INET6 socket's own endpoint and its peer's, as the kernel has them now (zeros when it
 * says nothing); 1 when it has a peer. */
int sock_endpoints(int fd, uint8_t *la, uint16_t *lp, uint8_t *ra, uint16_t *rp) {
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        set_endpoint((struct sockaddr *)&ss, la, lp);
    sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0)
        return 0;
    set_endpoint((struct sockaddr *)&ss, ra, rp);
    return 1;
}

static void bump_max_fd(int fd) {
    uint32_t want = (uint32_t)fd + 1, cur = __atomic_load_n(&g_core.hdr->max_fd, RELAXED);
    while (cur < want &&
           !__atomic_compare_exchange_n(&g_core.hdr->max_fd, &cur, want, 1, __ATOMIC_RELEASE, RELAXED))
        ;
}

/* Close the socket in slot fd: account calls in progress up to now, add its counters to the
 * header's retired totals (graph data sockets only), mark it closed. The header's seqlock is taken
 * last: nobody waits for another lock while holding it. */
void retire_slot(int fd) {
    struct nest_header *h = g_core.hdr;
    struct nest_slot *s = &g_core.slots[fd];
    if (__atomic_load_n(&s->state, RELAXED) != NEST_OPEN)
        return;
    uint64_t hs = seq_force(&s->seq);
    uint64_t h0 = seq_force(&s->dir[0].seq);
    uint64_t h1 = seq_force(&s->dir[1].seq);
    uint64_t hh = seq_force(&h->seq);
    if (s->state == NEST_OPEN) {
        late_apply_slot(s);   /* call ends that were waiting for these locks */
        uint64_t t = now_ns();
        int data = (s->flags & NEST_SF_GRAPH) && !(s->flags & NEST_SF_LISTEN);
        for (int d = 0; d < 2; d++) {
            struct nest_dir *x = &s->dir[d];
            x->wait_ns += x->pend_n * t - x->pend_sum;
            x->pend_n = 0;
            x->pend_sum = 0;
            if (data) {
                h->retired[d].msgs += x->msgs;
                h->retired[d].bytes += x->bytes;
                h->retired[d].errors += x->errors;
                h->retired[d].wait_ns += x->wait_ns;
            }
        }
        if (data)
            h->retired_n++;
        s->close_ns = t;
        __atomic_store_n(&s->state, NEST_CLOSED, RELAXED);
    }
    seq_release(&h->seq, hh);
    seq_release(&s->dir[1].seq, h1);
    seq_release(&s->dir[0].seq, h0);
    seq_release(&s->seq, hs);
}

/* Give slot fd to the socket now open on fd (inode ino); extra: NEST_SF_* known by the caller. */
static void install_slot(int fd, uint64_t ino, uint32_t extra) {
    struct nest_slot *s = &g_core.slots[fd];
    retire_slot(fd);   /* a socket we never saw closed (closed inside libc) */
    int dom = 0, type = 0, acc = 0;
    socklen_t l = sizeof dom;
    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l);
    l = sizeof type;
    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l);
    l = sizeof acc;
    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l);
    uint32_t flags = extra;
    if (acc)
        flags |= NEST_SF_LISTEN;
    if ((dom == AF_INET || dom == AF_INET6) && type == SOCK_STREAM)
        flags |= NEST_SF_GRAPH;
    uint8_t la[16] = {0}, ra[16] = {0};
    uint16_t lp = 0, rp = 0;
    if ((dom == AF_INET || dom == AF_INET6) && sock_endpoints(fd, la, &lp, ra, &rp))
        flags |= NEST_SF_PEER;
    uint64_t hs = seq_force(&s->seq);
    uint64_t h0 = seq_force(&s->dir[0].seq);
    uint64_t h1 = seq_force(&s->dir[1].seq);
    s->gen++;
    s->inode = ino;
    s->fd = fd;
    s->flags = flags;
    s->family = (uint16_t)dom;
    s->type = (uint16_t)type;
    s->lport = lp;
    s->rport = rp;
    memcpy(s->laddr, la, 16);
    memcpy(s->raddr, ra, 16);
    s->open_ns = now_ns();
    s->close_ns = 0;
    for (int d = 0; d < 2; d++) {
        struct nest_dir *x = &s->dir[d];
        x->msgs = x->bytes = x->errors = x->wait_ns = x->pend_n = x->pend_sum = x->last_ns = 0;
    }
    __atomic_store_n(&s->state, NEST_OPEN, RELAXED);
    if (h1) seq_unlock(&s->dir[1].seq, h1); else seq_heal(&s->dir[1].seq);
    if (h0) seq_unlock(&s->dir[0].seq, h0); else seq_heal(&s->dir[0].seq);
    if (hs) seq_unlock(&s->seq, hs); else seq_heal(&s->seq);
    bump_max_fd(fd);
    if ((flags & NEST_SF_GRAPH) && (flags & NEST_SF_PEER) && !(flags & NEST_SF_LISTEN))
        __atomic_fetch_or(&g_core.hdr->flags, NEST_HF_HAD_GRAPH, RELAXED);
}

/* A socket we have no slot for (fd >= nslots, or no space for slots at all): counted, not tracked. */
static void untracked_socket(void) {
    HCOUNT(untracked);
    if (g_core.nslots)
        __atomic_fetch_or(&g_core.hdr->flags, NEST_HF_FD_OVERFLOW, RELAXED);
}

void untracked_fd(int fd) {   /* fd >= nslots was handed out: a socket? */
    struct stat st;
    int saved = errno;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
        untracked_socket();
    errno = saved;
}

static inline uint32_t mark(uint32_t kind) { return kind | (my_tid() << 3); }

/* While another live thread makes a slot for fd (K_BUSY: a few system calls, unless it was
 * preempted), wait for it, up to g_env.lock_wait_ns. Returns the kind word seen last. */
static uint32_t wait_not_busy(int fd, uint32_t k) {
    uint32_t me = my_tid();
    uint64_t since = 0;
    int saved = errno;
    for (unsigned i = 0; KIND(k) == K_BUSY && KOWNER(k) != me; i++) {
        if (i < 64) {
            cpu_relax();
        } else if (i < 128) {
            sched_yield();
        } else {
            uint64_t t = now_ns();
            if (!since)
                since = t;
            if (t - since >= g_env.lock_wait_ns || ((i & 3) == 0 && thread_gone(KOWNER(k))))
                break;
            nap(i - 128);
        }
        k = __atomic_load_n(&g_fds.kind[fd], __ATOMIC_ACQUIRE);
    }
    errno = saved;
    return k;
}

/* Finish making the slot of fd (we hold K_BUSY as `m`): K_SOCK, unless the fd was closed meanwhile
 * (by a signal handler of this thread, which did not wait for us): then the slot is closed again. */
static int adopt_done(int fd, uint32_t m) {
    uint64_t gen = g_core.slots[fd].gen;
    if (__atomic_compare_exchange_n(&g_fds.kind[fd], &m, K_SOCK, 0, __ATOMIC_RELEASE, RELAXED))
        return 1;
    if (g_core.slots[fd].gen == gen)
        retire_slot(fd);
    return 0;
}

/* A socket fd came into existence (socket, accept): make its slot now. */
void adopt_socket(int fd, uint32_t extra) {
    if (fd < 0)
        return;
    if ((unsigned)fd >= g_core.nslots) {
        untracked_socket();
        return;
    }
    uint32_t m = mark(K_BUSY);
    __atomic_store_n(&g_fds.kind[fd], m, __ATOMIC_SEQ_CST);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
        __atomic_compare_exchange_n(&g_fds.kind[fd], &m, K_UNKNOWN, 0, __ATOMIC_RELEASE, RELAXED);
        return;
    }
    install_slot(fd, (uint64_t)st.st_ino, extra);
    if (adopt_done(fd, m) && (g_core.slots[fd].flags & NEST_SF_PEER))
        notify_sock("sock", fd);
}

/* An fd number was handed out by a call we do not count on (dup, socketpair, SCM_RIGHTS...):
 * forget what we knew about that number (it is classified again on first use). */
void fresh_fd(int fd) {
    if (fd < 0)
        return;
    if ((unsigned)fd >= g_core.nslots) {
        untracked_fd(fd);
        return;
    }
    uint32_t k = __atomic_exchange_n(&g_fds.kind[fd], mark(K_CLOSING), __ATOMIC_SEQ_CST);
    if (KIND(k) == K_SOCK)
        retire_slot(fd);
    g_fds.ep_owner[fd] = 0;
    __atomic_store_n(&g_fds.kind[fd], K_UNKNOWN, __ATOMIC_RELEASE);
}

/* First sight of fd (we hold K_BUSY as `m`): a socket gets a slot, anything else is remembered. */
static struct nest_slot *classify(int fd, uint32_t m) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        __atomic_compare_exchange_n(&g_fds.kind[fd], &m, K_UNKNOWN, 0, __ATOMIC_RELEASE, RELAXED);
        return NULL;
    }
    if (!S_ISSOCK(st.st_mode)) {
        __atomic_compare_exchange_n(&g_fds.kind[fd], &m, K_OTHER, 0, __ATOMIC_RELEASE, RELAXED);
        return NULL;
    }
    install_slot(fd, (uint64_t)st.st_ino, NEST_SF_INHERITED);
    if (!adopt_done(fd, m))
        return NULL;
    if (g_core.slots[fd].flags & NEST_SF_PEER)
        notify_sock("sock", fd);
    return &g_core.slots[fd];
}

static void lost_if_socket(int fd) {
    struct stat st;
    int saved = errno;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
        lost_call();
    errno = saved;
}

struct nest_slot *tracked_slow(int fd, uint32_t k) {
    for (int round = 0; round < 8; round++) {
        switch (KIND(k)) {
        case K_SOCK:
            return &g_core.slots[fd];
        case K_UNKNOWN: {
            uint32_t m = mark(K_BUSY);
            if (__atomic_compare_exchange_n(&g_fds.kind[fd], &k, m, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE))
                return classify(fd, m);
            continue;                         /* k: what another thread made of it */
        }
        case K_BUSY:                          /* another thread is making its slot: wait for it */
            if (KOWNER(k) != my_tid()) {
                uint32_t k2 = wait_not_busy(fd, k);
                if (k2 != k || KIND(k2) != K_BUSY) {
                    k = k2;
                    continue;
                }
            }
            lost_if_socket(fd);               /* this thread's own (a signal handler), or stuck */
            return NULL;
        default:                              /* K_OTHER, K_EPOLL, K_CLOSING (the program's race) */
            return NULL;
        }
    }
    return NULL;
}

/* The program closes fd (close, fclose, dup2 target, close_range): called before the real close.
 * A slot another live thread is making for fd is waited for, not taken from it. */
uint32_t forget_begin(int fd) {
    uint32_t m = mark(K_CLOSING);
    uint32_t k = __atomic_load_n(&g_fds.kind[fd], __ATOMIC_ACQUIRE);
    for (;;) {
        if (KIND(k) == K_BUSY && KOWNER(k) != my_tid()) {
            uint32_t k2 = wait_not_busy(fd, k);
            if (k2 != k) {
                k = k2;
                continue;
            }
        }
        if (__atomic_compare_exchange_n(&g_fds.kind[fd], &k, m, 0, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
            break;
    }
    uint32_t kind = KIND(k);
    if (kind == K_SOCK) {
        retire_slot(fd);
        notify_sock("close", fd);
    }
    g_fds.ep_owner[fd] = 0;
    if (kind == K_EPOLL) {
        uint32_t mx = __atomic_load_n(&g_core.hdr->max_fd, RELAXED);
        for (uint32_t i = 0; i < mx && i < g_core.nslots; i++)
            if (g_fds.ep_owner[i] == fd + 1)
                g_fds.ep_owner[i] = 0;
    }
    return kind;
}

void forget_end(int fd) {
    uint32_t k = mark(K_CLOSING);
    __atomic_compare_exchange_n(&g_fds.kind[fd], &k, K_UNKNOWN, 0, __ATOMIC_RELEASE, RELAXED);
}

/* After exec in the same process: keep the sockets still open, close the others. */
void slots_after_exec(void) {
    struct nest_header *h = g_core.hdr;
    /* Threads of the old image may have died inside a seqlock: we are alone now, release them. */
    uint32_t mx = __atomic_load_n(&h->max_fd, RELAXED);
    for (uint32_t fd = 0; fd < mx && fd < g_core.nslots; fd++) {
        struct nest_slot *s = &g_core.slots[fd];
        if (s->seq & 1)
            seq_heal(&s->seq);
        for (int d = 0; d < 2; d++)
            if (s->dir[d].seq & 1)
                seq_heal(&s->dir[d].seq);
    }
    if (h->seq & 1)
        seq_heal(&h->seq);
    uint64_t hh = seq_force(&h->seq);
    shm_fill_cmdline(h);
    h->exec_count++;
    seq_release(&h->seq, hh);
    __atomic_and_fetch(&h->flags, ~(uint32_t)NEST_HF_EXITED, RELAXED);
    h->paused = 0;
    h->paused_threads = 0;
    h->pause_sig = g_core.pause_sig;
    h->resume_sig = g_core.resume_sig;
    uint32_t m = __atomic_load_n(&h->max_fd, RELAXED);
    uint64_t t = now_ns();
    for (uint32_t fd = 0; fd < m && fd < g_core.nslots; fd++) {
        struct nest_slot *s = &g_core.slots[fd];
        if (s->state != NEST_OPEN)
            continue;
        struct stat st;
        if (fstat((int)fd, &st) == 0 && S_ISSOCK(st.st_mode) && (uint64_t)st.st_ino == s->inode) {
            /* calls in progress died with the old image's threads: end them now */
            for (int d = 0; d < 2; d++) {
                uint64_t hd = seq_force(&s->dir[d].seq);
                struct nest_dir *x = &s->dir[d];
                x->wait_ns += x->pend_n * t - x->pend_sum;
                x->pend_n = 0;
                x->pend_sum = 0;
                seq_release(&x->seq, hd);
            }
            g_fds.kind[fd] = K_SOCK;
        } else {
            retire_slot((int)fd);
        }
    }
}
