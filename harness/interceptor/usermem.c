/*
 * usermem.c - the program's memory read (and written) without trusting its pointers: a wrapper that
 * must look at a call's arguments before the real call (the delay fault's deferral copies a send's
 * bytes, iovecs and msghdr, defer.c) reads them with process_vm_readv, which fails with EFAULT where a
 * plain copy would be SIGSEGV, so that a bad argument fails the call as the kernel would, never the
 * program. Where process_vm_readv is refused (a seccomp filter), plain copies, as before.
 */
#include "usermem.h"

#include "env.h"

static int g_no_vm_read;             /* process_vm_readv refused here: plain copies */

/* n bytes from the program's memory at src, or -1 when some of it cannot be read (the real call
 * would fail with EFAULT, or send less): a bad pointer never faults here. */
int user_read(void *dst, const void *src, size_t n) {
    if (!n)
        return 0;
    if (!g_no_vm_read) {
        struct iovec l = {dst, n}, r = {(void *)src, n};
        long k = syscall(SYS_process_vm_readv, (long)g_env.pid, &l, 1L, &r, 1L, 0L);
        if (k == (long)n)
            return 0;
        if (k >= 0 || errno == EFAULT)
            return -1;
        g_no_vm_read = 1;
    }
    if (!src)
        return -1;
    memcpy(dst, src, n);
    return 0;
}

int user_write(void *dst, const void *src, size_t n) {
    if (!g_no_vm_read) {
        struct iovec l = {(void *)src, n}, r = {dst, n};
        long k = syscall(SYS_process_vm_writev, (long)g_env.pid, &l, 1L, &r, 1L, 0L);
        if (k == (long)n)
            return 0;
        if (k >= 0 || errno == EFAULT)
            return -1;
    }
    memcpy(dst, src, n);
    return 0;
}

/* The program's iovec array (cnt entries), read safely, into *out (v when it fits, else malloc'd);
 * its total length in *len. -1: not deferrable as it is (bad pointer, count or length: the real call
 * says what). */
int user_iovecs(const struct iovec *iov, long cnt, struct iovec *v, size_t nv, struct iovec **out, size_t *len) {
    if (cnt < 0 || cnt > IOV_MAX)
        return -1;
    struct iovec *a = (size_t)cnt <= nv ? v : malloc((size_t)cnt * sizeof *a);
    if (!a || user_read(a, iov, (size_t)cnt * sizeof *a) != 0) {
        if (a != v)
            free(a);
        return -1;
    }
    size_t sum = 0;
    for (long i = 0; i < cnt; i++) {
        if (a[i].iov_len > (size_t)SSIZE_MAX - sum) {   /* lengths that would wrap: EINVAL, or cut */
            if (a != v)
                free(a);
            return -1;
        }
        sum += a[i].iov_len;
    }
    *out = a;
    *len = sum;
    return 0;
}

/* The first n bytes of the iovecs into dst, read safely; -1 when some cannot be read. */
int user_gather(char *dst, const struct iovec *a, long cnt, size_t n) {
    size_t at = 0;
    for (long i = 0; i < cnt && at < n; i++) {
        size_t k = a[i].iov_len < n - at ? a[i].iov_len : n - at;
        if (user_read(dst + at, a[i].iov_base, k) != 0)
            return -1;
        at += k;
    }
    return 0;
}
