/*
 * hints.h - notifications to the collector ($NESTLAB_COLLECTOR_SOCK): one JSON object per datagram,
 * never waiting. They are hints; the files alone are complete.
 */
#ifndef NEST_HINTS_H
#define NEST_HINTS_H

#include "internal.h"

#pragma GCC visibility push(hidden)

void hints_configure(const char *sock);   /* NESTLAB_COLLECTOR_SOCK (NULL or empty: none) */
void notify_proc(const char *ev);
void notify_sock(const char *ev, int fd);
void notify_msg(const char *ev, const char *msg);
void notify_signal(const char *ev, uint64_t t_ns, uint64_t seq);

#pragma GCC visibility pop

#endif
