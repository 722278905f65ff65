/* loupe/error.h: error codes, their messages, and the per-thread error detail.
 *
 * Every loupe call that can fail returns an int: 0 on success or a negative LOUPE_E* code.
 * The codes are append-only: a released code never changes its value or meaning.
 * One X-macro table (LOUPE_ERRNO_MAP) generates the enum, loupe_strerror() and
 * loupe_err_name(), as libuv's UV_ERRNO_MAP does.
 */
#ifndef LOUPE_ERROR_H
#define LOUPE_ERROR_H

#include <loupe/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* XX(NAME, value, message). The state-error messages are jax.profiler's, word for word
 * (jax.profiler's RuntimeError/ValueError texts; loupe's design document, "Public API contract").
 */
#define LOUPE_ERRNO_MAP(XX)                                                                        \
    XX(ALREADY_STARTED, -1,                                                                        \
       "Profile has already been started. Only one profile may be run at a time.")                 \
    XX(NOT_STARTED, -2, "No profile started")                                                      \
    XX(SERVER_RUNNING, -3, "Only one profiler server can be active at a time.")                    \
    XX(NO_SERVER, -4, "No active profiler server.")                                                \
    XX(GPU_OVERFLOW, -5, "Insufficient space to capture a full trace")                             \
    XX(INVALID, -6, "Invalid argument")                                                            \
    XX(NOMEM, -7, "Out of memory")                                                                 \
    XX(IO, -8, "I/O error")                                                                        \
    XX(NO_TRACE, -9, "No recorded trace to write")                                                 \
    XX(FORMAT, -10, "Malformed trace input")                                                       \
    XX(UNSUPPORTED, -11, "Not supported")                                                          \
    XX(TOO_MANY_NAMES, -12, "Allocated too many names")

/** Error codes. All are negative; 0 is success. */
typedef enum loupe_errno {
#define LOUPE__ERR_ENUM(name, val, msg) LOUPE_E##name = (val),
    LOUPE_ERRNO_MAP(LOUPE__ERR_ENUM)
#undef LOUPE__ERR_ENUM
} loupe_errno;

/** The fixed message for a code, e.g. "No profile started" for LOUPE_ENOT_STARTED.
 * Returns "Success" for 0 and "Unknown error" for a value that is not a loupe code.
 * Lifetime: a static string. Thread-safety: any thread. */
LOUPE_API const char *loupe_strerror(int code);

/** The enum name without the LOUPE_ prefix, e.g. "ENOT_STARTED"; "OK" for 0, "EUNKNOWN" else.
 * Lifetime: a static string. Thread-safety: any thread. */
LOUPE_API const char *loupe_err_name(int code);

/** The detail of the last failed loupe call made by this thread: what was wrong, the path and
 * errno, the state the session was in. Empty ("") when no call has failed on this thread.
 * A successful call does not clear it.
 * Lifetime: valid until this thread's next loupe call. Thread-safety: per thread. */
LOUPE_API const char *loupe_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
