/*
 * fuzz_calls.c - the program of the interceptor's differential fuzz (bench/fuzz_interceptor.py):
 * random and boundary arguments to the calls the library wraps, each case in a fork child of its
 * own, printing what the call returned and its errno, so that runs without and with the library
 * (counting, and with the delay fault's deferral armed) can be compared line by line.
 *
 *     fuzz_calls SEED FIRST COUNT [defer]
 *
 * Each case (numbered FIRST .. FIRST+COUNT-1, its arguments drawn from SEED and its number) builds the
 * same descriptors in its child: a listener, a loopback TCP connection whose server side has just
 * received a request (its next send starts a reply: the deferral's case), Unix stream and datagram
 * pairs, a pipe, /dev/null, a memfd, an epoll set, a closed fd number; maybe a reply sent, then the
 * server socket closed, replaced by dup2 or closed by close_range (closed and reused fds); maybe some
 * sockets made non-blocking. Then one call with arguments drawn from: those fds, -1, huge and high
 * numbers; valid buffers, NULL, (void *)16, (void *)-1, a PROT_NONE page, a read-only page, a buffer
 * ending at a PROT_NONE page; lengths 0, small, SIZE_MAX, SSIZE_MAX, SSIZE_MAX+1, 2^40; iovec and
 * mmsghdr arrays with wrapping lengths, bad bases, counts -1, 0, IOV_MAX, IOV_MAX+1; random flags.
 * A SIGALRM 100 ms into the call (no SA_RESTART; its handler sends a byte on a socketpair, as
 * libevent's does) turns a call that would block into EINTR, the same with and without the library;
 * the parent kills a case that is not done within 5 s (a hang). A line per case:
 *
 *     CASE <n> <call> <description of the arguments> -> <rc> <errno>      (rc "fd" for any fd returned)
 *
 * or, from the parent, "CASE <n> <call> -> signal <sig>" when the child died ("hang 0": killed after 5 s). With `defer` (under the
 * library) the parent arms the deferral in its own file (20 ms, defer mode), which its children
 * inherit, and a case that sent a reply first waits 60 ms so that the reply is out before the call.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nestintercept.h"

#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wstringop-overread"
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#pragma GCC diagnostic ignored "-Wnonnull"

static uint64_t g_rng;

static uint64_t rnd(void) {   /* splitmix64: the same draws in every run */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static unsigned pick(unsigned n) { return (unsigned)(rnd() % n); }

static char g_desc[512];
static size_t g_dn;

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(g_desc + g_dn, sizeof g_desc - g_dn, fmt, ap);
    va_end(ap);
    if (k > 0)
        g_dn = g_dn + (size_t)k < sizeof g_desc ? g_dn + (size_t)k : sizeof g_desc - 1;
}

/* ---- the case's descriptors and memory ------------------------------------------------------ */

enum { F_S, F_C, F_L, F_U0, F_U1, F_D0, F_D1, F_P0, F_P1, F_NULLDEV, F_MEM, F_EP, F_CLOSED, F_NFD };
static const char *fd_names[] = {"s", "c", "l", "u0", "u1", "d0", "d1", "p0", "p1", "devnull", "memfd", "ep",
                                 "closed"};
static int g_fd[F_NFD];
static struct sockaddr_in g_addr;
static char *g_buf;          /* 64 KiB, valid */
static char *g_none;         /* a PROT_NONE page */
static char *g_ro;           /* a read-only page */
static char *g_edge;         /* 100 valid bytes, then the PROT_NONE page */
static int g_sig[2];

static int pick_fd(void) {
    unsigned k = pick(F_NFD + 5);
    int fd;
    if (k < F_NFD) {
        say("%s", fd_names[k]);
        return g_fd[k];
    }
    static const int odd[] = {-1, INT_MAX, 1 << 20, 4095, 5000};
    fd = odd[k - F_NFD];
    say("%d", fd);
    return fd;
}

static void *pick_buf(size_t *valid) {
    switch (pick(8)) {
    case 0: say(" NULL"); *valid = 0; return NULL;
    case 1: say(" (void*)16"); *valid = 0; return (void *)16;
    case 2: say(" (void*)-1"); *valid = 0; return (void *)-1;
    case 3: say(" none"); *valid = 0; return g_none;
    case 4: say(" ro"); *valid = 4096; return g_ro;   /* readable, not writable */
    case 5: say(" edge"); *valid = 100; return g_edge;
    default: say(" buf"); *valid = 65536; return g_buf;
    }
}

static size_t pick_len(void) {
    static const size_t lens[] = {0, 1, 7, 100, 101, 4096, 16384, SIZE_MAX, SSIZE_MAX, (size_t)SSIZE_MAX + 1,
                                  1ull << 40};
    size_t n = pick(4) == 0 ? (size_t)pick(16385) : lens[pick(sizeof lens / sizeof lens[0])];
    say(" %zu", n);
    return n;
}

static int pick_flags(void) {
    static const int fl[] = {0, 0, 0, MSG_DONTWAIT, MSG_NOSIGNAL, MSG_OOB, MSG_PEEK, MSG_WAITALL, MSG_TRUNC,
                             MSG_DONTWAIT | MSG_NOSIGNAL, 0x7fffffff, -1};
    int f = pick(5) == 0 ? (int)(rnd() & 0x7fffffff) : fl[pick(sizeof fl / sizeof fl[0])];
    if (f & MSG_WAITALL)   /* a receive that waits for more than can come: EINTR, or what came */
        f &= ~MSG_WAITALL;
    say(" flags=%#x", (unsigned)f);
    return f;
}

static struct iovec g_iov[IOV_MAX + 2];

static struct iovec *pick_iov(int *cnt) {
    static const int counts[] = {-1, 0, 1, 2, 3, IOV_MAX, IOV_MAX + 1, INT_MAX};
    int n = counts[pick(sizeof counts / sizeof counts[0])];
    *cnt = n;
    say(" iovcnt=%d", n);
    unsigned kind = pick(6);
    if (kind == 0) {
        say(" iov=NULL");
        return NULL;
    }
    if (kind == 1) {
        say(" iov=16");
        return (struct iovec *)16;
    }
    int fill = n < 0 ? 0 : n > IOV_MAX + 1 ? IOV_MAX + 1 : n;
    for (int i = 0; i < fill; i++) {
        g_iov[i].iov_base = g_buf + (i % 16) * 64;
        g_iov[i].iov_len = 8;
    }
    if (kind == 2 && fill >= 2) {   /* lengths whose sum wraps size_t */
        g_iov[0].iov_len = 16;
        g_iov[1].iov_len = SIZE_MAX - 7;
        say(" wrap");
    } else if (kind == 3 && fill >= 1) {
        g_iov[fill - 1].iov_base = pick(2) ? (void *)16 : g_none;
        say(" badbase");
    } else if (kind == 4 && fill >= 2) {
        g_iov[0].iov_len = SSIZE_MAX;
        g_iov[1].iov_len = SSIZE_MAX;
        say(" huge");
    }
    return g_iov;
}

static void on_alarm(int sig) {
    (void)sig;
    int e = errno;
    (void)!send(g_sig[0], "a", 1, MSG_DONTWAIT);   /* libevent's evsig_handler */
    errno = e;
}

static void die(const char *what) {
    perror(what);
    _exit(100);
}

static void fixture(int defer) {
    memset(g_fd, -1, sizeof g_fd);
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t al = sizeof g_addr;
    memset(&g_addr, 0, sizeof g_addr);
    g_addr.sin_family = AF_INET;
    g_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (l < 0 || bind(l, (struct sockaddr *)&g_addr, sizeof g_addr) || listen(l, 8) ||
        getsockname(l, (struct sockaddr *)&g_addr, &al))
        die("listen");
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&g_addr, sizeof g_addr) || send(c, "REQ", 3, 0) != 3)
        die("connect");
    int s = accept(l, NULL, NULL);
    char b[8];
    if (s < 0 || recv(s, b, sizeof b, 0) != 3)
        die("accept");
    int u[2], d[2], p[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, u) || socketpair(AF_UNIX, SOCK_DGRAM, 0, d) || pipe(p) ||
        socketpair(AF_UNIX, SOCK_STREAM, 0, g_sig))
        die("pairs");
    int nd = open("/dev/null", O_RDWR), mf = memfd_create("fuzz", 0), ep = epoll_create1(0);
    if (nd < 0 || mf < 0 || ep < 0 || write(mf, g_buf, 8192) != 8192)
        die("files");
    struct epoll_event ev = {.events = EPOLLIN | EPOLLOUT};
    ev.data.fd = s;
    epoll_ctl(ep, EPOLL_CTL_ADD, s, &ev);
    ev.data.fd = u[0];
    epoll_ctl(ep, EPOLL_CTL_ADD, u[0], &ev);
    int closed = dup(nd);
    close(closed);
    int v[F_NFD] = {s, c, l, u[0], u[1], d[0], d[1], p[0], p[1], nd, mf, ep, closed};
    memcpy(g_fd, v, sizeof v);
    /* Before the call: maybe a reply (deferred under the library), then the server socket let go. */
    int replied = 0;
    if (pick(3) == 0) {
        replied = send(s, "REPLY", 5, 0) == 5;
        say("[reply]");
        switch (pick(5)) {
        case 0: close(s); say("[close s]"); break;
        case 1: dup2(u[1], s); say("[dup2 u1 s]"); break;
        case 2: close_range((unsigned)s, (unsigned)s, 0); say("[close_range s]"); break;
        default: break;
        }
    }
    if (pick(3) == 0) {
        for (int i = 0; i < F_NFD; i++)
            if (pick(2))
                fcntl(g_fd[i], F_SETFL, O_NONBLOCK);
        say("[nonblock]");
    }
    if (pick(4) == 0) {   /* u0's buffer full: sends on it would block */
        while (send(u[0], g_buf, 4096, MSG_DONTWAIT) > 0)
            ;
        say("[u0 full]");
    }
    if (defer && replied)
        usleep(60000);   /* the deferred reply and close are out: what follows sees the same sockets */
    say(" ");
}

/* ---- the calls ------------------------------------------------------------------------------ */

typedef long (*call_fn)(void);

#define BUF_ARGS size_t valid_; void *b_ = pick_buf(&valid_); size_t n_ = pick_len(); (void)valid_

static long c_read(void) { int fd = pick_fd(); BUF_ARGS; return read(fd, b_, n_); }
static long c_write(void) { int fd = pick_fd(); BUF_ARGS; return write(fd, b_, n_); }
static long c_recv(void) { int fd = pick_fd(); BUF_ARGS; return recv(fd, b_, n_, pick_flags()); }
static long c_send(void) { int fd = pick_fd(); BUF_ARGS; return send(fd, b_, n_, pick_flags() | MSG_NOSIGNAL); }

static long c_recvfrom(void) {
    int fd = pick_fd();
    BUF_ARGS;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    unsigned k = pick(3);
    say(k == 0 ? " addr" : k == 1 ? " NULL" : " badaddr");
    return recvfrom(fd, b_, n_, pick_flags(), k == 0 ? (struct sockaddr *)&ss : k == 1 ? NULL : (struct sockaddr *)16,
                    k == 1 ? NULL : &sl);
}

static long c_sendto(void) {
    int fd = pick_fd();
    BUF_ARGS;
    unsigned k = pick(3);
    say(k == 0 ? " NULL" : k == 1 ? " addr" : " badaddr");
    return sendto(fd, b_, n_, pick_flags() | MSG_NOSIGNAL,
                  k == 0 ? NULL : k == 1 ? (struct sockaddr *)&g_addr : (struct sockaddr *)16,
                  k == 0 ? 0 : sizeof g_addr);
}

static long c_readv(void) { int fd = pick_fd(); int n; struct iovec *v = pick_iov(&n); return readv(fd, v, n); }
static long c_writev(void) { int fd = pick_fd(); int n; struct iovec *v = pick_iov(&n); return writev(fd, v, n); }

static struct msghdr *pick_msg(struct msghdr *m) {
    unsigned k = pick(6);
    if (k == 0) {
        say(" msg=NULL");
        return NULL;
    }
    if (k == 1) {
        say(" msg=16");
        return (struct msghdr *)16;
    }
    memset(m, 0, sizeof *m);
    int n;
    m->msg_iov = pick_iov(&n);
    m->msg_iovlen = (size_t)(long)n;
    if (k == 2) {
        static char ctl[64];
        memset(ctl, 0xff, sizeof ctl);
        m->msg_control = ctl;
        m->msg_controllen = sizeof ctl;
        say(" junkctl");
    } else if (k == 3) {
        m->msg_name = (void *)16;
        m->msg_namelen = 16;
        say(" badname");
    }
    return m;
}

static long c_recvmsg(void) {
    int fd = pick_fd();
    struct msghdr m;
    struct msghdr *p = pick_msg(&m);
    return recvmsg(fd, p, pick_flags());
}

static long c_sendmsg(void) {
    int fd = pick_fd();
    struct msghdr m;
    struct msghdr *p = pick_msg(&m);
    return sendmsg(fd, p, pick_flags() | MSG_NOSIGNAL);
}

static long c_mmsg(int send_) {
    int fd = pick_fd();
    static struct mmsghdr v[4];
    memset(v, 0, sizeof v);
    for (int i = 0; i < 4; i++) {
        int n;
        v[i].msg_hdr.msg_iov = pick_iov(&n);
        v[i].msg_hdr.msg_iovlen = (size_t)(long)n;
    }
    static const unsigned vl[] = {0, 1, 4, UINT_MAX};
    unsigned n = vl[pick(4)];
    say(" vlen=%u", n);
    struct mmsghdr *p = pick(4) ? v : (struct mmsghdr *)16;
    if (send_)
        return sendmmsg(fd, p, n, pick_flags() | MSG_NOSIGNAL);
    return recvmmsg(fd, p, n, pick_flags() | MSG_DONTWAIT, NULL);
}

static long c_recvmmsg(void) { return c_mmsg(0); }
static long c_sendmmsg(void) { return c_mmsg(1); }

static long c_sendfile(void) {
    int out = pick_fd();
    say(" ");
    int in = pick_fd();
    static off_t off;
    off = pick(2) ? 0 : 8000;
    unsigned k = pick(3);
    say(k == 0 ? " off" : k == 1 ? " NULL" : " badoff");
    size_t n = pick_len();
    return sendfile(out, in, k == 0 ? &off : k == 1 ? NULL : (off_t *)16, n);
}

static long c_connect(void) {
    int fd = pick_fd();
    unsigned k = pick(4);
    say(k == 0 ? " listener" : k == 1 ? " NULL" : k == 2 ? " bad" : " short");
    return connect(fd, k == 0 || k == 3 ? (struct sockaddr *)&g_addr : k == 1 ? NULL : (struct sockaddr *)16,
                   k == 3 ? 2 : sizeof g_addr);
}

static long c_poll(void) {
    static struct pollfd p[8];
    unsigned n = pick(9);
    for (unsigned i = 0; i < 8; i++) {
        say(" ");
        p[i].fd = pick_fd();
        p[i].events = (short)(pick(2) ? POLLIN : POLLIN | POLLOUT);
    }
    unsigned k = pick(4);
    say(" n=%u%s", n, k == 0 ? " fds=16" : "");
    static const int tmo[] = {0, 1, -1};   /* 1 ms: far from the guard's 100 ms on a loaded machine */
    int t = tmo[pick(3)];
    say(" t=%d", t);
    if (pick(2))
        return poll(k == 0 ? (struct pollfd *)16 : p, n, t);
    struct timespec ts = {0, t > 0 ? 1000000 : 0};
    return ppoll(k == 0 ? (struct pollfd *)16 : p, n, t < 0 ? NULL : &ts, NULL);
}

static long c_select(void) {
    fd_set r, w;
    FD_ZERO(&r);
    FD_ZERO(&w);
    for (int i = 0; i < 4; i++) {
        int fd = g_fd[pick(F_NFD)];
        if (fd >= 0 && fd < FD_SETSIZE)
            FD_SET(fd, pick(2) ? &r : &w);
    }
    static const int nfds[] = {0, 64, FD_SETSIZE, -1};
    int n = nfds[pick(4)];
    struct timeval tv = {0, pick(2) ? 0 : 1000};
    say(" nfds=%d t=%ld", n, (long)tv.tv_usec);
    return select(n, &r, &w, NULL, &tv);
}

static long c_epoll_wait(void) {
    int ep = pick_fd();
    static struct epoll_event ev[8];
    static const int mx[] = {0, 1, 8, -1};
    int m = mx[pick(4)];
    unsigned k = pick(4);
    say(" max=%d%s", m, k == 0 ? " ev=16" : "");
    return epoll_wait(ep, k == 0 ? (struct epoll_event *)16 : ev, m, pick(2) ? 0 : 1);
}

static long c_epoll_ctl(void) {
    int ep = pick_fd();
    static const int ops[] = {EPOLL_CTL_ADD, EPOLL_CTL_MOD, EPOLL_CTL_DEL, 99};
    int op = ops[pick(4)];
    say(" op=%d ", op);
    int fd = pick_fd();
    struct epoll_event e = {.events = EPOLLIN};
    unsigned k = pick(3);
    say(k == 0 ? " ev" : k == 1 ? " NULL" : " ev=16");
    return epoll_ctl(ep, op, fd, k == 0 ? &e : k == 1 ? NULL : (struct epoll_event *)16);
}

static long c_accept(void) {
    int fd = pick_fd();
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    unsigned k = pick(3);
    say(k == 0 ? " addr" : k == 1 ? " NULL" : " bad");
    if (pick(2))
        return accept(fd, k == 0 ? (struct sockaddr *)&ss : k == 1 ? NULL : (struct sockaddr *)16, k == 1 ? NULL : &sl);
    static const int fl[] = {0, SOCK_NONBLOCK, SOCK_CLOEXEC, 0x7fff};
    int f = fl[pick(4)];
    say(" flags=%#x", (unsigned)f);
    return accept4(fd, k == 0 ? (struct sockaddr *)&ss : k == 1 ? NULL : (struct sockaddr *)16, k == 1 ? NULL : &sl, f);
}

static long c_listen(void) { int fd = pick_fd(); return listen(fd, pick(2) ? 4 : -1); }

static long c_shutdown(void) {
    int fd = pick_fd();
    static const int how[] = {SHUT_RD, SHUT_WR, SHUT_RDWR, 7};
    int h = how[pick(4)];
    say(" how=%d", h);
    return shutdown(fd, h);
}

static long c_close(void) { int fd = pick_fd(); return close(fd); }
static long c_dup(void) { int fd = pick_fd(); return dup(fd); }

static long c_dup2(void) {
    int a = pick_fd();
    say(" ");
    int b = pick_fd();
    if (b >= 0 && b <= 2)
        b = 3;
    if (pick(2))
        return dup2(a, b);
    int f = pick(2) ? O_CLOEXEC : 0x7fff;
    say(" flags=%#x", (unsigned)f);
    return dup3(a, b, f);
}

static long c_close_range(void) {
    static const unsigned lo[] = {3, 5, 10, 4096, UINT_MAX};
    unsigned a = lo[pick(5)], b = pick(3) ? a + pick(8) : UINT_MAX;
    static const int fl[] = {0, CLOSE_RANGE_CLOEXEC, 0x7fff};
    int f = fl[pick(3)];
    say(" %u %u flags=%#x", a, b, (unsigned)f);
    return close_range(a, b, f);
}

static long c_socket(void) {
    static const int dom[] = {AF_INET, AF_INET6, AF_UNIX, 12345, -1};
    static const int ty[] = {SOCK_STREAM, SOCK_DGRAM, SOCK_STREAM | SOCK_NONBLOCK, 99, -1};
    int d = dom[pick(5)], t = ty[pick(5)];
    say(" %d %d", d, t);
    if (pick(2))
        return socket(d, t, 0);
    static int sv[2];
    unsigned k = pick(3);
    say(k == 0 ? " sv" : k == 1 ? " NULL" : " sv=16");
    return socketpair(d, t, 0, k == 0 ? sv : k == 1 ? NULL : (int *)16);
}

static long c_sleep(void) {
    struct timespec ts = {0, 0}, rem;
    static const long ns[] = {0, 1000, 999999999, 1000000000, -1};
    ts.tv_nsec = ns[pick(5)];
    ts.tv_sec = pick(3) == 0 ? 1 : 0;
    unsigned k = pick(3);
    say(" %ld.%09ld%s", (long)ts.tv_sec, ts.tv_nsec, k == 0 ? " req=16" : "");
    if (pick(2))
        return nanosleep(k == 0 ? (struct timespec *)16 : &ts, &rem);
    long r = clock_nanosleep(CLOCK_MONOTONIC, 0, k == 0 ? (struct timespec *)16 : &ts, &rem);
    if (r > 0) {   /* clock_nanosleep returns the error */
        errno = (int)r;
        return -1;
    }
    return r;
}

static long c_signals(void) {
    static const int sigs[] = {SIGUSR1, SIGUSR2, SIGALRM, SIGKILL, 0, 65};
    int sig = sigs[pick(6)];
    say(" sig=%d", sig);
    if (pick(2)) {
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = SIG_IGN;
        unsigned k = pick(3);   /* no bad pointer: glibc copies the struct itself (SIGSEGV without us too) */
        say(k == 0 ? " act" : " NULL");
        return sigaction(sig, k == 0 ? &sa : NULL, &old);
    }
    sigset_t set;
    sigemptyset(&set);
    if (sig > 0 && sig < 65)
        sigaddset(&set, sig);
    static const int how[] = {SIG_BLOCK, SIG_UNBLOCK, SIG_SETMASK, 99};
    int h = how[pick(4)];
    say(" how=%d", h);
    return sigprocmask(h, pick(4) ? &set : NULL, NULL);   /* glibc reads the set itself */
}

static const struct {
    const char *name;
    call_fn fn;
    int returns_fd;
} calls[] = {
    {"read", c_read, 0}, {"readv", c_readv, 0}, {"recv", c_recv, 0}, {"recvfrom", c_recvfrom, 0},
    {"recvmsg", c_recvmsg, 0}, {"recvmmsg", c_recvmmsg, 0}, {"write", c_write, 0}, {"writev", c_writev, 0},
    {"send", c_send, 0}, {"sendto", c_sendto, 0}, {"sendmsg", c_sendmsg, 0}, {"sendmmsg", c_sendmmsg, 0},
    {"sendfile", c_sendfile, 0}, {"connect", c_connect, 0}, {"poll/ppoll", c_poll, 0}, {"select", c_select, 0},
    {"epoll_wait", c_epoll_wait, 0}, {"epoll_ctl", c_epoll_ctl, 0}, {"accept/accept4", c_accept, 1},
    {"listen", c_listen, 0}, {"shutdown", c_shutdown, 0}, {"close", c_close, 0}, {"dup", c_dup, 1},
    {"dup2/dup3", c_dup2, 1}, {"close_range", c_close_range, 0}, {"socket/socketpair", c_socket, 1},
    {"nanosleep", c_sleep, 0}, {"sigaction/sigprocmask", c_signals, 0},
};
#define NCALLS (sizeof calls / sizeof calls[0])

static void one_case(uint64_t seed, long n, int defer) {
    g_rng = seed * 0x100000001b3ull + (uint64_t)n;
    g_dn = 0;
    g_desc[0] = 0;
    unsigned which = pick(NCALLS);
    fixture(defer);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;   /* no SA_RESTART: a call that would block returns EINTR */
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, 100000}};
    setitimer(ITIMER_REAL, &it, NULL);
    errno = 0;
    long r = calls[which].fn();
    int e = r < 0 ? errno : 0;
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    char out[700];
    int k;
    if (calls[which].returns_fd && r >= 0)
        k = snprintf(out, sizeof out, "CASE %ld %s %s -> fd 0\n", n, calls[which].name, g_desc);
    else
        k = snprintf(out, sizeof out, "CASE %ld %s %s -> %ld %d\n", n, calls[which].name, g_desc, r, e);
    (void)!write(1, out, (size_t)(k < (int)sizeof out ? k : (int)sizeof out - 1));
}

static void arm_deferral(void) {
    const char *dir = getenv("NESTLAB_SHM_DIR");
    if (!dir || !getenv("LD_PRELOAD"))
        return;
    char path[4096];
    snprintf(path, sizeof path, "%s/%d.nest", dir, (int)getpid());
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return;
    struct nest_header *h = mmap(NULL, NEST_HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (h == MAP_FAILED)
        return;
    h->reply_delay_mode = NEST_DELAY_DEFER;
    __atomic_store_n(&h->reply_delay_ns, 20000000ull, __ATOMIC_RELEASE);
    munmap(h, NEST_HEADER_SIZE);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s SEED FIRST COUNT [defer]\n", argv[0]);
        return 2;
    }
    uint64_t seed = strtoull(argv[1], NULL, 10);
    long first = atol(argv[2]), count = atol(argv[3]);
    int defer = argc > 4 && !strcmp(argv[4], "defer");
    if (defer)
        arm_deferral();
    signal(SIGPIPE, SIG_IGN);
    char *m = mmap(NULL, 65536 + 4 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED)
        die("mmap");
    g_buf = m;
    memset(g_buf, 'x', 65536);
    g_ro = m + 65536;
    g_edge = m + 65536 + 2 * 4096 - 100;
    g_none = m + 65536 + 2 * 4096;
    mprotect(g_ro, 4096, PROT_READ);
    mprotect(g_none, 2 * 4096, PROT_NONE);
    for (long n = first; n < first + count; n++) {
        pid_t p = fork();
        if (p == 0) {
            one_case(seed, n, defer);
            _exit(0);
        }
        int st = 0, hung = 0;
        struct timespec ms = {0, 1000000};
        for (int waited = 0; waitpid(p, &st, WNOHANG) != p; waited++) {
            if (waited == 5000) {      /* a hang: the case is killed and reported */
                kill(p, SIGKILL);
                hung = 1;
            }
            nanosleep(&ms, NULL);
        }
        if (hung || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            g_rng = seed * 0x100000001b3ull + (uint64_t)n;
            unsigned which = pick(NCALLS);
            printf("CASE %ld %s -> %s %d\n", n, calls[which].name,
                   hung ? "hang" : WIFSIGNALED(st) ? "signal" : "exit",
                   hung ? 0 : WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            fflush(stdout);
        }
    }
    return 0;
}
