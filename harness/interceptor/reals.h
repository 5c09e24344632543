/*
 * reals.h - the real functions the wrappers call (resolved with dlsym(RTLD_NEXT) by reals.c, at the
 * constructor or at the first call that comes before it), and the prologue every wrapper starts with.
 */
#ifndef NEST_REALS_H
#define NEST_REALS_H

#include "internal.h"

/* Not in the public headers (they are the _FORTIFY_SOURCE entry points). */
ssize_t __read_chk(int, void *, size_t, size_t);
ssize_t __recv_chk(int, void *, size_t, size_t, int);
ssize_t __recvfrom_chk(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
int __poll_chk(struct pollfd *, nfds_t, int, size_t);
int __ppoll_chk(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t);
sighandler_t bsd_signal(int, sighandler_t);

#pragma GCC visibility push(hidden)

#define REALS(X) \
    X(read, ssize_t, (int, void *, size_t)) \
    X(__read_chk, ssize_t, (int, void *, size_t, size_t)) \
    X(readv, ssize_t, (int, const struct iovec *, int)) \
    X(recv, ssize_t, (int, void *, size_t, int)) \
    X(__recv_chk, ssize_t, (int, void *, size_t, size_t, int)) \
    X(recvfrom, ssize_t, (int, void *, size_t, int, struct sockaddr *, socklen_t *)) \
    X(__recvfrom_chk, ssize_t, (int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *)) \
    X(recvmsg, ssize_t, (int, struct msghdr *, int)) \
    X(recvmmsg, int, (int, struct mmsghdr *, unsigned int, int, struct timespec *)) \
    X(write, ssize_t, (int, const void *, size_t)) \
    X(writev, ssize_t, (int, const struct iovec *, int)) \
    X(send, ssize_t, (int, const void *, size_t, int)) \
    X(sendto, ssize_t, (int, const void *, size_t, int, const struct sockaddr *, socklen_t)) \
    X(sendmsg, ssize_t, (int, const struct msghdr *, int)) \
    X(sendmmsg, int, (int, struct mmsghdr *, unsigned int, int)) \
    X(sendfile, ssize_t, (int, int, off_t *, size_t)) \
    X(sendfile64, ssize_t, (int, int, off64_t *, size_t)) \
    X(connect, int, (int, const struct sockaddr *, socklen_t)) \
    X(poll, int, (struct pollfd *, nfds_t, int)) \
    X(__poll_chk, int, (struct pollfd *, nfds_t, int, size_t)) \
    X(ppoll, int, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *)) \
    X(__ppoll_chk, int, (struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t)) \
    X(select, int, (int, fd_set *, fd_set *, fd_set *, struct timeval *)) \
    X(pselect, int, (int, fd_set *, fd_set *, fd_set *, const struct timespec *, const sigset_t *)) \
    X(epoll_wait, int, (int, struct epoll_event *, int, int)) \
    X(epoll_pwait, int, (int, struct epoll_event *, int, int, const sigset_t *)) \
    X(epoll_pwait2, int, (int, struct epoll_event *, int, const struct timespec *, const sigset_t *)) \
    X(epoll_ctl, int, (int, int, int, struct epoll_event *)) \
    X(nanosleep, int, (const struct timespec *, struct timespec *)) \
    X(clock_nanosleep, int, (clockid_t, int, const struct timespec *, struct timespec *)) \
    X(usleep, int, (useconds_t)) \
    X(sleep, unsigned int, (unsigned int)) \
    X(pause, int, (void)) \
    X(sigsuspend, int, (const sigset_t *)) \
    X(sigtimedwait, int, (const sigset_t *, siginfo_t *, const struct timespec *)) \
    X(sigwaitinfo, int, (const sigset_t *, siginfo_t *)) \
    X(sem_wait, int, (sem_t *)) \
    X(sem_timedwait, int, (sem_t *, const struct timespec *)) \
    X(epoll_create, int, (int)) \
    X(epoll_create1, int, (int)) \
    X(socket, int, (int, int, int)) \
    X(socketpair, int, (int, int, int, int *)) \
    X(accept, int, (int, struct sockaddr *, socklen_t *)) \
    X(accept4, int, (int, struct sockaddr *, socklen_t *, int)) \
    X(listen, int, (int, int)) \
    X(shutdown, int, (int, int)) \
    X(close, int, (int)) \
    X(fclose, int, (FILE *)) \
    X(dup, int, (int)) \
    X(dup2, int, (int, int)) \
    X(dup3, int, (int, int, int)) \
    X(close_range, int, (unsigned int, unsigned int, int)) \
    X(closefrom, void, (int)) \
    X(signal, sighandler_t, (int, sighandler_t)) \
    X(sysv_signal, sighandler_t, (int, sighandler_t)) \
    X(bsd_signal, sighandler_t, (int, sighandler_t)) \
    X(sigaction, int, (int, const struct sigaction *, struct sigaction *)) \
    X(sigprocmask, int, (int, const sigset_t *, sigset_t *)) \
    X(pthread_sigmask, int, (int, const sigset_t *, sigset_t *))

#define DECLARE_REAL(name, ret, args) extern ret(*real_##name) args;
REALS(DECLARE_REAL)
#undef DECLARE_REAL

void reals_resolve(void);

#define ENSURE(name) \
    do { \
        if (UNLIKELY(!real_##name)) \
            real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name); \
    } while (0)
#define MISSING(ret) do { errno = ENOSYS; return (ret)-1; } while (0)

/* The prologue of every wrapper: the real function (resolved here if a call comes before the
 * constructor ran), or -1 with ENOSYS when libc has none. */
#define REAL(name, ret) \
    do { \
        ENSURE(name); \
        if (!real_##name) \
            MISSING(ret); \
    } while (0)

#pragma GCC visibility pop

#endif
