/* region.c: the recording region: one mapping per process with the header, the chunk table,
 * the thread descriptors and the chunks (record.h). Anonymous memory by default; under
 * `loupe record`, the memfd the recorder passed in LOUPE_RECORD_SHM_FD, so that the recorder
 * still has every event after the program dies (recover.c reads it from the outside).
 *
 * The mapping reserves address space for the whole capacity (MAP_NORESERVE: no swap is
 * committed) and is populated chunk by chunk: the first chunks at the session's start, the rest
 * by the keeper ahead of the threads' demand. Memory therefore grows with the events recorded,
 * plus one chunk per live thread that records, plus a descriptor per thread.
 *
 * A shared region grows within its file system's room (a tmpfs: /dev/shm, 64 MiB in a container
 * by default). A page of a MAP_SHARED tmpfs file that the file system cannot hold is a SIGBUS at
 * the access that first touches it, read or write, which tracing must never cause: so no page
 * of a shared region is touched before MADV_POPULATE_WRITE made it (loupe__region_back), which
 * fails instead. At the start, the header, the chunk table's first page and the first
 * descriptors; then each chunk as the keeper populates it or a thread takes it, a descriptor as
 * a thread registers, a page of the name table as the keeper writes it. A chunk the file system
 * has no room for is remapped over with anonymous memory (MAP_FIXED) and marked
 * LOUPE__META_ANON: the process records on, and a death loses only those chunks, counted (the
 * recovery reads the table, not the chunk). Without room for the start's pages the process
 * records into anonymous memory and its region file says so (one byte: recover.c).
 */
#include "record/region.h"

#include "base/error.h"
#include "record/record.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14, include/uapi/asm-generic/mman-common.h */
#endif

/* Descriptors: threads alive or exited within one session (exited ones are recycled at the
 * stop). 262,144 x 320 bytes = 80 MiB of address space, touched as threads register. */
#define MAX_THREADS ((uint64_t)1 << 18)

static size_t region_size;
static int region_shared;
static int populate_works = 1;  /* MADV_POPULATE_WRITE (Linux 5.14): 0 once it said EINVAL */
static char regions_path[4096]; /* LOUPE_RECORD_REGIONS, at the shared region's start */
uint64_t loupe__chunk_end, loupe__desc_end, loupe__region_gen;

static uint64_t align_up(uint64_t v, uint64_t a) {
    return (v + a - 1) / a * a;
}

void loupe__region_layout(loupe__region_hdr *h, uint64_t nchunks, uint64_t max_threads) {
    h->header_size = (uint32_t)sizeof(loupe__region_hdr);
    h->nchunks = nchunks;
    h->max_threads = max_threads;
    h->meta_off = align_up(sizeof(loupe__region_hdr), 4096);
    h->desc_off = align_up(h->meta_off + nchunks * sizeof(loupe__chunk_meta), 4096);
    h->names_off = align_up(h->desc_off + max_threads * sizeof(loupe__thread), 4096);
    h->names_size = (uint64_t)8 << 20; /* the keeper's name table: 8 MiB */
    h->chunk_off = align_up(h->names_off + h->names_size, 65536);
    h->total_size = h->chunk_off + nchunks * LOUPE__CHUNK_SLOTS * sizeof(loupe__ev);
}

/* The region's share of a finite soft RLIMIT_AS (ulimit -v, prlimit --as): an eighth of it, at
 * least 32 MiB; UINT64_MAX when there is no limit. The region is reserved whole at the start
 * (MAP_NORESERVE commits nothing, but the address space counts against the limit): 1.1 GiB by
 * default took a program with a 512 MiB limit every byte it had (its malloc failed, its stack
 * could not grow). */
static uint64_t as_limit(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) {
        return UINT64_MAX;
    }
    return (uint64_t)rl.rlim_cur;
}

static uint64_t as_budget(void) {
    uint64_t l = as_limit();
    if (l == UINT64_MAX) {
        return UINT64_MAX;
    }
    return l / 8 < ((uint64_t)32 << 20) ? (uint64_t)32 << 20 : l / 8;
}

/* Fits a region of chunks chunks and *threads descriptors into budget bytes: fewer descriptors
 * first (a quarter of the budget at most, 1,024 at least), then fewer chunks (16 at least).
 * Returns the chunks that fit. */
static uint64_t fit_budget(uint64_t chunks, uint64_t *threads, uint64_t budget) {
    loupe__region_hdr probe;
    memset(&probe, 0, sizeof probe);
    loupe__region_layout(&probe, chunks, *threads);
    if (probe.total_size <= budget) {
        return chunks;
    }
    uint64_t t = budget / 4 / sizeof(loupe__thread);
    *threads = t < 1024 ? 1024 : t > MAX_THREADS ? MAX_THREADS : t;
    loupe__region_layout(&probe, 0, *threads);
    uint64_t per = LOUPE__CHUNK_SLOTS * sizeof(loupe__ev) + sizeof(loupe__chunk_meta);
    uint64_t fit =
        budget > probe.total_size + 65536 ? (budget - probe.total_size - 65536) / per : 0;
    fit = fit < 16 ? 16 : fit;
    return fit < chunks ? fit : chunks;
}

static void init_header(void *r, uint64_t nchunks, uint64_t threads) {
    loupe__region_hdr *h = r;
    memset(h, 0, sizeof *h);
    memcpy(h->magic, "LOUPERGN", 8);
    h->version = LOUPE__REGION_VERSION;
    loupe__region_layout(h, nchunks, threads);
    h->base_addr = (uint64_t)(uintptr_t)r;
    h->pid = (uint64_t)getpid();
    /* The chunk table is not written here: a chunk's entry is set when it is taken (chunk_take),
     * and only the chains of taken chunks are read. Touching it all would fault in 16 bytes per
     * chunk of capacity (256 KiB by default) in every process, of a shared region's file too. */
}

int loupe__region_back(void *a, size_t len) {
    if (!region_shared || !populate_works || len == 0) {
        return 0;
    }
    int e = errno;
    uintptr_t lo = (uintptr_t)a & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)a + len + 4095) & ~(uintptr_t)4095;
    int r = madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
    errno = e;
    return r == 0 ? 0 : -1;
}

int loupe__chunk_back(uint32_t c) {
    if (!region_shared || !populate_works) {
        return 0;
    }
    loupe__region_hdr *h = LOUPE__HDR;
    loupe__chunk_meta *m = loupe__meta(loupe__region, c);
    if (loupe__region_back(m, sizeof *m) != 0) {
        __atomic_store_n(&h->shm_full, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&h->shm_refused, 1, __ATOMIC_RELAXED);
        return -1;
    }
    void *a = loupe__chunk(loupe__region, c);
    size_t len = (size_t)LOUPE__CHUNK_SLOTS * sizeof(loupe__ev);
    if (!__atomic_load_n(&h->shm_full, __ATOMIC_RELAXED) && loupe__region_back(a, len) == 0) {
        return 0;
    }
    /* No room in the file: the chunk's addresses become the process's own memory. Only the
     * taker can touch it (it is not in any chain yet, and the keeper populates no chunk once
     * shm_full is set; one populated concurrently is anonymous memory populated). */
    int e = errno;
    void *p = mmap(a, len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    errno = e;
    __atomic_store_n(&h->shm_full, 1, __ATOMIC_RELAXED);
    if (p == MAP_FAILED) {
        __atomic_fetch_add(&h->shm_refused, 1, __ATOMIC_RELAXED);
        return -1;
    }
    __atomic_fetch_or(&m->tail, LOUPE__META_ANON, __ATOMIC_RELAXED);
    __atomic_fetch_add(&h->shm_anon_chunks, 1, __ATOMIC_RELAXED);
    return 0;
}

/* The pages a shared region r of layout lay needs before its first event: the header, the chunk
 * table's first page and the first descriptors' (a page each). 0, or -1 when the file system
 * has no room for them. */
static int back_start(void *r, const loupe__region_hdr *lay) {
    populate_works = 1;
    if (madvise(r, 4096, MADV_POPULATE_WRITE) != 0) {
        if (errno == EINVAL) {
            populate_works = 0; /* before Linux 5.14: touched as before (the preload's room rule) */
            return 0;
        }
        return -1;
    }
    return madvise((char *)r + lay->meta_off, 4096, MADV_POPULATE_WRITE) == 0 &&
                   madvise((char *)r + lay->desc_off, 4096, MADV_POPULATE_WRITE) == 0
               ? 0
               : -1;
}

/* The memfd `loupe record` passed, or -1. Taken once: LOUPE_RECORD_SHM_FD is removed, the fd
 * made close-on-exec, so that programs this one starts record into regions of their own. */
static int take_shm_fd(void) {
    const char *v = getenv("LOUPE_RECORD_SHM_FD");
    if (v == NULL || v[0] == 0) {
        return -1;
    }
    char *end;
    long fd = strtol(v, &end, 10);
    int junk = *end != 0; /* read before the unsetenv: bash's own unsetenv frees the string */
    const char *pid = getenv("LOUPE_RECORD_SHM_PID");
    unsetenv("LOUPE_RECORD_SHM_FD");
    if (junk || fd < 0 || fd > 65535 || (pid != NULL && atol(pid) != (long)getpid())) {
        return -1;
    }
    struct stat st;
    if (fstat((int)fd, &st) != 0) {
        return -1;
    }
    (void)fcntl((int)fd, F_SETFD, FD_CLOEXEC);
    /* the file system whose room shm_room() watches: the regions' directory, when the fd is a
     * file there; none for loupe record's memfd of the root process (the kernel's internal
     * tmpfs, without a size limit: f_blocks 0), which /dev/shm's room does not concern */
    const char *rg = getenv("LOUPE_RECORD_REGIONS");
    struct statfs fs;
    int unbounded = fstatfs((int)fd, &fs) == 0 && fs.f_blocks == 0;
    snprintf(regions_path, sizeof regions_path, "%s", rg != NULL && !unbounded ? rg : "");
    return (int)fd;
}

int loupe__region_ensure(uint64_t session_slots) {
    uint64_t chunks = (session_slots + LOUPE__CHUNK_SLOTS - 1) / LOUPE__CHUNK_SLOTS;
    if (loupe__region != NULL && chunks <= LOUPE__HDR->nchunks) {
        return 0;
    }
    if (chunks > LOUPE__NO_CHUNK - 1) {
        return loupe__err(LOUPE_EINVALID, "a session of %llu events is above loupe's limit",
                          (unsigned long long)session_slots);
    }
    uint64_t threads = MAX_THREADS, budget = as_budget();
    if (budget != UINT64_MAX) {
        uint64_t asked = chunks;
        chunks = fit_budget(chunks, &threads, budget);
        const char *q = getenv("LOUPE_RECORD_QUIET");
        if (chunks < asked && (q == NULL || strcmp(q, "1") != 0)) {
            fprintf(stderr,
                    "loupe: pid %ld: RLIMIT_AS (ulimit -v) is %llu MiB: the recording region "
                    "takes an eighth of it, so the session holds %llu events, not %llu; events "
                    "past that are dropped and counted\n",
                    (long)getpid(), (unsigned long long)(as_limit() >> 20),
                    (unsigned long long)(chunks * LOUPE__CHUNK_SLOTS),
                    (unsigned long long)session_slots);
        }
    }
    loupe__region_hdr probe;
    memset(&probe, 0, sizeof probe);
    loupe__region_layout(&probe, chunks, threads);
    size_t size = (size_t)probe.total_size;
    int fd = loupe__region == NULL ? take_shm_fd() : -1;
    void *r = MAP_FAILED;
    int e = 0;
    if (fd >= 0) {
        if (ftruncate(fd, (off_t)size) == 0) {
            r = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, fd, 0);
        }
        e = errno;
        if (r != MAP_FAILED) {
            region_shared = 1;
            if (back_start(r, &probe) != 0) {
                /* No room for the start's pages: the process records into its own memory;
                 * the file's one byte tells `loupe record` why a death leaves nothing. */
                munmap(r, size);
                r = MAP_FAILED;
                region_shared = 0;
                (void)!ftruncate(fd, 1);
                e = ENOSPC;
            }
        }
        close(fd); /* the mapping keeps the memfd; `loupe record` holds its own descriptor */
    }
    int shared = r != MAP_FAILED;
    if (r == MAP_FAILED) {
        r = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                 -1, 0);
        e = errno;
    }
    if (r == MAP_FAILED) {
        /* Say what would fit: the largest mapping the process can make now. */
        uint64_t lo = 0, hi = chunks;
        while (lo + 1 < hi) {
            uint64_t mid = lo + (hi - lo) / 2;
            loupe__region_layout(&probe, mid, threads);
            void *t = mmap(NULL, (size_t)probe.total_size, PROT_NONE,
                           MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
            if (t == MAP_FAILED) {
                hi = mid;
            } else {
                munmap(t, (size_t)probe.total_size);
                lo = mid;
            }
        }
        return loupe__err(LOUPE_ENOMEM,
                          "cannot map %zu bytes for a session of %llu events: %s (errno %d); "
                          "the process can map %llu events now (a limit such as ulimit -v): set "
                          "session_events (loupe record --session-events) to that or less",
                          size, (unsigned long long)session_slots, strerror(e), e,
                          (unsigned long long)(lo > 4 ? (lo - 4) * LOUPE__CHUNK_SLOTS : 0));
    }
    init_header(r, chunks, threads);
    __atomic_store_n(&loupe__chunk_end, chunks, __ATOMIC_SEQ_CST);
    __atomic_store_n(&loupe__desc_end, threads, __ATOMIC_SEQ_CST);
    /* An older, smaller region stays mapped: a thread that was interrupted inside a recording
     * call may still write into its chunk. Live threads register again in the new one. */
    loupe__region = r;
    loupe__region_gen++;
    region_size = size;
    region_shared = shared;
    return 0;
}

/* The regions' file system keeps an eighth of its size free (4 MiB at least) for the program's
 * own use of it and for the first pages of the tree's next processes: below that a shared
 * region stops growing in its file (shm_full: chunks are then taken into the process's own
 * memory), above it again it grows again. The keeper's passes ask, before they populate. */
static void shm_room(loupe__region_hdr *h) {
    struct statfs sf;
    if (regions_path[0] == 0 || statfs(regions_path, &sf) != 0) {
        return;
    }
    uint64_t size = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize;
    uint64_t avail = (uint64_t)sf.f_bavail * (uint64_t)sf.f_bsize;
    uint64_t reserve = size / 8 > ((uint64_t)4 << 20) ? size / 8 : (uint64_t)4 << 20;
    __atomic_store_n(&h->shm_full, avail < reserve, __ATOMIC_RELAXED);
}

void loupe__region_populate(uint64_t upto) {
    if (loupe__region == NULL) {
        return;
    }
    loupe__region_hdr *h = LOUPE__HDR;
    uint64_t end = __atomic_load_n(&loupe__chunk_end, __ATOMIC_SEQ_CST);
    if (upto > end) {
        upto = end; /* the rest was given back to a lowered RLIMIT_AS */
    }
    uint64_t from = __atomic_load_n(&h->populated, __ATOMIC_ACQUIRE);
    if (from >= upto) {
        return;
    }
    char *a = (char *)loupe__chunk(loupe__region, (uint32_t)from);
    size_t len = (size_t)(upto - from) * LOUPE__CHUNK_SLOTS * sizeof(loupe__ev);
    if (region_shared && populate_works) {
        shm_room(h);
        /* the chunks' table entries first (16 bytes a chunk), then the chunks: a page that did
         * not fit stops the populating for good (the takers back their chunks themselves) */
        if (__atomic_load_n(&h->shm_full, __ATOMIC_RELAXED) ||
            loupe__region_back(loupe__meta(loupe__region, (uint32_t)from),
                               (size_t)(upto - from) * sizeof(loupe__chunk_meta)) != 0 ||
            loupe__region_back(a, len) != 0) {
            __atomic_store_n(&h->shm_full, 1, __ATOMIC_RELAXED);
            return;
        }
    } else if (madvise(a, len, MADV_POPULATE_WRITE) != 0) {
        /* Older kernels: fault each page in by writing it. The chunks may be in use already
         * (the pool's cursor can pass the keeper): an atomic add of 0 keeps what a thread
         * wrote. */
        for (size_t off = 0; off < len; off += 4096) {
            (void)__atomic_fetch_add((uint64_t *)(void *)(a + off), 0, __ATOMIC_RELAXED);
        }
    }
    uint64_t cur = from;
    while (cur < upto && !__atomic_compare_exchange_n(&h->populated, &cur, upto, 0,
                                                      __ATOMIC_RELEASE, __ATOMIC_RELAXED)) {
    }
}

void loupe__region_fit_as(uint64_t limit) {
    if (loupe__region == NULL || limit == UINT64_MAX) {
        return;
    }
    uint64_t budget = limit / 8 < ((uint64_t)32 << 20) ? (uint64_t)32 << 20 : limit / 8;
    loupe__region_hdr *h = LOUPE__HDR;
    uint64_t cend = __atomic_load_n(&loupe__chunk_end, __ATOMIC_SEQ_CST);
    uint64_t dend = __atomic_load_n(&loupe__desc_end, __ATOMIC_SEQ_CST);
    uint64_t threads = dend;
    uint64_t want = fit_budget(cend, &threads, budget);
    if (want >= cend && threads >= dend) {
        return;
    }
    /* The keeper held (it populates chunks), then the ends lowered before the cursors are
     * read: a take that passed its cursor after that read sees the lower end and refuses
     * (seq_cst on both sides: chunk_take, thread_register); one before it is below the cursor
     * read here, which is where the unmapping starts. */
    loupe__keeper_pause();
    size_t cbytes = (size_t)LOUPE__CHUNK_SLOTS * sizeof(loupe__ev);
    if (want < cend) {
        __atomic_store_n(&loupe__chunk_end, want, __ATOMIC_SEQ_CST);
        uint64_t from = __atomic_load_n(&h->bump, __ATOMIC_SEQ_CST);
        from = from > want ? from : want;
        if (from < cend) {
            (void)munmap((char *)loupe__region + h->chunk_off + from * cbytes,
                         (size_t)(cend - from) * cbytes);
        }
        uint64_t cap = __atomic_load_n(&h->session_chunks, __ATOMIC_RELAXED);
        if (cap > from) {
            __atomic_store_n(&h->session_chunks, from, __ATOMIC_RELAXED);
        }
    }
    if (threads < dend) {
        __atomic_store_n(&loupe__desc_end, threads, __ATOMIC_SEQ_CST);
        uint64_t from = __atomic_load_n(&h->desc_bump, __ATOMIC_SEQ_CST);
        from = from > threads ? from : threads;
        uint64_t lo = align_up(h->desc_off + from * sizeof(loupe__thread), 4096);
        uint64_t hi = h->desc_off + dend * sizeof(loupe__thread);
        hi = hi > h->names_off ? h->names_off : hi / 4096 * 4096;
        if (from < dend && lo < hi) {
            (void)munmap((char *)loupe__region + lo, (size_t)(hi - lo));
        }
    }
    loupe__keeper_resume();
}

void loupe__region_forget(void) {
    /* Only the forking thread exists in the child, and it is not inside a recording call (it
     * called fork): nothing can write the mapping any more. */
    if (loupe__region != NULL) {
        munmap(loupe__region, region_size);
    }
    loupe__region = NULL;
    loupe__region_gen++;
    region_size = 0;
    region_shared = 0;
    __atomic_store_n(&loupe__chunk_end, 0, __ATOMIC_SEQ_CST);
    __atomic_store_n(&loupe__desc_end, 0, __ATOMIC_SEQ_CST);
}

int loupe__region_shared(void) {
    return region_shared;
}
