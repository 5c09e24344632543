/*
 * trace.h - part: message tracing (NESTLAB_TRACE_EVENTS; the ring's format is in nestintercept.h).
 * Its state is its own (g_trace: the ring in our file, NULL when not tracing); the hot path puts an
 * event in the ring inline (trace_put, no lock: a compare-and-swap reserves the place); trace.c holds
 * the ring's place in the file and the rare path, a socket's endpoints looked up once.
 */
#ifndef NEST_TRACE_H
#define NEST_TRACE_H

#include "internal.h"
#include "seqlock.h"

#pragma GCC visibility push(hidden)

struct nest_trace {
    uint32_t want;                     /* events asked for (0: not tracing) */
    struct nest_ring *ring;            /* NULL: not tracing */
    struct nest_event *events;
    uint64_t mask;                     /* trace_cap - 1 */
};

extern struct nest_trace g_trace;

void trace_configure(const char *v);
size_t ring_bytes(uint32_t cap);
void trace_attach(struct nest_header *h, size_t size);
void trace_endpoints(struct nest_slot *s, int fd);

/* Message tracing (nestintercept.h): a completed call as an event in the ring, stamped `t` (its end),
 * or dropped and counted when the ring is full. No lock: a compare-and-swap reserves the place. */
static inline __attribute__((always_inline)) void trace_put_tid(struct nest_ring *g, struct nest_slot *s, int fd,
                                                                int call, long r, uint64_t t, uint32_t tid) {
    if (UNLIKELY(!(s->flags & (NEST_SF_PEER | NEST_SF_TRACE_EP))))
        trace_endpoints(s, fd);
    uint64_t h = __atomic_load_n(&g->head, RELAXED);
    do {
        if (UNLIKELY(h - __atomic_load_n(&g->tail, __ATOMIC_ACQUIRE) > g_trace.mask)) {
            __atomic_fetch_add(&g->drops, 1, RELAXED);
            return;
        }
    } while (UNLIKELY(!__atomic_compare_exchange_n(&g->head, &h, h + 1, 1, RELAXED, RELAXED)));
    struct nest_event *ev = &g_trace.events[h & g_trace.mask];
    ev->tid = tid;
    ev->mono_ns = t;
    ev->fd = fd;
    ev->bytes = (uint32_t)r;
    ev->call = (uint8_t)call;
    ev->family = (uint8_t)s->family;
    ev->lport = s->lport;
    ev->rport = s->rport;
    memcpy(ev->laddr, s->laddr, 16);
    memcpy(ev->raddr, s->raddr, 16);
    __atomic_store_n(&ev->stamp, (uint32_t)(h + 1), __ATOMIC_RELEASE);
}

static inline __attribute__((always_inline)) void trace_put(struct nest_ring *g, struct nest_slot *s, int fd,
                                                            int call, long r, uint64_t t) {
    trace_put_tid(g, s, fd, call, r, t, my_tid());
}

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

#pragma GCC visibility pop

#endif
