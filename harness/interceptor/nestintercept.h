/*
 * nestintercept.h - shared-memory format of the nestlab LD_PRELOAD interceptor (format version 1).
 *
 * The interceptor (the .c files here, built into libnestintercept.so) is loaded with LD_PRELOAD into
 * every workload process. It counts, per socket, the calls of the NeST socket module (thesis 3.2.1,
 * paper section 4) and implements the application fault (thesis 3.5.1). The collector reads the
 * counters from shared memory (harness/interceptor/shm.py mirrors this file in Python; keep
 * the two in step and bump NEST_VERSION on any change; docs/interceptor.md describes it for humans).
 *
 * Files. One file per process, $NESTLAB_SHM_DIR/<pid>.nest (the harness makes the directory 0700 in
 * /dev/shm; files are created 0600). A file is built as .<pid>.tmp and renamed into place, so a
 * reader never sees a half-initialised one. fork(): the child makes its own file (its pid). exec():
 * the new image re-attaches to the file of its pid when the header's pid and starttime match (same
 * process), bumps exec_count, takes the new command line and keeps the sockets still open; a stale
 * file of a reused pid is replaced. A process never removes its file: the reader decides that a
 * process is gone from /proc/<pid>/stat (missing, zombie or another starttime) or the EXITED flag.
 *
 * Layout: a 4096-byte header, then nslots slots of 256 bytes; slot i describes file descriptor i;
 * then, when tracing messages, the message ring (below).
 * All integers are native (little-endian on x86-64), unsigned unless noted.
 *
 * Concurrency. Every per-direction block (struct nest_dir) and every slot identity and the header's
 * retired totals are guarded by a seqlock: `seq` is odd while a writer is inside. Writers take it
 * with a compare-and-swap from an even value (so it is also the writers' lock; nothing else is ever
 * locked) and release it by storing the next even value. Readers read seq, the fields, seq again and
 * retry when it was odd or changed. A held seq names its holder: bits 1..31 are the holder's thread
 * id (NEST_SEQ_OWNER), bit 0 is 1; releasing clears them and adds 1 to the upper 32 bits (so every
 * value differs from the last). A writer that finds a seq held waits for a live holder (it was
 * preempted, it will let go) up to NESTLAB_LOCK_WAIT_MS; takes it over from a dead one (counted in
 * `forced`); never waits for itself (a signal handler re-entering the library on a socket its own
 * thread was updating): the call is then counted in `lost`, or, for the end of a call, applied
 * later (`deferred`) so that no socket is left showing a call in progress.
 * Lock order: slot.seq, dir[0].seq, dir[1].seq, header.seq (nobody waits while holding header.seq).
 *
 * Space. The file's space is allocated when it is made (posix_fallocate), so a full /dev/shm can
 * never turn a write into SIGBUS. When the whole file does not fit, the file is made with the header
 * only (nslots 0, flag NO_SPACE, want_slots and space_errno say what failed): nothing is counted,
 * the pause/resume handshake still works. When not even the header fits there is no file (one line
 * on stderr, the library is inert).
 *
 * Format compatibility. Fields added in what was padding (untracked .. space_errno, NO_SPACE, the
 * trace_* and reply_delay fields) are zero in files written by earlier builds and ignored by earlier readers; the
 * message ring lies after the slots, where earlier readers do not look: the version stays 1. A
 * change of layout bumps NEST_VERSION.
 *
 * Wait time. wait_ns holds the time spent in finished calls and poll-type waits; calls still in
 * progress are described by pend_n (how many) and pend_sum (sum of their CLOCK_MONOTONIC start
 * times, ns), so a reader at CLOCK_MONOTONIC time T computes
 *     wait(T) = wait_ns + pend_n * T - pend_sum
 * and sees a thread blocked for seconds in select() as waiting during those seconds, not only when
 * the call returns. Time spent parked by the application fault is never inside these intervals.
 */
#ifndef NESTINTERCEPT_H
#define NESTINTERCEPT_H

#include <stdint.h>

#define NEST_MAGIC "NESTSHM\0"      /* 8 bytes */
#define NEST_VERSION 1u
#define NEST_HEADER_SIZE 4096u
#define NEST_SLOT_SIZE 256u
#define NEST_CMDLINE_MAX 2048u
#define NEST_DEFAULT_SLOTS 4096u     /* NESTLAB_MAX_FDS overrides (64..65536) */

/* slot.state */
#define NEST_FREE 0u
#define NEST_OPEN 1u
#define NEST_CLOSED 2u

/* slot.flags */
#define NEST_SF_LISTEN 0x01u      /* listen() was called or SO_ACCEPTCONN: not a data socket */
#define NEST_SF_PEER 0x02u        /* remote endpoint known (connected, connecting or accepted) */
#define NEST_SF_ACCEPTED 0x04u    /* returned by accept()/accept4() */
#define NEST_SF_CONNECT 0x08u     /* connect() was called on it */
#define NEST_SF_INHERITED 0x10u   /* found on first use (inherited, dup'd, received), not created here */
#define NEST_SF_GRAPH 0x20u       /* AF_INET/AF_INET6 SOCK_STREAM: has a TCP module (key tcp:<inode>) */
#define NEST_SF_TRACE_EP 0x40u    /* message tracing looked its endpoints up (a Unix peer's inode, an
                                     endpoint not known at first sight); not looked up again */

/* header.flags */
#define NEST_HF_EXITED 0x01u          /* the process ran exit() (destructor) */
#define NEST_HF_HAD_GRAPH 0x02u       /* a graph socket got a peer at least once: an app module */
#define NEST_HF_FD_OVERFLOW 0x04u     /* a socket had an fd >= nslots and is not counted */
#define NEST_HF_HANDLER_KEPT 0x08u    /* the program tried to install its own pause/resume handler */
#define NEST_HF_MASK_KEPT 0x10u       /* the program tried to block the pause/resume signals */
#define NEST_HF_PAUSE_OFF 0x20u       /* pause/resume signals disabled (NESTLAB_PAUSE_SIGNAL=none) */
#define NEST_HF_NO_SPACE 0x40u        /* the file could not get its space: header only, nothing counted */

/* seq: bit 0 set while held; bits 1..31 the holder's thread id; bits 32..63 count the releases */
#define NEST_SEQ_OWNER(seq) ((uint32_t)((seq) & 0xffffffffu) >> 1)

#define NEST_IN 0
#define NEST_OUT 1

struct nest_dir {                 /* 64 bytes, one cache line; [0] in (receive), [1] out (send) */
    uint64_t seq;                 /*  0 seqlock */
    uint64_t msgs;                /*  8 completed calls (returned >= 0; connect: 0 or EINPROGRESS) */
    uint64_t bytes;               /* 16 bytes moved by those calls */
    uint64_t errors;              /* 24 failed calls (not EAGAIN/EWOULDBLOCK/EINTR/EINPROGRESS/EALREADY) */
    uint64_t wait_ns;             /* 32 ns in finished calls and finished poll/select/epoll waits */
    uint64_t pend_n;              /* 40 calls and waits in progress */
    uint64_t pend_sum;            /* 48 sum of their start times (CLOCK_MONOTONIC ns) */
    uint64_t last_ns;             /* 56 CLOCK_MONOTONIC ns of the last completed call */
};

struct nest_slot {                /* 256 bytes */
    uint64_t seq;                 /*   0 seqlock of the identity fields */
    uint64_t gen;                 /*   8 +1 each time a new socket takes the slot */
    uint64_t inode;               /*  16 socket inode (st_ino; inet_diag idiag_inode) */
    int32_t fd;                   /*  24 */
    uint32_t state;               /*  28 NEST_FREE / NEST_OPEN / NEST_CLOSED */
    uint32_t flags;               /*  32 NEST_SF_* */
    uint16_t family;              /*  36 AF_* */
    uint16_t type;                /*  38 SOCK_* */
    uint16_t lport;               /*  40 local port, host order */
    uint16_t rport;               /*  42 remote port, host order */
    uint32_t pad0;                /*  44 */
    uint8_t laddr[16];            /*  48 IPv4: first 4 bytes */
    uint8_t raddr[16];            /*  64 */
    uint64_t open_ns;             /*  80 CLOCK_MONOTONIC ns when the slot was taken */
    uint64_t close_ns;            /*  88 CLOCK_MONOTONIC ns when it was closed */
    uint8_t pad1[32];             /*  96 */
    struct nest_dir dir[2];       /* 128 in, 192 out */
};

struct nest_totals {              /* 32 bytes */
    uint64_t msgs, bytes, errors, wait_ns;
};

struct nest_header {              /* 4096 bytes */
    char magic[8];                /*    0 NEST_MAGIC */
    uint32_t version;             /*    8 NEST_VERSION */
    uint32_t header_size;         /*   12 NEST_HEADER_SIZE */
    uint32_t slot_size;           /*   16 NEST_SLOT_SIZE */
    uint32_t nslots;              /*   20 */
    int32_t pid;                  /*   24 */
    int32_t ppid;                 /*   28 */
    uint64_t starttime;           /*   32 /proc/<pid>/stat field 22 (clock ticks after boot) */
    uint64_t created_ns;          /*   40 CLOCK_MONOTONIC ns */
    uint32_t exec_count;          /*   48 execs seen by this pid since the file was made */
    uint32_t flags;               /*   52 NEST_HF_* */
    uint64_t exited_ns;           /*   56 CLOCK_MONOTONIC ns of exit() */
    uint32_t max_fd;              /*   64 slots [0, max_fd) may be in use */
    int32_t pause_sig;            /*   68 0 = none */
    int32_t resume_sig;           /*   72 equal to pause_sig: the same signal toggles */
    uint32_t paused;              /*   76 1 while paused */
    uint64_t ack_seq;             /*   80 +1 after every pause/resume signal handled (written last) */
    uint64_t ack_ns;              /*   88 CLOCK_MONOTONIC ns when the handler ran for it */
    uint64_t pause_count;         /*   96 */
    uint64_t resume_count;        /*  104 */
    uint64_t pause_ns;            /*  112 start of the current (or last) pause */
    uint64_t resume_ns;           /*  120 last resume */
    uint32_t paused_threads;      /*  128 threads parked in the pause loop now */
    uint32_t refused;             /*  132 attempts to replace the handlers or block the signals */
    uint64_t lost;                /*  136 calls not accounted (seqlock not obtained) */
    uint64_t untracked;           /*  144 sockets not counted: fd >= nslots (or no space: every one) */
    uint64_t deferred;            /*  152 call ends applied late (their seqlock was busy at the time) */
    uint64_t unended;             /*  160 call ends never applied: the socket shows a call in progress
                                             until it closes */
    uint64_t forced;              /*  168 seqlocks taken from a dead thread or, after
                                             NESTLAB_LOCK_WAIT_MS, from a live one (counters may be off) */
    uint64_t eintr_retried;       /*  176 calls restarted because our pause/resume signal
                                             interrupted them (not seen by the program) */
    uint32_t want_slots;          /*  184 slots asked for (NO_SPACE: nslots is 0) */
    int32_t space_errno;          /*  188 why the space could not be allocated (NO_SPACE) */
    uint32_t trace_cap;           /*  192 events the message ring holds (a power of 2; 0: not tracing) */
    uint32_t trace_event_size;    /*  196 NEST_EVENT_SIZE */
    uint64_t trace_off;           /*  200 offset of the ring (struct nest_ring) from the file's start */
    uint64_t reply_delay_ns;      /*  208 the delay fault, written by the injector (0: none): every reply
                                             this process starts (its first send on an accepted socket
                                             after a receive there) is held this long before it is sent */
    uint64_t replies_delayed;     /*  216 replies held (or deferred) so far */
    uint32_t reply_delay_mode;    /*  224 NEST_DELAY_HOLD (0): the sending thread sleeps before the reply
                                             (a thread per connection); NEST_DELAY_DEFER (1): the reply is
                                             queued and sent `reply_delay_ns` later by the library's own
                                             thread (event loops: defer.c) */
    uint32_t pad0;                /*  228 */
    uint64_t replies_undeferred;  /*  232 sends not deferred for lack of room (NESTLAB_DEFER_MAX_BYTES):
                                             sent at once, or after the socket's queue drained */
    uint64_t deferred_bytes;      /*  240 bytes queued for a deferred send now */
    uint64_t replies_dropped;     /*  248 deferred sends never written: their socket was closed or
                                             replaced under them, or its peer was gone */
    uint64_t seq;                 /*  256 seqlock of retired, retired_n and the command line */
    uint64_t retired_n;           /*  264 graph sockets closed */
    struct nest_totals retired[2];/*  272 final counters of closed graph (non-listening) sockets */
    uint8_t pad1[176];            /*  336 */
    uint32_t cmdline_len;         /*  512 */
    uint32_t pad2;                /*  516 */
    char cmdline[NEST_CMDLINE_MAX];/* 520 NUL-separated arguments, truncated */
    uint8_t pad3[NEST_HEADER_SIZE - 520 - NEST_CMDLINE_MAX];
};

/*
 * Message tracing (NESTLAB_TRACE_EVENTS=N; issue 33 item 3, docs/interceptor.md "Message traces").
 * Every completed receive and send call on a counted socket is also an event in a ring after the
 * slots (header.trace_off): a 256-byte struct nest_ring, then trace_cap events of 64 bytes. Writers
 * (every thread of the process) reserve index `head` with a compare-and-swap, unless the ring is full
 * (head - tail == trace_cap: the event is dropped and counted in `drops`), fill the event and publish
 * it by storing its `stamp` (index + 1, low 32 bits) last. The one reader (the drainer) reads the
 * events from `tail` while their stamp says they are published, then stores the new tail: an event's
 * place is written again only after the reader moved past it. Nothing is locked and nothing allocated.
 *
 * Endpoints as the socket's slot has them: AF_INET/AF_INET6 addresses and ports; AF_UNIX: laddr's
 * first 8 bytes are the socket's inode and raddr's its peer's (looked up once with sock_diag; 0: no
 * peer), the ports 0.
 */
enum { NEST_DELAY_HOLD = 0, NEST_DELAY_DEFER = 1 };   /* header.reply_delay_mode */

#define NEST_RING_SIZE 256u
#define NEST_EVENT_SIZE 64u

struct nest_ring {                /* 256 bytes, each hot word on its own cache line */
    uint64_t head;                /*   0 next index to reserve (writers) */
    uint8_t pad0[56];
    uint64_t tail;                /*  64 next index to read (the reader; every index below it is read) */
    uint8_t pad1[56];
    uint64_t drops;               /* 128 events dropped: the ring was full */
    uint8_t pad2[120];
};

/* event.call */
enum {
    NEST_C_READ = 1, NEST_C_READV, NEST_C_RECV, NEST_C_RECVFROM, NEST_C_RECVMSG, NEST_C_RECVMMSG,
    NEST_C_WRITE = 16, NEST_C_WRITEV, NEST_C_SEND, NEST_C_SENDTO, NEST_C_SENDMSG, NEST_C_SENDMMSG,
    NEST_C_SENDFILE, NEST_C_SENDFILE64
};

struct nest_event {               /* 64 bytes */
    uint32_t stamp;               /*  0 index + 1 (low 32 bits) once published */
    uint32_t tid;                 /*  4 */
    uint64_t mono_ns;             /*  8 CLOCK_MONOTONIC ns: a receive's return, a send's call */
    int32_t fd;                   /* 16 */
    uint32_t bytes;               /* 20 what the call moved (Linux moves at most 2^31 - 4096 bytes a call) */
    uint8_t call;                 /* 24 NEST_C_* (< 16: a receive) */
    uint8_t family;               /* 25 AF_* of the socket */
    uint16_t lport;               /* 26 host order */
    uint16_t rport;               /* 28 */
    uint16_t pad;                 /* 30 */
    uint8_t laddr[16];            /* 32 */
    uint8_t raddr[16];            /* 48 */
};

#ifdef __cplusplus
#define NEST_STATIC_ASSERT static_assert
#else
#define NEST_STATIC_ASSERT _Static_assert
#endif
NEST_STATIC_ASSERT(sizeof(struct nest_dir) == 64, "nest_dir size");
NEST_STATIC_ASSERT(sizeof(struct nest_slot) == NEST_SLOT_SIZE, "nest_slot size");
NEST_STATIC_ASSERT(sizeof(struct nest_header) == NEST_HEADER_SIZE, "nest_header size");
NEST_STATIC_ASSERT(sizeof(struct nest_ring) == NEST_RING_SIZE, "nest_ring size");
NEST_STATIC_ASSERT(sizeof(struct nest_event) == NEST_EVENT_SIZE, "nest_event size");

#endif
