/*
 * nestprobe - a small program that exercises the interceptor (tests/test_interceptor.py builds it
 * with gcc into a temporary directory and runs it under LD_PRELOAD; bench/bench_interceptor.py
 * times its `bench` mode). It counts its own calls and prints them as JSON, so the tests can compare
 * the interceptor's counters with the truth. Every mode talks to 127.0.0.1 only.
 *
 *   threads N M S K   N threads each connect to an in-process listener and send M messages of S
 *                     bytes with send(); K threads share one more connection and write() M
 *                     messages each on it; a reader thread per accepted connection read()s it all.
 *                     Prints "READY {...}", waits for a line on stdin, closes every socket, prints
 *                     "CLOSED", waits for a line, exits.
 *   fork PORT         connect A to PORT, send 5; fork; the child sends 7 on A, connects B and sends
 *                     3 on it, prints "CHILD {...}" and exits when the parent says so; the parent
 *                     waits for a stdin line, lets the child go, reaps it, sends 2 more on A, prints
 *                     "PARENT {...}", waits for a line, exits.
 *   exec PORT         connect A (inheritable) and C (close-on-exec), send 4 on A and 1 on C, exec
 *                     itself as "exec2 FD": sends 6 more on A, prints "EXEC2 {...}", waits, exits.
 *   dup PORT          connect A, send 2; B = dup(A), send 3 on B; dup2(A, 40), send 1 on 40;
 *                     close_range(A, A); prints "DUP {...}", waits for a line, exits.
 *   poll PORT         connect A to a peer that sends nothing; wait for input with poll (300 ms),
 *                     select (200 ms), epoll_wait (200 ms); wait for output with poll and epoll
 *                     (ready at once); prints "WAITED {...}", then "LONG" before a 1500 ms
 *                     poll for input, then "DONE", waits for a line, exits.
 *   stream PORT       connect A; one thread write()s 1 KB messages, one read()s, without end.
 *                     Prints "READY {...}"; exits at a line (or EOF) on stdin, printing "COUNTS {...}".
 *   handler PORT      like stream, after installing its own SIGUSR1 handler (signal, sigaction)
 *                     and blocking SIGUSR1/SIGUSR2; prints what the calls returned, and at exit
 *                     how many times its handler ran.
 *   highfd PORT FD [N]  connect A, send 2 on it, dup2(A, FD), send 3 on FD; with N, also dup2(A,
 *                     FD + 16 i) and send 1 on it for i = 1..N-1 (one 4 KiB page of slots each);
 *                     prints "HIGH {...}", waits for a line, exits.
 *   lock CASE         plays a thread of the program inside the library's seqlock (the probe maps its
 *                     own counter file, NESTLAB_SHM_DIR/<pid>.nest, and takes a lock as the library
 *                     does, naming its thread): A connects to B, an in-process listener; A sends 2.
 *                     other: a helper thread holds A's send lock 300 ms, adds 100 messages inside,
 *                            lets go; meanwhile the main thread closes A (a writer must wait).
 *                     dead:  a helper thread takes A's send lock and ends; the main thread closes A.
 *                     self:  the main thread holds A's send lock and sends on A (a signal handler
 *                            re-entering the library), lets go, sends once more.
 *                     end:   a thread blocks in recv(A); the main thread holds A's receive lock,
 *                            sends 10 bytes on B (the recv ends), lets go after 300 ms.
 *                     defer: like end, holding it 400 ms (run with NESTLAB_LOCK_WAIT_MS=50), then
 *                            one send on B (the next call of the program).
 *                     Prints "LOCK {...}", waits for a line, exits.
 *   eintr PORT        connect A to a peer that sends nothing; while the test sends pause and resume
 *                     signals, waits in poll, ppoll, select, pselect, epoll_wait, epoll_pwait,
 *                     nanosleep, clock_nanosleep, usleep, sleep, recv with SO_RCVTIMEO,
 *                     sem_timedwait and sigtimedwait, each with a timeout; prints "OWN", waits for a
 *                     line, then waits in poll interrupted by its own SIGALRM (no SA_RESTART).
 *                     Prints "EINTR {name: [rc, errno, ms, expected ms]...}".
 *   bench N KIND [CPU DRAIN_CPU]
 *                     N one-byte send()s on a loopback TCP connection (KIND tcp) or a Unix
 *                     socketpair (unix), a thread draining the other end; or on a full socketpair
 *                     with MSG_DONTWAIT, every call failing at once with EAGAIN (eagain: no peer
 *                     activity, the steadiest measure of the per-call cost); sender and drainer
 *                     pinned to the CPUs given (-1: not pinned). Prints "BENCH {"ns_per_call":...}".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "nestintercept.h"

static void die(const char *what) {
    fprintf(stderr, "nestprobe: %s: %s\n", what, strerror(errno));
    exit(2);
}

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static unsigned long inode_of(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0)
        die("fstat");
    return (unsigned long)st.st_ino;
}

static void wait_line(void) {
    char line[256];
    if (!fgets(line, sizeof line, stdin))
        return;
}

static int connect_to(int port, int flags) {
    int fd = socket(AF_INET, SOCK_STREAM | flags, 0);
    if (fd < 0)
        die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0)
        die("connect");
    return fd;
}

static int listener(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        die("socket");
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t l = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 128) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &l) != 0)
        die("listen");
    *port = ntohs(a.sin_port);
    return fd;
}

/* send exactly n bytes; returns the number of send()/write() calls made */
static long send_all(int fd, const char *buf, size_t n, int use_write) {
    long calls = 0;
    size_t off = 0;
    while (off < n) {
        ssize_t r = use_write ? write(fd, buf + off, n - off) : send(fd, buf + off, n - off, 0);
        calls++;
        if (r < 0) {
            if (errno == EINTR)
                continue;
            die("send");
        }
        off += (size_t)r;
    }
    return calls;
}

/* ---------------------------------------------------------------------------------------------- */

struct conn {
    int port, fd, shared, msgs, size;
    long calls;        /* send or read calls that returned >= 0, connect included for senders */
    long bytes;
    long expect;       /* reader: bytes to read */
    pthread_t th;
};

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;

static void *sender(void *arg) {
    struct conn *c = arg;
    char *buf = calloc(1, (size_t)c->size);
    for (int i = 0; i < c->msgs; i++) {
        long k = send_all(c->fd, buf, (size_t)c->size, c->shared);
        if (c->shared) {
            pthread_mutex_lock(&g_mu);
            c->calls += k;
            pthread_mutex_unlock(&g_mu);
        } else {
            c->calls += k;
        }
    }
    free(buf);
    return NULL;
}

static void *reader(void *arg) {
    struct conn *c = arg;
    char buf[65536];
    while (c->bytes < c->expect) {
        ssize_t r = read(c->fd, buf, sizeof buf);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            die("read");
        c->calls++;
        if (r == 0)
            break;
        c->bytes += r;
    }
    return NULL;
}

static int mode_threads(int n, int m, int s, int k) {
    int port;
    int lfd = listener(&port);
    struct conn *snd = calloc((size_t)n + 1, sizeof *snd), *rcv = calloc((size_t)n + 1, sizeof *rcv);
    /* connection 0 is shared by k writer threads; 1..n have one sender each */
    for (int i = 0; i <= n; i++) {
        snd[i].fd = connect_to(port, 0);
        snd[i].calls = 1;               /* connect */
        snd[i].msgs = m;
        snd[i].size = s;
        snd[i].shared = i == 0;
        rcv[i].fd = accept(lfd, NULL, NULL);
        if (rcv[i].fd < 0)
            die("accept");
        rcv[i].expect = (long)m * s * (i == 0 ? k : 1);
    }
    for (int i = 0; i <= n; i++)
        pthread_create(&rcv[i].th, NULL, reader, &rcv[i]);
    pthread_t *shared = calloc((size_t)k, sizeof *shared);
    for (int j = 0; j < k; j++)
        pthread_create(&shared[j], NULL, sender, &snd[0]);
    for (int i = 1; i <= n; i++)
        pthread_create(&snd[i].th, NULL, sender, &snd[i]);
    for (int j = 0; j < k; j++)
        pthread_join(shared[j], NULL);
    for (int i = 1; i <= n; i++)
        pthread_join(snd[i].th, NULL);
    for (int i = 0; i <= n; i++)
        pthread_join(rcv[i].th, NULL);
    printf("READY {\"pid\":%d,\"listen_fd\":%d,\"conns\":[", getpid(), lfd);
    for (int i = 0; i <= n; i++)
        printf("%s{\"shared\":%d,\"send_fd\":%d,\"send_inode\":%lu,\"send_calls\":%ld,"
               "\"recv_fd\":%d,\"recv_inode\":%lu,\"recv_calls\":%ld,\"bytes\":%ld}",
               i ? "," : "", i == 0, snd[i].fd, inode_of(snd[i].fd), snd[i].calls, rcv[i].fd,
               inode_of(rcv[i].fd), rcv[i].calls, rcv[i].bytes);
    printf("]}\n");
    fflush(stdout);
    wait_line();
    for (int i = 0; i <= n; i++) {
        close(snd[i].fd);
        close(rcv[i].fd);
    }
    close(lfd);
    printf("CLOSED\n");
    fflush(stdout);
    wait_line();
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */

static void sendn(int fd, int n) {
    char b[100] = {0};
    for (int i = 0; i < n; i++)
        send_all(fd, b, sizeof b, 0);
}

static int mode_fork(int port) {
    int a = connect_to(port, 0);
    sendn(a, 5);
    int go[2];
    if (pipe(go) != 0)
        die("pipe");
    pid_t child = fork();
    if (child < 0)
        die("fork");
    if (child == 0) {
        close(go[1]);
        sendn(a, 7);
        int b = connect_to(port, 0);
        sendn(b, 3);
        printf("CHILD {\"pid\":%d,\"a_fd\":%d,\"a_inode\":%lu,\"b_fd\":%d,\"b_inode\":%lu}\n", getpid(), a,
               inode_of(a), b, inode_of(b));
        fflush(stdout);
        char c;
        while (read(go[0], &c, 1) > 0)
            ;
        exit(0);
    }
    close(go[0]);
    wait_line();
    close(go[1]);
    int st;
    waitpid(child, &st, 0);
    sendn(a, 2);
    printf("PARENT {\"pid\":%d,\"child\":%d,\"child_status\":%d,\"a_fd\":%d,\"a_inode\":%lu}\n", getpid(),
           child, st, a, inode_of(a));
    fflush(stdout);
    wait_line();
    return 0;
}

static int mode_exec(int port, const char *self) {
    int a = connect_to(port, 0);
    int c = connect_to(port, SOCK_CLOEXEC);
    sendn(a, 4);
    sendn(c, 1);
    char fdbuf[16], inobuf[32], cino[32];
    snprintf(fdbuf, sizeof fdbuf, "%d", a);
    snprintf(inobuf, sizeof inobuf, "%lu", inode_of(a));
    snprintf(cino, sizeof cino, "%lu", inode_of(c));
    fflush(stdout);
    execl(self, "nestprobe", "exec2", fdbuf, inobuf, cino, (char *)NULL);
    die("exec");
    return 2;
}

static int mode_exec2(int fd, const char *ino, const char *cino) {
    sendn(fd, 6);
    printf("EXEC2 {\"pid\":%d,\"a_fd\":%d,\"a_inode\":%s,\"c_inode\":%s}\n", getpid(), fd, ino, cino);
    fflush(stdout);
    wait_line();
    return 0;
}

static int mode_dup(int port) {
    int a = connect_to(port, 0);
    sendn(a, 2);
    int b = dup(a);
    sendn(b, 3);
    if (dup2(a, 40) != 40)
        die("dup2");
    sendn(40, 1);
    if (close_range((unsigned)a, (unsigned)a, 0) != 0)
        die("close_range");
    printf("DUP {\"pid\":%d,\"a_fd\":%d,\"b_fd\":%d,\"c_fd\":40,\"inode\":%lu}\n", getpid(), a, b,
           inode_of(b));
    fflush(stdout);
    wait_line();
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */

static int mode_poll(int port) {
    int a = connect_to(port, 0);
    uint64_t t0 = mono_ns();
    struct pollfd p = {.fd = a, .events = POLLIN};
    if (poll(&p, 1, 300) != 0)
        die("poll: expected a timeout");
    uint64_t t1 = mono_ns();
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(a, &rs);
    struct timeval tv = {0, 200000};
    if (select(a + 1, &rs, NULL, NULL, &tv) != 0)
        die("select: expected a timeout");
    uint64_t t2 = mono_ns();
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = a};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev) != 0)
        die("epoll_ctl");
    struct epoll_event out[4];
    if (epoll_wait(ep, out, 4, 200) != 0)
        die("epoll_wait: expected a timeout");
    uint64_t t3 = mono_ns();
    p.events = POLLOUT;
    if (poll(&p, 1, 1000) != 1)
        die("poll out");
    ev.events = EPOLLOUT;
    if (epoll_ctl(ep, EPOLL_CTL_MOD, a, &ev) != 0)
        die("epoll_ctl mod");
    if (epoll_wait(ep, out, 4, 1000) != 1)
        die("epoll_wait out");
    uint64_t t4 = mono_ns();
    printf("WAITED {\"pid\":%d,\"fd\":%d,\"inode\":%lu,\"poll_ms\":%.3f,\"select_ms\":%.3f,\"epoll_ms\":%.3f,"
           "\"out_ms\":%.3f}\n",
           getpid(), a, inode_of(a), (t1 - t0) / 1e6, (t2 - t1) / 1e6, (t3 - t2) / 1e6, (t4 - t3) / 1e6);
    printf("LONG\n");
    fflush(stdout);
    p.events = POLLIN;
    uint64_t t5 = mono_ns();
    if (poll(&p, 1, 1500) != 0)
        die("long poll: expected a timeout");
    printf("DONE {\"long_ms\":%.3f}\n", (mono_ns() - t5) / 1e6);
    fflush(stdout);
    wait_line();
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */

static volatile long g_w_calls, g_r_calls;
static volatile int g_handler_ran;
static volatile int g_stop;

static void *stream_writer(void *arg) {
    int fd = *(int *)arg;
    char buf[1024] = {0};
    while (!g_stop) {
        ssize_t r = write(fd, buf, sizeof buf);
        if (r < 0 && errno != EINTR)
            break;
        if (r >= 0)
            __atomic_add_fetch(&g_w_calls, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void *stream_reader(void *arg) {
    int fd = *(int *)arg;
    char buf[1024];
    while (!g_stop) {
        ssize_t r = read(fd, buf, sizeof buf);
        if (r < 0 && errno != EINTR)
            break;
        if (r == 0)
            break;
        if (r > 0)
            __atomic_add_fetch(&g_r_calls, 1, __ATOMIC_RELAXED);
    }
    return NULL;
}

static void my_handler(int sig) {
    (void)sig;
    g_handler_ran++;
}

static int mode_stream(int port, int own_handler) {
    char extra[512] = "";
    if (own_handler) {
        sighandler_t prev = signal(SIGUSR1, my_handler);
        struct sigaction sa, old;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = my_handler;
        sigemptyset(&sa.sa_mask);
        int rc = sigaction(SIGUSR1, &sa, &old);
        struct sigaction now;
        sigaction(SIGUSR1, NULL, &now);
        sigset_t set, cur;
        sigemptyset(&set);
        sigaddset(&set, SIGUSR1);
        sigaddset(&set, SIGUSR2);
        int mrc = sigprocmask(SIG_BLOCK, &set, NULL);
        sigprocmask(SIG_BLOCK, NULL, &cur);
        snprintf(extra, sizeof extra,
                 ",\"signal_prev_dfl\":%d,\"sigaction_rc\":%d,\"old_is_mine\":%d,\"query_is_mine\":%d,"
                 "\"mask_rc\":%d,\"usr1_blocked\":%d,\"usr2_blocked\":%d",
                 prev == SIG_DFL, rc, old.sa_handler == my_handler, now.sa_handler == my_handler, mrc,
                 sigismember(&cur, SIGUSR1), sigismember(&cur, SIGUSR2));
    }
    int a = connect_to(port, 0);
    pthread_t w, r;
    pthread_create(&w, NULL, stream_writer, &a);
    pthread_create(&r, NULL, stream_reader, &a);
    printf("READY {\"pid\":%d,\"fd\":%d,\"inode\":%lu%s}\n", getpid(), a, inode_of(a), extra);
    fflush(stdout);
    wait_line();
    printf("COUNTS {\"writes\":%ld,\"reads\":%ld,\"handler_ran\":%d}\n", g_w_calls, g_r_calls, g_handler_ran);
    fflush(stdout);
    _exit(0);
}

/* ---------------------------------------------------------------------------------------------- */

static int mode_highfd(int port, int high, int n) {
    int a = connect_to(port, 0);
    sendn(a, 2);
    if (dup2(a, high) != high)
        die("dup2");
    sendn(high, 3);
    for (int i = 1; i < n; i++) {
        if (dup2(a, high + 16 * i) != high + 16 * i)
            die("dup2");
        sendn(high + 16 * i, 1);
    }
    printf("HIGH {\"pid\":%d,\"a_fd\":%d,\"fd\":%d,\"inode\":%lu}\n", getpid(), a, high, inode_of(a));
    fflush(stdout);
    wait_line();
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */

static struct nest_header *g_own;

static struct nest_slot *own_slot(int fd) {
    if (!g_own) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%d.nest", getenv("NESTLAB_SHM_DIR"), getpid());
        int f = open(path, O_RDWR);
        struct stat st;
        if (f < 0 || fstat(f, &st) != 0)
            die("open own counter file");
        void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, f, 0);
        if (m == MAP_FAILED)
            die("mmap own counter file");
        close(f);
        g_own = m;
    }
    return (struct nest_slot *)((char *)g_own + NEST_HEADER_SIZE) + fd;
}

static uint64_t take(uint64_t *seq) {   /* as the library: odd, naming this thread */
    uint64_t tid = (uint64_t)syscall(SYS_gettid) & 0x7fffffffu;
    for (;;) {
        uint64_t s = __atomic_load_n(seq, __ATOMIC_RELAXED);
        uint64_t h = (s & ~0xffffffffull) | (tid << 1) | 1;
        if (!(s & 1) && __atomic_compare_exchange_n(seq, &s, h, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
            return h;
        sched_yield();
    }
}

static void let_go(uint64_t *seq, uint64_t held) {
    __atomic_store_n(seq, (held & ~0xffffffffull) + (1ull << 32), __ATOMIC_RELEASE);
}

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

struct lockarg {
    int fd, hold_ms, add;
    volatile int held;
    long got;
};

static void *holder(void *arg) {   /* takes fd's send lock; holds it hold_ms (< 0: ends holding it) */
    struct lockarg *l = arg;
    struct nest_dir *d = &own_slot(l->fd)->dir[NEST_OUT];
    uint64_t h = take(&d->seq);
    l->held = 1;
    if (l->hold_ms < 0)
        return NULL;
    sleep_ms(l->hold_ms);
    d->msgs += (uint64_t)l->add;   /* an update made inside, as a writer would */
    let_go(&d->seq, h);
    return NULL;
}

static void *receiver(void *arg) {
    struct lockarg *l = arg;
    char buf[64];
    l->got = recv(l->fd, buf, sizeof buf, 0);
    return NULL;
}

static int mode_lock(const char *c) {
    int port;
    int lfd = listener(&port);
    int a = connect_to(port, 0);
    int b = accept(lfd, NULL, NULL);
    if (b < 0)
        die("accept");
    unsigned long ino = inode_of(a);
    sendn(a, 2);
    char out[256] = "";
    struct lockarg l = {.fd = a};
    pthread_t th;
    uint64_t t0, t1;
    if (!strcmp(c, "other") || !strcmp(c, "dead")) {
        int dead = !strcmp(c, "dead");
        l.hold_ms = dead ? -1 : 300;
        l.add = 100;
        pthread_create(&th, NULL, holder, &l);
        if (dead)
            pthread_join(th, NULL);
        while (!l.held)
            sched_yield();
        t0 = mono_ns();
        close(a);
        t1 = mono_ns();
        if (!dead)
            pthread_join(th, NULL);
        snprintf(out, sizeof out, "\"close_ms\":%.3f", (t1 - t0) / 1e6);
    } else if (!strcmp(c, "self")) {
        struct nest_dir *d = &own_slot(a)->dir[NEST_OUT];
        uint64_t h = take(&d->seq);
        t0 = mono_ns();
        char x = 'x';
        ssize_t r = send(a, &x, 1, 0);
        t1 = mono_ns();
        let_go(&d->seq, h);
        sendn(a, 1);
        snprintf(out, sizeof out, "\"send_ms\":%.3f,\"send_rc\":%zd", (t1 - t0) / 1e6, r);
    } else if (!strcmp(c, "end") || !strcmp(c, "defer")) {
        struct nest_dir *d = &own_slot(a)->dir[NEST_IN];
        pthread_create(&th, NULL, receiver, &l);
        while (__atomic_load_n(&d->pend_n, __ATOMIC_ACQUIRE) == 0)   /* the recv has begun */
            sched_yield();
        uint64_t h = take(&d->seq);
        char ten[10] = {0};
        send_all(b, ten, sizeof ten, 0);
        sleep_ms(!strcmp(c, "end") ? 300 : 400);
        let_go(&d->seq, h);
        pthread_join(th, NULL);
        if (!strcmp(c, "defer"))
            send_all(b, ten, 1, 0);   /* the program's next call */
        snprintf(out, sizeof out, "\"got\":%ld", l.got);
    } else {
        fprintf(stderr, "nestprobe: lock: unknown case %s\n", c);
        return 2;
    }
    printf("LOCK {\"pid\":%d,\"a_fd\":%d,\"b_fd\":%d,\"inode\":%lu,%s}\n", getpid(), a, b, ino, out);
    fflush(stdout);
    wait_line();
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */

static char g_eintr[4096];
static size_t g_eintr_n;

static void note(const char *name, long rc, int err, uint64_t t0, int expected_ms) {
    g_eintr_n += (size_t)snprintf(g_eintr + g_eintr_n, sizeof g_eintr - g_eintr_n, "%s\"%s\":[%ld,%d,%.3f,%d]",
                                  g_eintr_n ? "," : "", name, rc, rc < 0 ? err : 0, (mono_ns() - t0) / 1e6,
                                  expected_ms);
}

static volatile int g_alarms;

static void on_alarm(int sig) {
    (void)sig;
    g_alarms++;
}

static int mode_eintr(int port) {
    int a = connect_to(port, 0);
    int ep = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = a}, evs[4];
    if (epoll_ctl(ep, EPOLL_CTL_ADD, a, &ev) != 0)
        die("epoll_ctl");
    sem_t sem;
    sem_init(&sem, 0, 0);
    printf("EINTR_READY {\"pid\":%d}\n", getpid());
    fflush(stdout);
    wait_line();   /* the test starts signalling */
    const int T = 250;
    struct pollfd p = {.fd = a, .events = POLLIN};
    struct timespec ts = {0, T * 1000000L}, rem;
    uint64_t t0;
    long r;
    t0 = mono_ns(); r = poll(&p, 1, T); note("poll", r, errno, t0, T);
    t0 = mono_ns(); r = ppoll(&p, 1, &ts, NULL); note("ppoll", r, errno, t0, T);
    fd_set rs;
    FD_ZERO(&rs);
    FD_SET(a, &rs);
    struct timeval tv = {0, T * 1000};
    t0 = mono_ns(); r = select(a + 1, &rs, NULL, NULL, &tv); note("select", r, errno, t0, T);
    FD_ZERO(&rs);
    FD_SET(a, &rs);
    t0 = mono_ns(); r = pselect(a + 1, &rs, NULL, NULL, &ts, NULL); note("pselect", r, errno, t0, T);
    t0 = mono_ns(); r = epoll_wait(ep, evs, 4, T); note("epoll_wait", r, errno, t0, T);
    t0 = mono_ns(); r = epoll_pwait(ep, evs, 4, T, NULL); note("epoll_pwait", r, errno, t0, T);
    t0 = mono_ns(); r = nanosleep(&ts, &rem); note("nanosleep", r, errno, t0, T);
    t0 = mono_ns(); r = clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, &rem);
    note("clock_nanosleep", r ? -1 : 0, (int)r, t0, T);
    t0 = mono_ns(); r = usleep(T * 1000); note("usleep", r, errno, t0, T);
    t0 = mono_ns(); r = sleep(1); note("sleep", r ? -1 : 0, (int)r, t0, 1000);
    struct timeval rt = {0, T * 1000};
    setsockopt(a, SOL_SOCKET, SO_RCVTIMEO, &rt, sizeof rt);
    char buf[16];
    t0 = mono_ns(); r = recv(a, buf, sizeof buf, 0); note("recv_timeout", r, errno, t0, T);
    struct timespec abs;
    clock_gettime(CLOCK_REALTIME, &abs);
    abs.tv_nsec += T * 1000000L;
    if (abs.tv_nsec >= 1000000000L) {
        abs.tv_sec++;
        abs.tv_nsec -= 1000000000L;
    }
    t0 = mono_ns(); r = sem_timedwait(&sem, &abs); note("sem_timedwait", r, errno, t0, T);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGWINCH);
    sigprocmask(SIG_BLOCK, &set, NULL);
    t0 = mono_ns(); r = sigtimedwait(&set, NULL, &ts); note("sigtimedwait", r, errno, t0, T);
    /* the program's own signal still interrupts: SIGALRM, no SA_RESTART, in 150 ms (once the test
     * has stopped signalling: ours and its own in the very same call would restart the call) */
    printf("OWN\n");
    fflush(stdout);
    wait_line();
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, 150000}};
    setitimer(ITIMER_REAL, &it, NULL);
    t0 = mono_ns(); r = poll(&p, 1, 3000); note("own_alarm", r, errno, t0, 150);
    printf("EINTR {%s,\"alarms\":%d}\n", g_eintr, g_alarms);
    fflush(stdout);
    wait_line();
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */

static int g_drain_cpu = -1;

static void pin(int cpu) {
    if (cpu < 0)
        return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set);
}

static void *drain(void *arg) {
    int fd = *(int *)arg;
    char buf[65536];
    pin(g_drain_cpu);
    while (read(fd, buf, sizeof buf) > 0)
        ;
    return NULL;
}

static int mode_bench(long n, const char *kind, int cpu, int drain_cpu) {
    int sv[2];
    pin(cpu);
    g_drain_cpu = drain_cpu;
    int eagain = !strcmp(kind, "eagain");
    if (eagain || !strcmp(kind, "unix")) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
            die("socketpair");
    } else {
        int port;
        int l = listener(&port);
        sv[0] = connect_to(port, 0);
        sv[1] = accept(l, NULL, NULL);
        if (sv[1] < 0)
            die("accept");
        close(l);
    }
    char b = 'x';
    pthread_t th;
    int flags = 0;
    if (eagain) {
        /* no reader: fill the socket, then every send fails at once with EAGAIN */
        flags = MSG_DONTWAIT;
        while (send(sv[0], &b, 1, MSG_DONTWAIT) == 1)
            ;
        if (errno != EAGAIN)
            die("fill");
    } else {
        pthread_create(&th, NULL, drain, &sv[1]);
    }
    for (long i = 0; i < n / 10; i++)   /* warm up */
        send(sv[0], &b, 1, flags);
    uint64_t t0 = mono_ns();
    for (long i = 0; i < n; i++) {
        ssize_t r = send(sv[0], &b, 1, flags);
        if (r != 1 && !(eagain && r < 0 && errno == EAGAIN))
            die("send");
    }
    uint64_t t1 = mono_ns();
    if (!eagain) {
        shutdown(sv[0], SHUT_WR);
        pthread_join(th, NULL);
    }
    printf("BENCH {\"calls\":%ld,\"ns_per_call\":%.2f}\n", n, (double)(t1 - t0) / (double)n);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2)
        goto usage;
    const char *m = argv[1];
    if (!strcmp(m, "threads") && argc == 6)
        return mode_threads(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]));
    if (!strcmp(m, "fork") && argc == 3)
        return mode_fork(atoi(argv[2]));
    if (!strcmp(m, "exec") && argc == 3)
        return mode_exec(atoi(argv[2]), "/proc/self/exe");
    if (!strcmp(m, "exec2") && argc == 5)
        return mode_exec2(atoi(argv[2]), argv[3], argv[4]);
    if (!strcmp(m, "dup") && argc == 3)
        return mode_dup(atoi(argv[2]));
    if (!strcmp(m, "poll") && argc == 3)
        return mode_poll(atoi(argv[2]));
    if (!strcmp(m, "stream") && argc == 3)
        return mode_stream(atoi(argv[2]), 0);
    if (!strcmp(m, "handler") && argc == 3)
        return mode_stream(atoi(argv[2]), 1);
    if (!strcmp(m, "highfd") && (argc == 4 || argc == 5))
        return mode_highfd(atoi(argv[2]), atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 1);
    if (!strcmp(m, "lock") && argc == 3)
        return mode_lock(argv[2]);
    if (!strcmp(m, "eintr") && argc == 3)
        return mode_eintr(atoi(argv[2]));
    if (!strcmp(m, "bench") && (argc == 4 || argc == 6))
        return mode_bench(atol(argv[2]), argv[3], argc == 6 ? atoi(argv[4]) : -1,
                          argc == 6 ? atoi(argv[5]) : -1);
usage:
    fprintf(stderr, "usage: nestprobe threads N M S K | fork PORT | exec PORT | dup PORT | poll PORT | stream PORT | "
                    "handler PORT | highfd PORT FD [N] | lock other|dead|self|end|defer | eintr PORT | "
                    "bench N tcp|unix|eagain [CPU DRAIN_CPU]\n");
    return 2;
}
