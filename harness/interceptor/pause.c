/*
 * pause.c - the application fault of thesis 3.5.1 for unmodified programs: the pause signal
 * ($NESTLAB_PAUSE_SIGNAL, default SIGUSR1) sets a flag; before and after the real call every
 * intercepted read/write-type call on a socket loops in 10 ms sleeps while it is set (pause_gate in
 * pause.h, pause_wait here); the resume signal ($NESTLAB_RESUME_SIGNAL, default SIGUSR2; the same
 * signal as pause = toggle) clears it. That sleeping is outside the timed interval: it is not wait
 * time. The handler stamps CLOCK_MONOTONIC and bumps ack_seq in the header so the harness knows when
 * it was delivered.
 *
 * The program cannot replace these handlers (signal, sigaction, sysv_signal, bsd_signal are
 * intercepted for the two signals; its handler is remembered, reported back to it, never run) nor
 * block the signals (sigprocmask/pthread_sigmask drop them from the set); the first attempt is
 * logged once on stderr and to the collector and flagged in the header. The handler counts its runs
 * per thread (t_sigs), so that the calls it interrupted are restarted (call.h, call.c).
 */
#include "pause.h"

#include "hints.h"
#include "reals.h"
#include "shm.h"
#include "text.h"

struct nest_pause g_pause;
static struct sigaction g_app_act[2];  /* what the program asked for (never installed) */
static int g_logged_handler, g_logged_mask;
TLS volatile uint32_t t_sigs;

void pause_wait(void) {
    struct nest_header *h = g_core.hdr;
    if (h)
        __atomic_fetch_add(&h->paused_threads, 1, RELAXED);
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    ENSURE(clock_nanosleep);
    while (__atomic_load_n(&g_pause.paused, __ATOMIC_ACQUIRE))
        real_clock_nanosleep(CLOCK_MONOTONIC, 0, &ten_ms, NULL);
    if (h)
        __atomic_fetch_sub(&h->paused_threads, 1, RELAXED);
}

static void pause_handler(int sig, siginfo_t *si, void *uc) {
    (void)si;
    (void)uc;
    int saved = errno;
    t_sigs++;   /* the call this thread was in, if any, is restarted (RESTART, call.h) */
    uint64_t t = now_ns();
    int pausing = (g_pause.pause_sig == g_pause.resume_sig) ? !__atomic_load_n(&g_pause.paused, RELAXED)
                                                : (sig == g_pause.pause_sig);
    __atomic_store_n(&g_pause.paused, pausing, __ATOMIC_SEQ_CST);
    struct nest_header *h = g_core.hdr;
    uint64_t seq = 0;
    if (h) {
        if (pausing) {
            if (!__atomic_load_n(&h->paused, RELAXED))
                __atomic_store_n(&h->pause_ns, t, RELAXED);
            __atomic_fetch_add(&h->pause_count, 1, RELAXED);
        } else {
            __atomic_store_n(&h->resume_ns, t, RELAXED);
            __atomic_fetch_add(&h->resume_count, 1, RELAXED);
        }
        __atomic_store_n(&h->paused, (uint32_t)pausing, RELAXED);
        __atomic_store_n(&h->ack_ns, t, RELAXED);
        seq = __atomic_add_fetch(&h->ack_seq, 1, __ATOMIC_SEQ_CST);
    }
    notify_signal(pausing ? "pause" : "resume", t, seq);
    errno = saved;
}

static int sig_slot(int sig) {   /* 0 pause, 1 resume, -1 not ours */
    if (!g_pause.on || sig <= 0)
        return -1;
    if (sig == g_pause.pause_sig)
        return 0;
    if (sig == g_pause.resume_sig)
        return 1;
    return -1;
}

static const char *sig_name(int sig) {
    if (sig == SIGUSR1)
        return "SIGUSR1";
    if (sig == SIGUSR2)
        return "SIGUSR2";
    return "the pause/resume signal";
}

static void handler_kept(int sig) {
    if (g_core.hdr) {
        __atomic_fetch_or(&g_core.hdr->flags, NEST_HF_HANDLER_KEPT, RELAXED);
        __atomic_fetch_add(&g_core.hdr->refused, 1, RELAXED);
    }
    if (__atomic_exchange_n(&g_logged_handler, 1, RELAXED))
        return;
    char t[256];
    struct buf b = {t, 0, sizeof t};
    b_str(&b, "the program installs its own handler for ");
    b_str(&b, sig_name(sig));
    b_str(&b, " (");
    b_i64(&b, sig);
    b_str(&b, "); the interceptor keeps its pause/resume handler and the program's will not run");
    log_stderr(t);
    notify_msg("warn", t);
}

static void mask_kept(void) {
    if (g_core.hdr) {
        __atomic_fetch_or(&g_core.hdr->flags, NEST_HF_MASK_KEPT, RELAXED);
        __atomic_fetch_add(&g_core.hdr->refused, 1, RELAXED);
    }
    if (__atomic_exchange_n(&g_logged_mask, 1, RELAXED))
        return;
    notify_msg("warn", "the program blocks the pause/resume signals; the interceptor leaves them unblocked");
}

int parse_signal(const char *v, int dflt) {
    if (!v || !*v)
        return dflt;
    if (!strcasecmp(v, "none") || !strcasecmp(v, "off") || !strcmp(v, "0"))
        return 0;
    if (!strncasecmp(v, "SIG", 3))
        v += 3;
    static const struct { const char *n; int s; } names[] = {
        {"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"HUP", SIGHUP}, {"INT", SIGINT}, {"QUIT", SIGQUIT},
        {"TERM", SIGTERM}, {"ALRM", SIGALRM}, {"WINCH", SIGWINCH}, {"URG", SIGURG},
        {"CONT", SIGCONT}, {"TSTP", SIGTSTP}, {"TTIN", SIGTTIN}, {"TTOU", SIGTTOU},
        {"PWR", SIGPWR}, {"IO", SIGIO}, {"PROF", SIGPROF}, {"VTALRM", SIGVTALRM},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcasecmp(v, names[i].n))
            return names[i].s;
    char *end;
    if (!strncasecmp(v, "RTMIN", 5)) {
        long off = v[5] ? strtol(v + 5, &end, 10) : 0;
        int s = SIGRTMIN + (int)off;
        return s <= SIGRTMAX ? s : -1;
    }
    if (!strncasecmp(v, "RTMAX", 5)) {
        long off = v[5] ? strtol(v + 5, &end, 10) : 0;
        int s = SIGRTMAX + (int)off;
        return s >= SIGRTMIN ? s : -1;
    }
    long n = strtol(v, &end, 10);
    if (*end || n <= 0 || n > SIGRTMAX || n == SIGKILL || n == SIGSTOP)
        return -1;
    return (int)n;
}

/* NESTLAB_PAUSE_SIGNAL and NESTLAB_RESUME_SIGNAL; either one off: both off. */
int pause_configure(const char *pause, const char *resume) {
    g_pause.pause_sig = parse_signal(pause, SIGUSR1);
    g_pause.resume_sig = parse_signal(resume, SIGUSR2);
    if (g_pause.pause_sig < 0 || g_pause.resume_sig < 0)
        return -1;
    if (!g_pause.pause_sig || !g_pause.resume_sig)
        g_pause.pause_sig = g_pause.resume_sig = 0;
    return 0;
}

void install_signals(void) {
    if (!g_pause.pause_sig) {
        if (g_core.hdr)
            __atomic_fetch_or(&g_core.hdr->flags, NEST_HF_PAUSE_OFF, RELAXED);
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pause_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, g_pause.pause_sig);
    sigaddset(&sa.sa_mask, g_pause.resume_sig);
    int sigs[2] = {g_pause.pause_sig, g_pause.resume_sig};
    for (int i = 0; i < 2; i++) {
        if (i == 1 && g_pause.resume_sig == g_pause.pause_sig)
            break;
        struct sigaction old;
        if (real_sigaction(sigs[i], &sa, &old) == 0)
            g_app_act[i] = old;   /* what the program would see as the current disposition */
    }
    if (g_pause.resume_sig == g_pause.pause_sig)
        g_app_act[1] = g_app_act[0];
    /* The program may have inherited them blocked: unblock in this thread (inherited by threads). */
    sigset_t un;
    sigemptyset(&un);
    sigaddset(&un, g_pause.pause_sig);
    sigaddset(&un, g_pause.resume_sig);
    real_pthread_sigmask(SIG_UNBLOCK, &un, NULL);
    g_pause.on = 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Signals: the program may not take the pause/resume signals away                            */

static sighandler_t app_swap_handler(int i, sighandler_t h, int flags) {
    sighandler_t old = (g_app_act[i].sa_flags & SA_SIGINFO) ? (sighandler_t)(void (*)(void))g_app_act[i].sa_sigaction
                                                            : g_app_act[i].sa_handler;
    memset(&g_app_act[i], 0, sizeof g_app_act[i]);
    g_app_act[i].sa_handler = h;
    g_app_act[i].sa_flags = flags;
    return old;
}

EXPORT sighandler_t signal(int sig, sighandler_t h) {
    ENSURE(signal);
    int i = sig_slot(sig);
    if (i < 0)
        return real_signal ? real_signal(sig, h) : SIG_ERR;
    handler_kept(sig);
    return app_swap_handler(i, h, SA_RESTART);
}

EXPORT sighandler_t sysv_signal(int sig, sighandler_t h) {
    ENSURE(sysv_signal);
    int i = sig_slot(sig);
    if (i < 0)
        return real_sysv_signal ? real_sysv_signal(sig, h) : SIG_ERR;
    handler_kept(sig);
    return app_swap_handler(i, h, SA_RESETHAND | SA_NODEFER);
}

EXPORT sighandler_t bsd_signal(int sig, sighandler_t h) {
    ENSURE(bsd_signal);
    int i = sig_slot(sig);
    if (i < 0)
        return real_bsd_signal ? real_bsd_signal(sig, h) : SIG_ERR;
    handler_kept(sig);
    return app_swap_handler(i, h, SA_RESTART);
}

EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old) {
    REAL(sigaction, int);
    int i = sig_slot(sig);
    if (i < 0)
        return real_sigaction(sig, act, old);
    struct sigaction prev = g_app_act[i];
    if (act) {
        handler_kept(sig);
        g_app_act[i] = *act;
    }
    if (old)
        *old = prev;
    return 0;
}

static const sigset_t *strip_ours(int how, const sigset_t *set, sigset_t *copy) {
    if (!g_pause.on || !set || how == SIG_UNBLOCK)
        return set;
    if (!sigismember(set, g_pause.pause_sig) && !sigismember(set, g_pause.resume_sig))
        return set;
    *copy = *set;
    sigdelset(copy, g_pause.pause_sig);
    sigdelset(copy, g_pause.resume_sig);
    mask_kept();
    return copy;
}

EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    REAL(sigprocmask, int);
    sigset_t copy;
    return real_sigprocmask(how, strip_ours(how, set, &copy), old);
}

EXPORT int pthread_sigmask(int how, const sigset_t *set, sigset_t *old) {
    ENSURE(pthread_sigmask);
    if (!real_pthread_sigmask)
        return ENOSYS;
    sigset_t copy;
    return real_pthread_sigmask(how, strip_ours(how, set, &copy), old);
}
