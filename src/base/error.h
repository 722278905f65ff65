/* error.h: setting this thread's error detail (error.c): loupe__err() and loupe__err_append(). */
#ifndef LOUPE_BASE_ERROR_H
#define LOUPE_BASE_ERROR_H

#include <loupe/error.h>
#include <stdarg.h>
#include <stddef.h>

/* Sets this thread's error detail (printf format) and returns code, for `return loupe__err(...)`.
 */
int loupe__err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends "; ..." to the detail. */
void loupe__err_append(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
