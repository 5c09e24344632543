/*
 * usermem.h - the program's memory read (and written) without trusting its pointers (usermem.c).
 */
#ifndef NEST_USERMEM_H
#define NEST_USERMEM_H

#include "internal.h"

#pragma GCC visibility push(hidden)

int user_read(void *dst, const void *src, size_t n);
int user_write(void *dst, const void *src, size_t n);
int user_iovecs(const struct iovec *iov, long cnt, struct iovec *v, size_t nv, struct iovec **out, size_t *len);
int user_gather(char *dst, const struct iovec *a, long cnt, size_t n);

#pragma GCC visibility pop

#endif
