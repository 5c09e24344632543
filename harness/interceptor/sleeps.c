/*
 * sleeps.c - sleeps and signal waits: not restarted by SA_RESTART, so when our pause/resume signal
 * interrupts one it is restarted here, for what is left of its timeout (the program never sees our
 * signals as EINTR).
 */
#include "call.h"

EXPORT int nanosleep(const struct timespec *req, struct timespec *rem) {
    REAL(nanosleep, int);
    uint32_t k = t_sigs;
    struct timespec left, next;
    const struct timespec *cur = req;
    for (;;) {
        int r = real_nanosleep(cur, &left);
        if (r == 0 || LIKELY(t_sigs == k) || !ours_since(&k)) {
            if (r != 0 && errno == EINTR && rem)
                *rem = left;
            return r;
        }
        next = left;
        cur = &next;
    }
}

EXPORT int clock_nanosleep(clockid_t clk, int flags, const struct timespec *req, struct timespec *rem) {
    ENSURE(clock_nanosleep);
    if (!real_clock_nanosleep)
        return ENOSYS;
    uint32_t k = t_sigs;
    struct timespec left, next;
    const struct timespec *cur = req;
    for (;;) {
        int r = real_clock_nanosleep(clk, flags, cur, &left);
        if (r != EINTR || LIKELY(t_sigs == k)) {
            if (r == EINTR && rem && !(flags & TIMER_ABSTIME))
                *rem = left;
            return r;
        }
        k = t_sigs;
        HCOUNT(eintr_retried);
        if (!(flags & TIMER_ABSTIME)) {
            next = left;
            cur = &next;
        }
    }
}

EXPORT int usleep(useconds_t us) {   /* glibc's calls its internal nanosleep: not ours */
    struct timespec ts = {(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    return nanosleep(&ts, NULL);
}

EXPORT unsigned int sleep(unsigned int seconds) {
    int saved = errno;
    struct timespec ts = {(time_t)seconds, 0};
    if (nanosleep(&ts, &ts) < 0)
        return (unsigned int)ts.tv_sec;   /* the whole seconds not slept, as glibc's */
    errno = saved;
    return 0;
}

EXPORT int pause(void) {
    REAL(pause, int);
    int r;
    RESTART(r, real_pause());
    return r;
}

EXPORT int sigsuspend(const sigset_t *mask) {
    REAL(sigsuspend, int);
    int r;
    RESTART(r, real_sigsuspend(mask));
    return r;
}

EXPORT int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *tmo) {
    REAL(sigtimedwait, int);
    int r;
    const struct timespec *cur;
    TS_RESTART(r, real_sigtimedwait(set, info, cur), tmo, cur);
    return r;
}

EXPORT int sigwaitinfo(const sigset_t *set, siginfo_t *info) {
    REAL(sigwaitinfo, int);
    int r;
    RESTART(r, real_sigwaitinfo(set, info));
    return r;
}

EXPORT int sem_wait(sem_t *sem) {
    REAL(sem_wait, int);
    int r;
    RESTART(r, real_sem_wait(sem));
    return r;
}

EXPORT int sem_timedwait(sem_t *sem, const struct timespec *abstime) {   /* absolute: as it is */
    REAL(sem_timedwait, int);
    int r;
    RESTART(r, real_sem_timedwait(sem, abstime));
    return r;
}
