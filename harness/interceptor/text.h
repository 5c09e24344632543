/*
 * text.h - text made without malloc (async-signal-safe: the pause handler and the fork child use it),
 * small files read whole, and the library's lines on stderr.
 */
#ifndef NEST_TEXT_H
#define NEST_TEXT_H

#include "internal.h"

#pragma GCC visibility push(hidden)

struct buf {
    char *p;
    size_t n, cap;
};

void b_raw(struct buf *b, const char *s, size_t n);
void b_str(struct buf *b, const char *s);
void b_u64(struct buf *b, uint64_t v);
void b_i64(struct buf *b, int64_t v);
int read_file(const char *path, char *out, size_t cap);
void log_stderr(const char *msg);

#pragma GCC visibility pop

#endif
