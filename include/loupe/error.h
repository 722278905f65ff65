/* loupe/error.h: error codes, their messages, and the per-thread error detail.
 *
 * Every loupe call that can fail returns an int: 0 on success or a negative LOUPE_E* code.
 * One X-macro table (LOUPE_ERRNO_MAP) generates the enum, loupe_strerror() and
 * loupe_err_name(), as libuv's UV_ERRNO_MAP does.
 *
 * The range: loupe's codes are -3001, -3002, ... and stay within -3999..-3001. They never
 * collide with a negated errno value (Linux defines 1..133, and no POSIX system comes near
 * 3000), so a program that keeps its own -errno results and loupe's in one int can tell them
 * apart, and loupe never returns a -errno value itself: the errno of a failed system call is in
 * the detail text (loupe_last_error(): "cannot create X: Permission denied (errno 13)").
 * libuv keeps its own codes in a separate range the same way (UV__EOF = -4095 in uv/errno.h).
 *
 * The codes are append-only (curl's rule for CURLcode: "never remove any"): a released code
 * keeps its value and meaning for good, and a new one takes the next free value.
 */
#ifndef LOUPE_ERROR_H
#define LOUPE_ERROR_H

#include <loupe/export.h>

#ifdef __cplusplus
extern "C" {
#endif

/* XX(NAME, value, message). The state-error messages are jax.profiler's, word for word
 * (jax.profiler's RuntimeError/ValueError texts; loupe's design document, "Public API contract").
 *
 * ETOO_MANY_KEYS (loupe_set_metadata past its fixed table of keys) is its own code rather than
 * EINVALID or ENOMEM: the arguments are valid and memory is there, the table is full by design;
 * a caller that sees it can drop a key and retry, which neither of the others would tell it.
 */
#define LOUPE_ERRNO_MAP(XX)                                                                        \
    XX(ALREADY_STARTED, -3001,                                                                     \
       "Profile has already been started. Only one profile may be run at a time.")                 \
    XX(NOT_STARTED, -3002, "No profile started")                                                   \
    XX(SERVER_RUNNING, -3003, "Only one profiler server can be active at a time.")                 \
    XX(NO_SERVER, -3004, "No active profiler server.")                                             \
    XX(GPU_OVERFLOW, -3005, "Insufficient space to capture a full trace")                          \
    XX(INVALID, -3006, "Invalid argument")                                                         \
    XX(NOMEM, -3007, "Out of memory")                                                              \
    XX(IO, -3008, "I/O error")                                                                     \
    XX(NO_TRACE, -3009, "No recorded trace to write")                                              \
    XX(FORMAT, -3010, "Malformed trace input")                                                     \
    XX(UNSUPPORTED, -3011, "Not supported")                                                        \
    XX(TOO_MANY_NAMES, -3012, "Allocated too many names")                                          \
    XX(TOO_MANY_KEYS, -3013, "Too many metadata keys")

/** Error codes. All are negative; 0 is success. */
typedef enum loupe_errno {
#define LOUPE__ERR_ENUM(name, val, msg) LOUPE_E##name = (val),
    LOUPE_ERRNO_MAP(LOUPE__ERR_ENUM)
#undef LOUPE__ERR_ENUM
} loupe_errno;

/** The fixed message for a code, e.g. "No profile started" for LOUPE_ENOT_STARTED.
 * Returns "Success" for 0 and "Unknown error" for a value that is not a loupe code, -errno
 * values included (use strerror() for those).
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
