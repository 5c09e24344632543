/*
 * trace.c - message tracing (NESTLAB_TRACE_EVENTS; the ring's format is in nestintercept.h): the
 * ring's place in the file, and the rare path of an event, a socket's endpoints looked up once when
 * its slot does not have them (a Unix socket's own and peer inodes, through sock_diag). The hot path,
 * an event put in the ring, is inline in trace.h (trace_put).
 */
#include "trace.h"

#include "slots.h"

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>

struct nest_trace g_trace;

/* NESTLAB_TRACE_EVENTS: unset, empty or 0: off; else rounded up to a power of 2 in [16, 2^24]. */
void trace_configure(const char *v) {
    long n = v && *v ? strtol(v, NULL, 10) : 0;
    if (n <= 0) {
        g_trace.want = 0;
        return;
    }
    uint32_t c = 16;
    while (c < (uint32_t)(n > (1L << 24) ? (1L << 24) : n))
        c <<= 1;
    g_trace.want = c;
}

size_t ring_bytes(uint32_t cap) {
    return cap ? (size_t)NEST_RING_SIZE + (size_t)cap * NEST_EVENT_SIZE : 0;
}

/* The ring of a mapped file of `size` bytes, if it has one that fits. */
void trace_attach(struct nest_header *h, size_t size) {
    g_trace.ring = NULL;
    g_trace.events = NULL;
    g_trace.mask = 0;
    if (!h || !h->trace_cap || h->trace_event_size != NEST_EVENT_SIZE || (h->trace_cap & (h->trace_cap - 1)) ||
        h->trace_off < NEST_HEADER_SIZE || h->trace_off + ring_bytes(h->trace_cap) > size)
        return;
    g_trace.events = (struct nest_event *)((char *)h + h->trace_off + NEST_RING_SIZE);
    g_trace.mask = h->trace_cap - 1;
    __atomic_store_n(&g_trace.ring, (struct nest_ring *)((char *)h + h->trace_off), __ATOMIC_RELEASE);
}

/* The inode of the peer of Unix socket `ino` (sock_diag, UDIAG_SHOW_PEER), 0 when it has none or the
 * kernel does not say. Raw system calls: none of them is a call we count. */
static uint64_t unix_peer_inode(uint64_t ino) {
    int nl = (int)syscall(SYS_socket, AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
    if (nl < 0)
        return 0;
    struct {
        struct nlmsghdr nlh;
        struct unix_diag_req r;
    } req;
    memset(&req, 0, sizeof req);
    req.nlh.nlmsg_len = sizeof req;
    req.nlh.nlmsg_type = SOCK_DIAG_BY_FAMILY;
    req.nlh.nlmsg_flags = NLM_F_REQUEST;
    req.r.sdiag_family = AF_UNIX;
    req.r.udiag_ino = (uint32_t)ino;
    req.r.udiag_show = UDIAG_SHOW_PEER;
    req.r.udiag_cookie[0] = req.r.udiag_cookie[1] = ~0u;   /* INET_DIAG_NOCOOKIE: any */
    struct sockaddr_nl sa = {.nl_family = AF_NETLINK};
    uint64_t peer = 0;
    if (syscall(SYS_sendto, nl, &req, sizeof req, 0, &sa, sizeof sa) == (long)sizeof req) {
        union {
            char b[1024];
            struct nlmsghdr h;
        } buf;
        long n = syscall(SYS_recvfrom, nl, buf.b, sizeof buf.b, 0, NULL, NULL);
        struct nlmsghdr *h = &buf.h;
        if (n > 0 && NLMSG_OK(h, (unsigned long)n) && h->nlmsg_type == SOCK_DIAG_BY_FAMILY) {
            struct unix_diag_msg *m = NLMSG_DATA(h);
            int len = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof *m));
            for (struct rtattr *a = (struct rtattr *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len))
                if (a->rta_type == UNIX_DIAG_PEER && RTA_PAYLOAD(a) >= 4) {
                    uint32_t p32;
                    memcpy(&p32, RTA_DATA(a), 4);
                    peer = p32;
                }
        }
    }
    syscall(SYS_close, nl);
    return peer;
}

/* First event of a socket whose slot has no peer: look its endpoints up, once. AF_UNIX: its inode and
 * its peer's into laddr and raddr; AF_INET/AF_INET6: getsockname and getpeername (a socket connected
 * by a call we do not see). Under the slot's seqlock, as connect() sets them. */
void trace_endpoints(struct nest_slot *s, int fd) {
    int saved = errno;
    uint8_t la[16] = {0}, ra[16] = {0};
    uint16_t lp = 0, rp = 0;
    uint32_t flags = NEST_SF_TRACE_EP;
    if (s->family == AF_UNIX) {
        uint64_t me = s->inode, peer = unix_peer_inode(me);
        memcpy(la, &me, 8);
        memcpy(ra, &peer, 8);
    } else if ((s->family == AF_INET || s->family == AF_INET6) && sock_endpoints(fd, la, &lp, ra, &rp)) {
        flags |= NEST_SF_PEER;
    }
    uint64_t q = seq_force(&s->seq);
    if (s->family == AF_UNIX || (flags & NEST_SF_PEER)) {
        memcpy(s->laddr, la, 16);
        memcpy(s->raddr, ra, 16);
        s->lport = lp;
        s->rport = rp;
    }
    s->flags |= flags;
    seq_release(&s->seq, q);
    errno = saved;
}
