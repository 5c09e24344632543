/*
 * internal.h - what the files of libnestintercept.so share. Private: the shared-memory format that
 * readers share is nestintercept.h. docs/interceptor.md describes the library as a whole.
 *
 * The files, by concern:
 *   init.c     the real functions, the environment, the constructor, the fork child, the destructor
 *   shm.c      the shared-memory file: made with its space, re-attached after exec
 *   seqlock.c  the seqlocks' slow paths: waiting for a held lock, taking it over, healing it
 *   slots.c    what each fd is, and the slots of sockets: made, looked up, closed
 *   call.h     the hot path every counted call shares: the wrappers' prologue and epilogue, inline
 *   call.c     its rare paths: call ends applied late, calls restarted after our signal
 *   io.c       wrappers: receive and send calls (counted)
 *   waits.c    wrappers: poll, select, epoll (the wait goes to every socket waited on)
 *   sleeps.c   wrappers: sleeps and signal waits (restarted after our signal)
 *   fds.c      wrappers: sockets and descriptors made, duplicated, closed
 *   pause.c    the application fault: the pause/resume handler, and the signal wrappers that keep it
 *   hints.c    notifications to the collector and lines on stderr (async-signal-safe formatting)
 *   defer.c    the delay fault at an event loop: replies queued and sent later by a thread of ours
 *   usermem.c  the program's memory read without trusting its pointers (process_vm_readv)
 *   trace.c    message tracing: the ring's place in the file, endpoints looked up once (the hot
 *              path, trace_put, is inline in call.h)
 *
 * Every file includes this header (or call.h) first. Everything declared here is hidden (the pragma
 * below, and -fvisibility=hidden for the definitions): the files reach each other's globals and
 * functions as directly as static ones, without the GOT or the PLT; only the wrappers (EXPORT) are
 * seen outside the library.
 */
#ifndef NEST_INTERNAL_H
#define NEST_INTERNAL_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
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

#define TLS __thread __attribute__((tls_model("initial-exec")))

/* Not in the public headers (they are the _FORTIFY_SOURCE entry points). */
ssize_t __read_chk(int, void *, size_t, size_t);
ssize_t __recv_chk(int, void *, size_t, size_t, int);
ssize_t __recvfrom_chk(int, void *, size_t, size_t, int, struct sockaddr *, socklen_t *);
int __poll_chk(struct pollfd *, nfds_t, int, size_t);
int __ppoll_chk(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *, size_t);
sighandler_t bsd_signal(int, sighandler_t);

#pragma GCC visibility push(hidden)

/* ------------------------------------------------------------------------------------------ */
/* The real functions                                                                         */

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

/* ------------------------------------------------------------------------------------------ */
/* State (each defined in the file named)                                                     */

/* What an fd is (private, per fd): the kind in bits 0..2; K_BUSY and K_CLOSING also name the thread
 * doing it (tid << 3), so that nobody waits for itself. K_BUSY: a slot is being made for it (others
 * wait, then count the call); K_CLOSING: it is being closed (a call on it is the program's race). */
enum { K_UNKNOWN = 0, K_SOCK = 1, K_OTHER = 2, K_BUSY = 3, K_EPOLL = 4, K_CLOSING = 5 };
#define KIND(v) ((v) & 7u)
#define KOWNER(v) ((v) >> 3)

extern int g_on;                       /* init.c: the library is active (a file of ours exists) */
extern pid_t g_pid;                    /* init.c */
extern uint32_t g_want_slots;          /* init.c: slots asked for (NESTLAB_MAX_FDS), the private tables' size */
extern char g_dir[PATH_MAX - 32];      /* init.c: NESTLAB_SHM_DIR */
extern uint64_t g_lock_wait_ns;        /* init.c: NESTLAB_LOCK_WAIT_MS */
extern uint32_t g_nslots;              /* shm.c: slots in our file (0: no space, nothing counted) */
extern struct nest_header *g_hdr;      /* shm.c */
extern struct nest_slot *g_slots;      /* shm.c */
extern uint32_t *g_kind;               /* slots.c: private, per fd: K_* | owner << 3 */
extern int32_t *g_ep_owner;            /* slots.c: per fd: the epoll fd + 1 it is registered in, 0 none */
extern uint32_t *g_ep_events;          /* slots.c: private, per fd: its epoll events */
extern socklen_t g_notify_len;         /* hints.c: NESTLAB_COLLECTOR_SOCK (0: none) */
extern struct sockaddr_un g_notify_addr;
extern int g_pause_sig, g_resume_sig;  /* pause.c: 0: none */
extern int g_sig_on;                   /* pause.c: our handlers are installed */
extern volatile int g_paused;          /* pause.c */
extern uint64_t *g_stuck_seq;          /* seqlock.c: a seqlock that outlasted the wait */
extern uint32_t g_defer_n;             /* call.c: call ends waiting to be applied */
extern uint32_t g_trace_want;          /* trace.c: ring events asked for (NESTLAB_TRACE_EVENTS; 0: off) */
extern struct nest_ring *g_ring;       /* trace.c: the message ring (NULL: not tracing) */
extern struct nest_event *g_events;    /* trace.c */
extern uint64_t g_trace_mask;          /* trace.c: trace_cap - 1 */
extern uint32_t g_pend_n;              /* defer.c: sockets with a deferred send or close waiting */
extern uint64_t g_defer_cap;           /* defer.c: NESTLAB_DEFER_MAX_BYTES */

extern TLS uint32_t t_tid;             /* seqlock.c: this thread's id (0: not known yet; reset after fork) */
extern TLS volatile uint32_t t_sigs;   /* pause.c: runs of our pause/resume handler on this thread */

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

/* Closes made by a vfork()/posix_spawn child share our memory but not our fd table. */
static inline int same_process(void) { return (pid_t)syscall(SYS_getpid) == g_pid; }

/* ------------------------------------------------------------------------------------------ */
/* Seqlocks (also the writers' lock): the fast path; the slow ones are in seqlock.c           */

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

uint64_t seq_lock_slow(uint64_t *seq, uint32_t tid, int *why);
uint64_t seq_force(uint64_t *seq);
void seq_heal(uint64_t *seq);
int thread_gone(uint32_t tid);
void nap(unsigned i);

/* Take *seq (even -> odd, naming this thread). Returns the odd value held, or 0 (seq_lock_slow). */
static inline uint64_t seq_lock(uint64_t *seq) {
    uint32_t tid = my_tid();
    uint64_t h = seq_trylock(seq, tid);
    if (LIKELY(h))
        return h;
    int why = 0;
    return seq_lock_slow(seq, tid, &why);
}

static inline void seq_release(uint64_t *seq, uint64_t held) {
    if (held)
        seq_unlock(seq, held);
}

static inline void lost_call(void) {
    HCOUNT(lost);
}

/* ------------------------------------------------------------------------------------------ */
/* Functions the files share, by the file that defines them                                  */

/* hints.c: text without malloc (async-signal-safe), notifications, stderr */
struct buf {
    char *p;
    size_t n, cap;
};

void b_str(struct buf *b, const char *s);
void b_u64(struct buf *b, uint64_t v);
void b_i64(struct buf *b, int64_t v);
void log_stderr(const char *msg);
void notify_proc(const char *ev);
void notify_sock(const char *ev, int fd);
void notify_msg(const char *ev, const char *msg);
void notify_signal(const char *ev, uint64_t t_ns, uint64_t seq);

/* shm.c */
int read_file(const char *path, char *out, size_t cap);
uint64_t proc_starttime(pid_t *ppid);
size_t map_size(uint32_t nslots);
struct nest_header *shm_create(pid_t pid, pid_t ppid, uint64_t starttime, const struct nest_header *from,
                               uint32_t *nslots);
struct nest_header *shm_reattach(pid_t pid, uint64_t starttime, uint32_t *nslots);
void revalidate_after_exec(void);

/* slots.c */
void set_endpoint(const struct sockaddr *sa, uint8_t *addr, uint16_t *port);
int sock_endpoints(int fd, uint8_t *la, uint16_t *lp, uint8_t *ra, uint16_t *rp);
void retire_slot(int fd);
void untracked_fd(int fd);
void adopt_socket(int fd, uint32_t extra);
void fresh_fd(int fd);
struct nest_slot *tracked_slow(int fd, uint32_t k);
uint32_t forget_begin(int fd);
void forget_end(int fd);

/* pause.c */
void pause_wait(void);
int parse_signal(const char *v, int dflt);
void install_signals(void);

/* call.c */
void defer_end(struct nest_slot *s, struct nest_dir *d, uint64_t gen, uint64_t t0, uint64_t t1, long r, int e,
               int is_call);
void defer_flush(void);
void defer_apply_slot(struct nest_slot *s);
void defer_forget(void);
int sock_wait_left(int fd, int dir, uint64_t *t0);
void reply_hold(uint64_t ns);
int ms_left(int timeout, uint64_t t0);
void ts_left(const struct timespec *full, uint64_t t0, struct timespec *out);

/* defer.c */
long defer_send(int fd, const struct iovec *iov, long cnt, int can, int call, int flags);
long defer_sendmsg(int fd, const struct msghdr *m, int flags, int call);
long defer_sendfile(int out, int in, off64_t *off, size_t n, int call);
int defer_close(int fd, int how);
void defer_settle(unsigned lo, unsigned hi);
void defer_after_fork(void);
void defer_drain_at_exit(void);

/* usermem.c */
int user_read(void *dst, const void *src, size_t n);
int user_write(void *dst, const void *src, size_t n);
int user_iovecs(const struct iovec *iov, long cnt, struct iovec *v, size_t nv, struct iovec **out, size_t *len);
int user_gather(char *dst, const struct iovec *a, long cnt, size_t n);

/* trace.c */
void trace_configure(const char *v);
size_t ring_bytes(uint32_t cap);
void trace_attach(struct nest_header *h, size_t size);
void trace_endpoints(struct nest_slot *s, int fd);

/* The NEST_C_* code of a wrapped call, by its name (COUNT in call.h). */
#define TRC_read NEST_C_READ
#define TRC_readv NEST_C_READV
#define TRC_recv NEST_C_RECV
#define TRC_recvfrom NEST_C_RECVFROM
#define TRC_recvmsg NEST_C_RECVMSG
#define TRC_recvmmsg NEST_C_RECVMMSG
#define TRC_write NEST_C_WRITE
#define TRC_writev NEST_C_WRITEV
#define TRC_send NEST_C_SEND
#define TRC_sendto NEST_C_SENDTO
#define TRC_sendmsg NEST_C_SENDMSG
#define TRC_sendmmsg NEST_C_SENDMMSG
#define TRC_sendfile NEST_C_SENDFILE
#define TRC_sendfile64 NEST_C_SENDFILE64

/* waits.c */
int poll_r(struct pollfd *fds, nfds_t n, int timeout);

#pragma GCC visibility pop

#endif
