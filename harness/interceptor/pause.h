/*
 * pause.h - part: the application fault of thesis 3.5.1 (pause.c). Its state is its own (g_pause:
 * the flag the pause signal sets, the signals, whether our handlers are installed; t_sigs: runs of
 * our handler on this thread, so that the calls it interrupted are restarted, call.h). The hot path
 * parks at its gate (pause_gate) while the flag is set.
 */
#ifndef NEST_PAUSE_H
#define NEST_PAUSE_H

#include "internal.h"

#pragma GCC visibility push(hidden)

struct nest_pause {
    volatile int paused;
    int on;                            /* our handlers are installed */
    int pause_sig, resume_sig;         /* 0: none */
};

extern struct nest_pause g_pause;
extern TLS volatile uint32_t t_sigs;   /* runs of our pause/resume handler on this thread */

void pause_wait(void);
int parse_signal(const char *v, int dflt);
int pause_configure(const char *pause, const char *resume);   /* -1: a bad signal name */
void install_signals(void);

/* Before and after the real call, park while paused (thesis 3.5.1). */
static inline void pause_gate(void) {
    if (UNLIKELY(__atomic_load_n(&g_pause.paused, RELAXED)))
        pause_wait();
}

#pragma GCC visibility pop

#endif
