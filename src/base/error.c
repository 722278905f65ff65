/* error.c: loupe_strerror(), loupe_err_name() and the per-thread error detail. */
#include "base/error.h"

#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

static _Thread_local char tls_detail[1024];

const char *loupe_strerror(int code) {
    switch (code) {
    case 0:
        return "Success";
#define LOUPE__ERR_MSG(name, val, msg)                                                             \
    case val:                                                                                      \
        return msg;
        LOUPE_ERRNO_MAP(LOUPE__ERR_MSG)
#undef LOUPE__ERR_MSG
    default:
        return "Unknown error";
    }
}

const char *loupe_err_name(int code) {
    switch (code) {
    case 0:
        return "OK";
#define LOUPE__ERR_NAME(name, val, msg)                                                            \
    case val:                                                                                      \
        return "E" #name;
        LOUPE_ERRNO_MAP(LOUPE__ERR_NAME)
#undef LOUPE__ERR_NAME
    default:
        return "EUNKNOWN";
    }
}

const char *loupe_last_error(void) {
    return tls_detail;
}

int loupe__err(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_detail, sizeof(tls_detail), fmt, ap);
    va_end(ap);
    return code;
}

void loupe__err_append(const char *fmt, ...) {
    size_t n = strlen(tls_detail);
    if (n + 3 >= sizeof(tls_detail)) {
        return;
    }
    memcpy(tls_detail + n, "; ", 3);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tls_detail + n + 2, sizeof(tls_detail) - n - 2, fmt, ap);
    va_end(ap);
}

int loupe__err_nomem(int code) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
        loupe__err_append("this process's RLIMIT_AS (ulimit -v) is %.1f MiB, which the program's "
                          "memory and the stop's share",
                          (double)rl.rlim_cur / 1048576.0);
    }
    return code;
}

int loupe__err_prefix(int code, const char *fmt, ...) {
    char old[sizeof(tls_detail)];
    memcpy(old, tls_detail, sizeof old);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tls_detail, sizeof(tls_detail), fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n + 2 >= sizeof(tls_detail)) {
        return code; /* the prefix alone fills the buffer */
    }
    /* ": " then as much of the old detail as fits (cut, as loupe__err() cuts a long one) */
    size_t at = (size_t)n, room = sizeof(tls_detail) - at - 3, len = strlen(old);
    memcpy(tls_detail + at, ": ", 2);
    memcpy(tls_detail + at + 2, old, len < room ? len : room);
    tls_detail[at + 2 + (len < room ? len : room)] = 0;
    return code;
}
