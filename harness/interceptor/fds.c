/*
 * fds.c - sockets and descriptors made, duplicated and closed: what slots.c must know so that every
 * fd number is classified again when it is handed out anew, and a socket's slot is closed with it.
 */
#include "call.h"
#include "env.h"

EXPORT int socket(int domain, int type, int proto) {
    REAL(socket, int);
    int r = real_socket(domain, type, proto);
    if (r >= 0 && g_core.on) {
        int e = errno;
        adopt_socket(r, 0);
        errno = e;
    }
    return r;
}

EXPORT int socketpair(int domain, int type, int proto, int sv[2]) {
    REAL(socketpair, int);
    int r = real_socketpair(domain, type, proto, sv);
    if (r == 0 && g_core.on) {
        int e = errno;
        adopt_socket(sv[0], 0);
        adopt_socket(sv[1], 0);
        errno = e;
    }
    return r;
}

EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *alen) {
    REAL(accept, int);
    int r;
    SOCK_RESTART(r, real_accept(fd, SA_PTR(addr), alen), fd, NEST_IN, 0);
    if (r >= 0 && g_core.on) {
        int e = errno;
        adopt_socket(r, NEST_SF_ACCEPTED);
        errno = e;
    }
    return r;
}

EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *alen, int flags) {
    REAL(accept4, int);
    int r;
    SOCK_RESTART(r, real_accept4(fd, SA_PTR(addr), alen, flags), fd, NEST_IN, 0);
    if (r >= 0 && g_core.on) {
        int e = errno;
        adopt_socket(r, NEST_SF_ACCEPTED);
        errno = e;
    }
    return r;
}

EXPORT int listen(int fd, int backlog) {
    REAL(listen, int);
    int r = real_listen(fd, backlog);
    if (r == 0) {
        int e = errno;
        struct nest_slot *s = tracked(fd);
        if (s) {
            struct sockaddr_storage ss;
            socklen_t sl = sizeof ss;
            uint8_t la[16] = {0};
            uint16_t lp = 0;
            int named = getsockname(fd, (struct sockaddr *)&ss, &sl) == 0 &&
                        (ss.ss_family == AF_INET || ss.ss_family == AF_INET6);
            if (named)
                set_endpoint((struct sockaddr *)&ss, la, &lp);
            uint64_t q = seq_force(&s->seq);
            s->flags |= NEST_SF_LISTEN;
            if (named) {
                memcpy(s->laddr, la, 16);
                s->lport = lp;
            }
            seq_release(&s->seq, q);
        }
        errno = e;
    }
    return r;
}

EXPORT int close(int fd) {
    REAL(close, int);
    if (!g_core.on || (unsigned)fd >= g_core.nslots)
        return real_close(fd);
    uint32_t k = __atomic_load_n(&g_fds.kind[fd], RELAXED);
    if ((k == K_SOCK || k == K_EPOLL) && !same_process())
        return real_close(fd);   /* a vfork child: its fd table is not ours */
    if (UNLIKELY(__atomic_load_n(&g_defer.pend_n, RELAXED)) && defer_close(fd, -1))
        return 0;   /* replies queued on it (defer.c): closed once they are sent */
    forget_begin(fd);
    int r = real_close(fd);
    int e = errno;
    forget_end(fd);
    errno = e;
    return r;
}

/* shutdown(SHUT_WR) of a socket with replies queued (defer.c) waits for them, as its FIN would. */
EXPORT int shutdown(int fd, int how) {
    REAL(shutdown, int);
    if (UNLIKELY(__atomic_load_n(&g_defer.pend_n, RELAXED)) && g_core.on && defer_close(fd, how))
        return 0;
    return real_shutdown(fd, how);
}

EXPORT int fclose(FILE *fp) {
    REAL(fclose, int);
    int fd = g_core.on && fp ? fileno(fp) : -1;
    if (fd < 0 || (unsigned)fd >= g_core.nslots || g_fds.kind[fd] != K_SOCK)
        return real_fclose(fp);
    defer_settle((unsigned)fd, (unsigned)fd);   /* its queued replies first, never to the next socket */
    forget_begin(fd);
    int r = real_fclose(fp);
    int e = errno;
    forget_end(fd);
    errno = e;
    return r;
}

EXPORT int dup(int old) {
    REAL(dup, int);
    int r = real_dup(old);
    if (r >= 0 && g_core.on) {
        int e = errno;
        fresh_fd(r);
        errno = e;
    }
    return r;
}

static int dup_to(int old, int new, int flags, int is3) {
    if (!g_core.on || old == new || !same_process())
        return is3 ? real_dup3(old, new, flags) : real_dup2(old, new);
    if ((unsigned)new >= g_core.nslots) {
        int r = is3 ? real_dup3(old, new, flags) : real_dup2(old, new);
        if (r >= 0)
            untracked_fd(r);
        return r;
    }
    defer_settle((unsigned)new, (unsigned)new);
    forget_begin(new);
    int r = is3 ? real_dup3(old, new, flags) : real_dup2(old, new);
    int e = errno;
    forget_end(new);
    errno = e;
    return r;
}

EXPORT int dup2(int old, int new) {
    REAL(dup2, int);
    return dup_to(old, new, 0, 0);
}

EXPORT int dup3(int old, int new, int flags) {
    REAL(dup3, int);
    return dup_to(old, new, flags, 1);
}

static void forget_range(unsigned lo, unsigned hi, int end) {
    if (!g_core.nslots)
        return;
    if (hi >= g_core.nslots)
        hi = g_core.nslots - 1;
    for (unsigned fd = lo; fd <= hi; fd++) {
        uint32_t k = __atomic_load_n(&g_fds.kind[fd], RELAXED);
        if (end)
            forget_end((int)fd);
        else if (k != K_UNKNOWN)
            forget_begin((int)fd);
    }
}

EXPORT int close_range(unsigned int lo, unsigned int hi, int flags) {
    REAL(close_range, int);
    int mine = g_core.on && !(flags & CLOSE_RANGE_CLOEXEC) && same_process();
    if (mine) {
        defer_settle(lo, hi);
        forget_range(lo, hi, 0);
    }
    int r = real_close_range(lo, hi, flags);
    int e = errno;
    if (mine)
        forget_range(lo, hi, 1);
    errno = e;
    return r;
}

EXPORT void closefrom(int lo) {
    ENSURE(closefrom);
    if (!real_closefrom)
        return;
    int mine = g_core.on && lo >= 0 && same_process();
    if (mine) {
        defer_settle((unsigned)lo, UINT_MAX);
        forget_range((unsigned)lo, UINT_MAX, 0);
    }
    real_closefrom(lo);
    if (mine)
        forget_range((unsigned)lo, UINT_MAX, 1);
}
