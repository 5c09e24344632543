/*
 * call.c - the rare paths of a counted call (the hot path is inline in call.h): calls our
 * pause/resume signal interrupted that SA_RESTART does not restart, restarted for what is left of
 * their timeout. (Call ends applied late: late.c; the delay fault's hold: defer.c.)
 */
#include "call.h"

/* ------------------------------------------------------------------------------------------ */
/* Restarting what our signal interrupted                                                     */

/* Our signal interrupted a call on fd that SA_RESTART did not restart: a socket with a receive or
 * send timeout (dir: which one). Wait for the socket to be ready for what is left of the timeout,
 * counted from *t0 (0: unknown, from now): 1 = call again, 0 = no (timed out: EAGAIN, as the call
 * would have; or the program's own signal came: EINTR). Not a socket, or no timeout: call again. */
int sock_wait_left(int fd, int dir, uint64_t *t0) {
    struct timeval tv = {0, 0};
    socklen_t l = sizeof tv;
    int saved = errno;
    if (getsockopt(fd, SOL_SOCKET, dir == NEST_IN ? SO_RCVTIMEO : SO_SNDTIMEO, &tv, &l) != 0 ||
        (!tv.tv_sec && !tv.tv_usec)) {
        errno = saved;
        return 1;
    }
    uint64_t t = now_ns();
    if (!*t0)
        *t0 = t;
    uint64_t total = (uint64_t)tv.tv_sec * 1000000000ull + (uint64_t)tv.tv_usec * 1000ull, el = t - *t0;
    if (el >= total) {
        errno = EAGAIN;
        return 0;
    }
    struct pollfd p = {fd, dir == NEST_IN ? POLLIN : POLLOUT, 0};
    int n = poll_r(&p, 1, (int)((total - el + 999999) / 1000000));
    if (n == 0)
        errno = EAGAIN;
    if (n <= 0)
        return 0;
    errno = saved;
    return 1;
}

int ms_left(int timeout, uint64_t t0) {
    if (timeout < 0)
        return timeout;
    uint64_t total = (uint64_t)timeout * 1000000ull, el = now_ns() - t0;
    return el >= total ? 0 : (int)((total - el + 999999) / 1000000);
}

void ts_left(const struct timespec *full, uint64_t t0, struct timespec *out) {
    uint64_t total = (uint64_t)full->tv_sec * 1000000000ull + (uint64_t)full->tv_nsec;
    uint64_t el = now_ns() - t0, left = el >= total ? 0 : total - el;
    out->tv_sec = (time_t)(left / 1000000000ull);
    out->tv_nsec = (long)(left % 1000000000ull);
}

/* poll, restarted for what is left of its timeout when our signal interrupted it. */
int poll_r(struct pollfd *fds, nfds_t n, int timeout) {
    ENSURE(poll);
    int r, cur;
    MS_RESTART(r, real_poll(fds, n, cur), timeout, cur);
    return r;
}
