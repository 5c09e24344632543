/*
 * libnestintercept.so - the nestlab LD_PRELOAD interceptor (NeST application and socket modules).
 *
 * What it does, for an unmodified dynamically linked program started with
 *     LD_PRELOAD=.../libnestintercept.so NESTLAB_SHM_DIR=/dev/shm/<run dir> program ...
 *
 * 1. Counts, per socket, in a shared-memory file ($NESTLAB_SHM_DIR/<pid>.nest, format in
 *    nestintercept.h): completed receive calls (read, readv, recv, recvfrom, recvmsg, recvmmsg and
 *    their _chk forms) and send calls (write, writev, send, sendto, sendmsg, sendmmsg, sendfile,
 *    connect), the bytes they moved, failed calls, and the time blocked in them; the time spent in
 *    poll/ppoll/select/pselect/epoll_wait/epoll_pwait/epoll_pwait2 goes to every socket waited on,
 *    by direction of interest (POLLIN/readfds/EPOLLIN -> in, POLLOUT/writefds/EPOLLOUT -> out; epoll
 *    sets are tracked from epoll_ctl). Calls in progress are visible to the reader (pend_n/pend_sum).
 *    Only fds that are sockets are counted: the type is cached per fd (fstat S_ISSOCK on first
 *    sight; forgotten on close, fclose, dup2/dup3, close_range, closefrom and when a call hands out
 *    a new fd). The hot path takes no lock: one compare-and-swap seqlock per call and direction,
 *    two vDSO clock reads.
 * 2. Tells the collector about new processes and sockets with one JSON datagram each on the Unix
 *    datagram socket $NESTLAB_COLLECTOR_SOCK (a fresh socket per message, MSG_DONTWAIT: dropped when
 *    the collector is absent or slow). The datagrams are hints; the files alone are complete.
 * 3. Implements the application fault of thesis 3.5.1 for unmodified programs: the pause signal
 *    ($NESTLAB_PAUSE_SIGNAL, default SIGUSR1) sets a flag; before and after the real call every
 *    intercepted read/write-type call on a socket loops in 10 ms sleeps while it is set; the resume
 *    signal ($NESTLAB_RESUME_SIGNAL, default SIGUSR2; the same signal as pause = toggle) clears it.
 *    That sleeping is outside the timed interval: it is not wait time. The handler stamps
 *    CLOCK_MONOTONIC and bumps ack_seq in the header so the harness knows when it was delivered.
 *    The program cannot replace these handlers (signal, sigaction, sysv_signal, bsd_signal are
 *    intercepted for the two signals; its handler is remembered, reported back to it, never run)
 *    nor block the signals (sigprocmask/pthread_sigmask drop them from the set); the first attempt
 *    is logged once on stderr and to the collector and flagged in the header.
 *
 *    The two signals never surface as EINTR: a call that SA_RESTART does not restart (poll, ppoll,
 *    select, pselect, epoll_wait/epoll_pwait/epoll_pwait2, nanosleep, clock_nanosleep, usleep,
 *    sleep, pause, sigsuspend, sigtimedwait, sigwaitinfo, sem_wait, sem_timedwait, and socket calls
 *    on sockets with SO_RCVTIMEO/SO_SNDTIMEO) and that our handler interrupted is restarted here
 *    with what is left of its timeout (the handler counts its runs per thread).
 *
 * Never fatal to the program: the file's space is allocated up front (posix_fallocate; a full
 * /dev/shm gives a header-only file flagged NO_SPACE, or no file, never SIGBUS); a writer waits for
 * a seqlock held by a live thread (preempted), takes it from a dead one and never waits for itself;
 * the end of a call that could not be recorded at once is recorded later; what could not be
 * counted is counted (lost, untracked, unended, forced in the header).
 *
 * Environment: NESTLAB_SHM_DIR (unset or unusable: the library is inert, every call passes
 * straight through), NESTLAB_COLLECTOR_SOCK (path, '@name' for the abstract namespace; optional),
 * NESTLAB_PAUSE_SIGNAL / NESTLAB_RESUME_SIGNAL (USR1, SIGUSR2, 12, RTMIN+3, none), NESTLAB_MAX_FDS
 * (slots per process, default 4096: sockets with a larger fd are not counted and flagged),
 * NESTLAB_LOCK_WAIT_MS (how long a writer waits for a seqlock held by a live thread, default 1000).
 *
 * Processes: fork() (pthread_atfork child handler) gives the child its own file, with the inherited
 * sockets and zero counters; exec keeps LD_PRELOAD, so the constructor runs again and re-attaches to
 * the file of the same pid. Thread-safe; nothing on the paths used from signal handlers and after
 * fork allocates memory. Known limits (docs/interceptor.md): a socket closed inside libc without
 * going through close/fclose keeps its slot until its fd number is handed out again by an
 * intercepted call; calls left by longjmp out of a signal handler stay "in progress" until the
 * socket is closed; a child of vfork()/posix_spawn shares the parent's memory, so counted calls it
 * makes before exec land in the parent's file (closes are recognised and not applied).
 */
#define _GNU_SOURCE
#include "nestintercept.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define LIKELY(x) __builtin_expect(!!(x), 1)
#define UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RELAXED __ATOMIC_RELAXED

#if defined(__GNUC__) && defined(__USE_GNU) && !defined(__cplusplus)
#define SA_PTR(a) ((a).__sockaddr__)          /* glibc's transparent union under _GNU_SOURCE */
#else
#define SA_PTR(a) (a)
#endif

/* ------------------------------------------------------------------------------------------ */
/* The real functions                                                                           */

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

#define DECLARE_REAL(name, ret, args) static ret(*real_##name) args;
REALS(DECLARE_REAL)
#undef DECLARE_REAL

#define ENSURE(name) \
    do { \
        if (UNLIKELY(!real_##name)) \
            real_##name = (__typeof__(real_##name))dlsym(RTLD_NEXT, #name); \
    } while (0)
#define MISSING(ret) do { errno = ENOSYS; return (ret)-1; } while (0)

static void resolve_all(void) {
#define RESOLVE(name, ret, args) ENSURE(name);
    REALS(RESOLVE)
#undef RESOLVE
}

/* Not in the public headers (they are the _FORTIFY_SOURCE entry points). */
ssize_t __read_chk(int, void *, size_t, size_t);
ssize_t __recv_chk(int, void *, size_t, size_t, int);
ssize_t __recvfrom_chk(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
int __poll_chk(struct pollfd *, nfds_t, int, size_t);
int __ppoll_chk(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t);
sighandler_t bsd_signal(int, sighandler_t);

/* ------------------------------------------------------------------------------------------ */
/* State                                                                                       */

/* What an fd is (private, per fd): the kind in bits 0..2; K_BUSY and K_CLOSING also name the thread
 * doing it (tid << 3), so that nobody waits for itself. K_BUSY: a slot is being made for it (others
 * wait, then count the call); K_CLOSING: it is being closed (a call on it is the program's race). */
enum { K_UNKNOWN = 0, K_SOCK = 1, K_OTHER = 2, K_BUSY = 3, K_EPOLL = 4, K_CLOSING = 5 };
#define KIND(v) ((v) & 7u)
#define KOWNER(v) ((v) >> 3)

#define TLS __thread __attribute__((tls_model("initial-exec")))

static int g_on;                       /* the library is active (a file of ours exists) */
static pid_t g_pid;
static uint32_t g_nslots;              /* slots in our file (0: no space, nothing counted) */
static uint32_t g_want_slots;          /* slots asked for (NESTLAB_MAX_FDS); the private tables' size */
static struct nest_header *g_hdr;
static struct nest_slot *g_slots;
static size_t g_map_size;
static uint32_t *g_kind;               /* private, per fd: K_* | owner << 3 */
static int32_t *g_ep_owner;            /* private, per fd: epoll fd + 1 it is registered in, 0 none */
static uint32_t *g_ep_events;          /* private, per fd: its epoll events */
static char g_dir[PATH_MAX - 32];
static struct sockaddr_un g_notify_addr;
static socklen_t g_notify_len;
static int g_pause_sig, g_resume_sig;  /* 0: none */
static int g_sig_on;                   /* our handlers are installed */
static volatile int g_paused;
static struct sigaction g_app_act[2];  /* what the program asked for (never installed) */
static int g_logged_handler, g_logged_mask;
static uint64_t g_lock_wait_ns = 1000000000ull;   /* NESTLAB_LOCK_WAIT_MS */
static uint64_t *g_stuck_seq;          /* a seqlock that outlasted the wait (and its value then): */
static uint64_t g_stuck_val;           /* later writers give up on it at once while it stays so */

static TLS uint32_t t_tid;             /* this thread's id (0: not known yet; reset after fork) */
static TLS volatile uint32_t t_sigs;   /* runs of our pause/resume handler on this thread */

static inline uint64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

/* ------------------------------------------------------------------------------------------ */
/* Seqlocks (also the writers' lock)                                                            */

#define HCOUNT(field) do { if (g_hdr) __atomic_fetch_add(&g_hdr->field, 1, RELAXED); } while (0)

static inline uint32_t my_tid(void) {
    uint32_t t = t_tid;
    if (UNLIKELY(!t))
        t_tid = t = (uint32_t)syscall(SYS_gettid) & 0x7fffffffu;
    return t;
}

#define SEQ_LOW 0xffffffffull

static inline uint64_t seq_mine(uint64_t s, uint32_t tid) {   /* the held value, from s */
    return (s & ~SEQ_LOW) | ((uint64_t)tid << 1) | 1u;
}

/* One attempt: the odd value held, or 0 if it is held by someone. */
static inline uint64_t seq_trylock(uint64_t *seq, uint32_t tid) {
    uint64_t s = __atomic_load_n(seq, RELAXED);
    if (s & 1)
        return 0;
    uint64_t h = seq_mine(s, tid);
    return __atomic_compare_exchange_n(seq, &s, h, 0, __ATOMIC_ACQUIRE, RELAXED) ? h : 0;
}

static inline void seq_unlock(uint64_t *seq, uint64_t held) {
    __atomic_store_n(seq, (held & ~SEQ_LOW) + (1ull << 32), __ATOMIC_RELEASE);
}

static int thread_gone(uint32_t tid) {   /* tid is no thread of this process any more */
    if (!tid || !g_pid)
        return 0;
    return syscall(SYS_tgkill, g_pid, tid, 0) != 0 && errno == ESRCH;
}

static void nap(unsigned i) {            /* back off: 20 us, doubling to 1 ms */
    unsigned sh = i > 6 ? 6 : i;
    struct timespec ts = {0, (long)(20000u << sh) > 1000000 ? 1000000 : (long)(20000u << sh)};
    ENSURE(clock_nanosleep);
    if (real_clock_nanosleep)
        real_clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
    else
        sched_yield();
}

enum { SEQ_SELF = 1, SEQ_STUCK = 2 };

/* Wait for *seq: the odd value held, or 0 with *why = SEQ_SELF (this thread holds it: a signal
 * handler that interrupted its own thread inside the library; waiting would never end) or SEQ_STUCK
 * (a live holder kept the same value for g_lock_wait_ns; or an earlier writer found it so and it has
 * not changed since). A holder that is not a thread of ours any more is taken over (forced). */
static uint64_t seq_lock_slow(uint64_t *seq, uint32_t tid, int *why) {
    int saved = errno;
    uint64_t last = 0, since = 0, h = 0;
    for (unsigned i = 0;; i++) {
        uint64_t s = __atomic_load_n(seq, __ATOMIC_ACQUIRE);
        if (!(s & 1)) {
            h = seq_mine(s, tid);
            if (__atomic_compare_exchange_n(seq, &s, h, 0, __ATOMIC_ACQUIRE, RELAXED))
                break;
            continue;
        }
        uint32_t owner = NEST_SEQ_OWNER(s);
        if (owner == tid) {
            *why = SEQ_SELF;
            h = 0;
            break;
        }
        if (seq == __atomic_load_n(&g_stuck_seq, RELAXED) && s == __atomic_load_n(&g_stuck_val, RELAXED)) {
            *why = SEQ_STUCK;
            h = 0;
            break;
        }
        if (s != last) {                  /* it changed hands: whoever holds it now is new */
            last = s;
            since = 0;
        }
        if (i < 64) {
            cpu_relax();
            continue;
        }
        if (i < 128) {
            sched_yield();
            continue;
        }
        uint64_t t = now_ns();
        if (!since)
            since = t;
        if ((i & 3) == 0 && thread_gone(owner)) {
            h = seq_mine(s, tid);
            if (__atomic_compare_exchange_n(seq, &s, h, 0, __ATOMIC_ACQUIRE, RELAXED)) {
                HCOUNT(forced);
                break;
            }
            continue;
        }
        if (t - since >= g_lock_wait_ns) {
            __atomic_store_n(&g_stuck_val, s, RELAXED);
            __atomic_store_n(&g_stuck_seq, seq, RELAXED);
            *why = SEQ_STUCK;
            h = 0;
            break;
        }
        nap(i - 128);
    }
    errno = saved;
    return h;
}

/* Take *seq (even -> odd, naming this thread). Returns the odd value held, or 0 (see above). */
static inline uint64_t seq_lock(uint64_t *seq) {
    uint32_t tid = my_tid();
    uint64_t h = seq_trylock(seq, tid);
    if (LIKELY(h))
        return h;
    int why = 0;
    return seq_lock_slow(seq, tid, &why);
}

/* For the rare paths that must change a slot (install, retire, endpoints): take it, or, when it is
 * this thread's own (we interrupted it) or stuck, go ahead without it: returns 0 then, and the
 * caller must not release it. Going ahead past a live holder is counted in `forced`. */
static uint64_t seq_force(uint64_t *seq) {
    uint32_t tid = my_tid();
    uint64_t h = seq_trylock(seq, tid);
    if (LIKELY(h))
        return h;
    int why = 0;
    h = seq_lock_slow(seq, tid, &why);
    if (!h && why == SEQ_STUCK)
        HCOUNT(forced);
    return h;
}

static inline void seq_release(uint64_t *seq, uint64_t held) {
    if (held)
        seq_unlock(seq, held);
}

static inline void lost_call(void) {
    HCOUNT(lost);
}

/* ------------------------------------------------------------------------------------------ */
/* Small async-signal-safe helpers                                                              */

struct buf {
    char *p;
    size_t n, cap;
};

static void b_raw(struct buf *b, const char *s, size_t n) {
    if (b->n + n >= b->cap)
        n = b->cap > b->n + 1 ? b->cap - b->n - 1 : 0;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void b_str(struct buf *b, const char *s) { b_raw(b, s, strlen(s)); }

static void b_u64(struct buf *b, uint64_t v) {
    char t[24];
    int i = 23;
    t[i] = 0;
    do {
        t[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    b_str(b, t + i);
}

static void b_i64(struct buf *b, int64_t v) {
    if (v < 0) {
        b_raw(b, "-", 1);
        b_u64(b, (uint64_t)(-(v + 1)) + 1);
    } else {
        b_u64(b, (uint64_t)v);
    }
}

static void b_jstr(struct buf *b, const char *s, size_t n) {   /* a JSON string literal */
    static const char hex[] = "0123456789abcdef";
    b_raw(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            b_raw(b, e, 2);
        } else if (c < 0x20 || c == 0x7f) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            b_raw(b, e, 6);
        } else {
            b_raw(b, (const char *)&c, 1);
        }
    }
    b_raw(b, "\"", 1);
}

static int read_file(const char *path, char *out, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    size_t n = 0;
    while (n < cap) {
        ssize_t r = real_read ? real_read(fd, out + n, cap - n) : -1;
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    if (real_close)
        real_close(fd);
    return (int)n;
}

/* /proc/self/stat field 22 (starttime) and 4 (ppid). */
static uint64_t proc_starttime(pid_t *ppid) {
    char s[1024];
    int n = read_file("/proc/self/stat", s, sizeof s - 1);
    if (n <= 0)
        return 0;
    s[n] = 0;
    char *p = strrchr(s, ')');
    if (!p)
        return 0;
    p += 2;                                  /* field 3 (state) */
    uint64_t v = 0;
    for (int field = 3; *p && field <= 22; field++) {
        v = 0;
        int neg = 0;
        if (*p == '-') {
            neg = 1;
            p++;
        }
        while (*p >= '0' && *p <= '9')
            v = v * 10 + (uint64_t)(*p++ - '0');
        if (field == 4 && ppid)
            *ppid = neg ? 0 : (pid_t)v;
        while (*p && *p != ' ')
            p++;
        if (*p == ' ')
            p++;
    }
    return v;
}

static void log_stderr(const char *msg) {
    char t[512];
    struct buf b = {t, 0, sizeof t};
    char comm[64];
    int n = read_file("/proc/self/comm", comm, sizeof comm - 1);
    while (n > 0 && (comm[n - 1] == '\n' || comm[n - 1] == 0))
        n--;
    comm[n > 0 ? n : 0] = 0;
    b_str(&b, "nestlab-intercept[");
    b_i64(&b, g_pid);
    b_str(&b, "] ");
    b_str(&b, comm);
    b_str(&b, ": ");
    b_str(&b, msg);
    b_str(&b, "\n");
    if (real_write)
        (void)!real_write(2, t, b.n);
}

/* ------------------------------------------------------------------------------------------ */
/* Notifications to the collector (one JSON object per datagram; never blocks)                  */

static void notify_send(const char *msg, size_t len) {
    if (!g_notify_len || !real_socket || !real_sendto || !real_close)
        return;
    int saved = errno;
    int fd = real_socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd >= 0) {
        (void)real_sendto(fd, msg, len, MSG_DONTWAIT | MSG_NOSIGNAL,
                          (const struct sockaddr *)&g_notify_addr, g_notify_len);
        real_close(fd);
    }
    errno = saved;
}

static void b_head(struct buf *b, const char *ev) {
    b_str(b, "{\"v\":1,\"ev\":\"");
    b_str(b, ev);
    b_str(b, "\",\"pid\":");
    b_i64(b, g_pid);
}

static void notify_proc(const char *ev) {
    if (!g_notify_len || !g_hdr)
        return;
    char t[NEST_CMDLINE_MAX * 2 + 512];
    struct buf b = {t, 0, sizeof t};
    struct nest_header *h = g_hdr;
    b_head(&b, ev);
    b_str(&b, ",\"ppid\":");
    b_i64(&b, h->ppid);
    b_str(&b, ",\"starttime\":");
    b_u64(&b, h->starttime);
    b_str(&b, ",\"exec_count\":");
    b_u64(&b, h->exec_count);
    b_str(&b, ",\"shm\":");
    char path[PATH_MAX];
    struct buf pb = {path, 0, sizeof path};
    b_str(&pb, g_dir);
    b_str(&pb, "/");
    b_i64(&pb, g_pid);
    b_str(&pb, ".nest");
    b_jstr(&b, path, pb.n);
    b_str(&b, ",\"cmdline\":[");
    uint32_t len = h->cmdline_len < NEST_CMDLINE_MAX ? h->cmdline_len : NEST_CMDLINE_MAX;
    size_t start = 0;
    int first = 1;
    for (size_t i = 0; i <= len; i++) {
        if (i == len || h->cmdline[i] == 0) {
            if (i > start || i < len) {
                if (!first)
                    b_str(&b, ",");
                b_jstr(&b, h->cmdline + start, i - start);
                first = 0;
            }
            start = i + 1;
        }
    }
    b_str(&b, "]}");
    notify_send(t, b.n);
}

static void b_endpoint(struct buf *b, int family, const uint8_t *addr, uint16_t port) {
    char a[INET6_ADDRSTRLEN + 8];
    if (!inet_ntop(family, addr, a, sizeof a))
        a[0] = 0;
    char t[INET6_ADDRSTRLEN + 16];
    struct buf e = {t, 0, sizeof t};
    if (family == AF_INET6)
        b_str(&e, "[");
    b_str(&e, a);
    if (family == AF_INET6)
        b_str(&e, "]");
    b_str(&e, ":");
    b_u64(&e, port);
    b_jstr(b, t, e.n);
}

static void notify_sock(const char *ev, int fd) {
    if (!g_notify_len || !g_slots)
        return;
    struct nest_slot *s = &g_slots[fd];
    char t[512];
    struct buf b = {t, 0, sizeof t};
    b_head(&b, ev);
    b_str(&b, ",\"fd\":");
    b_i64(&b, fd);
    b_str(&b, ",\"inode\":");
    b_u64(&b, s->inode);
    b_str(&b, ",\"gen\":");
    b_u64(&b, s->gen);
    b_str(&b, ",\"family\":");
    b_u64(&b, s->family);
    b_str(&b, ",\"type\":");
    b_u64(&b, s->type);
    b_str(&b, ",\"flags\":");
    b_u64(&b, s->flags);
    if (s->family == AF_INET || s->family == AF_INET6) {
        b_str(&b, ",\"local\":");
        b_endpoint(&b, s->family, s->laddr, s->lport);
        if (s->flags & NEST_SF_PEER) {
            b_str(&b, ",\"remote\":");
            b_endpoint(&b, s->family, s->raddr, s->rport);
        }
    }
    b_str(&b, "}");
    notify_send(t, b.n);
}

static void notify_msg(const char *ev, const char *msg) {
    if (!g_notify_len)
        return;
    char t[512];
    struct buf b = {t, 0, sizeof t};
    b_head(&b, ev);
    b_str(&b, ",\"msg\":");
    b_jstr(&b, msg, strlen(msg));
    b_str(&b, "}");
    notify_send(t, b.n);
}

static void notify_signal(const char *ev, uint64_t t_ns, uint64_t seq) {
    if (!g_notify_len)
        return;
    char t[160];
    struct buf b = {t, 0, sizeof t};
    b_head(&b, ev);
    b_str(&b, ",\"mono_ns\":");
    b_u64(&b, t_ns);
    b_str(&b, ",\"ack_seq\":");
    b_u64(&b, seq);
    b_str(&b, "}");
    notify_send(t, b.n);
}

/* ------------------------------------------------------------------------------------------ */
/* Slots                                                                                        */

static void set_endpoint(const struct sockaddr *sa, uint8_t *addr, uint16_t *port) {
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        memset(addr, 0, 16);
        memcpy(addr, &in->sin_addr, 4);
        *port = ntohs(in->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        memcpy(addr, &in6->sin6_addr, 16);
        *port = ntohs(in6->sin6_port);
    }
}

static void bump_max_fd(int fd) {
    uint32_t want = (uint32_t)fd + 1, cur = __atomic_load_n(&g_hdr->max_fd, RELAXED);
    while (cur < want &&
           !__atomic_compare_exchange_n(&g_hdr->max_fd, &cur, want, 1, __ATOMIC_RELEASE, RELAXED))
        ;
}

static void defer_apply_slot(struct nest_slot *s);

/* Close the socket in slot fd: account calls in progress up to now, add its counters to the
 * header's retired totals (graph data sockets only), mark it closed. The header's seqlock is taken
 * last: nobody waits for another lock while holding it. */
static void retire_slot(int fd) {
    struct nest_header *h = g_hdr;
    struct nest_slot *s = &g_slots[fd];
    if (__atomic_load_n(&s->state, RELAXED) != NEST_OPEN)
        return;
    uint64_t hs = seq_force(&s->seq);
    uint64_t h0 = seq_force(&s->dir[0].seq);
    uint64_t h1 = seq_force(&s->dir[1].seq);
    uint64_t hh = seq_force(&h->seq);
    if (s->state == NEST_OPEN) {
        defer_apply_slot(s);   /* call ends that were waiting for these locks */
        uint64_t t = now_ns();
        int data = (s->flags & NEST_SF_GRAPH) && !(s->flags & NEST_SF_LISTEN);
        for (int d = 0; d < 2; d++) {
            struct nest_dir *x = &s->dir[d];
            x->wait_ns += x->pend_n * t - x->pend_sum;
            x->pend_n = 0;
            x->pend_sum = 0;
            if (data) {
                h->retired[d].msgs += x->msgs;
                h->retired[d].bytes += x->bytes;
                h->retired[d].errors += x->errors;
                h->retired[d].wait_ns += x->wait_ns;
            }
        }
        if (data)
            h->retired_n++;
        s->close_ns = t;
        __atomic_store_n(&s->state, NEST_CLOSED, RELAXED);
    }
    seq_release(&h->seq, hh);
    seq_release(&s->dir[1].seq, h1);
    seq_release(&s->dir[0].seq, h0);
    seq_release(&s->seq, hs);
}

/* Release a lock we went ahead without (install_slot): a new socket starts with a usable lock. */
static void seq_heal(uint64_t *seq) {
    __atomic_store_n(seq, (__atomic_load_n(seq, RELAXED) & ~SEQ_LOW) + (1ull << 32), __ATOMIC_RELEASE);
}

/* Give slot fd to the socket now open on fd (inode ino); extra: NEST_SF_* known by the caller. */
static void install_slot(int fd, uint64_t ino, uint32_t extra) {
    struct nest_slot *s = &g_slots[fd];
    retire_slot(fd);   /* a socket we never saw closed (closed inside libc) */
    int dom = 0, type = 0, acc = 0;
    socklen_t l = sizeof dom;
    getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &dom, &l);
    l = sizeof type;
    getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &l);
    l = sizeof acc;
    getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &l);
    uint32_t flags = extra;
    if (acc)
        flags |= NEST_SF_LISTEN;
    if ((dom == AF_INET || dom == AF_INET6) && type == SOCK_STREAM)
        flags |= NEST_SF_GRAPH;
    uint8_t la[16] = {0}, ra[16] = {0};
    uint16_t lp = 0, rp = 0;
    if (dom == AF_INET || dom == AF_INET6) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
            set_endpoint((struct sockaddr *)&ss, la, &lp);
        sl = sizeof ss;
        if (getpeername(fd, (struct sockaddr *)&ss, &sl) == 0) {
            set_endpoint((struct sockaddr *)&ss, ra, &rp);
            flags |= NEST_SF_PEER;
        }
    }
    uint64_t hs = seq_force(&s->seq);
    uint64_t h0 = seq_force(&s->dir[0].seq);
    uint64_t h1 = seq_force(&s->dir[1].seq);
    s->gen++;
    s->inode = ino;
    s->fd = fd;
    s->flags = flags;
    s->family = (uint16_t)dom;
    s->type = (uint16_t)type;
    s->lport = lp;
    s->rport = rp;
    memcpy(s->laddr, la, 16);
    memcpy(s->raddr, ra, 16);
    s->open_ns = now_ns();
    s->close_ns = 0;
    for (int d = 0; d < 2; d++) {
        struct nest_dir *x = &s->dir[d];
        x->msgs = x->bytes = x->errors = x->wait_ns = x->pend_n = x->pend_sum = x->last_ns = 0;
    }
    __atomic_store_n(&s->state, NEST_OPEN, RELAXED);
    if (h1) seq_unlock(&s->dir[1].seq, h1); else seq_heal(&s->dir[1].seq);
    if (h0) seq_unlock(&s->dir[0].seq, h0); else seq_heal(&s->dir[0].seq);
    if (hs) seq_unlock(&s->seq, hs); else seq_heal(&s->seq);
    bump_max_fd(fd);
    if ((flags & NEST_SF_GRAPH) && (flags & NEST_SF_PEER) && !(flags & NEST_SF_LISTEN))
        __atomic_fetch_or(&g_hdr->flags, NEST_HF_HAD_GRAPH, RELAXED);
}

/* A socket we have no slot for (fd >= nslots, or no space for slots at all): counted, not tracked. */
static void untracked_socket(void) {
    HCOUNT(untracked);
    if (g_nslots)
        __atomic_fetch_or(&g_hdr->flags, NEST_HF_FD_OVERFLOW, RELAXED);
}

static void untracked_fd(int fd) {   /* fd >= nslots was handed out: a socket? */
    struct stat st;
    int saved = errno;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
        untracked_socket();
    errno = saved;
}

static inline uint32_t mark(uint32_t kind) { return kind | (my_tid() << 3); }

/* While another live thread makes a slot for fd (K_BUSY: a few system calls, unless it was
 * preempted), wait for it, up to g_lock_wait_ns. Returns the kind word seen last. */
static uint32_t wait_not_busy(int fd, uint32_t k) {
    uint32_t me = my_tid();
    uint64_t since = 0;
    int saved = errno;
    for (unsigned i = 0; KIND(k) == K_BUSY && KOWNER(k) != me; i++) {
        if (i < 64) {
            cpu_relax();
        } else if (i < 128) {
            sched_yield();
        } else {
            uint64_t t = now_ns();
            if (!since)
                since = t;
            if (t - since >= g_lock_wait_ns || ((i & 3) == 0 && thread_gone(KOWNER(k))))
                break;
            nap(i - 128);
        }
        k = __atomic_load_n(&g_kind[fd], __ATOMIC_ACQUIRE);
    }
    errno = saved;
    return k;
}

/* Finish making the slot of fd (we hold K_BUSY as `m`): K_SOCK, unless the fd was closed meanwhile
 * (by a signal handler of this thread, which did not wait for us): then the slot is closed again. */
static int adopt_done(int fd, uint32_t m) {
    uint64_t gen = g_slots[fd].gen;
    if (__atomic_compare_exchange_n(&g_kind[fd], &m, K_SOCK, 0, __ATOMIC_RELEASE, RELAXED))
        return 1;
    if (g_slots[fd].gen == gen)
        retire_slot(fd);
    return 0;
}

/* A socket fd came into existence (socket, accept): make its slot now. */
static void adopt_socket(int fd, uint32_t extra) {
    if (fd < 0)
        return;
    if ((unsigned)fd >= g_nslots) {
        untracked_socket();
        return;
    }
    uint32_t m = mark(K_BUSY);
    __atomic_store_n(&g_kind[fd], m, __ATOMIC_SEQ_CST);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
        __atomic_compare_exchange_n(&g_kind[fd], &m, K_UNKNOWN, 0, __ATOMIC_RELEASE, RELAXED);
        return;
    }
    install_slot(fd, (uint64_t)st.st_ino, extra);
    if (adopt_done(fd, m) && (g_slots[fd].flags & NEST_SF_PEER))
        notify_sock("sock", fd);
}

/* An fd number was handed out by a call we do not count on (dup, socketpair, SCM_RIGHTS...):
 * forget what we knew about that number (it is classified again on first use). */
static void fresh_fd(int fd) {
    if (fd < 0)
        return;
    if ((unsigned)fd >= g_nslots) {
        untracked_fd(fd);
        return;
    }
    uint32_t k = __atomic_exchange_n(&g_kind[fd], mark(K_CLOSING), __ATOMIC_SEQ_CST);
    if (KIND(k) == K_SOCK)
        retire_slot(fd);
    g_ep_owner[fd] = 0;
    __atomic_store_n(&g_kind[fd], K_UNKNOWN, __ATOMIC_RELEASE);
}

/* First sight of fd (we hold K_BUSY as `m`): a socket gets a slot, anything else is remembered. */
static struct nest_slot *classify(int fd, uint32_t m) {
    struct stat st;
    if (fstat(fd, &st) != 0) {
        __atomic_compare_exchange_n(&g_kind[fd], &m, K_UNKNOWN, 0, __ATOMIC_RELEASE, RELAXED);
        return NULL;
    }
    if (!S_ISSOCK(st.st_mode)) {
        __atomic_compare_exchange_n(&g_kind[fd], &m, K_OTHER, 0, __ATOMIC_RELEASE, RELAXED);
        return NULL;
    }
    install_slot(fd, (uint64_t)st.st_ino, NEST_SF_INHERITED);
    if (!adopt_done(fd, m))
        return NULL;
    if (g_slots[fd].flags & NEST_SF_PEER)
        notify_sock("sock", fd);
    return &g_slots[fd];
}

static void lost_if_socket(int fd) {
    struct stat st;
    int saved = errno;
    if (fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode))
        lost_call();
    errno = saved;
}

static struct nest_slot *tracked_slow(int fd, uint32_t k) {
    for (int round = 0; round < 8; round++) {
        switch (KIND(k)) {
        case K_SOCK:
            return &g_slots[fd];
        case K_UNKNOWN: {
            uint32_t m = mark(K_BUSY);
            if (__atomic_compare_exchange_n(&g_kind[fd], &k, m, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE))
                return classify(fd, m);
            continue;                         /* k: what another thread made of it */
        }
        case K_BUSY:                          /* another thread is making its slot: wait for it */
            if (KOWNER(k) != my_tid()) {
                uint32_t k2 = wait_not_busy(fd, k);
                if (k2 != k || KIND(k2) != K_BUSY) {
                    k = k2;
                    continue;
                }
            }
            lost_if_socket(fd);               /* this thread's own (a signal handler), or stuck */
            return NULL;
        default:                              /* K_OTHER, K_EPOLL, K_CLOSING (the program's race) */
            return NULL;
        }
    }
    return NULL;
}

/* The slot of fd if fd is a socket we count, else NULL. The hot path. */
static inline struct nest_slot *tracked(int fd) {
    if (UNLIKELY(!g_on) || (unsigned)fd >= g_nslots)
        return NULL;
    uint32_t k = __atomic_load_n(&g_kind[fd], __ATOMIC_ACQUIRE);
    if (LIKELY(k == K_SOCK))
        return &g_slots[fd];
    return tracked_slow(fd, k);
}

/* The program closes fd (close, fclose, dup2 target, close_range): called before the real close.
 * A slot another live thread is making for fd is waited for, not taken from it. */
static uint32_t forget_begin(int fd) {
    uint32_t m = mark(K_CLOSING);
    uint32_t k = __atomic_load_n(&g_kind[fd], __ATOMIC_ACQUIRE);
    for (;;) {
        if (KIND(k) == K_BUSY && KOWNER(k) != my_tid()) {
            uint32_t k2 = wait_not_busy(fd, k);
            if (k2 != k) {
                k = k2;
                continue;
            }
        }
        if (__atomic_compare_exchange_n(&g_kind[fd], &k, m, 0, __ATOMIC_SEQ_CST, __ATOMIC_ACQUIRE))
            break;
    }
    uint32_t kind = KIND(k);
    if (kind == K_SOCK) {
        retire_slot(fd);
        if (g_notify_len)
            notify_sock("close", fd);
    }
    g_ep_owner[fd] = 0;
    if (kind == K_EPOLL) {
        uint32_t mx = __atomic_load_n(&g_hdr->max_fd, RELAXED);
        for (uint32_t i = 0; i < mx && i < g_nslots; i++)
            if (g_ep_owner[i] == fd + 1)
                g_ep_owner[i] = 0;
    }
    return kind;
}

static void forget_end(int fd) {
    uint32_t k = mark(K_CLOSING);
    __atomic_compare_exchange_n(&g_kind[fd], &k, K_UNKNOWN, 0, __ATOMIC_RELEASE, RELAXED);
}

/* Closes made by a vfork()/posix_spawn child share our memory but not our fd table. */
static inline int same_process(void) { return (pid_t)syscall(SYS_getpid) == g_pid; }

/* ------------------------------------------------------------------------------------------ */
/* The application fault                                                                        */

static void pause_wait(void) {
    struct nest_header *h = g_hdr;
    if (h)
        __atomic_fetch_add(&h->paused_threads, 1, RELAXED);
    struct timespec ten_ms = {0, 10 * 1000 * 1000};
    ENSURE(clock_nanosleep);
    while (__atomic_load_n(&g_paused, __ATOMIC_ACQUIRE))
        real_clock_nanosleep(CLOCK_MONOTONIC, 0, &ten_ms, NULL);
    if (h)
        __atomic_fetch_sub(&h->paused_threads, 1, RELAXED);
}

static inline void pause_gate(void) {
    if (UNLIKELY(__atomic_load_n(&g_paused, RELAXED)))
        pause_wait();
}

static void pause_handler(int sig, siginfo_t *si, void *uc) {
    (void)si;
    (void)uc;
    int saved = errno;
    t_sigs++;   /* the call this thread was in, if any, is restarted (see RESTART) */
    uint64_t t = now_ns();
    int pausing = (g_pause_sig == g_resume_sig) ? !__atomic_load_n(&g_paused, RELAXED)
                                                : (sig == g_pause_sig);
    __atomic_store_n(&g_paused, pausing, __ATOMIC_SEQ_CST);
    struct nest_header *h = g_hdr;
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
    if (!g_sig_on || sig <= 0)
        return -1;
    if (sig == g_pause_sig)
        return 0;
    if (sig == g_resume_sig)
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
    if (g_hdr) {
        __atomic_fetch_or(&g_hdr->flags, NEST_HF_HANDLER_KEPT, RELAXED);
        __atomic_fetch_add(&g_hdr->refused, 1, RELAXED);
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
    if (g_hdr) {
        __atomic_fetch_or(&g_hdr->flags, NEST_HF_MASK_KEPT, RELAXED);
        __atomic_fetch_add(&g_hdr->refused, 1, RELAXED);
    }
    if (__atomic_exchange_n(&g_logged_mask, 1, RELAXED))
        return;
    notify_msg("warn", "the program blocks the pause/resume signals; the interceptor leaves them unblocked");
}

static int parse_signal(const char *v, int dflt) {
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

static void install_signals(void) {
    if (!g_pause_sig) {
        if (g_hdr)
            __atomic_fetch_or(&g_hdr->flags, NEST_HF_PAUSE_OFF, RELAXED);
        return;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = pause_handler;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, g_pause_sig);
    sigaddset(&sa.sa_mask, g_resume_sig);
    int sigs[2] = {g_pause_sig, g_resume_sig};
    for (int i = 0; i < 2; i++) {
        if (i == 1 && g_resume_sig == g_pause_sig)
            break;
        struct sigaction old;
        if (real_sigaction(sigs[i], &sa, &old) == 0)
            g_app_act[i] = old;   /* what the program would see as the current disposition */
    }
    if (g_resume_sig == g_pause_sig)
        g_app_act[1] = g_app_act[0];
    /* The program may have inherited them blocked: unblock in this thread (inherited by threads). */
    sigset_t un;
    sigemptyset(&un);
    sigaddset(&un, g_pause_sig);
    sigaddset(&un, g_resume_sig);
    real_pthread_sigmask(SIG_UNBLOCK, &un, NULL);
    g_sig_on = 1;
}

/* ------------------------------------------------------------------------------------------ */
/* Shared-memory file                                                                           */

static size_t map_size(uint32_t nslots) {
    return (size_t)NEST_HEADER_SIZE + (size_t)nslots * NEST_SLOT_SIZE;
}

static void shm_path(char *out, size_t cap, pid_t pid, int tmp) {
    struct buf b = {out, 0, cap};
    b_str(&b, g_dir);
    b_str(&b, tmp ? "/." : "/");
    b_i64(&b, pid);
    b_str(&b, tmp ? ".tmp" : ".nest");
}

static void fill_cmdline(struct nest_header *h) {
    char c[NEST_CMDLINE_MAX];
    int n = read_file("/proc/self/cmdline", c, sizeof c);
    if (n < 0)
        n = 0;
    memcpy(h->cmdline, c, (size_t)n);
    if ((size_t)n < NEST_CMDLINE_MAX)
        memset(h->cmdline + n, 0, NEST_CMDLINE_MAX - (size_t)n);
    h->cmdline_len = (uint32_t)n;
}

/* Give the file its space now (a write to a page tmpfs cannot supply would be SIGBUS): all of it,
 * else the header alone (*nslots = 0). Returns 0, or the error of the full allocation with
 * *nslots = 0, or -1 when not even the header fits (errno set). */
static int shm_allocate(int fd, uint32_t *nslots) {
    int err = posix_fallocate(fd, 0, (off_t)map_size(*nslots));
    if (err == 0)
        return 0;
    *nslots = 0;
    if (ftruncate(fd, 0) != 0)
        return -1;
    int herr = posix_fallocate(fd, 0, (off_t)NEST_HEADER_SIZE);
    if (herr != 0) {
        errno = herr;
        return -1;
    }
    return err;
}

/* Make a fresh file for this process with g_want_slots slots (fewer: see shm_allocate; *nslots says
 * how many); copy the command line from `from` when given (fork). Returns the mapping or NULL.
 * Async-signal-safe (used in the fork child). */
static struct nest_header *shm_create(pid_t pid, pid_t ppid, uint64_t starttime,
                                      const struct nest_header *from, uint32_t *nslots) {
    char tmp[PATH_MAX], path[PATH_MAX];
    shm_path(tmp, sizeof tmp, pid, 1);
    shm_path(path, sizeof path, pid, 0);
    int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0 && errno == EEXIST) {   /* left by a crash of an earlier process with this pid */
        unlink(tmp);
        fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
    }
    if (fd < 0)
        return NULL;
    uint32_t n = g_want_slots;
    int space = -1;
    struct nest_header *h = NULL;
    if (fchmod(fd, 0600) == 0 && (space = shm_allocate(fd, &n)) >= 0) {
        void *m = mmap(NULL, map_size(n), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED)
            h = (struct nest_header *)m;
    }
    int saved = errno;
    if (h) {
        memcpy(h->magic, NEST_MAGIC, 8);
        h->header_size = NEST_HEADER_SIZE;
        h->slot_size = NEST_SLOT_SIZE;
        h->nslots = n;
        h->want_slots = g_want_slots;
        if (space > 0) {
            h->flags = NEST_HF_NO_SPACE;
            h->space_errno = space;
        }
        h->pid = pid;
        h->ppid = ppid;
        h->starttime = starttime;
        h->created_ns = now_ns();
        h->pause_sig = g_pause_sig;
        h->resume_sig = g_resume_sig;
        if (from) {
            memcpy(h->cmdline, from->cmdline, NEST_CMDLINE_MAX);
            h->cmdline_len = from->cmdline_len;
        } else {
            fill_cmdline(h);
        }
        __atomic_store_n(&h->version, NEST_VERSION, __ATOMIC_RELEASE);
        if (rename(tmp, path) != 0) {
            saved = errno;
            munmap(h, map_size(n));
            h = NULL;
        }
    }
    if (!h)
        unlink(tmp);
    real_close(fd);
    if (h)
        *nslots = n;
    errno = saved;
    return h;
}

/* After exec: the file of this pid, if it is ours (same process), else NULL. A file with the
 * header only (no space when it was made) is taken as it is (*nslots = 0). A file made by an
 * earlier build may be sparse: its space is allocated now, or it is not taken. */
static struct nest_header *shm_reattach(pid_t pid, uint64_t starttime, uint32_t *nslots) {
    char path[PATH_MAX];
    shm_path(path, sizeof path, pid, 0);
    int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    struct stat st;
    struct nest_header *h = NULL;
    uint32_t n = 0;
    int ok = 0;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
        if ((size_t)st.st_size == map_size(g_want_slots))
            n = g_want_slots, ok = 1;
        else if ((size_t)st.st_size == map_size(0))
            ok = 1;
    }
    size_t size = map_size(n);
    if (ok && posix_fallocate(fd, 0, (off_t)size) == 0) {
        void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (m != MAP_FAILED) {
            h = (struct nest_header *)m;
            if (memcmp(h->magic, NEST_MAGIC, 8) || h->version != NEST_VERSION ||
                h->header_size != NEST_HEADER_SIZE || h->slot_size != NEST_SLOT_SIZE ||
                h->nslots != n || h->pid != pid || h->starttime != starttime ||
                starttime == 0) {
                munmap(m, size);
                h = NULL;
            }
        }
    }
    real_close(fd);
    if (h)
        *nslots = n;
    return h;
}

/* After exec in the same process: keep the sockets still open, close the others. */
static void revalidate_after_exec(void) {
    struct nest_header *h = g_hdr;
    /* Threads of the old image may have died inside a seqlock: we are alone now, release them. */
    uint32_t mx = __atomic_load_n(&h->max_fd, RELAXED);
    for (uint32_t fd = 0; fd < mx && fd < g_nslots; fd++) {
        struct nest_slot *s = &g_slots[fd];
        if (s->seq & 1)
            seq_heal(&s->seq);
        for (int d = 0; d < 2; d++)
            if (s->dir[d].seq & 1)
                seq_heal(&s->dir[d].seq);
    }
    if (h->seq & 1)
        seq_heal(&h->seq);
    uint64_t hh = seq_force(&h->seq);
    fill_cmdline(h);
    h->exec_count++;
    seq_release(&h->seq, hh);
    __atomic_and_fetch(&h->flags, ~(uint32_t)NEST_HF_EXITED, RELAXED);
    h->paused = 0;
    h->paused_threads = 0;
    h->pause_sig = g_pause_sig;
    h->resume_sig = g_resume_sig;
    uint32_t m = __atomic_load_n(&h->max_fd, RELAXED);
    uint64_t t = now_ns();
    for (uint32_t fd = 0; fd < m && fd < g_nslots; fd++) {
        struct nest_slot *s = &g_slots[fd];
        if (s->state != NEST_OPEN)
            continue;
        struct stat st;
        if (fstat((int)fd, &st) == 0 && S_ISSOCK(st.st_mode) && (uint64_t)st.st_ino == s->inode) {
            /* calls in progress died with the old image's threads: end them now */
            for (int d = 0; d < 2; d++) {
                uint64_t hd = seq_force(&s->dir[d].seq);
                struct nest_dir *x = &s->dir[d];
                x->wait_ns += x->pend_n * t - x->pend_sum;
                x->pend_n = 0;
                x->pend_sum = 0;
                seq_release(&x->seq, hd);
            }
            g_kind[fd] = K_SOCK;
        } else {
            retire_slot((int)fd);
        }
    }
}

static void warn_inert(const char *what) {
    char t[PATH_MAX + 128];
    struct buf b = {t, 0, sizeof t};
    b_str(&b, "not counting: ");
    b_str(&b, what);
    b_str(&b, " (NESTLAB_SHM_DIR=");
    b_str(&b, g_dir);
    b_str(&b, ")");
    log_stderr(t);
    notify_msg("warn", t);
}

static void warn_no_space(const struct nest_header *h) {
    char t[256];
    struct buf b = {t, 0, sizeof t};
    b_str(&b, "no space for ");
    b_u64(&b, h->want_slots);
    b_str(&b, " slots (");
    b_str(&b, strerror(h->space_errno));
    b_str(&b, "): the file has its header only; pause/resume work, sockets are not counted");
    warn_inert(t);
}

static void defer_forget(void);

static void atfork_child(void) {
    t_tid = 0;   /* this thread has another id in the child */
    if (!g_on)
        return;
    sigset_t all, old;
    sigfillset(&all);
    real_pthread_sigmask(SIG_BLOCK, &all, &old);
    struct nest_header *oh = g_hdr;
    struct nest_slot *os = g_slots;
    size_t osz = g_map_size;
    uint32_t on = g_nslots;
    g_on = 0;
    defer_forget();   /* they point into the parent's file */
    g_stuck_seq = NULL;
    pid_t ppid = g_pid;
    g_pid = (pid_t)syscall(SYS_getpid);
    uint64_t st = proc_starttime(NULL);
    uint32_t nn = 0;
    struct nest_header *h = shm_create(g_pid, ppid, st, oh, &nn);
    if (h) {
        struct nest_slot *ns = (struct nest_slot *)((char *)h + NEST_HEADER_SIZE);
        uint32_t m = oh->max_fd < on ? oh->max_fd : on;
        if (m > nn)
            m = nn;
        uint32_t had = 0;
        for (uint32_t fd = 0; fd < m; fd++) {
            const struct nest_slot *s = &os[fd];
            if (s->state != NEST_OPEN)
                continue;
            struct nest_slot *d = &ns[fd];
            d->gen = 1;
            d->inode = s->inode;
            d->fd = s->fd;
            d->flags = s->flags | NEST_SF_INHERITED;
            d->family = s->family;
            d->type = s->type;
            d->lport = s->lport;
            d->rport = s->rport;
            memcpy(d->laddr, s->laddr, 16);
            memcpy(d->raddr, s->raddr, 16);
            d->open_ns = now_ns();
            d->state = NEST_OPEN;
            if ((d->flags & NEST_SF_GRAPH) && (d->flags & NEST_SF_PEER) && !(d->flags & NEST_SF_LISTEN))
                had = NEST_HF_HAD_GRAPH;
        }
        h->max_fd = m;
        h->flags |= had | (oh->flags & NEST_HF_PAUSE_OFF);
        h->paused = (uint32_t)__atomic_load_n(&g_paused, RELAXED);
        g_hdr = h;
        g_slots = ns;
        g_nslots = nn;
        g_map_size = map_size(nn);
        g_on = 1;
    } else {
        g_hdr = NULL;
        g_slots = NULL;
        g_nslots = 0;
    }
    munmap(oh, osz);
    real_pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (g_on)
        notify_proc("fork");
    if (g_on && (h->flags & NEST_HF_NO_SPACE))
        warn_no_space(h);
}


__attribute__((constructor)) static void nest_init(void) {
    int saved = errno;
    resolve_all();
    const char *dir = getenv("NESTLAB_SHM_DIR");
    if (!dir || !*dir || strlen(dir) >= sizeof g_dir)
        goto out;
    strcpy(g_dir, dir);
    g_pid = getpid();

    const char *ms = getenv("NESTLAB_MAX_FDS");
    long n = ms && *ms ? strtol(ms, NULL, 10) : NEST_DEFAULT_SLOTS;
    g_want_slots = (uint32_t)(n < 64 ? 64 : n > 65536 ? 65536 : n);
    const char *lw = getenv("NESTLAB_LOCK_WAIT_MS");
    long w = lw && *lw ? strtol(lw, NULL, 10) : 1000;
    g_lock_wait_ns = (uint64_t)(w < 1 ? 1 : w > 60000 ? 60000 : w) * 1000000ull;

    g_pause_sig = parse_signal(getenv("NESTLAB_PAUSE_SIGNAL"), SIGUSR1);
    g_resume_sig = parse_signal(getenv("NESTLAB_RESUME_SIGNAL"), SIGUSR2);
    if (g_pause_sig < 0 || g_resume_sig < 0) {
        warn_inert("bad NESTLAB_PAUSE_SIGNAL/NESTLAB_RESUME_SIGNAL");
        goto out;
    }
    if (!g_pause_sig || !g_resume_sig)
        g_pause_sig = g_resume_sig = 0;

    const char *sock = getenv("NESTLAB_COLLECTOR_SOCK");
    if (sock && *sock && strlen(sock) < sizeof g_notify_addr.sun_path) {
        g_notify_addr.sun_family = AF_UNIX;
        size_t l = strlen(sock);
        memcpy(g_notify_addr.sun_path, sock, l);
        if (sock[0] == '@')
            g_notify_addr.sun_path[0] = 0;   /* abstract namespace */
        g_notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + l + (sock[0] == '@' ? 0 : 1));
    }

    size_t priv = (size_t)g_want_slots * (4 + 4 + 4);
    void *p = mmap(NULL, priv, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        warn_inert("no memory");
        goto out;
    }
    g_ep_owner = (int32_t *)p;
    g_ep_events = (uint32_t *)((char *)p + (size_t)g_want_slots * 4);
    g_kind = (uint32_t *)((char *)p + (size_t)g_want_slots * 8);

    pid_t ppid = getppid();
    uint64_t st = proc_starttime(NULL);
    int reattached = 0;
    uint32_t nn = 0;
    struct nest_header *h = shm_reattach(g_pid, st, &nn);
    if (h) {
        reattached = 1;
    } else {
        h = shm_create(g_pid, ppid, st, NULL, &nn);
    }
    if (!h) {
        warn_inert(strerror(errno));
        munmap(p, priv);
        g_kind = NULL;
        goto out;
    }
    g_hdr = h;
    g_nslots = nn;
    g_map_size = map_size(nn);
    g_slots = (struct nest_slot *)((char *)h + NEST_HEADER_SIZE);
    if (reattached)
        revalidate_after_exec();
    install_signals();
    pthread_atfork(NULL, NULL, atfork_child);
    __atomic_store_n(&g_on, 1, __ATOMIC_SEQ_CST);
    notify_proc(reattached ? "exec" : "start");
    if (h->flags & NEST_HF_NO_SPACE)
        warn_no_space(h);
out:
    errno = saved;
}

__attribute__((destructor)) static void nest_fini(void) {
    if (!g_on || !g_hdr || !same_process())
        return;
    __atomic_store_n(&g_hdr->exited_ns, now_ns(), RELAXED);
    __atomic_fetch_or(&g_hdr->flags, NEST_HF_EXITED, __ATOMIC_SEQ_CST);
    if (g_notify_len)
        notify_msg("exit", "exit");
}

/* ------------------------------------------------------------------------------------------ */
/* Call accounting                                                                              */

struct nest_call {
    struct nest_slot *s;
    struct nest_dir *d;
    uint64_t gen, t0;
    int ok;
};

static inline int is_error(int e) {
    return !(e == EAGAIN || e == EWOULDBLOCK || e == EINTR || e == EINPROGRESS || e == EALREADY ||
             e == EISCONN);
}

/* The end of a call or wait: it is no longer in progress; a call is a message or an error. */
static inline void end_apply(struct nest_slot *s, struct nest_dir *d, uint64_t gen, uint64_t t0,
                             uint64_t t1, long r, int e, int is_call) {
    if (LIKELY(s->gen == gen && s->state == NEST_OPEN)) {
        d->pend_n--;
        d->pend_sum -= t0;
        d->wait_ns += t1 - t0;
        if (is_call) {
            if (r >= 0) {
                d->msgs++;
                d->bytes += (uint64_t)r;
            } else if (is_error(e)) {
                d->errors++;
            }
            d->last_ns = t1;
        }
    }
}

/* Ends that could not take their seqlock (this thread's own, interrupted by the signal handler we
 * run in, or stuck) wait here, in private memory, and are applied as soon as the lock is free: by
 * the next call of any thread (call_end, waits_end) or when the socket closes (retire_slot). So no
 * socket is left showing a call in progress that ended. Only when all NEST_NDEFER places are taken
 * is an end given up (`unended`; the socket shows the call in progress until it closes). */
#define NEST_NDEFER 64
enum { DF_FREE = 0, DF_FILLING, DF_READY, DF_TAKEN };

struct nest_defer {
    uint32_t st;
    int32_t e;
    int is_call;
    struct nest_slot *s;
    struct nest_dir *d;
    uint64_t gen, t0, t1;
    long r;
};

static struct nest_defer g_defer[NEST_NDEFER];
static uint32_t g_defer_n;               /* entries DF_READY or DF_TAKEN */

static void defer_end(struct nest_slot *s, struct nest_dir *d, uint64_t gen, uint64_t t0, uint64_t t1,
                      long r, int e, int is_call) {
    for (int i = 0; i < NEST_NDEFER; i++) {
        struct nest_defer *x = &g_defer[i];
        uint32_t f = DF_FREE;
        if (!__atomic_compare_exchange_n(&x->st, &f, DF_FILLING, 0, __ATOMIC_ACQUIRE, RELAXED))
            continue;
        x->s = s;
        x->d = d;
        x->gen = gen;
        x->t0 = t0;
        x->t1 = t1;
        x->r = r;
        x->e = e;
        x->is_call = is_call;
        __atomic_fetch_add(&g_defer_n, 1, RELAXED);
        __atomic_store_n(&x->st, DF_READY, __ATOMIC_RELEASE);
        HCOUNT(deferred);
        return;
    }
    HCOUNT(unended);
}

static void defer_flush(void) {
    uint32_t tid = my_tid();
    for (int i = 0; i < NEST_NDEFER; i++) {
        struct nest_defer *x = &g_defer[i];
        uint32_t r = DF_READY;
        if (!__atomic_compare_exchange_n(&x->st, &r, DF_TAKEN, 0, __ATOMIC_ACQUIRE, RELAXED))
            continue;
        uint64_t q = seq_trylock(&x->d->seq, tid);
        if (!q) {
            __atomic_store_n(&x->st, DF_READY, __ATOMIC_RELEASE);
            continue;
        }
        end_apply(x->s, x->d, x->gen, x->t0, x->t1, x->r, x->e, x->is_call);
        seq_unlock(&x->d->seq, q);
        __atomic_fetch_sub(&g_defer_n, 1, RELAXED);
        __atomic_store_n(&x->st, DF_FREE, __ATOMIC_RELEASE);
    }
}

static inline void defer_poll(void) {
    if (UNLIKELY(__atomic_load_n(&g_defer_n, RELAXED)))
        defer_flush();
}

/* retire_slot, holding the slot's locks: apply its waiting ends before it is closed. */
static void defer_apply_slot(struct nest_slot *s) {
    if (!__atomic_load_n(&g_defer_n, RELAXED))
        return;
    for (int i = 0; i < NEST_NDEFER; i++) {
        struct nest_defer *x = &g_defer[i];
        if (__atomic_load_n(&x->st, __ATOMIC_ACQUIRE) != DF_READY || x->s != s)
            continue;
        uint32_t r = DF_READY;
        if (!__atomic_compare_exchange_n(&x->st, &r, DF_TAKEN, 0, __ATOMIC_ACQUIRE, RELAXED))
            continue;
        end_apply(x->s, x->d, x->gen, x->t0, x->t1, x->r, x->e, x->is_call);
        __atomic_fetch_sub(&g_defer_n, 1, RELAXED);
        __atomic_store_n(&x->st, DF_FREE, __ATOMIC_RELEASE);
    }
}

static void defer_forget(void) {
    memset(g_defer, 0, sizeof g_defer);
    g_defer_n = 0;
}

static inline void call_begin(struct nest_call *c, struct nest_slot *s, int dir) {
    pause_gate();
    c->s = s;
    c->d = &s->dir[dir];
    c->ok = 0;
    c->t0 = now_ns();
    uint64_t q = seq_lock(&c->d->seq);
    if (LIKELY(q)) {
        if (LIKELY(s->state == NEST_OPEN)) {
            c->gen = s->gen;
            c->d->pend_n++;
            c->d->pend_sum += c->t0;
            c->ok = 1;
        }
        seq_unlock(&c->d->seq, q);
    } else {
        lost_call();
    }
}

static inline void call_finish(struct nest_call *c, uint64_t t1, long r, int e, int is_call) {
    struct nest_dir *d = c->d;
    uint64_t q = seq_lock(&d->seq);
    if (LIKELY(q)) {
        end_apply(c->s, d, c->gen, c->t0, t1, r, e, is_call);
        seq_unlock(&d->seq, q);
    } else {
        defer_end(c->s, d, c->gen, c->t0, t1, r, e, is_call);
    }
    c->ok = 0;
}

/* r >= 0: completed (a message of r bytes); r < 0: failed with errno e. */
static inline void call_end(struct nest_call *c, long r, int e) {
    if (LIKELY(c->ok))
        call_finish(c, now_ns(), r, e, 1);
    defer_poll();
    pause_gate();
}

/* Runs when a thread is cancelled inside the real call (forced unwind, -fexceptions). */
static void call_cleanup(struct nest_call *c) {
    if (UNLIKELY(c->ok))
        call_finish(c, now_ns(), 0, 0, 0);
}

/* Our pause/resume handler ran on this thread since *k (and the call failed with EINTR): restart
 * the call. The program would not have seen the signal without us. */
static int ours_since(uint32_t *k) {
    uint32_t now = t_sigs;
    if (now == *k || errno != EINTR)
        return 0;
    *k = now;
    HCOUNT(eintr_retried);
    return 1;
}

#define RESTART(r, expr) \
    do { \
        uint32_t k_ = t_sigs; \
        while (((r) = (expr)) < 0 && UNLIKELY(t_sigs != k_) && ours_since(&k_)) \
            ; \
    } while (0)

static int poll_r(struct pollfd *fds, nfds_t n, int timeout);

/* Our signal interrupted a call on fd that SA_RESTART did not restart: a socket with a receive or
 * send timeout (dir: which one). Wait for the socket to be ready for what is left of the timeout,
 * counted from *t0 (0: unknown, from now): 1 = call again, 0 = no (timed out: EAGAIN, as the call
 * would have; or the program's own signal came: EINTR). Not a socket, or no timeout: call again. */
static int sock_wait_left(int fd, int dir, uint64_t *t0) {
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

#define SOCK_RESTART(r, expr, fd, dir, t0) \
    do { \
        uint32_t k_ = t_sigs; \
        uint64_t t0_ = (t0); \
        while (((r) = (expr)) < 0 && UNLIKELY(t_sigs != k_) && ours_since(&k_) && sock_wait_left(fd, dir, &t0_)) \
            ; \
    } while (0)

#define CALL(dir, fd, rtype, expr) \
    do { \
        rtype r_; \
        struct nest_slot *s_ = tracked(fd); \
        if (!s_) { \
            SOCK_RESTART(r_, expr, fd, dir, 0); \
            return r_; \
        } \
        struct nest_call c_ __attribute__((cleanup(call_cleanup))); \
        call_begin(&c_, s_, dir); \
        SOCK_RESTART(r_, expr, fd, dir, c_.t0); \
        int e_ = errno; \
        call_end(&c_, (long)r_, e_); \
        errno = e_; \
        return r_; \
    } while (0)

/* Poll-type waits: the elapsed time goes to every socket in the set, by direction of interest. */
struct nest_wait_ent {
    struct nest_slot *s;
    uint64_t gen;
    uint8_t dir, ok;
};

struct nest_waits {
    struct nest_wait_ent *e;
    size_t n, cap;
    uint64_t t0;
    struct nest_wait_ent local[32];
    int heap;
};

static void waits_init(struct nest_waits *w) {
    w->e = w->local;
    w->n = 0;
    w->cap = sizeof w->local / sizeof w->local[0];
    w->heap = 0;
}

static void waits_add(struct nest_waits *w, int fd, int dir) {
    struct nest_slot *s = tracked(fd);
    if (!s)
        return;
    if (w->n == w->cap) {
        size_t cap = w->cap * 4;
        struct nest_wait_ent *e = malloc(cap * sizeof *e);
        if (!e)
            return;
        memcpy(e, w->e, w->n * sizeof *e);
        if (w->heap)
            free(w->e);
        w->e = e;
        w->cap = cap;
        w->heap = 1;
    }
    struct nest_wait_ent *x = &w->e[w->n++];
    x->s = s;
    x->dir = (uint8_t)dir;
    x->ok = 0;
}

static void waits_begin(struct nest_waits *w) {
    w->t0 = now_ns();
    for (size_t i = 0; i < w->n; i++) {
        struct nest_wait_ent *x = &w->e[i];
        struct nest_dir *d = &x->s->dir[x->dir];
        uint64_t q = seq_lock(&d->seq);
        if (!q) {
            lost_call();
            continue;
        }
        if (x->s->state == NEST_OPEN) {
            x->gen = x->s->gen;
            d->pend_n++;
            d->pend_sum += w->t0;
            x->ok = 1;
        }
        seq_unlock(&d->seq, q);
    }
}

static void waits_end(struct nest_waits *w) {
    uint64_t t1 = w->n ? now_ns() : 0;
    for (size_t i = 0; i < w->n; i++) {
        struct nest_wait_ent *x = &w->e[i];
        if (!x->ok)
            continue;
        struct nest_dir *d = &x->s->dir[x->dir];
        uint64_t q = seq_lock(&d->seq);
        if (q) {
            end_apply(x->s, d, x->gen, w->t0, t1, 0, 0, 0);
            seq_unlock(&d->seq, q);
        } else {
            defer_end(x->s, d, x->gen, w->t0, t1, 0, 0, 0);
        }
        x->ok = 0;
    }
    if (w->heap)
        free(w->e);
    w->heap = 0;
    w->n = 0;
    defer_poll();
}

static void waits_cleanup(struct nest_waits *w) {
    if (w->n)
        waits_end(w);
}

static void waits_from_pollfds(struct nest_waits *w, const struct pollfd *fds, nfds_t n) {
    for (nfds_t i = 0; i < n; i++) {
        if (fds[i].fd < 0)
            continue;
        if (fds[i].events & (POLLIN | POLLPRI | POLLRDHUP | POLLRDNORM | POLLRDBAND))
            waits_add(w, fds[i].fd, NEST_IN);
        if (fds[i].events & (POLLOUT | POLLWRNORM | POLLWRBAND))
            waits_add(w, fds[i].fd, NEST_OUT);
    }
}

static void waits_from_fdsets(struct nest_waits *w, int nfds, const fd_set *r, const fd_set *wr) {
    if (nfds > FD_SETSIZE)
        nfds = FD_SETSIZE;
    for (int fd = 0; fd < nfds; fd++) {
        if (r && FD_ISSET(fd, r))
            waits_add(w, fd, NEST_IN);
        if (wr && FD_ISSET(fd, wr))
            waits_add(w, fd, NEST_OUT);
    }
}

static void waits_from_epoll(struct nest_waits *w, int epfd) {
    if ((unsigned)epfd >= g_nslots)
        return;
    uint32_t m = __atomic_load_n(&g_hdr->max_fd, RELAXED);
    for (uint32_t fd = 0; fd < m && fd < g_nslots; fd++) {
        if (__atomic_load_n(&g_ep_owner[fd], RELAXED) != epfd + 1 || g_kind[fd] != K_SOCK)
            continue;
        uint32_t ev = __atomic_load_n(&g_ep_events[fd], RELAXED);
        if (ev & (EPOLLIN | EPOLLPRI | EPOLLRDHUP))
            waits_add(w, (int)fd, NEST_IN);
        if (ev & EPOLLOUT)
            waits_add(w, (int)fd, NEST_OUT);
    }
}

#define WAIT(fill, rtype, expr) \
    do { \
        if (!g_on) \
            return expr; \
        struct nest_waits w_ __attribute__((cleanup(waits_cleanup))); \
        waits_init(&w_); \
        fill; \
        if (!w_.n) \
            return expr; \
        waits_begin(&w_); \
        rtype r_ = expr; \
        int e_ = errno; \
        waits_end(&w_); \
        errno = e_; \
        return r_; \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* Receive-type calls                                                                           */

EXPORT ssize_t read(int fd, void *buf, size_t n) {
    ENSURE(read);
    if (!real_read)
        MISSING(ssize_t);
    CALL(NEST_IN, fd, ssize_t, real_read(fd, buf, n));
}

EXPORT ssize_t __read_chk(int fd, void *buf, size_t n, size_t buflen) {
    ENSURE(__read_chk);
    if (n > buflen && real___read_chk)
        return real___read_chk(fd, buf, n, buflen);   /* reports the overflow */
    return read(fd, buf, n);
}

EXPORT ssize_t readv(int fd, const struct iovec *iov, int cnt) {
    ENSURE(readv);
    if (!real_readv)
        MISSING(ssize_t);
    CALL(NEST_IN, fd, ssize_t, real_readv(fd, iov, cnt));
}

EXPORT ssize_t recv(int fd, void *buf, size_t n, int flags) {
    ENSURE(recv);
    if (!real_recv)
        MISSING(ssize_t);
    CALL(NEST_IN, fd, ssize_t, real_recv(fd, buf, n, flags));
}

EXPORT ssize_t __recv_chk(int fd, void *buf, size_t n, size_t buflen, int flags) {
    ENSURE(__recv_chk);
    if (n > buflen && real___recv_chk)
        return real___recv_chk(fd, buf, n, buflen, flags);
    return recv(fd, buf, n, flags);
}

EXPORT ssize_t recvfrom(int fd, void *buf, size_t n, int flags, __SOCKADDR_ARG addr, socklen_t *alen) {
    ENSURE(recvfrom);
    if (!real_recvfrom)
        MISSING(ssize_t);
    CALL(NEST_IN, fd, ssize_t, real_recvfrom(fd, buf, n, flags, SA_PTR(addr), alen));
}

EXPORT ssize_t __recvfrom_chk(int fd, void *buf, size_t n, size_t buflen, int flags,
                              struct sockaddr *addr, socklen_t *alen) {
    ENSURE(__recvfrom_chk);
    if (n > buflen && real___recvfrom_chk)
        return real___recvfrom_chk(fd, buf, n, buflen, flags, addr, alen);
    return recvfrom(fd, buf, n, flags, addr, alen);
}

static void scm_rights_fresh(const struct msghdr *m) {
    if (!g_on || !m || !m->msg_control || m->msg_controllen < sizeof(struct cmsghdr))
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

EXPORT ssize_t recvmsg(int fd, struct msghdr *m, int flags) {
    ENSURE(recvmsg);
    if (!real_recvmsg)
        MISSING(ssize_t);
    struct nest_slot *s = tracked(fd);
    ssize_t r;
    int e;
    if (!s) {
        SOCK_RESTART(r, real_recvmsg(fd, m, flags), fd, NEST_IN, 0);
        e = errno;
    } else {
        struct nest_call c __attribute__((cleanup(call_cleanup)));
        call_begin(&c, s, NEST_IN);
        SOCK_RESTART(r, real_recvmsg(fd, m, flags), fd, NEST_IN, c.t0);
        e = errno;
        call_end(&c, (long)r, e);
    }
    if (r >= 0)
        scm_rights_fresh(m);
    errno = e;
    return r;
}

static long mmsg_bytes(const struct mmsghdr *v, int r) {
    long b = 0;
    for (int i = 0; i < r; i++)
        b += v[i].msg_len;
    return r < 0 ? -1 : b;
}

EXPORT int recvmmsg(int fd, struct mmsghdr *v, unsigned int vlen, int flags, struct timespec *tmo) {
    ENSURE(recvmmsg);
    if (!real_recvmmsg)
        MISSING(int);
    struct nest_slot *s = tracked(fd);
    int r;
    if (!s) {
        SOCK_RESTART(r, real_recvmmsg(fd, v, vlen, flags, tmo), fd, NEST_IN, 0);
        return r;
    }
    struct nest_call c __attribute__((cleanup(call_cleanup)));
    call_begin(&c, s, NEST_IN);
    SOCK_RESTART(r, real_recvmmsg(fd, v, vlen, flags, tmo), fd, NEST_IN, c.t0);
    int e = errno;
    call_end(&c, mmsg_bytes(v, r), e);
    errno = e;
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Send-type calls                                                                              */

EXPORT ssize_t write(int fd, const void *buf, size_t n) {
    ENSURE(write);
    if (!real_write)
        MISSING(ssize_t);
    CALL(NEST_OUT, fd, ssize_t, real_write(fd, buf, n));
}

EXPORT ssize_t writev(int fd, const struct iovec *iov, int cnt) {
    ENSURE(writev);
    if (!real_writev)
        MISSING(ssize_t);
    CALL(NEST_OUT, fd, ssize_t, real_writev(fd, iov, cnt));
}

EXPORT ssize_t send(int fd, const void *buf, size_t n, int flags) {
    ENSURE(send);
    if (!real_send)
        MISSING(ssize_t);
    CALL(NEST_OUT, fd, ssize_t, real_send(fd, buf, n, flags));
}

EXPORT ssize_t sendto(int fd, const void *buf, size_t n, int flags, __CONST_SOCKADDR_ARG addr,
                      socklen_t alen) {
    ENSURE(sendto);
    if (!real_sendto)
        MISSING(ssize_t);
    CALL(NEST_OUT, fd, ssize_t, real_sendto(fd, buf, n, flags, SA_PTR(addr), alen));
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *m, int flags) {
    ENSURE(sendmsg);
    if (!real_sendmsg)
        MISSING(ssize_t);
    CALL(NEST_OUT, fd, ssize_t, real_sendmsg(fd, m, flags));
}

EXPORT int sendmmsg(int fd, struct mmsghdr *v, unsigned int vlen, int flags) {
    ENSURE(sendmmsg);
    if (!real_sendmmsg)
        MISSING(int);
    struct nest_slot *s = tracked(fd);
    int r;
    if (!s) {
        SOCK_RESTART(r, real_sendmmsg(fd, v, vlen, flags), fd, NEST_OUT, 0);
        return r;
    }
    struct nest_call c __attribute__((cleanup(call_cleanup)));
    call_begin(&c, s, NEST_OUT);
    SOCK_RESTART(r, real_sendmmsg(fd, v, vlen, flags), fd, NEST_OUT, c.t0);
    int e = errno;
    call_end(&c, mmsg_bytes(v, r), e);
    errno = e;
    return r;
}

EXPORT ssize_t sendfile(int out, int in, off_t *off, size_t n) {
    ENSURE(sendfile);
    if (!real_sendfile)
        MISSING(ssize_t);
    CALL(NEST_OUT, out, ssize_t, real_sendfile(out, in, off, n));
}

EXPORT ssize_t sendfile64(int out, int in, off64_t *off, size_t n) {
    ENSURE(sendfile64);
    if (!real_sendfile64)
        MISSING(ssize_t);
    CALL(NEST_OUT, out, ssize_t, real_sendfile64(out, in, off, n));
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
    ENSURE(connect);
    if (!real_connect)
        MISSING(int);
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
            __atomic_fetch_or(&g_hdr->flags, NEST_HF_HAD_GRAPH, RELAXED);
    }
    call_end(&c, started ? 0 : -1, e);
    if (started)
        notify_sock("sock", fd);
    errno = e;
    return r;
}

/* ------------------------------------------------------------------------------------------ */
/* Waits                                                                                        */

/* The waits below are not restarted by SA_RESTART: when our signal interrupts one it goes on
 * here, for what is left of its timeout (measured on CLOCK_MONOTONIC from the first start). */

static inline uint64_t retry_clock(int timed) {   /* start time, when a retry may need it */
    return timed && g_sig_on ? now_ns() : 0;
}

static int ms_left(int timeout, uint64_t t0) {
    if (timeout < 0)
        return timeout;
    uint64_t total = (uint64_t)timeout * 1000000ull, el = now_ns() - t0;
    return el >= total ? 0 : (int)((total - el + 999999) / 1000000);
}

static void ts_left(const struct timespec *full, uint64_t t0, struct timespec *out) {
    uint64_t total = (uint64_t)full->tv_sec * 1000000000ull + (uint64_t)full->tv_nsec;
    uint64_t el = now_ns() - t0, left = el >= total ? 0 : total - el;
    out->tv_sec = (time_t)(left / 1000000000ull);
    out->tv_nsec = (long)(left % 1000000000ull);
}

static int poll_r(struct pollfd *fds, nfds_t n, int timeout) {
    ENSURE(poll);
    uint32_t k = t_sigs;
    uint64_t t0 = retry_clock(timeout > 0);
    int r, tmo = timeout;
    while ((r = real_poll(fds, n, tmo)) < 0 && UNLIKELY(t_sigs != k) && ours_since(&k))
        tmo = ms_left(timeout, t0);
    return r;
}

static int ppoll_r(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask) {
    uint32_t k = t_sigs;
    struct timespec full, left;
    if (tmo)
        full = *tmo;
    uint64_t t0 = retry_clock(tmo != NULL);
    int r;
    const struct timespec *cur = tmo;
    while ((r = real_ppoll(fds, n, cur, mask)) < 0 && UNLIKELY(t_sigs != k) && ours_since(&k)) {
        if (tmo) {
            ts_left(&full, t0, &left);
            cur = &left;
        }
    }
    return r;
}

/* select: Linux leaves the time not slept in *tmo, and the sets as they were after EINTR. */
static int select_r(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, struct timeval *tmo) {
    uint32_t k = t_sigs;
    struct timespec full, left;
    if (tmo) {
        full.tv_sec = tmo->tv_sec;
        full.tv_nsec = tmo->tv_usec * 1000;
    }
    uint64_t t0 = retry_clock(tmo != NULL);
    int r;
    while ((r = real_select(nfds, rd, wr, ex, tmo)) < 0 && UNLIKELY(t_sigs != k) && ours_since(&k)) {
        if (tmo) {
            ts_left(&full, t0, &left);
            tmo->tv_sec = left.tv_sec;
            tmo->tv_usec = (left.tv_nsec + 999) / 1000;
        }
    }
    return r;
}

static int pselect_r(int nfds, fd_set *rd, fd_set *wr, fd_set *ex, const struct timespec *tmo,
                     const sigset_t *mask) {
    uint32_t k = t_sigs;
    struct timespec full, left;
    if (tmo)
        full = *tmo;
    uint64_t t0 = retry_clock(tmo != NULL);
    int r;
    const struct timespec *cur = tmo;
    while ((r = real_pselect(nfds, rd, wr, ex, cur, mask)) < 0 && UNLIKELY(t_sigs != k) && ours_since(&k)) {
        if (tmo) {
            ts_left(&full, t0, &left);
            cur = &left;
        }
    }
    return r;
}

static int epoll_wait_r(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask,
                        int pwait) {
    uint32_t k = t_sigs;
    uint64_t t0 = retry_clock(timeout > 0);
    int r, tmo = timeout;
    while ((r = pwait ? real_epoll_pwait(epfd, ev, max, tmo, mask) : real_epoll_wait(epfd, ev, max, tmo)) < 0 &&
           UNLIKELY(t_sigs != k) && ours_since(&k))
        tmo = ms_left(timeout, t0);
    return r;
}

static int epoll_pwait2_r(int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
                          const sigset_t *mask) {
    uint32_t k = t_sigs;
    struct timespec full, left;
    if (tmo)
        full = *tmo;
    uint64_t t0 = retry_clock(tmo != NULL);
    int r;
    const struct timespec *cur = tmo;
    while ((r = real_epoll_pwait2(epfd, ev, max, cur, mask)) < 0 && UNLIKELY(t_sigs != k) && ours_since(&k)) {
        if (tmo) {
            ts_left(&full, t0, &left);
            cur = &left;
        }
    }
    return r;
}

EXPORT int poll(struct pollfd *fds, nfds_t n, int timeout) {
    ENSURE(poll);
    if (!real_poll)
        MISSING(int);
    WAIT(waits_from_pollfds(&w_, fds, n), int, poll_r(fds, n, timeout));
}

EXPORT int __poll_chk(struct pollfd *fds, nfds_t n, int timeout, size_t fdslen) {
    ENSURE(__poll_chk);
    if (fdslen / sizeof *fds < n && real___poll_chk)
        return real___poll_chk(fds, n, timeout, fdslen);
    return poll(fds, n, timeout);
}

EXPORT int ppoll(struct pollfd *fds, nfds_t n, const struct timespec *tmo, const sigset_t *mask) {
    ENSURE(ppoll);
    if (!real_ppoll)
        MISSING(int);
    WAIT(waits_from_pollfds(&w_, fds, n), int, ppoll_r(fds, n, tmo, mask));
}

EXPORT int __ppoll_chk(struct pollfd *fds, nfds_t n, const struct timespec *tmo,
                       const sigset_t *mask, size_t fdslen) {
    ENSURE(__ppoll_chk);
    if (fdslen / sizeof *fds < n && real___ppoll_chk)
        return real___ppoll_chk(fds, n, tmo, mask, fdslen);
    return ppoll(fds, n, tmo, mask);
}

EXPORT int select(int nfds, fd_set *r, fd_set *w, fd_set *x, struct timeval *tmo) {
    ENSURE(select);
    if (!real_select)
        MISSING(int);
    WAIT(waits_from_fdsets(&w_, nfds, r, w), int, select_r(nfds, r, w, x, tmo));
}

EXPORT int pselect(int nfds, fd_set *r, fd_set *w, fd_set *x, const struct timespec *tmo,
                   const sigset_t *mask) {
    ENSURE(pselect);
    if (!real_pselect)
        MISSING(int);
    WAIT(waits_from_fdsets(&w_, nfds, r, w), int, pselect_r(nfds, r, w, x, tmo, mask));
}

EXPORT int epoll_wait(int epfd, struct epoll_event *ev, int max, int timeout) {
    ENSURE(epoll_wait);
    if (!real_epoll_wait)
        MISSING(int);
    WAIT(waits_from_epoll(&w_, epfd), int, epoll_wait_r(epfd, ev, max, timeout, NULL, 0));
}

EXPORT int epoll_pwait(int epfd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask) {
    ENSURE(epoll_pwait);
    if (!real_epoll_pwait)
        MISSING(int);
    WAIT(waits_from_epoll(&w_, epfd), int, epoll_wait_r(epfd, ev, max, timeout, mask, 1));
}

EXPORT int epoll_pwait2(int epfd, struct epoll_event *ev, int max, const struct timespec *tmo,
                        const sigset_t *mask) {
    ENSURE(epoll_pwait2);
    if (!real_epoll_pwait2)
        MISSING(int);
    WAIT(waits_from_epoll(&w_, epfd), int, epoll_pwait2_r(epfd, ev, max, tmo, mask));
}

/* Sleeps and signal waits: not restarted by SA_RESTART either. */

EXPORT int nanosleep(const struct timespec *req, struct timespec *rem) {
    ENSURE(nanosleep);
    if (!real_nanosleep)
        MISSING(int);
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
    ENSURE(pause);
    if (!real_pause)
        MISSING(int);
    int r;
    RESTART(r, real_pause());
    return r;
}

EXPORT int sigsuspend(const sigset_t *mask) {
    ENSURE(sigsuspend);
    if (!real_sigsuspend)
        MISSING(int);
    int r;
    RESTART(r, real_sigsuspend(mask));
    return r;
}

EXPORT int sigtimedwait(const sigset_t *set, siginfo_t *info, const struct timespec *tmo) {
    ENSURE(sigtimedwait);
    if (!real_sigtimedwait)
        MISSING(int);
    uint32_t k = t_sigs;
    struct timespec full, left;
    if (tmo)
        full = *tmo;
    uint64_t t0 = retry_clock(tmo != NULL);
    int r;
    const struct timespec *cur = tmo;
    while ((r = real_sigtimedwait(set, info, cur)) < 0 && UNLIKELY(t_sigs != k) && ours_since(&k)) {
        if (tmo) {
            ts_left(&full, t0, &left);
            cur = &left;
        }
    }
    return r;
}

EXPORT int sigwaitinfo(const sigset_t *set, siginfo_t *info) {
    ENSURE(sigwaitinfo);
    if (!real_sigwaitinfo)
        MISSING(int);
    int r;
    RESTART(r, real_sigwaitinfo(set, info));
    return r;
}

EXPORT int sem_wait(sem_t *sem) {
    ENSURE(sem_wait);
    if (!real_sem_wait)
        MISSING(int);
    int r;
    RESTART(r, real_sem_wait(sem));
    return r;
}

EXPORT int sem_timedwait(sem_t *sem, const struct timespec *abstime) {   /* absolute: as it is */
    ENSURE(sem_timedwait);
    if (!real_sem_timedwait)
        MISSING(int);
    int r;
    RESTART(r, real_sem_timedwait(sem, abstime));
    return r;
}

EXPORT int epoll_ctl(int epfd, int op, int fd, struct epoll_event *ev) {
    ENSURE(epoll_ctl);
    if (!real_epoll_ctl)
        MISSING(int);
    int r = real_epoll_ctl(epfd, op, fd, ev);
    if (r != 0 || !g_on || (unsigned)fd >= g_nslots || (unsigned)epfd >= g_nslots)
        return r;
    int e = errno;
    uint32_t k = K_OTHER;
    __atomic_compare_exchange_n(&g_kind[epfd], &k, K_EPOLL, 0, RELAXED, RELAXED);
    k = K_UNKNOWN;
    __atomic_compare_exchange_n(&g_kind[epfd], &k, K_EPOLL, 0, RELAXED, RELAXED);
    if (op == EPOLL_CTL_ADD || op == EPOLL_CTL_MOD) {
        if (tracked(fd)) {
            __atomic_store_n(&g_ep_events[fd], ev ? ev->events : 0, RELAXED);
            __atomic_store_n(&g_ep_owner[fd], epfd + 1, RELAXED);
        }
    } else if (op == EPOLL_CTL_DEL) {
        int32_t o = epfd + 1;
        __atomic_compare_exchange_n(&g_ep_owner[fd], &o, 0, 0, RELAXED, RELAXED);
    }
    errno = e;
    return r;
}

static int new_epoll_fd(int r) {
    if (r >= 0 && g_on && (unsigned)r < g_nslots) {
        int e = errno;
        fresh_fd(r);
        __atomic_store_n(&g_kind[r], K_EPOLL, __ATOMIC_RELEASE);
        errno = e;
    }
    return r;
}

EXPORT int epoll_create(int size) {
    ENSURE(epoll_create);
    if (!real_epoll_create)
        MISSING(int);
    return new_epoll_fd(real_epoll_create(size));
}

EXPORT int epoll_create1(int flags) {
    ENSURE(epoll_create1);
    if (!real_epoll_create1)
        MISSING(int);
    return new_epoll_fd(real_epoll_create1(flags));
}

/* ------------------------------------------------------------------------------------------ */
/* Socket and descriptor lifecycle                                                              */

EXPORT int socket(int domain, int type, int proto) {
    ENSURE(socket);
    if (!real_socket)
        MISSING(int);
    int r = real_socket(domain, type, proto);
    if (r >= 0 && g_on) {
        int e = errno;
        adopt_socket(r, 0);
        errno = e;
    }
    return r;
}

EXPORT int socketpair(int domain, int type, int proto, int sv[2]) {
    ENSURE(socketpair);
    if (!real_socketpair)
        MISSING(int);
    int r = real_socketpair(domain, type, proto, sv);
    if (r == 0 && g_on) {
        int e = errno;
        adopt_socket(sv[0], 0);
        adopt_socket(sv[1], 0);
        errno = e;
    }
    return r;
}

EXPORT int accept(int fd, __SOCKADDR_ARG addr, socklen_t *alen) {
    ENSURE(accept);
    if (!real_accept)
        MISSING(int);
    int r;
    SOCK_RESTART(r, real_accept(fd, SA_PTR(addr), alen), fd, NEST_IN, 0);
    if (r >= 0 && g_on) {
        int e = errno;
        adopt_socket(r, NEST_SF_ACCEPTED);
        errno = e;
    }
    return r;
}

EXPORT int accept4(int fd, __SOCKADDR_ARG addr, socklen_t *alen, int flags) {
    ENSURE(accept4);
    if (!real_accept4)
        MISSING(int);
    int r;
    SOCK_RESTART(r, real_accept4(fd, SA_PTR(addr), alen, flags), fd, NEST_IN, 0);
    if (r >= 0 && g_on) {
        int e = errno;
        adopt_socket(r, NEST_SF_ACCEPTED);
        errno = e;
    }
    return r;
}

EXPORT int listen(int fd, int backlog) {
    ENSURE(listen);
    if (!real_listen)
        MISSING(int);
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
    ENSURE(close);
    if (!real_close)
        MISSING(int);
    if (!g_on || (unsigned)fd >= g_nslots)
        return real_close(fd);
    uint32_t k = __atomic_load_n(&g_kind[fd], RELAXED);
    if ((k == K_SOCK || k == K_EPOLL) && !same_process())
        return real_close(fd);   /* a vfork child: its fd table is not ours */
    forget_begin(fd);
    int r = real_close(fd);
    int e = errno;
    forget_end(fd);
    errno = e;
    return r;
}

EXPORT int fclose(FILE *fp) {
    ENSURE(fclose);
    if (!real_fclose)
        MISSING(int);
    int fd = g_on && fp ? fileno(fp) : -1;
    if (fd < 0 || (unsigned)fd >= g_nslots || g_kind[fd] != K_SOCK)
        return real_fclose(fp);
    forget_begin(fd);
    int r = real_fclose(fp);
    int e = errno;
    forget_end(fd);
    errno = e;
    return r;
}

EXPORT int dup(int old) {
    ENSURE(dup);
    if (!real_dup)
        MISSING(int);
    int r = real_dup(old);
    if (r >= 0 && g_on) {
        int e = errno;
        fresh_fd(r);
        errno = e;
    }
    return r;
}

static int dup_to(int old, int new, int flags, int is3) {
    if (!g_on || old == new || !same_process())
        return is3 ? real_dup3(old, new, flags) : real_dup2(old, new);
    if ((unsigned)new >= g_nslots) {
        int r = is3 ? real_dup3(old, new, flags) : real_dup2(old, new);
        if (r >= 0)
            untracked_fd(r);
        return r;
    }
    forget_begin(new);
    int r = is3 ? real_dup3(old, new, flags) : real_dup2(old, new);
    int e = errno;
    forget_end(new);
    errno = e;
    return r;
}

EXPORT int dup2(int old, int new) {
    ENSURE(dup2);
    if (!real_dup2)
        MISSING(int);
    return dup_to(old, new, 0, 0);
}

EXPORT int dup3(int old, int new, int flags) {
    ENSURE(dup3);
    if (!real_dup3)
        MISSING(int);
    return dup_to(old, new, flags, 1);
}

static void forget_range(unsigned lo, unsigned hi, int end) {
    if (!g_nslots)
        return;
    if (hi >= g_nslots)
        hi = g_nslots - 1;
    for (unsigned fd = lo; fd <= hi; fd++) {
        uint32_t k = __atomic_load_n(&g_kind[fd], RELAXED);
        if (end)
            forget_end((int)fd);
        else if (k != K_UNKNOWN)
            forget_begin((int)fd);
    }
}

EXPORT int close_range(unsigned int lo, unsigned int hi, int flags) {
    ENSURE(close_range);
    if (!real_close_range)
        MISSING(int);
    int mine = g_on && !(flags & CLOSE_RANGE_CLOEXEC) && same_process();
    if (mine)
        forget_range(lo, hi, 0);
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
    int mine = g_on && lo >= 0 && same_process();
    if (mine)
        forget_range((unsigned)lo, UINT_MAX, 0);
    real_closefrom(lo);
    if (mine)
        forget_range((unsigned)lo, UINT_MAX, 1);
}

/* ------------------------------------------------------------------------------------------ */
/* Signals: the program may not take the pause/resume signals away                             */

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
    ENSURE(sigaction);
    if (!real_sigaction)
        MISSING(int);
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
    if (!g_sig_on || !set || how == SIG_UNBLOCK)
        return set;
    if (!sigismember(set, g_pause_sig) && !sigismember(set, g_resume_sig))
        return set;
    *copy = *set;
    sigdelset(copy, g_pause_sig);
    sigdelset(copy, g_resume_sig);
    mask_kept();
    return copy;
}

EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *old) {
    ENSURE(sigprocmask);
    if (!real_sigprocmask)
        MISSING(int);
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
