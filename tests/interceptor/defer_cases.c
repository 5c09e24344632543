/*
 * defer_cases - small programs for the delay fault's deferral (harness/interceptor/defer.c), run
 * under the library by tests/test_interceptor_defer.py (issue 40 items 2, 3, 7, 8 and 15). Each arms
 * the deferral in its own counter file (as the injector does: header.reply_delay_ns and
 * reply_delay_mode = DEFER) and plays a server on 127.0.0.1 whose replies are deferred; it prints
 * one line "RESULT {...}" with what it saw. Without the library the deferral is not armed and every
 * case shows what the kernel does (the reference).
 *
 *   reuse HOW       A's reply deferred (300 ms), then the server lets go of A's socket by HOW
 *                   (close_range, fclose, dup2, raw: a close system call the library does not see)
 *                   and B gets A's fd number (accept; dup2: B's socket put on it): what B and A
 *                   received after 700 ms, and the replies the library dropped.
 *   badargs         in a fork child each, on a socket whose next send is a deferred reply: write from
 *                   (void *)16, sendmsg of NULL and of (void *)16, writev of lengths that wrap size_t,
 *                   of a bad iovec pointer, with -1 and IOV_MAX+1 entries: return value, errno or the
 *                   signal that killed the child.
 *   nonblock        an O_NONBLOCK socket, a peer that reads nothing: a 40 MiB reply, the fault
 *                   healed, 40 MiB more: what each write returned and how long it took.
 *   signal          20000 sends of 4 KiB queued behind a deferred reply while a SIGALRM handler (every
 *                   200 us) sends a byte on a socketpair (libevent's pattern): done, handler runs.
 *   epoll2          a socket in two epoll sets, its reply deferred, then closed; the client sends
 *                   more: events each set still reports for it.
 *   forkclose       a reply deferred, the socket closed, then fork (the child lives 3 s): when the
 *                   client sees the reply and the end of the stream.
 *   execclose       a reply deferred, the socket closed, then the server execs `sleep 3`; its client
 *                   (a fork child) says when it sees the end of the stream.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nestintercept.h"

/* The bad arguments are the point (badargs). */
#pragma GCC diagnostic ignored "-Wpragmas"
#pragma GCC diagnostic ignored "-Wstringop-overread"
#pragma GCC diagnostic ignored "-Wstringop-overflow"

static void die(const char *what) {
    perror(what);
    exit(1);
}

static uint64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Our own counter file's header, when the library counts this process. */
static struct nest_header *own_header(void) {
    const char *dir = getenv("NESTLAB_SHM_DIR");
    if (!dir || !getenv("LD_PRELOAD"))
        return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%d.nest", dir, (int)getpid());
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return NULL;
    void *m = mmap(NULL, NEST_HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return m == MAP_FAILED ? NULL : m;
}

/* The delay fault in defer mode, as the injector sets it (0: healed). */
static void arm(uint64_t ms) {
    struct nest_header *h = own_header();
    if (!h)
        return;
    __atomic_store_n(&h->reply_delay_mode, NEST_DELAY_DEFER, __ATOMIC_RELAXED);
    __atomic_store_n(&h->reply_delay_ns, ms * 1000000ull, __ATOMIC_RELEASE);
    munmap(h, NEST_HEADER_SIZE);
}

static int listener(struct sockaddr_in *a) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t al = sizeof *a;
    memset(a, 0, sizeof *a);
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (l < 0 || bind(l, (struct sockaddr *)a, sizeof *a) || listen(l, 8) || getsockname(l, (struct sockaddr *)a, &al))
        die("listen");
    return l;
}

static int client(const struct sockaddr_in *a) {
    int c = socket(AF_INET, SOCK_STREAM, 0);
    if (c < 0 || connect(c, (const struct sockaddr *)a, sizeof *a))
        die("connect");
    return c;
}

/* A client connected, with its request sent. */
static int asking(const struct sockaddr_in *a, const char *req) {
    int c = client(a);
    if (send(c, req, strlen(req), 0) != (ssize_t)strlen(req))
        die("send request");
    return c;
}

/* The server accepts a client and receives its request: its next send on it starts a reply. */
static int accepted(int l) {
    int s = accept(l, NULL, NULL);
    char b[64];
    if (s < 0 || recv(s, b, sizeof b, 0) <= 0)
        die("accept/recv");
    return s;
}

static int served(int l, const struct sockaddr_in *a, int *cl, const char *req) {
    *cl = asking(a, req);
    return accepted(l);
}

/* What fd has to read within ms (non-blocking afterwards), as a JSON string (printable bytes). */
static void got(int fd, int ms, char *out, size_t cap) {
    size_t n = 0;
    uint64_t until = now_ms() + (uint64_t)ms;
    for (;;) {
        uint64_t t = now_ms();
        struct pollfd p = {fd, POLLIN, 0};
        if (t >= until || poll(&p, 1, (int)(until - t)) <= 0)
            break;
        char b[256];
        ssize_t r = recv(fd, b, sizeof b, MSG_DONTWAIT);
        if (r <= 0)
            break;
        for (ssize_t i = 0; i < r && n + 1 < cap; i++)
            out[n++] = (b[i] >= 32 && b[i] < 127 && b[i] != '"' && b[i] != '\\') ? b[i] : '.';
    }
    out[n] = 0;
}

static int reuse(const char *how) {
    struct sockaddr_in a;
    int l = listener(&a), ca, cb;
    arm(300);
    int sa = served(l, &a, &ca, "REQ-A");
    if (send(sa, "REPLY-FOR-A", 11, 0) != 11)
        die("reply A");
    cb = asking(&a, "REQ-B");   /* B's client socket made first: the server's next fd is A's number */
    int sb;
    if (!strcmp(how, "close_range")) {
        if (close_range(sa, sa, 0))
            die("close_range");
        sb = accepted(l);
    } else if (!strcmp(how, "fclose")) {
        FILE *f = fdopen(sa, "r+");
        if (!f || fclose(f))
            die("fclose");
        sb = accepted(l);
    } else if (!strcmp(how, "raw")) {   /* a close the library does not see (inside libc, say) */
        syscall(SYS_close, sa);
        sb = accepted(l);
    } else if (!strcmp(how, "dup2")) {
        int b = accepted(l);
        if (dup2(b, sa) != sa)
            die("dup2");
        close(b);
        sb = sa;
    } else {
        fprintf(stderr, "reuse: unknown way %s\n", how);
        return 2;
    }
    char gb[256], ga[256];
    got(cb, 700, gb, sizeof gb);
    got(ca, 100, ga, sizeof ga);
    struct nest_header *h = own_header();
    printf("RESULT {\"same_fd\": %d, \"b_got\": \"%s\", \"a_got\": \"%s\", \"dropped\": %lld}\n", sb == sa, gb, ga,
           h ? (long long)h->replies_dropped : -1LL);
    return 0;
}

/* One bad call in a fork child (the parent's socket s, whose next send starts a reply). */
static void bad_case(const char *name, int s, int which) {
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        static char buf[64];
        struct iovec wrap[2] = {{buf, 16}, {buf, SIZE_MAX - 7}};   /* 16 + (2^64 - 8) wraps to 8 */
        struct iovec one = {buf, 4};
        long r = 0;
        errno = 0;
        switch (which) {
        case 0: r = write(s, (void *)16, 100); break;
        case 1: r = sendmsg(s, NULL, 0); break;
        case 2: r = sendmsg(s, (void *)16, 0); break;
        case 3: r = writev(s, wrap, 2); break;
        case 4: r = writev(s, (void *)16, 1); break;
        case 5: r = writev(s, &one, -1); break;
        case 6: r = writev(s, &one, IOV_MAX + 1); break;
        case 7: r = send(s, (void *)-1, 1, 0); break;
        }
        printf("\"%s\": [%ld, %d, 0]", name, r, r < 0 ? errno : 0);
        fflush(stdout);
        _exit(0);
    }
    int st = 0;
    waitpid(p, &st, 0);
    if (!WIFEXITED(st))
        printf("\"%s\": [null, null, %d]", name, WIFSIGNALED(st) ? WTERMSIG(st) : -1);
}

static int badargs(void) {
    static const char *names[] = {"write_16", "sendmsg_null", "sendmsg_16", "writev_wrap", "writev_iov_16",
                                  "writev_cnt_-1", "writev_cnt_big", "send_-1"};
    struct sockaddr_in a;
    int l = listener(&a), c;
    arm(300);
    int s = served(l, &a, &c, "REQ");
    printf("RESULT {");
    for (int i = 0; i < 8; i++) {
        if (i)
            printf(", ");
        bad_case(names[i], s, i);
    }
    printf("}\n");
    return 0;
}

static int nonblock(void) {
    struct sockaddr_in a;
    int l = listener(&a), c;
    arm(300);
    int s = served(l, &a, &c, "REQ");
    fcntl(s, F_SETFL, fcntl(s, F_GETFL) | O_NONBLOCK);
    size_t n = 40u << 20;
    char *big = malloc(n);
    if (!big)
        die("malloc");
    memset(big, 'r', n);
    uint64_t t0 = now_ms();
    long r1 = write(s, big, n);
    int e1 = r1 < 0 ? errno : 0;
    uint64_t t1 = now_ms();
    arm(0);   /* the fault heals; the peer still reads nothing */
    long r2 = write(s, big, n);
    int e2 = r2 < 0 ? errno : 0;
    uint64_t t2 = now_ms();
    printf("RESULT {\"first\": [%ld, %d, %llu], \"second\": [%ld, %d, %llu], \"asked\": %zu}\n", r1, e1,
           (unsigned long long)(t1 - t0), r2, e2, (unsigned long long)(t2 - t1), n);
    return 0;
}

static int g_sp[2];
static volatile long g_runs;

static void on_alarm(int sig) {
    (void)sig;
    int e = errno;
    (void)!send(g_sp[0], "s", 1, MSG_DONTWAIT);   /* libevent's evsig_handler */
    g_runs++;
    errno = e;
}

static int sigsend(void) {
    struct sockaddr_in a;
    int l = listener(&a), c;
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, g_sp))
        die("socketpair");
    arm(50);
    int s = served(l, &a, &c, "REQ");
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 200}, {0, 200}};
    setitimer(ITIMER_REAL, &it, NULL);
    static char blk[4096];
    long sent = 0;
    for (int i = 0; i < 20000; i++) {
        if (send(s, blk, sizeof blk, MSG_NOSIGNAL) == (ssize_t)sizeof blk)
            sent++;
        if (i % 64 == 0) {   /* the client reads (the queue and the socket never fill) */
            char b[65536];
            while (recv(c, b, sizeof b, MSG_DONTWAIT) > 0)
                ;
        }
    }
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
    printf("RESULT {\"sent\": %ld, \"handler_runs\": %ld}\n", sent, g_runs);
    return 0;
}

static int epoll2(void) {
    struct sockaddr_in a;
    int l = listener(&a), c;
    arm(300);
    int s = served(l, &a, &c, "REQ");
    int e1 = epoll_create1(0), e2 = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = s};
    if (epoll_ctl(e1, EPOLL_CTL_ADD, s, &ev) || epoll_ctl(e2, EPOLL_CTL_ADD, s, &ev))
        die("epoll_ctl");
    if (send(s, "REPLY", 5, 0) != 5)
        die("reply");
    close(s);
    if (send(c, "MORE", 4, 0) != 4)
        die("more");
    struct epoll_event out[4];
    int n1 = epoll_wait(e1, out, 4, 100), n2 = epoll_wait(e2, out, 4, 100);
    char g[64];
    got(c, 700, g, sizeof g);
    printf("RESULT {\"set1\": %d, \"set2\": %d, \"client_got\": \"%s\"}\n", n1, n2, g);
    return 0;
}

static int forkclose(void) {
    struct sockaddr_in a;
    int l = listener(&a), c;
    arm(300);
    int s = served(l, &a, &c, "REQ");
    if (send(s, "REPLY", 5, 0) != 5)
        die("reply");
    close(s);
    uint64_t t0 = now_ms();
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {
        sleep(3);
        _exit(0);
    }
    char b[64];
    long reply_ms = -1, eof_ms = -1;
    size_t n = 0;
    while (now_ms() - t0 < 2000) {
        struct pollfd pf = {c, POLLIN, 0};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t r = recv(c, b + n, sizeof b - n - 1, 0);
        if (r > 0) {
            n += (size_t)r;
            reply_ms = (long)(now_ms() - t0);
        } else {
            eof_ms = (long)(now_ms() - t0);
            break;
        }
    }
    b[n] = 0;
    kill(p, SIGKILL);
    waitpid(p, NULL, 0);
    printf("RESULT {\"reply\": \"%s\", \"reply_ms\": %ld, \"eof_ms\": %ld}\n", b, reply_ms, eof_ms);
    return 0;
}

static int execclose(void) {
    struct sockaddr_in a;
    int l = listener(&a);
    fflush(stdout);
    pid_t p = fork();
    if (p == 0) {   /* the client */
        int c = asking(&a, "REQ");
        uint64_t t0 = 0;
        char b[64];
        long eof_ms = -1;
        for (uint64_t start = now_ms(); now_ms() - start < 4000;) {
            struct pollfd pf = {c, POLLIN, 0};
            if (poll(&pf, 1, 100) <= 0)
                continue;
            if (!t0)
                t0 = now_ms();
            if (recv(c, b, sizeof b, 0) <= 0) {
                eof_ms = (long)(now_ms() - start);
                break;
            }
        }
        printf("RESULT {\"eof_ms\": %ld}\n", eof_ms);
        fflush(stdout);
        _exit(0);
    }
    arm(300);
    int s = accepted(l);
    if (send(s, "REPLY", 5, 0) != 5)
        die("reply");
    close(s);
    close(l);
    execl("/bin/sleep", "sleep", "3", (char *)NULL);
    die("exec");
    return 1;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 3 && !strcmp(argv[1], "reuse"))
        return reuse(argv[2]);
    if (argc >= 2 && !strcmp(argv[1], "badargs"))
        return badargs();
    if (argc >= 2 && !strcmp(argv[1], "nonblock"))
        return nonblock();
    if (argc >= 2 && !strcmp(argv[1], "signal"))
        return sigsend();
    if (argc >= 2 && !strcmp(argv[1], "epoll2"))
        return epoll2();
    if (argc >= 2 && !strcmp(argv[1], "forkclose"))
        return forkclose();
    if (argc >= 2 && !strcmp(argv[1], "execclose"))
        return execclose();
    fprintf(stderr, "usage: %s reuse close_range|fclose|dup2 | badargs | nonblock | signal | epoll2 | forkclose | execclose\n",
            argv[0]);
    return 2;
}
