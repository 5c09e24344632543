/*
 * internal.h - what every file of libnestintercept.so starts with: the system headers, a few macros
 * and the clock. No state and no function of another file: each file's state and functions are in
 * its own header (docs/interceptor.md, "The C source, by file", says which file owns what). The
 * shared-memory format that readers share is nestintercept.h.
 *
 * The files, by layer (a file uses only files of the layers above it in this list; no circle:
 * tests/test_interceptor_layers.py checks it from the objects' symbols and the includes):
 *   reals      the real functions (dlsym RTLD_NEXT)
 *   env        the process's pid and the environment the constructor read
 *   text       text without malloc (async-signal-safe), files read, lines on stderr
 *   usermem    the program's memory read without trusting its pointers (process_vm_readv)
 *   seqlock    the seqlocks: fast path inline, slow paths (waiting, taking over, never for itself)
 *   shm        the counting core's state: the shared-memory file, made with its space, re-attached
 *   hints      notifications to the collector
 *   late       call ends applied late (their seqlock was busy)
 *   slots      what each fd is, the sockets' slots: made, looked up, closed
 *   trace      part: message tracing (the ring, endpoints looked up once)
 *   pause      part: the application fault (pause/resume handler, signal wrappers that keep it)
 *   defer      part: the delay fault (hold, or deferral at an event loop)
 *   call       the hot path every counted call shares (call.h, inline) and its restarts (call.c)
 *   io, waits, sleeps, fds   the wrappers
 *   init       the constructor, the fork child, the destructor: configures and attaches every part
 *
 * Every declaration in the library's headers is hidden (their visibility pragmas, and
 * -fvisibility=hidden for the definitions): the files reach each other's state and functions as
 * directly as static ones, without the GOT or the PLT; only the wrappers (EXPORT) are seen outside.
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

#endif
