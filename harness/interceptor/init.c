/*
 * libnestintercept.so - the nestlab LD_PRELOAD interceptor (NeST application and socket modules).
 * init.c: the real functions, the environment, the constructor, the fork child and the destructor.
 * internal.h lists the other files; docs/interceptor.md describes the whole.
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

#define DEFINE_REAL(name, ret, args) ret(*real_##name) args;
REALS(DEFINE_REAL)
#undef DEFINE_REAL

static void resolve_all(void) {
#define RESOLVE(name, ret, args) ENSURE(name);
    REALS(RESOLVE)
#undef RESOLVE
}

int g_on;
pid_t g_pid;
uint32_t g_want_slots;
char g_dir[PATH_MAX - 32];
uint64_t g_lock_wait_ns = 1000000000ull;
static size_t g_map_size;              /* of our mapping */

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
    trace_attach(NULL, 0);   /* the parent's ring: the child gets its own with its file */
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
            /* A socket of ours at the fork (g_kind, this process's copy) is copied even if the parent
             * closed its own fd meanwhile (state CLOSED): the child's fd is still open, and without
             * its slot its calls would go to a free one. */
            if (s->state != NEST_OPEN && !(KIND(g_kind[fd]) == K_SOCK && s->state == NEST_CLOSED))
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
        for (uint32_t fd = m; fd < on && fd < g_want_slots; fd++)   /* no slot in the child's file */
            if (KIND(g_kind[fd]) == K_SOCK)
                g_kind[fd] = K_UNKNOWN;
        h->max_fd = m;
        h->flags |= had | (oh->flags & NEST_HF_PAUSE_OFF);
        h->paused = (uint32_t)__atomic_load_n(&g_paused, RELAXED);
        g_hdr = h;
        g_slots = ns;
        g_nslots = nn;
        g_map_size = map_size(nn);
        trace_attach(h, g_map_size);
        g_on = 1;
    } else {
        g_hdr = NULL;
        g_slots = NULL;
        g_nslots = 0;
    }
    defer_after_fork();   /* the parent's deferred sends and their thread; its deferred closes done */
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
    trace_configure(getenv("NESTLAB_TRACE_EVENTS"));
    const char *dm = getenv("NESTLAB_DEFER_MAX_BYTES");
    if (dm && *dm)
        g_defer_cap = strtoull(dm, NULL, 10);

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
    trace_attach(h, g_map_size);
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
    defer_drain_at_exit();   /* the delay fault's replies still queued (defer.c) */
    __atomic_store_n(&g_hdr->exited_ns, now_ns(), RELAXED);
    __atomic_fetch_or(&g_hdr->flags, NEST_HF_EXITED, __ATOMIC_SEQ_CST);
    if (g_notify_len)
        notify_msg("exit", "exit");
}
