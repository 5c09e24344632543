/*
 * libnestintercept.so - the nestlab LD_PRELOAD interceptor (NeST application and socket modules).
 * init.c: the real functions, the environment, the constructor, the fork child and the destructor.
 * internal.h lists the other files by layer; docs/interceptor.md describes the whole.
 *
 * What it does, for an unmodified dynamically linked program started with
 *     LD_PRELOAD=.../libnestintercept.so NESTLAB_SHM_DIR=/dev/shm/<run dir> program ...
 *
 * 1. Counts, per socket, in a shared-memory file ($NESTLAB_SHM_DIR/<pid>.nest, format in
 *    nestintercept.h, made by shm.c): completed receive and send calls (io.c), the bytes they moved,
 *    failed calls, and the time blocked in them and in poll/select/epoll waits on the socket
 *    (waits.c). Only fds that are sockets are counted (slots.c). The hot path (call.h) takes no
 *    lock: one compare-and-swap seqlock per call and direction, two vDSO clock reads.
 * 2. Tells the collector about new processes and sockets (hints.c). The files alone are complete.
 * 3. Implements the application fault of thesis 3.5.1 for unmodified programs (pause.c): a signal
 *    parks every intercepted receive/send call on a socket, another lets them go; the two signals
 *    never surface as EINTR (call.c, waits.c, sleeps.c).
 *
 * Never fatal to the program: the file's space is allocated up front (posix_fallocate; a full
 * /dev/shm gives a header-only file flagged NO_SPACE, or no file, never SIGBUS); a writer waits for
 * a seqlock held by a live thread (preempted), takes it from a dead one and never waits for itself
 * (seqlock.c); the end of a call that could not be recorded at once is recorded later (call.c); what
 * could not be counted is counted (lost, untracked, unended, forced in the header).
 *
 * Environment: NESTLAB_SHM_DIR (unset or unusable: the library is inert, every call passes
 * straight through), NESTLAB_COLLECTOR_SOCK (path, '@name' for the abstract namespace; optional),
 * NESTLAB_PAUSE_SIGNAL / NESTLAB_RESUME_SIGNAL (USR1, SIGUSR2, 12, RTMIN+3, none), NESTLAB_MAX_FDS
 * (slots per process, default 4096: sockets with a larger fd are not counted and flagged),
 * NESTLAB_LOCK_WAIT_MS (how long a writer waits for a seqlock held by a live thread, default 1000),
 * NESTLAB_TRACE_EVENTS (message tracing: every completed receive and send call also goes into a ring
 * of this many events in the file, trace.c; unset or 0: off), NESTLAB_DEFER_MAX_BYTES (bytes the delay
 * fault may queue in a process at an event loop, defer.c; default 64 MiB).
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
#include "internal.h"

#include "defer.h"
#include "env.h"
#include "hints.h"
#include "late.h"
#include "pause.h"
#include "reals.h"
#include "seqlock.h"
#include "shm.h"
#include "slots.h"
#include "text.h"
#include "trace.h"

static size_t g_map_size;              /* of our mapping */

/* The counting core and the parts on the file just mapped (h, nn slots); NULL: none. */
static void attach(struct nest_header *h, uint32_t nn) {
    g_core.hdr = h;
    g_core.nslots = h ? nn : 0;
    g_core.slots = h ? (struct nest_slot *)((char *)h + NEST_HEADER_SIZE) : NULL;
    g_map_size = h ? map_size(nn) : 0;
    seqlock_attach(h);
    trace_attach(h, g_map_size);
}

static void warn_inert(const char *what) {
    char t[PATH_MAX + 128];
    struct buf b = {t, 0, sizeof t};
    b_str(&b, "not counting: ");
    b_str(&b, what);
    b_str(&b, " (NESTLAB_SHM_DIR=");
    b_str(&b, g_env.dir);
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

static void atfork_child(void) {
    seqlock_after_fork();   /* this thread has another id in the child */
    if (!g_core.on)
        return;
    sigset_t all, old;
    sigfillset(&all);
    real_pthread_sigmask(SIG_BLOCK, &all, &old);
    struct nest_header *oh = g_core.hdr;
    struct nest_slot *os = g_core.slots;
    size_t osz = g_map_size;
    uint32_t on = g_core.nslots;
    g_core.on = 0;
    attach(NULL, 0);   /* the parent's file and ring: the child gets its own */
    late_forget();   /* they point into the parent's file */
    pid_t ppid = g_env.pid;
    g_env.pid = (pid_t)syscall(SYS_getpid);
    uint64_t st = proc_starttime(NULL);
    uint32_t nn = 0;
    struct nest_header *h = shm_create(g_env.pid, ppid, st, oh, &nn);
    if (h) {
        struct nest_slot *ns = (struct nest_slot *)((char *)h + NEST_HEADER_SIZE);
        uint32_t m = oh->max_fd < on ? oh->max_fd : on;
        if (m > nn)
            m = nn;
        uint32_t had = 0;
        for (uint32_t fd = 0; fd < m; fd++) {
            const struct nest_slot *s = &os[fd];
            /* A socket of ours at the fork (g_fds.kind, this process's copy) is copied even if the parent
             * closed its own fd meanwhile (state CLOSED): the child's fd is still open, and without
             * its slot its calls would go to a free one. */
            if (s->state != NEST_OPEN && !(KIND(g_fds.kind[fd]) == K_SOCK && s->state == NEST_CLOSED))
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
        for (uint32_t fd = m; fd < on && fd < g_env.want_slots; fd++)   /* no slot in the child's file */
            if (KIND(g_fds.kind[fd]) == K_SOCK)
                g_fds.kind[fd] = K_UNKNOWN;
        h->max_fd = m;
        h->flags |= had | (oh->flags & NEST_HF_PAUSE_OFF);
        h->paused = (uint32_t)__atomic_load_n(&g_pause.paused, RELAXED);
        attach(h, nn);
        g_core.on = 1;
    }
    defer_after_fork();   /* the parent's deferred sends and their thread; its deferred closes done */
    munmap(oh, osz);
    real_pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (g_core.on)
        notify_proc("fork");
    if (g_core.on && (h->flags & NEST_HF_NO_SPACE))
        warn_no_space(h);
}

__attribute__((constructor)) static void nest_init(void) {
    int saved = errno;
    reals_resolve();
    const char *dir = getenv("NESTLAB_SHM_DIR");
    if (!dir || !*dir || strlen(dir) >= sizeof g_env.dir)
        goto out;
    strcpy(g_env.dir, dir);
    g_env.pid = getpid();

    const char *ms = getenv("NESTLAB_MAX_FDS");
    long n = ms && *ms ? strtol(ms, NULL, 10) : NEST_DEFAULT_SLOTS;
    g_env.want_slots = (uint32_t)(n < 64 ? 64 : n > 65536 ? 65536 : n);
    const char *lw = getenv("NESTLAB_LOCK_WAIT_MS");
    long w = lw && *lw ? strtol(lw, NULL, 10) : 1000;
    g_env.lock_wait_ns = (uint64_t)(w < 1 ? 1 : w > 60000 ? 60000 : w) * 1000000ull;
    trace_configure(getenv("NESTLAB_TRACE_EVENTS"));
    defer_configure(getenv("NESTLAB_DEFER_MAX_BYTES"));
    if (pause_configure(getenv("NESTLAB_PAUSE_SIGNAL"), getenv("NESTLAB_RESUME_SIGNAL")) != 0) {
        warn_inert("bad NESTLAB_PAUSE_SIGNAL/NESTLAB_RESUME_SIGNAL");
        goto out;
    }
    hints_configure(getenv("NESTLAB_COLLECTOR_SOCK"));
    /* what the file is made with: the ring after the slots, the signals the header names */
    g_core.trace_cap = g_trace.want;
    g_core.ring_bytes = ring_bytes(g_trace.want);
    g_core.pause_sig = g_pause.pause_sig;
    g_core.resume_sig = g_pause.resume_sig;

    if (slots_init(g_env.want_slots) != 0) {
        warn_inert("no memory");
        goto out;
    }

    pid_t ppid = getppid();
    uint64_t st = proc_starttime(NULL);
    int reattached = 0;
    uint32_t nn = 0;
    struct nest_header *h = shm_reattach(g_env.pid, st, &nn);
    if (h) {
        reattached = 1;
    } else {
        h = shm_create(g_env.pid, ppid, st, NULL, &nn);
    }
    if (!h) {
        warn_inert(strerror(errno));
        slots_free(g_env.want_slots);
        goto out;
    }
    attach(h, nn);
    if (reattached)
        slots_after_exec();
    install_signals();
    pthread_atfork(NULL, NULL, atfork_child);
    __atomic_store_n(&g_core.on, 1, __ATOMIC_SEQ_CST);
    notify_proc(reattached ? "exec" : "start");
    if (h->flags & NEST_HF_NO_SPACE)
        warn_no_space(h);
out:
    errno = saved;
}

__attribute__((destructor)) static void nest_fini(void) {
    if (!g_core.on || !g_core.hdr || !same_process())
        return;
    defer_drain_at_exit();   /* the delay fault's replies still queued (defer.c) */
    __atomic_store_n(&g_core.hdr->exited_ns, now_ns(), RELAXED);
    __atomic_fetch_or(&g_core.hdr->flags, NEST_HF_EXITED, __ATOMIC_SEQ_CST);
    notify_msg("exit", "exit");
}
