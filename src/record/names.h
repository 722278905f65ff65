/* names.h: the region's name table (names.c): what the events of a recorded program point at
 * (static zone names, argument keys, counter and instant names, function symbols), copied into
 * the region by the keeper so that a trace can be recovered from outside after the program died.
 * One writer (the keeper, or a thread holding its lock); read after the recording process is gone,
 * or at the stop (a name kept from a library dlclose()d during the session). */
#ifndef LOUPE_RECORD_NAMES_H
#define LOUPE_RECORD_NAMES_H

#include <stddef.h>
#include <stdint.h>

/* What a key stands for: the name of a srcloc, a string, a function's symbol. */
enum { LOUPE__NAME_SRCLOC = 1, LOUPE__NAME_STR = 2, LOUPE__NAME_FUNC = 3 };

/* Scans the events recorded since the last scan and adds the names they point at. Keeper only. */
void loupe__names_scan(void);
/* The same without function symbols (symbolising allocates): async-signal-safe, for a fatal
 * signal's handler in a process whose keeper does not scan (no `loupe record`). */
void loupe__names_scan_signal_safe(void);

/* Empties the table (a session's start: addresses of an earlier session may hold other names
 * now). No session may be running. */
void loupe__names_reset(void);
/* Copies the names the events recorded so far point at, now: a library is about to be unloaded
 * (dlclose), and its static names with it. Takes the keeper's lock; not from a signal handler. A
 * no-op when no session runs. */
void loupe__names_before_unload(void);

/* unload.c: looks up libc's dlclose (libloupe's own dlclose() calls it after the copy). */
void loupe__unload_prepare(void);

/* The name stored for (kind, addr) in the region at r, or NULL. The string lives in the region.
 */
const char *loupe__names_find(const void *r, int kind, uint64_t addr);

#endif
