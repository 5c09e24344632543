/*
 * text.c - text without malloc, files read whole, lines on stderr (text.h).
 */
#include "text.h"

#include "env.h"
#include "reals.h"

void b_raw(struct buf *b, const char *s, size_t n) {
    if (b->n + n >= b->cap)
        n = b->cap > b->n + 1 ? b->cap - b->n - 1 : 0;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void b_str(struct buf *b, const char *s) { b_raw(b, s, strlen(s)); }

void b_u64(struct buf *b, uint64_t v) {
    char t[24];
    int i = 23;
    t[i] = 0;
    do {
        t[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    b_str(b, t + i);
}

void b_i64(struct buf *b, int64_t v) {
    if (v < 0) {
        b_raw(b, "-", 1);
        b_u64(b, (uint64_t)(-(v + 1)) + 1);
    } else {
        b_u64(b, (uint64_t)v);
    }
}

int read_file(const char *path, char *out, size_t cap) {
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

void log_stderr(const char *msg) {
    char t[512];
    struct buf b = {t, 0, sizeof t};
    char comm[64];
    int n = read_file("/proc/self/comm", comm, sizeof comm - 1);
    while (n > 0 && (comm[n - 1] == '\n' || comm[n - 1] == 0))
        n--;
    comm[n > 0 ? n : 0] = 0;
    b_str(&b, "nestlab-intercept[");
    b_i64(&b, g_env.pid);
    b_str(&b, "] ");
    b_str(&b, comm);
    b_str(&b, ": ");
    b_str(&b, msg);
    b_str(&b, "\n");
    if (real_write)
        (void)!real_write(2, t, b.n);
}
