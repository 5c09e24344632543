/*
 * reals.c - the table of real functions (reals.h): every one resolved at the constructor; a wrapper
 * called before it resolves its own (ENSURE).
 */
#include "reals.h"

#define DEFINE_REAL(name, ret, args) ret(*real_##name) args;
REALS(DEFINE_REAL)
#undef DEFINE_REAL

void reals_resolve(void) {
#define RESOLVE(name, ret, args) ENSURE(name);
    REALS(RESOLVE)
#undef RESOLVE
}
