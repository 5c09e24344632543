/*
 * shm.c - the shared-memory file of this process ($NESTLAB_SHM_DIR/<pid>.nest, format in
 * nestintercept.h): made as .<pid>.tmp with all its space (posix_fallocate: a full /dev/shm is never
 * SIGBUS) and renamed into place, or re-attached after exec. The constructor and the fork child
 * (init.c) make or find it.
 */
#include "shm.h"

#include "env.h"
#include "reals.h"
#include "text.h"

struct nest_core g_core;

/* /proc/self/stat field 22 (starttime) and 4 (ppid). */
uint64_t proc_starttime(pid_t *ppid) {
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

/* The header, the slots and, when tracing (and there are slots), the message ring after them. */
size_t map_size(uint32_t nslots) {
    size_t n = (size_t)NEST_HEADER_SIZE + (size_t)nslots * NEST_SLOT_SIZE;
    return nslots ? n + g_core.ring_bytes : n;
}

static void shm_path(char *out, size_t cap, pid_t pid, int tmp) {
    struct buf b = {out, 0, cap};
    b_str(&b, g_env.dir);
    b_str(&b, tmp ? "/." : "/");
    b_i64(&b, pid);
    b_str(&b, tmp ? ".tmp" : ".nest");
}

void shm_fill_cmdline(struct nest_header *h) {
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
struct nest_header *shm_create(pid_t pid, pid_t ppid, uint64_t starttime,
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
    uint32_t n = g_env.want_slots;
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
        h->want_slots = g_env.want_slots;
        if (space > 0) {
            h->flags = NEST_HF_NO_SPACE;
            h->space_errno = space;
        }
        h->pid = pid;
        h->ppid = ppid;
        h->starttime = starttime;
        h->created_ns = now_ns();
        h->pause_sig = g_core.pause_sig;
        h->resume_sig = g_core.resume_sig;
        if (n && g_core.trace_cap) {
            h->trace_cap = g_core.trace_cap;
            h->trace_event_size = NEST_EVENT_SIZE;
            h->trace_off = (uint64_t)NEST_HEADER_SIZE + (uint64_t)n * NEST_SLOT_SIZE;
        }
        if (from) {
            memcpy(h->cmdline, from->cmdline, NEST_CMDLINE_MAX);
            h->cmdline_len = from->cmdline_len;
            /* a child born while the delay fault is in force is delayed as its parent (the fault
             * clears every live process's file, this one too) */
            h->reply_delay_mode = from->reply_delay_mode;
            h->reply_delay_ns = __atomic_load_n(&from->reply_delay_ns, RELAXED);
        } else {
            shm_fill_cmdline(h);
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
struct nest_header *shm_reattach(pid_t pid, uint64_t starttime, uint32_t *nslots) {
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
        if ((size_t)st.st_size == map_size(g_env.want_slots))
            n = g_env.want_slots, ok = 1;
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
                starttime == 0 || h->trace_cap != (n ? g_core.trace_cap : 0)) {
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
