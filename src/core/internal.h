/* internal.h: helpers shared across libloupe's files (the loupe__ prefix). */
#ifndef LOUPE_CORE_INTERNAL_H
#define LOUPE_CORE_INTERNAL_H

#include <loupe/error.h>
#include <stdarg.h>
#include <stddef.h>

/* Sets this thread's error detail (printf format) and returns code, for `return loupe__err(...)`.
 */
int loupe__err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends "; ..." to the detail. */
void loupe__err_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Creates a directory and its parents (mode 0777 & umask). 0 or -errno. */
int loupe__mkdirs(const char *path);

/* The host name as jax.profiler writes it (':' replaced by '_'); "localhost" when unknown. */
void loupe__hostname(char *buf, size_t size);

#endif
