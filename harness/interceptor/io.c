/*
 * io.c - the receive and send calls, counted per socket (call.h): read, readv, recv, recvfrom,
 * recvmsg, recvmmsg and their _chk forms; write, writev, send, sendto, sendmsg, sendmmsg, sendfile,
 * sendfile64, connect. A send may be deferred by the delay fault at an event loop (DEFERRABLE, defer.c).
 */
#include "call.h"
#include "hints.h"

/* ------------------------------------------------------------------------------------------ */
/* Receive-type calls                                                                         */

EXPORT ssize_t read(int fd, void *buf, size_t n) {
    COUNTED(read, ssize_t, NEST_IN, fd, real_read(fd, buf, n));
}

EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen) {
    ENSURE(__read_chk);
    if (n > buflen && real___read_chk)
        return real___read_chk(fd, buf, n, buflen);   /* reports the overflow */
    return read(fd, buf, n);
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt) {
    COUNTED(readv, ssize_t, NEST_IN, fd, real_readv(fd, iov, cnt));
}

/* A receive with MSG_PEEK is counted as before but not traced: its bytes are read again. */
#define PEEKED(code, flags) (((flags) & MSG_PEEK) ? 0 : (code))

EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags) {
    ssize_t r;
    COUNT_AS(recv, PEEKED(NEST_C_RECV, flags), ssize_t, NEST_IN, fd, r, real_recv(fd, buf, n, flags), (long)r);
    return r;
}

EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags) {
    ENSURE(__recv_chk);
    if (n > buflen && real___recv_chk)
        return real___recv_chk(fd, buf, n, buflen, flags);
    return recv(fd, buf, n, flags);
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG addr, socklen_t *alen) {
    ssize_t r;
    COUNT_AS(recvfrom, PEEKED(NEST_C_RECVFROM, flags), ssize_t, NEST_IN, fd, r,
             real_recvfrom(fd, buf, n, flags, SA_PTR(addr), alen), (long)r);
    return r;
}

EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                              struct sockaddr *addr, socklen_t *alen) {
    ENSURE(__recvfrom_chk);
    if (n > buflen && real___recvfrom_chk)
        return real___recvfrom_chk(fd, buf, n, buflen, flags, addr, alen);
    return recvfrom(fd, buf, n, flags, addr, alen);
}

static void scm_rights_fresh(const struct msghdr *m) {
    if (!g_core.on || !m || !m->msg_control || m->msg_controllen < sizeof(struct cmsghdr))
        return;
    for (struct cmsghdr *c = CMSG_FIRSTHDR((struct msghdr *)m); c; c = CMSG_NXTHDR((struct msghdr *)m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
            continue;
        size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        const unsigned char *p = CMSG_DATA(c);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, p + i * sizeof(int), sizeof fd);
            fresh_fd(fd);
        }
    }
}

static long mmsg_bytes(const struct mmsghdr *v, int r) {
    long b = 0;
    for (int i = 0; i < r; i++)
        b += v[i].msg_len;
    return r < 0 ? -1 : b;
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *m, int flags) {
    ssize_t r;
    COUNT_AS(recvmsg, PEEKED(NEST_C_RECVMSG, flags), ssize_t, NEST_IN, fd, r, real_recvmsg(fd, m, flags), (long)r);
    if (r >= 0) {
        int e = errno;
        scm_rights_fresh(m);
        errno = e;
    }
    return r;
}

EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned int vlen, int flags, struct timespec *tmo) {
    int r;
    COUNT(recvmmsg, int, NEST_IN, fd, r, real_recvmmsg(fd, v, vlen, flags, tmo), mmsg_bytes(v, r));
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Send-type calls                                                                            */

EXPORT ssize_t write(int fd, const void *buf, size_t n) {
    struct iovec v_ = {(void *)buf, n};
    DEFERRABLE(fd, &v_, 1, 1, NEST_C_WRITE, 0);
    COUNTED(write, ssize_t, NEST_OUT, fd, real_write(fd, buf, n));
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    DEFERRABLE(fd, iov, cnt, 1, NEST_C_WRITEV, 0);
    COUNTED(writev, ssize_t, NEST_OUT, fd, real_writev(fd, iov, cnt));
}

EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags) {
    struct iovec v_ = {(void *)buf, n};
    DEFERRABLE(fd, &v_, 1, !(flags & MSG_OOB), NEST_C_SEND, flags);
    COUNTED(send, ssize_t, NEST_OUT, fd, real_send(fd, buf, n, flags));
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG addr,
                      socklen_t alen) {
    struct iovec v_ = {(void *)buf, n};
    DEFERRABLE(fd, &v_, 1, !(flags & MSG_OOB) && !SA_PTR(addr), NEST_C_SENDTO, flags);
    COUNTED(sendto, ssize_t, NEST_OUT, fd, real_sendto(fd, buf, n, flags, SA_PTR(addr), alen));
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *m, int flags) {
    DEFERRED(defer_sendmsg(fd, m, flags, NEST_C_SENDMSG));   /* m read safely there: NULL is EFAULT */
    COUNTED(sendmsg, ssize_t, NEST_OUT, fd, real_sendmsg(fd, m, flags));
}

EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned int vlen, int flags) {
    int r;
    COUNT(sendmmsg, int, NEST_OUT, fd, r, real_sendmmsg(fd, v, vlen, flags), mmsg_bytes(v, r));
    return r;
}

EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n) {
    DEFERRED(defer_sendfile(out, in, (off64_t *)off, n, NEST_C_SENDFILE));
    COUNTED(sendfile, ssize_t, NEST_OUT, out, real_sendfile(out, in, off, n));
}

EXPORT ssize_t sendfile64(int out, int in, off64_t *off, size_t n) {
    DEFERRED(defer_sendfile(out, in, off, n, NEST_C_SENDFILE64));
    COUNTED(sendfile64, ssize_t, NEST_OUT, out, real_sendfile64(out, in, off, n));
}

/* A blocking connect() on a socket with a send timeout (else the kernel restarts it) was
 * interrupted by our signal: wait for its outcome as the call would have. The timeout starts
 * again. */
static int connect_finish(int fd) {
    struct timeval tv = {0, 0};
    socklen_t l = sizeof tv;
    int tmo = -1;
    if (getsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, &l) == 0 && (tv.tv_sec || tv.tv_usec))
        tmo = (int)(tv.tv_sec * 1000 + (tv.tv_usec + 999) / 1000);
    struct pollfd p = {fd, POLLOUT, 0};
    int n = poll_r(&p, 1, tmo);
    if (n < 0)
        return -1;                     /* EINTR of the program's own signal, as connect would */
    if (n == 0) {
        errno = EINPROGRESS;           /* what a blocking connect that timed out returns */
        return -1;
    }
    int err = 0;
    l = sizeof err;
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l) != 0)
        return -1;
    if (err) {
        errno = err;
        return -1;
    }
    return 0;
}

static int connect_r(int fd, const struct sockaddr *sa, socklen_t alen) {
    uint32_t k = t_sigs;
    int r = real_connect(fd, sa, alen);
    if (r < 0 && UNLIKELY(t_sigs != k) && ours_since(&k))
        r = connect_finish(fd);
    return r;
}

/* connect() is a send-type call (thesis 3.2.1): a message when it succeeds or starts (EINPROGRESS).
 * The remote endpoint is taken from its argument, the local one from getsockname. */
EXPORT int connect(int fd, __CONST_SOCKADDR_ARG addr, socklen_t alen) {
    REAL(connect, int);
    const struct sockaddr *sa = SA_PTR(addr);
    struct nest_slot *s = tracked(fd);
    if (!s)
        return connect_r(fd, sa, alen);
    struct nest_call c __attribute__((cleanup(call_cleanup)));
    call_begin(&c, s, NEST_OUT);
    int r = connect_r(fd, sa, alen);
    int e = errno;
    int started = r == 0 || e == EINPROGRESS;
    /* account before the pause gate at the end of call_end, endpoints right after */
    if (started && sa && (sa->sa_family == AF_INET || sa->sa_family == AF_INET6) &&
        (s->family == AF_INET || s->family == AF_INET6)) {
        uint8_t la[16] = {0}, ra[16] = {0};
        uint16_t lp = 0, rp = 0;
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
            set_endpoint((struct sockaddr *)&ss, la, &lp);
        set_endpoint(sa, ra, &rp);
        uint64_t q = seq_force(&s->seq);
        memcpy(s->laddr, la, 16);
        memcpy(s->raddr, ra, 16);
        s->lport = lp;
        s->rport = rp;
        s->flags |= NEST_SF_PEER | NEST_SF_CONNECT;
        seq_release(&s->seq, q);
        if ((s->flags & NEST_SF_GRAPH) && !(s->flags & NEST_SF_LISTEN))
            __atomic_fetch_or(&g_core.hdr->flags, NEST_HF_HAD_GRAPH, RELAXED);
    }
    call_end(&c, started ? 0 : -1, e);
    if (started)
        notify_sock("sock", fd);
    errno = e;
    return r;
}
