/* crash.c: what a traced program that dies of a fatal signal leaves behind when no `loupe record`
 * watches it. While a session runs, handlers for SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL (and
 * SIGINT, SIGTERM while their action is the default) write the recording region to
 * <log_dir>/loupe-crash-<pid>.region with async-signal-safe calls only (open, pwrite, ftruncate,
 * write), then let the signal take its default action. `loupe recover FILE` (or
 * loupe_recover_trace() on the file) turns it into a run directory.
 *
 * Under `loupe record` (the region is shared with the recorder, which recovers every death of
 * the tree from it) no handler is installed at all: the traced program sees exactly the
 * dispositions it would have had. That matters beyond a query: CPython installs its SIGINT
 * handler (KeyboardInterrupt) only when SIGINT's action is SIG_DFL at its start, and reads a
 * foreign handler as None (Modules/signalmodule.c), so a handler of ours there turned Ctrl-C
 * into a death without the program's cleanup. The names the last events point at are copied by
 * the keeper every millisecond, and by loupe__crash_exit_names() at an _exit().
 *
 * The dump is sparse: the header, the chunk table, the descriptors and the name table in use,
 * and the chunks handed out so far (everything recorded), at their offsets in the region.
 */
#include "base/error.h"
#include "record/names.h"
#include "record/record.h"
#include "record/region.h"
#include "record/spool.h"
#include "session/session.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <sys/syscall.h>
#include <unistd.h>

static const int fatal[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGINT, SIGTERM};
#define NFATAL (sizeof fatal / sizeof fatal[0])

static struct sigaction saved[NFATAL];
static int installed[NFATAL];
static char dump_path[4200];

static void say(const char *s) {
    ssize_t r = write(2, s, strlen(s));
    (void)r;
}

/* Writes [off, off + len) of the region at the same offset of fd. */
static void dump_range(int fd, uint64_t off, uint64_t len) {
    const char *p = (const char *)loupe__region + off;
    while (len > 0) {
        size_t n = len > ((size_t)1 << 30) ? (size_t)1 << 30 : (size_t)len;
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w <= 0) {
            if (w < 0 && errno == EINTR) {
                continue;
            }
            return;
        }
        p += w;
        off += (uint64_t)w;
        len -= (uint64_t)w;
    }
}

static void on_fatal(int sig) {
    int saved_errno = errno;
    loupe__region_hdr *h = LOUPE__HDR;
    if (h != NULL && __atomic_load_n(&h->active, __ATOMIC_ACQUIRE) && dump_path[0] != 0) {
        loupe__names_scan_signal_safe(); /* the names the events point at, while they exist */
        int fd = open(dump_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd >= 0) {
            uint64_t desc = __atomic_load_n(&h->desc_bump, __ATOMIC_RELAXED);
            uint64_t chunks = __atomic_load_n(&h->bump, __ATOMIC_RELAXED);
            /* what is still mapped (a lowered RLIMIT_AS gave the rest back: region.h) */
            uint64_t dend = __atomic_load_n(&loupe__desc_end, __ATOMIC_RELAXED);
            uint64_t cend = __atomic_load_n(&loupe__chunk_end, __ATOMIC_RELAXED);
            desc = desc > dend ? dend : desc;
            chunks = chunks > cend ? cend : chunks;
            /* The file ends after the last chunk ever handed out: a 1 GiB pool with 2 MiB of
             * events makes a 12 MiB dump, not a sparse 1 GiB one a plain cp would fill in. */
            h->dumped = (uint32_t)chunks + 1;
            uint64_t end = h->chunk_off + chunks * LOUPE__CHUNK_SLOTS * (uint64_t)sizeof(loupe__ev);
            if (ftruncate(fd, (off_t)end) == 0) {
                dump_range(fd, 0, h->desc_off); /* header and chunk table */
                dump_range(fd, h->desc_off, desc * sizeof(loupe__thread));
                dump_range(fd, h->names_off, h->names_size);
                dump_range(fd, h->chunk_off,
                           chunks * LOUPE__CHUNK_SLOTS * (uint64_t)sizeof(loupe__ev));
            }
            close(fd);
            say("loupe: the traced program got a fatal signal; what it recorded is in ");
            say(dump_path);
            say(" (loupe recover FILE writes its run directory)\n");
        }
    }
    /* The default action now: the handler was installed with SA_RESETHAND. A fault re-executes
     * its instruction on return; a raised signal (abort(), kill) must be raised again. */
    for (size_t i = 0; i < NFATAL; i++) {
        if (fatal[i] == sig && installed[i]) {
            (void)sigaction(sig, &saved[i], NULL);
        }
    }
    errno = saved_errno;
    if (sig != SIGSEGV && sig != SIGBUS && sig != SIGFPE && sig != SIGILL) {
        raise(sig);
    }
}

void loupe__crash_arm(const char *log_dir, int on) {
    dump_path[0] = 0;
    if (!on || loupe__region == NULL) {
        return;
    }
    if (loupe__region_shared()) {
        return; /* `loupe record` recovers the region: the program's dispositions stay its own */
    }
    int n =
        snprintf(dump_path, sizeof dump_path, "%s/loupe-crash-%ld.region", log_dir, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof dump_path) {
        dump_path[0] = 0;
        return;
    }
    for (size_t i = 0; i < NFATAL; i++) {
        if (installed[i]) {
            continue;
        }
        struct sigaction old;
        if (sigaction(fatal[i], NULL, &old) != 0) {
            continue;
        }
        /* The program's own handlers stay: only a default action is taken over. */
        if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) {
            continue;
        }
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal;
        sa.sa_flags = (int)(SA_RESETHAND | SA_NODEFER | SA_ONSTACK);
        sigemptyset(&sa.sa_mask);
        if (sigaction(fatal[i], &sa, &saved[i]) == 0) {
            installed[i] = 1;
        }
    }
}

void loupe__crash_disarm(void) {
    dump_path[0] = 0;
    for (size_t i = 0; i < NFATAL; i++) {
        if (installed[i]) {
            struct sigaction cur;
            /* put the old action back only when ours is still there */
            if (sigaction(fatal[i], NULL, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) &&
                cur.sa_handler == on_fatal) {
                (void)sigaction(fatal[i], &saved[i], NULL);
            }
            installed[i] = 0;
        }
    }
}

int loupe__region_collected(void) {
    loupe__region_hdr *h = LOUPE__HDR;
    return h != NULL && loupe__region_shared() && __atomic_load_n(&h->stopped, __ATOMIC_ACQUIRE);
}

void loupe__crash_exit_memlost(const char *path) {
    loupe__region_hdr *h = LOUPE__HDR;
    if (path == NULL || path[0] == 0 || h == NULL || loupe__region_shared() ||
        !__atomic_load_n(&h->active, __ATOMIC_ACQUIRE)) {
        return;
    }
    uint64_t c[5];
    if (loupe__rec_count_memory(c) != 0) {
        return; /* a vfork() child's _exit(): the session is its parent's */
    }
    /* --spool: the chunks spooled die too (the spool alone cannot be read without the region):
     * counted, and the file goes (a helper found 10 spool files left in the log directory) */
    uint64_t spooled = loupe__spool_slots();
    c[0] += spooled;
    c[4] += spooled;
    loupe__spool_unlink_own();
    char line[200]; /* 5 keys of at most 11 bytes, 5 numbers of at most 20 */
    size_t n = 0;
    static const char *const keys[5] = {"events=", " dropped=", " reentered=", " need=", " total="};
    for (int i = 0; i < 5; i++) {
        size_t k = strlen(keys[i]);
        memcpy(line + n, keys[i], k);
        n += k;
        n += loupe__put_dec(line + n, c[i]);
    }
    line[n++] = '\n';
    int e = errno;
    long fd = syscall(SYS_openat, AT_FDCWD, path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (fd >= 0) {
        (void)!syscall(SYS_write, (int)fd, line, n); /* one write: whole or nothing */
        (void)syscall(SYS_close, (int)fd);
    }
    errno = e;
}

void loupe__crash_exit_names(void) {
    loupe__region_hdr *h = LOUPE__HDR;
    if (h == NULL || !loupe__region_shared() || !__atomic_load_n(&h->active, __ATOMIC_ACQUIRE)) {
        return;
    }
    /* The table has one writer: wait for the keeper's pass to end, but never for long (an _exit
     * from a signal handler that interrupted a thread holding the lock must still exit). */
    for (int i = 0; i < 200; i++) {
        if (loupe__keeper_trypause()) {
            loupe__names_scan_signal_safe();
            loupe__keeper_resume();
            return;
        }
        struct timespec ts = {0, 100000}; /* 0.1 ms: a keeper pass is shorter */
        (void)nanosleep(&ts, NULL);
    }
}
