/* spool.c: the spool of full chunks (spool.h). The keeper, each pass, moves the chunks a
 * keep-first thread has finished (full, and followed by another in its chain) from the head of
 * the thread's chain to the spool file, oldest first, and gives them back to the pool: a spooled
 * chunk no longer counts against the session's capacity, so memory stays bounded by the
 * capacity while every event is kept. The collector reads them back at the stop.
 *
 * Who touches a chain's head (first_chunk), and why the keeper may move it:
 * - the owner writes first_chunk only when it joins a session (before it publishes its state
 *   word with a release store, which the keeper reads first with acquire) and in keep-last's
 *   recycling (the spool refuses keep-last: session.c);
 * - thread exit and the collector/recycling rewrite it under the registry lock, which the pass
 *   holds (taken with a try: the stop takes it while holding the keeper's lock);
 * - the names scan (names.c) runs on the keeper itself, before the pass.
 * A chunk is finished when its meta's next is set: the owner stores used, then next (release),
 * and never writes the chunk again in keep-first. The owner's current chunk has next unset, so
 * the pass never touches it.
 *
 * The file: records of {loupe__spool_rec, 64 KiB of slots}, at seq * record size. The keeper
 * keeps, in memory, the descriptor of each record (4 bytes per 64 KiB chunk) so that the
 * collector reads each thread's records with pread, in order, one chunk buffer at a time.
 * A recovery (the program died) has no such index: it reads the records' headers from the file
 * the region's header names, as many as the header counts, plus the one a death may have left
 * written but not counted (loupe__spool_each_in).
 */
#include "record/spool.h"

#include "base/error.h"
#include "base/fs.h"
#include "base/ownfd.h"
#include "record/region.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <sys/syscall.h>
#include <unistd.h>

#define REC_SIZE (sizeof(loupe__spool_rec) + (size_t)LOUPE__CHUNK_SLOTS * sizeof(loupe__ev))

/* Written at the open and the close (keeper paused, gate closed) and by the keeper's passes. */
static int spool_fd = -1;
static int spool_failed;     /* a write failed: no more spooling this session (atomic) */
static uint64_t spool_n;     /* records written (atomic: loupe__spool_chunks reads it) */
static uint64_t spool_slots; /* the events in them (atomic: loupe__spool_slots) */
static uint32_t *spool_desc; /* the descriptor of each record */
static size_t spool_cap;
static char spool_file[1024]; /* as the header's spool_path */
static char spool_err[1400];
static pid_t spool_pid;       /* the process that opened it: a fork child must not remove it */
static int spool_spill;       /* spool only past the high-water mark; the file made at the first */
static uint64_t spool_budget; /* bytes the file may take (UINT64_MAX: no limit) */
static char spool_budget_why[96]; /* how the budget was set, for the error that names it */
static int spilling; /* spill: the last pass found the capacity past its mark (atomic) */

/* "12.3 GiB", "640.0 MiB", "200.0 KiB", "512 B": a size for a message. */
static void put_size(char *b, size_t n, uint64_t v) {
    if (v >= (1ull << 30)) {
        snprintf(b, n, "%.1f GiB", (double)v / (double)(1ull << 30));
    } else if (v >= (1ull << 20)) {
        snprintf(b, n, "%.1f MiB", (double)v / (double)(1ull << 20));
    } else if (v >= (1ull << 10)) {
        snprintf(b, n, "%.1f KiB", (double)v / (double)(1ull << 10));
    } else {
        snprintf(b, n, "%llu B", (unsigned long long)v);
    }
}

/* The budget: budget, or half of what dir's file system has free now (0). */
static void set_budget(const char *dir, uint64_t budget) {
    char sz[32];
    spool_budget_why[0] = 0;
    if (budget == 0) {
        struct statvfs v;
        if (statvfs(dir, &v) != 0) {
            spool_budget = UINT64_MAX; /* the writes say what fails */
            return;
        }
        uint64_t free_b = (uint64_t)v.f_bavail * (uint64_t)v.f_frsize;
        spool_budget = free_b / 2;
        put_size(sz, sizeof sz, free_b);
        snprintf(spool_budget_why, sizeof spool_budget_why,
                 "half of the %s free there at the start", sz);
        return;
    }
    spool_budget = budget;
    snprintf(spool_budget_why, sizeof spool_budget_why, "as given");
}

int loupe__spool_open(const char *dir, int spill, uint64_t budget) {
    loupe__spool_close();
    __atomic_store_n(&spool_failed, 0, __ATOMIC_RELAXED);
    spool_err[0] = 0;
    __atomic_store_n(&spool_n, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&spool_slots, 0, __ATOMIC_RELAXED);
    if (dir == NULL) {
        return 0;
    }
    int r = loupe__mkdirs(dir);
    if (r != 0) {
        return loupe__err_prefix(r, "spool_dir %s", dir);
    }
    char f[sizeof spool_file];
    int n = snprintf(f, sizeof f, "%s/loupe-spool-%ld.bin", dir, (long)getpid());
    if (n < 0 || (size_t)n >= sizeof f) {
        return loupe__err(LOUPE_EIO, "spool_dir %s: the path is too long", dir);
    }
    spool_spill = spill;
    set_budget(dir, budget);
    if (!spill) {
        int fd = loupe__fd_open(f, O_RDWR | O_CREAT | O_TRUNC, 0600, "the event spool");
        if (fd < 0) {
            int e = errno;
            return loupe__err(LOUPE_EIO, "spool_dir %s: cannot open %s: %s (errno %d)", dir, f,
                              strerror(e), e);
        }
        spool_fd = fd; /* a number of loupe's, checked at each write (base/ownfd.h) */
    }
    spool_pid = getpid();
    memcpy(spool_file, f, (size_t)n + 1);
    if (loupe__region != NULL) {
        loupe__region_hdr *h = LOUPE__HDR;
        memcpy(h->spool_path, f, (size_t)n + 1);
        __atomic_store_n(&h->spool_chunks, 0, __ATOMIC_RELEASE);
    }
    return 0;
}

void loupe__spool_close(void) {
    if (spool_fd >= 0 || spool_file[0]) {
        loupe__fd_close(spool_fd); /* only a number still loupe's */
        spool_fd = -1;
        if (spool_pid == getpid()) {
            (void)unlink(spool_file);
        }
    }
    free(spool_desc);
    spool_desc = NULL;
    spool_cap = 0;
    if (loupe__region != NULL) {
        loupe__region_hdr *h = LOUPE__HDR;
        __atomic_store_n(&h->spool_chunks, 0, __ATOMIC_RELEASE);
        h->spool_path[0] = 0;
    }
    spool_file[0] = 0;
}

static void fail(int e, int fd) {
    __atomic_store_n(&spool_failed, 1, __ATOMIC_RELEASE);
    char lost[160];
    if (e == EBADF && loupe__fd_lost(lost, sizeof lost) > 0) {
        snprintf(spool_err, sizeof spool_err,
                 "%s, and %s could not be opened again after %llu chunks", lost, spool_file,
                 (unsigned long long)spool_n);
    } else {
        snprintf(spool_err, sizeof spool_err, "write to %s failed after %llu chunks: %s (errno %d)",
                 spool_file, (unsigned long long)spool_n, strerror(e), e);
    }
    /* A record cut short stays out of the file: the collector reads spool_n records only. */
    if (fd >= 0 && loupe__fd_ok(fd)) {
        (void)ftruncate(fd, (off_t)(spool_n * REC_SIZE));
    }
}

/* spool_fd, still loupe's or opened again (the program may close every fd: base/ownfd.h). */
static int keep_fd(void) {
    return loupe__fd_keep(&spool_fd, spool_file, O_RDWR, spool_n * REC_SIZE, "the event spool");
}

/* Appends chunk c of t (used slots). 0, or -1 when it failed (the spool is off then). */
static int put(const loupe__thread *t, uint32_t c, uint32_t used) {
    if (spool_budget != UINT64_MAX && (spool_n + 1) * REC_SIZE > spool_budget) {
        char sz[32];
        put_size(sz, sizeof sz, spool_budget);
        __atomic_store_n(&spool_failed, 1, __ATOMIC_RELEASE);
        snprintf(spool_err, sizeof spool_err,
                 "the spool %s reached its budget of %s (%s) after %llu chunks; later "
                 "events past the session's capacity were dropped",
                 spool_file, sz, spool_budget_why, (unsigned long long)spool_n);
        return -1;
    }
    if (spool_spill && spool_n == 0 && spool_fd < 0) {
        /* the first chunk spilled: the file is made now */
        int fd = loupe__fd_open(spool_file, O_RDWR | O_CREAT | O_TRUNC, 0600, "the event spool");
        if (fd < 0) {
            fail(errno, -1);
            return -1;
        }
        spool_fd = fd;
    } else if (keep_fd() != 0) {
        fail(EBADF, -1);
        return -1;
    }
    int fd = spool_fd;
    if (spool_n >= spool_cap) {
        size_t cap = spool_cap ? spool_cap * 2 : 1024;
        uint32_t *v = realloc(spool_desc, cap * sizeof *v);
        if (v == NULL) {
            fail(ENOMEM, fd);
            return -1;
        }
        spool_desc = v;
        spool_cap = cap;
    }
    loupe__spool_rec rec = {t->id, spool_n, used, loupe__desc_index(loupe__region, t), c, 0};
    struct iovec iov[2] = {
        {&rec, sizeof rec},
        {loupe__chunk(loupe__region, c), (size_t)LOUPE__CHUNK_SLOTS * sizeof(loupe__ev)},
    };
    off_t off = (off_t)(spool_n * REC_SIZE);
    size_t left = REC_SIZE;
    while (left > 0) {
        ssize_t w = pwritev(fd, iov, 2, off);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            fail(w < 0 ? errno : EIO, fd);
            return -1;
        }
        /* a short write (a file-size limit, a full disk): the rest, whose failure says why */
        left -= (size_t)w;
        off += w;
        for (int i = 0; i < 2 && w > 0; i++) {
            size_t k = (size_t)w < iov[i].iov_len ? (size_t)w : iov[i].iov_len;
            iov[i].iov_base = (char *)iov[i].iov_base + k;
            iov[i].iov_len -= k;
            w -= (ssize_t)k;
        }
    }
    spool_desc[spool_n] = rec.desc;
    return 0;
}

/* Counts the record put() wrote last, once its chunk is out of the chain (the order a recovery
 * relies on: written, out of the chain, counted, back in the pool). */
static void counted(uint32_t used) {
    __atomic_store_n(&spool_slots, spool_slots + used, __ATOMIC_RELAXED);
    __atomic_store_n(&spool_n, spool_n + 1, __ATOMIC_RELAXED);
    __atomic_store_n(&LOUPE__HDR->spool_chunks, spool_n, __ATOMIC_RELEASE);
}

/* Whether the session's chunks in use reach 1/k of its capacity: a spill spool starts at half
 * (k 2) and writes until a quarter (k 4) is left in memory, so that a thread recording at full
 * speed has half the capacity to fill while the keeper catches up. */
static int spill_above(const loupe__region_hdr *h, uint64_t k) {
    uint64_t cap = __atomic_load_n(&h->session_chunks, __ATOMIC_RELAXED);
    uint64_t used = __atomic_load_n(&h->chunks_in_use, __ATOMIC_RELAXED);
    return used * k >= cap;
}

/* The chunks at the head of t's chain that t finished, written and given back in order. */
static void spool_thread(loupe__thread *t, void *arg) {
    uint64_t state = *(const uint64_t *)arg;
    if ((__atomic_load_n(&t->hot.state, __ATOMIC_ACQUIRE) & ~(uint64_t)LOUPE__STATE_NOTSC) !=
            state ||
        t->ring || t->tail_chunk != LOUPE__NO_CHUNK) {
        return;
    }
    loupe__region_hdr *h = LOUPE__HDR;
    int shared = loupe__region_shared();
    while (!loupe__spool_failed() && (!spool_spill || spill_above(h, 4))) {
        uint32_t c = __atomic_load_n(&t->first_chunk, __ATOMIC_RELAXED);
        if (c == LOUPE__NO_CHUNK || c >= h->nchunks) {
            return;
        }
        loupe__chunk_meta *m = loupe__meta(loupe__region, c);
        uint32_t next = __atomic_load_n(&m->next, __ATOMIC_ACQUIRE);
        if (next == LOUPE__NO_CHUNK) {
            return; /* the thread's current chunk */
        }
        uint32_t used = m->used > LOUPE__CHUNK_SLOTS ? LOUPE__CHUNK_SLOTS : m->used;
        /* Under `loupe record` the names of the chunk's events must be in the region's table
         * before the chunk leaves memory (a recovery cannot follow the dead program's
         * pointers): the scan, just before this pass, may not have reached it yet. */
        /* A call taken back in this chunk since the scan (while it was the thread's current
         * one): the scan reads it again first. Only this chunk waits: a take-back every 100 ns
         * in the current chunk kept the whole spool waiting, and 85,000-124,000 events were
         * dropped at --session-events 65536 where a run without them dropped none (a helper). */
        if (shared && (t->keeper_scanned < used ||
                       (__atomic_load_n(&t->retract_seq, __ATOMIC_ACQUIRE) != t->retract_ack &&
                        __atomic_load_n(&t->retract_chunk, __ATOMIC_RELAXED) == c))) {
            return;
        }
        if (put(t, c, used) != 0) {
            return; /* the chunk stays: the thread's events count against the capacity again */
        }
        __atomic_store_n(&t->first_chunk, next, __ATOMIC_RELEASE);
        counted(used);
        if (shared) {
            t->keeper_scanned -= used; /* the scan counts from the chain's head */
        }
        loupe__chunk_give(c);
    }
}

uint64_t loupe__spool_pass(void) {
    if (spool_file[0] == 0 || loupe__spool_failed() || loupe__region == NULL) {
        return 0;
    }
    if (spool_spill && !spill_above(LOUPE__HDR, 2)) {
        __atomic_store_n(&spilling, 0, __ATOMIC_RELAXED);
        return 0; /* the chunks stay in memory while the capacity has room */
    }
    __atomic_store_n(&spilling, 1, __ATOMIC_RELAXED);
    if (!loupe__registry_lock_try()) {
        return 0; /* the next pass, a millisecond later */
    }
    uint64_t before = spool_n;
    uint64_t state = __atomic_load_n(&LOUPE__HDR->state, __ATOMIC_ACQUIRE);
    loupe__threads_each(spool_thread, &state);
    loupe__registry_lock_give();
    return spool_n - before;
}

int loupe__spool_on(void) {
    return spool_file[0] != 0 && !loupe__spool_failed() &&
           (!spool_spill || __atomic_load_n(&spilling, __ATOMIC_RELAXED));
}

int loupe__spool_failed(void) {
    return __atomic_load_n(&spool_failed, __ATOMIC_ACQUIRE);
}

uint64_t loupe__spool_slots(void) {
    return __atomic_load_n(&spool_slots, __ATOMIC_RELAXED);
}

void loupe__spool_unlink_own(void) {
    if (spool_file[0] != 0 && spool_pid == (pid_t)syscall(SYS_getpid)) {
        (void)syscall(SYS_unlinkat, AT_FDCWD, spool_file, 0);
    }
}

uint64_t loupe__spool_chunks(void) {
    return __atomic_load_n(&spool_n, __ATOMIC_RELAXED);
}

const char *loupe__spool_path(void) {
    return spool_file;
}

const char *loupe__spool_error(void) {
    return spool_err;
}

/* Reads record i of fd (REC_SIZE bytes) into buf. 0, 1 when the file ends before it, or -1
 * with the detail set. */
static int read_rec(int fd, const char *file, uint64_t i, char *buf) {
    size_t got = 0;
    while (got < REC_SIZE) {
        ssize_t k = pread(fd, buf + got, REC_SIZE - got, (off_t)(i * REC_SIZE + got));
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k == 0) {
            return 1;
        }
        if (k < 0) {
            int e = errno;
            (void)loupe__err(LOUPE_EIO, "cannot read %s: %s (errno %d)", file, strerror(e), e);
            return -1;
        }
        got += (size_t)k;
    }
    return 0;
}

int loupe__spool_each_in(const void *region, uint32_t desc,
                         int (*fn)(const loupe__ev *slots, size_t n, void *arg), void *arg) {
    const loupe__region_hdr *h = region;
    uint64_t n = __atomic_load_n(&h->spool_chunks, __ATOMIC_ACQUIRE);
    char file[sizeof h->spool_path];
    memcpy(file, h->spool_path, sizeof file);
    file[sizeof file - 1] = 0;
    if (file[0] == 0 || desc >= h->max_threads) {
        return 0;
    }
    int fd = open(file, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0; /* gone: the recovery says what it misses (collect.c) */
    }
    char *buf = malloc(REC_SIZE);
    if (buf == NULL) {
        close(fd);
        (void)loupe__err(LOUPE_ENOMEM, "out of memory while reading the spool");
        return -1;
    }
    const loupe__thread *t = loupe__desc((void *)(uintptr_t)region, desc);
    int r = 0;
    for (uint64_t i = 0; i <= n && r == 0; i++) {
        int k = read_rec(fd, file, i, buf);
        if (k != 0) {
            r = k < 0 ? -1 : 0;
            break;
        }
        loupe__spool_rec rec;
        memcpy(&rec, buf, sizeof rec);
        if (rec.seq != i || rec.used > LOUPE__CHUNK_SLOTS) {
            break; /* not a record of this session */
        }
        if (rec.desc != desc) {
            continue;
        }
        if (i == n && __atomic_load_n(&t->first_chunk, __ATOMIC_ACQUIRE) == rec.chunk) {
            break; /* written, but the program died before it left the chain: read from there */
        }
        r = fn((const loupe__ev *)(const void *)(buf + sizeof rec), rec.used, arg);
    }
    free(buf);
    close(fd);
    return r;
}

int loupe__spool_each(uint32_t desc, int (*fn)(const loupe__ev *slots, size_t n, void *arg),
                      void *arg) {
    if (spool_n == 0) {
        return 0;
    }
    if (keep_fd() != 0) {
        char lost[160];
        (void)loupe__fd_lost(lost, sizeof lost);
        return loupe__err(LOUPE_EIO, "the spool %s cannot be read back: %s", spool_file,
                          lost[0] ? lost : "its fd is gone");
    }
    char *buf = NULL;
    int r = 0;
    for (uint64_t i = 0; i < spool_n && r == 0; i++) {
        if (spool_desc[i] != desc) {
            continue;
        }
        if (buf == NULL && (buf = malloc(REC_SIZE)) == NULL) {
            (void)loupe__err(LOUPE_ENOMEM, "out of memory while reading the spool");
            return -1;
        }
        size_t got = 0;
        while (got < REC_SIZE) {
            ssize_t k = pread(spool_fd, buf + got, REC_SIZE - got, (off_t)(i * REC_SIZE + got));
            if (k < 0 && errno == EINTR) {
                continue;
            }
            if (k <= 0) {
                int e = k < 0 ? errno : EIO;
                free(buf);
                (void)loupe__err(LOUPE_EIO, "cannot read %s: %s (errno %d)", spool_file,
                                 strerror(e), e);
                return -1;
            }
            got += (size_t)k;
        }
        loupe__spool_rec rec;
        memcpy(&rec, buf, sizeof rec);
        if (rec.seq != i || rec.desc != desc || rec.used > LOUPE__CHUNK_SLOTS) {
            free(buf);
            (void)loupe__err(LOUPE_EIO, "%s: record %llu is not the one written", spool_file,
                             (unsigned long long)i);
            return -1;
        }
        r = fn((const loupe__ev *)(const void *)(buf + sizeof rec), rec.used, arg);
    }
    free(buf);
    return r;
}
