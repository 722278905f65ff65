/* ownfd.h: the file descriptors loupe keeps open in the traced program (the sampler's eventfd
 * and perf events, the two spools), held where the program does not look and checked before
 * each use (ownfd.c; DESIGN.md invariant 10; docs/record.md, "What loupe takes from your
 * process").
 *
 * The rule, after LTTng-UST's fd tracker (liblttng-ust-fd): a number loupe keeps is never a
 * standard one (0-2) and never one the program is about to be given: it lives at or above a
 * floor high in the program's RLIMIT_NOFILE (loupe__fd_floor()). Before each use loupe checks
 * that the number still holds the file it opened (st_dev and st_ino, and that the program has not
 * closed it): a number the program closed or replaced (close, dup2 onto it) is the program's,
 * and loupe neither reads, writes nor closes it again. Under `loupe record` the preload's
 * close/dup2/dup3 tell this table at once (loupe__fd_surrender()), close_range/closefrom
 * leave loupe's numbers open, and fcntl of one answers EBADF, as untraced (src/preload/preload.c).
 * ownfd.c's own fcntl calls are system calls, past that answer.
 *
 * Numbers are below LOUPE__FD_MAX (a table of states and identities, zero pages until touched);
 * a process whose free numbers all lie above it gets none (the source is off, said). The table
 * takes no lock (each number's state changes by compare-and-swap), so every call is
 * async-signal-safe, and a fork child keeps its parent's table as fork(2) keeps the files. */
#ifndef LOUPE_BASE_OWNFD_H
#define LOUPE_BASE_OWNFD_H

#include <loupe/export.h>

#include <stddef.h>
#include <stdint.h>

#define LOUPE__FD_MAX 65536

/* The lowest number loupe keeps an fd at, from the soft RLIMIT_NOFILE L read now: 1024 when L is
 * above 2048 (select(2)'s FD_SETSIZE range stays the program's), else L - L/4 (at least 3):
 * loupe's share is the top quarter of a small limit. That is the fallback: loupe__fd_adopt()
 * and loupe__fd_open() first raise a small soft limit (2048 or less) for the moment they open
 * and move the fd, and put loupe's number at or above the program's soft limit, where none of
 * its own open()s reach (ownfd.c's room_begin()); only where the hard limit leaves no room, or
 * another thread holds that room, is this floor used. Thread-safety: any thread;
 * async-signal-safe. */
int loupe__fd_floor(void);

/* Adopts fd, a descriptor loupe just opened for `what` (a static string: "the sampler's
 * wake-up", "the event spool"): moves it to the lowest free number >= loupe__fd_floor() with
 * FD_CLOEXEC, closes the original number and records the file's identity. Returns the new number,
 * or -1 with errno set and fd closed: EMFILE (no free number in loupe's share: the caller counts
 * what it cannot record), EBADF for a bad fd. Thread-safety: any thread; async-signal-safe. */
LOUPE_API int loupe__fd_adopt(int fd, const char *what);

/* open(2) of path with flags (| O_CLOEXEC), adopted. -1 with errno as open(2) or
 * loupe__fd_adopt() sets it. */
int loupe__fd_open(const char *path, int flags, unsigned mode, const char *what);

/* 1 when fd is a number loupe adopted and still holds the same file, else 0. A number the
 * program closed (the preload said so) or replaced (another file is there now: linked use, with no
 * preload to tell) is given up here: counted once with its cause (loupe__fd_lost()), and never
 * used or closed by loupe again. One fstat(2). Thread-safety: any thread; async-signal-safe. */
int loupe__fd_ok(int fd);

/* Closes fd when it is still loupe's (loupe__fd_ok()) and forgets it; a number the program took
 * over is only forgotten, never closed. A negative fd does nothing. Thread-safety: any thread;
 * async-signal-safe. */
void loupe__fd_close(int fd);

/* Keeps *fd a number of loupe's for the file at path, which loupe has written `size` bytes of:
 * 0 when *fd is still loupe's, or when the program had closed or replaced it and path opened
 * again (with flags | O_CLOEXEC, at least `size` bytes long, positioned at `size`) into a new
 * number stored in *fd. -1 (and *fd = -1) when it could not be: the file is gone or shorter.
 * The caller says the cause with loupe__fd_lost(). Thread-safety: the fd's owner only. */
int loupe__fd_keep(int *fd, const char *path, int flags, uint64_t size, const char *what);

/* Calls fn(tid, arg) for each thread of this process, from /proc/self/task read through *dirfd
 * (-1 at first: opened then, and again when the program took the number; a fork child must
 * loupe__fd_close() its parent's and start from -1). fn returns non-zero to stop. No malloc, no
 * fd number but loupe's own after the first call. 0, or -1 when /proc cannot be read.
 * Thread-safety: the fd's owner only. */
int loupe__each_task(int *dirfd, int (*fn)(uint64_t tid, void *arg), void *arg);

/* Marks the calling thread as loupe's (on = 1: the keeper and sampler threads for their whole
 * life, the stop around its symbolisation) or not. On such a thread the preload's open() adopts
 * every fd a library opens (libdw's ELF files), and its close() forgets loupe's numbers instead
 * of taking them for the program's. Thread-safety: the calling thread's own flag. */
void loupe__fd_loupe_thread(int on);

/* Gives the calling thread an fd table of its own (close_range(2) with CLOSE_RANGE_UNSHARE,
 * Linux 5.9) holding only the numbers in keep[0..n) (at most 8; negative ones are skipped), and
 * marks it so: what it opens from then on (perf events, /proc, libdw's files) takes no number of
 * the program's, counts against none of the program's RLIMIT_NOFILE numbers, and no close or
 * dup2 of the program's reaches it. The kept numbers are the same files as the shared table's
 * at those numbers now. 0, or -1 (errno; ENOSYS under TSan, whose fd tracking knows one table):
 * the thread stays on the shared table. Thread-safety: the calling thread; call it before the
 * thread opens anything. */
int loupe__fd_private_table(const int *keep, size_t n);

/* For the preload: 0 on a program's thread, non-zero on loupe's (1: the shared table, 2: a
 * private one). Async-signal-safe. */
LOUPE_API int loupe__fd_is_loupe_thread(void);

/* For the preload's close(): fd is being closed by the calling thread. On a program's thread, one
 * of loupe's numbers becomes the program's (loupe__fd_surrender(fd, "closed")) and the close goes
 * on: 1. On a loupe thread, the number is forgotten; 1 when the close should go on, 0 when the
 * number is the program's now and must be left open. Async-signal-safe. */
LOUPE_API int loupe__fd_closing(int fd);

/* For the preload's interposers: 1 when fd is a number loupe holds (a table read, no system
 * call). Thread-safety: any thread; async-signal-safe. */
LOUPE_API int loupe__fd_is_own(int fd);

/* For the preload's interposers: the program is closing fd (close, or dup2/dup3 onto it), one of
 * loupe's numbers: from now on it is the program's. `how` is a static string ("closed",
 * "replaced with dup2"). The owner finds out at its next loupe__fd_ok() and opens another.
 * Thread-safety: any thread; async-signal-safe. */
LOUPE_API void loupe__fd_surrender(int fd, const char *how);

/* How many of loupe's numbers the program closed or replaced since the process started, and the
 * first one's cause ("the program closed fd 1021 (the event spool)") into buf. Thread-safety:
 * any thread. */
uint64_t loupe__fd_lost(char *buf, size_t size);

#endif
