/* session.h: what the session's files share (session.c, recover.c). */
#ifndef LOUPE_SESSION_SESSION_H
#define LOUPE_SESSION_SESSION_H

#include <loupe/model.h>
#include <loupe/trace.h>
#include <stddef.h>

/* Fills a result's counts and per-thread figures from m (the figures in a new array the result
 * owns). 0, or -1 when out of memory (then no figures). res may be NULL. */
int loupe__result_fill(loupe_trace_result *res, const loupe_model *m);

/* The program's name: the basename of /proc/self/exe, in buf. */
const char *loupe__process_name(char *buf, size_t size);

#endif
