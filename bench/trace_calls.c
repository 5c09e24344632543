/*
 * trace_calls.c - the program bench/bench_trace_calls.py runs with and without the interceptor (and
 * with message tracing): ns per socket call of one kind, one thread, one byte a call.
 *
 *     trace_calls PAIR ITERATIONS ROUNDS CPU
 *
 * PAIR: write/read, send/recv, sendto/recvfrom, sendmsg/recvmsg, writev/readv on a Unix socketpair,
 * or tcp (send/recv on a loopback TCP connection to itself). Each iteration sends one byte on one end
 * with the send call and receives it on the other with the receive call: two calls, never blocking.
 * eagain: a send on a full socketpair and a recv on an empty one, both MSG_DONTWAIT (both fail with
 * EAGAIN: a real system call with no peer activity); poll: a poll and an epoll_wait of timeout 0 on a
 * socket with nothing to read (the waits' path). Two calls an iteration too.
 * Prints one line `BENCH {"pair": ..., "ns_per_call": [one per round]}`.
 *
 * Between rounds, outside the timed part, the program empties its own message ring when it has one
 * (tail = head in its interceptor file): the drainer does that in another process in a run, so a
 * round measures the writer's side alone with a ring that never fills (ITERATIONS * 2 events fit).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "nestintercept.h"

static uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* Our own ring, if the interceptor traces this process. */
static struct nest_ring *own_ring(void) {
    const char *dir = getenv("NESTLAB_SHM_DIR");
    if (!dir || !getenv("LD_PRELOAD"))
        return NULL;
    char path[4096];
    snprintf(path, sizeof path, "%s/%d.nest", dir, (int)getpid());
    int fd = open(path, O_RDWR);
    if (fd < 0)
        return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0)
        die("fstat");
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        die("mmap");
    struct nest_header *h = m;
    return h->trace_cap ? (struct nest_ring *)((char *)m + h->trace_off) : NULL;
}

static void tcp_pair(int sv[2]) {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof a;
    if (l < 0 || bind(l, (struct sockaddr *)&a, sizeof a) || listen(l, 1) || getsockname(l, (struct sockaddr *)&a, &al))
        die("listen");
    sv[0] = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(sv[0], (struct sockaddr *)&a, sizeof a))
        die("connect");
    sv[1] = accept(l, NULL, NULL);
    int one = 1;
    setsockopt(sv[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    close(l);
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s PAIR ITERATIONS ROUNDS CPU\n", argv[0]);
        return 2;
    }
    const char *pair = argv[1];
    long n = atol(argv[2]), rounds = atol(argv[3]);
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(atoi(argv[4]), &set);
    sched_setaffinity(0, sizeof set, &set);
    int sv[2];
    int tcp = !strcmp(pair, "tcp");
    if (tcp)
        tcp_pair(sv);
    else if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
        die("socketpair");
    int full[2], ep = -1;
    if (!strcmp(pair, "eagain")) {   /* fill full[0]'s buffer: every send fails with EAGAIN */
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, full))
            die("socketpair");
        static char blk[65536];
        while (send(full[0], blk, sizeof blk, MSG_DONTWAIT) > 0)
            ;
    }
    if (!strcmp(pair, "poll")) {
        struct epoll_event e = {.events = EPOLLIN, .data.fd = sv[1]};
        if ((ep = epoll_create1(0)) < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, sv[1], &e))
            die("epoll");
    }
    long want = 2 * n;
    struct nest_ring *ring = NULL;
    char c = 'x', r;
    struct iovec wv = {&c, 1}, rv = {&r, 1};
    struct msghdr wm = {.msg_iov = &wv, .msg_iovlen = 1}, rm = {.msg_iov = &rv, .msg_iovlen = 1};
    printf("BENCH {\"pair\": \"%s\", \"ns_per_call\": [", pair);
    for (long k = 0; k <= rounds; k++) {   /* round 0 warms up (slots made, pages touched): not printed */
        if (k == 1)
            ring = own_ring();
        if (ring)
            __atomic_store_n(&ring->tail, __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE), __ATOMIC_RELEASE);
        uint64_t t0 = now_ns();
        long ok = 0;
        if (tcp || !strcmp(pair, "send/recv")) {
            for (long i = 0; i < n; i++)
                ok += send(sv[0], &c, 1, 0) + recv(sv[1], &r, 1, 0);
        } else if (!strcmp(pair, "write/read")) {
            for (long i = 0; i < n; i++)
                ok += write(sv[0], &c, 1) + read(sv[1], &r, 1);
        } else if (!strcmp(pair, "sendto/recvfrom")) {
            for (long i = 0; i < n; i++)
                ok += sendto(sv[0], &c, 1, 0, NULL, 0) + recvfrom(sv[1], &r, 1, 0, NULL, NULL);
        } else if (!strcmp(pair, "sendmsg/recvmsg")) {
            for (long i = 0; i < n; i++)
                ok += sendmsg(sv[0], &wm, 0) + recvmsg(sv[1], &rm, 0);
        } else if (!strcmp(pair, "writev/readv")) {
            for (long i = 0; i < n; i++)
                ok += writev(sv[0], &wv, 1) + readv(sv[1], &rv, 1);
        } else if (!strcmp(pair, "eagain")) {
            want = -2 * n;
            for (long i = 0; i < n; i++)
                ok += send(full[0], &c, 1, MSG_DONTWAIT) + recv(sv[1], &r, 1, MSG_DONTWAIT);
        } else if (!strcmp(pair, "poll")) {
            want = 0;
            struct pollfd pf = {sv[1], POLLIN, 0};
            struct epoll_event ev;
            for (long i = 0; i < n; i++)
                ok += poll(&pf, 1, 0) + epoll_wait(ep, &ev, 1, 0);
        } else {
            fprintf(stderr, "unknown pair %s\n", pair);
            return 2;
        }
        uint64_t t1 = now_ns();
        if (ok != want) {
            fprintf(stderr, "calls returned %ld in all, expected %ld\n", ok, want);
            return 1;
        }
        if (k)
            printf("%s%.2f", k > 1 ? ", " : "", (double)(t1 - t0) / (2.0 * (double)n));
    }
    printf("]}\n");
    return 0;
}
