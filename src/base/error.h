/* error.h: setting this thread's error detail (error.c): loupe__err(), loupe__err_append() and
 * loupe__err_prefix().
 *
 * The internal convention: a function that can fail and is called from another file returns 0 or
 * a negative LOUPE_E* code, and sets the detail with loupe__err() before it returns the code. A
 * failed system call's errno goes into the detail text ("cannot write X: No space left on device
 * (errno 28)"), never into the return value. A caller returns the code it got unchanged, adding
 * context with loupe__err_prefix() / loupe__err_append(). Only file-local (static) helpers may
 * return 0/-1, and then their caller sets the detail. */
#ifndef LOUPE_BASE_ERROR_H
#define LOUPE_BASE_ERROR_H

#include <loupe/export.h>

#include <loupe/error.h>
#include <stdarg.h>
#include <stddef.h>

/* Sets this thread's error detail (printf format) and returns code, for `return loupe__err(...)`.
 */
LOUPE_API int loupe__err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends "; ..." to the detail. */
LOUPE_API void loupe__err_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* After an out-of-memory failure: appends "; this process's RLIMIT_AS (ulimit -v) is N MiB,
 * which the program's memory and the stop's share" when the soft limit is finite, so that the
 * cause is named (a program that lowered its own limit and used it up), nothing otherwise.
 * Returns code, for `return loupe__err_nomem(loupe__err(LOUPE_ENOMEM, ...))`. */
LOUPE_API int loupe__err_nomem(int code);
/* Puts "...: " in front of the detail (a caller naming itself: "loupe_start_trace: ") and returns
 * code, for `return loupe__err_prefix(r, "...")`. */
LOUPE_API int loupe__err_prefix(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
