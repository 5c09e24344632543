/*
 * hints.c - notifications to the collector: one JSON object per datagram on the Unix datagram
 * socket $NESTLAB_COLLECTOR_SOCK (a fresh socket per message, MSG_DONTWAIT: dropped when the
 * collector is absent or slow). They are hints; the files alone are complete. The text is made
 * without malloc (text.c: async-signal-safe, the pause handler and the fork child use it).
 */
#include "hints.h"

#include "env.h"
#include "reals.h"
#include "shm.h"
#include "text.h"

static struct sockaddr_un g_notify_addr;
static socklen_t g_notify_len;         /* 0: no collector socket */

void hints_configure(const char *sock) {
    g_notify_len = 0;
    if (!sock || !*sock || strlen(sock) >= sizeof g_notify_addr.sun_path)
        return;
    g_notify_addr.sun_family = AF_UNIX;
    size_t l = strlen(sock);
    memcpy(g_notify_addr.sun_path, sock, l);
    if (sock[0] == '@')
        g_notify_addr.sun_path[0] = 0;   /* abstract namespace */
    g_notify_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + l + (sock[0] == '@' ? 0 : 1));
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

/* ------------------------------------------------------------------------------------------ */
/* Notifications to the collector (one JSON object per datagram; never blocks)                */

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
    b_i64(b, g_env.pid);
}

void notify_proc(const char *ev) {
    if (!g_notify_len || !g_core.hdr)
        return;
    char t[NEST_CMDLINE_MAX * 2 + 512];
    struct buf b = {t, 0, sizeof t};
    struct nest_header *h = g_core.hdr;
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
    b_str(&pb, g_env.dir);
    b_str(&pb, "/");
    b_i64(&pb, g_env.pid);
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

void notify_sock(const char *ev, int fd) {
    if (!g_notify_len || !g_core.slots)
        return;
    struct nest_slot *s = &g_core.slots[fd];
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

void notify_msg(const char *ev, const char *msg) {
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

void notify_signal(const char *ev, uint64_t t_ns, uint64_t seq) {
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
