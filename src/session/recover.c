/* recover.c: loupe_recover_trace() (loupe/trace.h): the trace of a program that died while it
 * recorded, read from outside it. Under `loupe record` the program's recording region is a memfd
 * that the recorder holds too (src/record/region.c), so that after a SIGKILL, a crash, _exit()
 * or an exec every event written up to the death is still there: the collector reads the region
 * in its foreign mode (pointers rebased, names from the region's name table, open zones ended at
 * their thread's last event) and the run directory is written as a stop would write it.
 *
 * The region is hostile input: the program may have died of a wild write. Every offset, index
 * and count read from it is checked against the mapping (collect.c does so for the chains).
 */
#include "base/array.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/fs.h"
#include "export/writers.h"
#include "model/builder.h"
#include "model/merge.h"
#include "record/collect.h"
#include "record/region.h"
#include "record/record.h"
#include "record/sample.h"
#include "record/sample_spool.h"
#include "session/session.h"

#include <loupe/trace.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The header is what the region's own layout says for its sizes, and fits the mapping. */
static int header_ok(const loupe__region_hdr *h, size_t size) {
    if (size < sizeof *h || memcmp(h->magic, "LOUPERGN", 8) != 0 ||
        h->version != LOUPE__REGION_VERSION) {
        return 0;
    }
    if (h->nchunks == 0 || h->nchunks >= LOUPE__NO_CHUNK || h->max_threads == 0 ||
        h->max_threads > (1u << 24)) {
        return 0;
    }
    loupe__region_hdr want;
    memset(&want, 0, sizeof want);
    loupe__region_layout(&want, h->nchunks, h->max_threads);
    return want.meta_off == h->meta_off && want.desc_off == h->desc_off &&
           want.names_off == h->names_off && want.names_size == h->names_size &&
           want.chunk_off == h->chunk_off && want.total_size == h->total_size &&
           h->total_size <= size;
}

/* The bytes a region file must hold: the whole region, or for a crash dump its chunks up to the
 * last one used (the rest read as empty). */
static uint64_t file_needs(const loupe__region_hdr *h) {
    if (h->dumped != 0 && h->dumped - 1 <= h->nchunks && h->chunk_off < h->total_size) {
        return h->chunk_off + (uint64_t)(h->dumped - 1) * LOUPE__CHUNK_SLOTS * sizeof(loupe__ev);
    }
    return h->total_size;
}

/* The whole of a spool file, or NULL (errno set; EFBIG for one above the largest cap). */
static unsigned char *read_file(const char *path, size_t *size) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0) {
        return NULL;
    }
    if (fstat(fd, &st) != 0 || st.st_size < 0 || (uint64_t)st.st_size > ((uint64_t)1 << 36)) {
        close(fd);
        errno = EFBIG;
        return NULL;
    }
    unsigned char *buf = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (buf != NULL && got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break; /* cut meanwhile: what was read is parsed */
        }
        got += (size_t)n;
    }
    close(fd);
    *size = got;
    return buf;
}

/* The CPU samples of the dead program: its sampler thread's spool (sample_spool.h) read back,
 * symbolised against the files it had mapped (outside.c's Dwfl of them, the files on disk) and
 * added as a stop adds them (sample.c's collector, the same metadata names), with
 * "loupe_samples_spool" saying what was read and "loupe_samples_spool_dropped" what the spool
 * did not hold. *spool is set to the file (to be removed once the trace is written). 0, or -1
 * when memory ran out. */
static int recover_samples_locked(loupe__mb *mb, const loupe__region_hdr *h, uint64_t stop_ns,
                                  const char **spool) {
    *spool = NULL;
    if (h->samples_path[0] == 0 || memchr(h->samples_path, 0, sizeof h->samples_path) == NULL) {
        return 0; /* the program did not sample, or it was not under loupe record */
    }
    const char *path = h->samples_path;
    char note[1200];
    if (loupe__sample_tid() != 0) {
        /* this process samples itself now: the sampler's store is its own session's */
        snprintf(note, sizeof note, "not read: %.900s: this process is sampling", path);
        return loupe__mb_metadata(mb, "loupe_samples_spool", note) != 0 ? -1 : 0;
    }
    size_t size = 0;
    unsigned char *buf = read_file(path, &size);
    if (buf == NULL) {
        int e = errno;
        snprintf(note, sizeof note, "not read: %.900s: %s (errno %d)", path, strerror(e), e);
        fprintf(stderr, "loupe: pid %llu's CPU samples are lost: %s\n", (unsigned long long)h->pid,
                note + 10);
        return loupe__mb_metadata(mb, "loupe_samples_spool", note) != 0 ? -1 : 0;
    }
    loupe__sspool_read r;
    int prc = loupe__sspool_parse(buf, size, &r);
    free(buf);
    if (prc != 0 && r.hz == 0) {
        loupe__sample_discard();
        snprintf(note, sizeof note, "not read: %.900s: not a sample spool (%zu bytes)", path, size);
        fprintf(stderr, "loupe: pid %llu's CPU samples are lost: %s\n", (unsigned long long)h->pid,
                note + 10);
        *spool = path;
        return loupe__mb_metadata(mb, "loupe_samples_spool", note) != 0 ? -1 : 0;
    }
    if (prc != 0) {
        loupe__sample_discard();
        loupe__sspool_read_free(&r);
        return -1;
    }
    if (r.origin_mono != h->start_mono || r.pid != h->pid) {
        loupe__sample_discard();
        loupe__sspool_read_free(&r);
        snprintf(note, sizeof note, "not read: %.900s: another session's (pid %llu)", path,
                 (unsigned long long)r.pid);
        return loupe__mb_metadata(mb, "loupe_samples_spool", note) != 0 ? -1 : 0;
    }
    if (r.skipped != 0) {
        fprintf(stderr,
                "loupe: pid %llu's sample spool %s: skipped %llu records that were not valid "
                "(%llu bytes); kept %llu samples\n",
                (unsigned long long)h->pid, path, (unsigned long long)r.skipped,
                (unsigned long long)r.skipped_bytes, (unsigned long long)r.samples);
    }
    int n = snprintf(note, sizeof note, "%llu samples, %llu off-CPU intervals",
                     (unsigned long long)r.samples, (unsigned long long)r.offs);
    if (r.skipped != 0) {
        n += snprintf(note + n, sizeof note - (size_t)n,
                      "; skipped %llu records that were not valid (%llu bytes)",
                      (unsigned long long)r.skipped, (unsigned long long)r.skipped_bytes);
    }
    if (r.cut_bytes != 0) {
        n += snprintf(note + n, sizeof note - (size_t)n,
                      "; its last record (%llu bytes) was cut by the program's end",
                      (unsigned long long)r.cut_bytes);
    }
    if (r.dropped_offs != 0) {
        n += snprintf(note + n, sizeof note - (size_t)n, "; %llu off-CPU intervals dropped",
                      (unsigned long long)r.dropped_offs);
    }
    size_t changed = loupe__sspool_keep_same_files(&r);
    if (changed != 0) {
        n += snprintf(note + n, sizeof note - (size_t)n,
                      "; %zu files rebuilt since they were mapped (their samples keep raw "
                      "addresses)",
                      changed);
    }
    if (r.reason[0] != 0) {
        snprintf(note + n, sizeof note - (size_t)n, "; stopped: %.600s", r.reason);
    }
    char dropped[24];
    snprintf(dropped, sizeof dropped, "%llu", (unsigned long long)r.dropped_samples);
    void *dwfl = loupe__maps_dwfl(r.maps, r.nmaps);
    loupe__sspool_read_free(&r);
    /* the trace lasts until its last sample, when that is after its last event: a program that
     * sampled without zones has no other end */
    loupe_model *m = loupe__mb_model(mb);
    if (r.last_mono > h->start_mono && r.last_mono - h->start_mono > m->duration_ns) {
        m->duration_ns = r.last_mono - h->start_mono;
    }
    *spool = path;
    if (loupe__sample_collect_with(mb, stop_ns, dwfl) != 0 ||
        loupe__mb_metadata(mb, "loupe_samples_spool", note) != 0 ||
        loupe__mb_metadata(mb, "loupe_samples_spool_dropped", dropped) != 0) {
        return -1;
    }
    return 0;
}

/* sample.c's store holds one recovery's samples from the restore to the collect: two threads
 * recovering at once take turns. */
static pthread_mutex_t samples_lock = PTHREAD_MUTEX_INITIALIZER;

static int recover_samples(loupe__mb *mb, const loupe__region_hdr *h, uint64_t stop_ns,
                           const char **spool) {
    pthread_mutex_lock(&samples_lock);
    int rc = recover_samples_locked(mb, h, stop_ns, spool);
    pthread_mutex_unlock(&samples_lock);
    return rc;
}

/* A cut region: the chunks in use past cut_at (those the file does not hold whole), per thread
 * of the session, are emptied in the private mapping before the collector reads it (a chunk's
 * used count to 0, a thread's cursor back to the start of a current chunk past the cut), so
 * that it reads the zeros there as no events rather than as events; their events (a chunk's
 * used slots, the current chunk's up to the cursor) are counted as the thread's dropped ones
 * after the collect (cut_account), and loupe_recover_cut says what was cut. */
typedef struct cut_lost_thread {
    uint64_t tid, events, anon_events;
} cut_lost_thread;

/* The same walk empties, in a region read from its live file (not a dump), the chunks the
 * program recorded in its own memory (LOUPE__META_ANON: its regions' file system had no room
 * for them, region.c): the file holds no events there, and theirs are counted lost. */
typedef struct cut_walk {
    loupe__region_hdr *h;
    uint64_t cut_at, chunks, events;
    int anon; /* LOUPE__META_ANON chunks are lost (a live file's region) */
    uint64_t anon_chunks, anon_events;
    cut_lost_thread *v;
    size_t n, cap;
    int failed;
} cut_walk;

static void cut_thread(loupe__thread *t, void *arg) {
    cut_walk *w = arg;
    loupe__region_hdr *h = w->h;
    if ((__atomic_load_n(&t->hot.state, __ATOMIC_ACQUIRE) & ~(uint64_t)LOUPE__STATE_NOTSC) !=
        h->state) {
        return; /* recorded nothing in this session: the collector skips it too */
    }
    const uint64_t chunk_bytes = LOUPE__CHUNK_SLOTS * sizeof(loupe__ev);
    uint64_t lost = 0, anon_lost = 0;
    uint32_t ch = t->first_chunk;
    for (uint64_t guard = 0; ch != LOUPE__NO_CHUNK && ch < h->nchunks && guard < h->nchunks;
         guard++) {
        loupe__chunk_meta *cm = loupe__meta(h, ch);
        int cut = w->cut_at != 0 && h->chunk_off + ((uint64_t)ch + 1) * chunk_bytes > w->cut_at;
        int anon = !cut && w->anon && (cm->tail & LOUPE__META_ANON) != 0;
        int past = cut || anon;
        uint64_t used = cm->used;
        if (ch == t->cur_chunk) {
            /* the cursor is an address in the program: rebased on its chunk's */
            uint64_t cur = (uint64_t)(uintptr_t)t->hot.cur;
            uint64_t base = h->base_addr + h->chunk_off + (uint64_t)ch * chunk_bytes;
            used = cur >= base ? (cur - base) / sizeof(loupe__ev) : 0;
            if (past) {
                t->hot.cur = (loupe__ev *)(uintptr_t)base;
            }
        } else if (past) {
            cm->used = 0;
        }
        used = used > LOUPE__CHUNK_SLOTS ? LOUPE__CHUNK_SLOTS : used;
        if (cut && used > 0) {
            lost += used;
            w->chunks++;
        } else if (anon && used > 0) {
            anon_lost += used;
            w->anon_chunks++;
        }
        if (ch == t->cur_chunk) {
            break;
        }
        ch = cm->next;
    }
    if (lost == 0 && anon_lost == 0) {
        return;
    }
    if (loupe__grow((void **)&w->v, &w->cap, w->n + 1, sizeof(*w->v)) != 0) {
        w->failed = 1;
        return;
    }
    w->v[w->n++] = (cut_lost_thread){t->tid, lost, anon_lost};
    w->events += lost;
    w->anon_events += anon_lost;
}

/* After the collect: the lost events as their threads' dropped ones, and the notes. */
static int cut_account(loupe__mb *mb, const cut_walk *w, uint64_t needs, size_t file_size) {
    loupe_model *m = loupe__mb_model(mb);
    for (size_t k = 0; k < w->n; k++) {
        for (size_t i = 0; i < m->thread_count; i++) {
            loupe_model_thread *th = loupe__mb_thread_at(mb, i);
            if (th->kind == LOUPE_TRACK_THREAD && th->tid == w->v[k].tid) {
                th->events_dropped += w->v[k].events + w->v[k].anon_events;
                th->capacity_needed += w->v[k].events;
                break;
            }
        }
    }
    char note[512];
    if (w->chunks != 0) {
        snprintf(note, sizeof note,
                 "the region was cut short: its header says %llu bytes, the file held %zu; %llu "
                 "chunk%s in use (%llu events) %s past the cut, lost",
                 (unsigned long long)needs, file_size, (unsigned long long)w->chunks,
                 w->chunks == 1 ? "" : "s", (unsigned long long)w->events,
                 w->chunks == 1 ? "was" : "were");
        if (loupe__mb_metadata(mb, "loupe_recover_cut", note) != 0) {
            return -1;
        }
    }
    if (w->anon_chunks != 0) {
        snprintf(note, sizeof note,
                 "%llu event slot%s in %llu chunk%s, lost with the process: its regions' file "
                 "system (/dev/shm) had no room for them, so it recorded them in its own memory",
                 (unsigned long long)w->anon_events, w->anon_events == 1 ? "" : "s",
                 (unsigned long long)w->anon_chunks, w->anon_chunks == 1 ? "" : "s");
        if (loupe__mb_metadata(mb, "loupe_recover_shm_lost", note) != 0) {
            return -1;
        }
    }
    return 0;
}

/* A live region file (a tmpfs under loupe record) mapped for reading without touching its
 * holes: a read fault on a tmpfs hole allocates a page, and a SIGBUS when the file system is
 * full (the reason the program's region has holes at all: region.c). A private, writable
 * mapping of anonymous zeros of the region's size with the file's data extents (SEEK_DATA,
 * SEEK_HOLE) mapped over it, privately: the walk above may empty chunks in it. The mapping,
 * or MAP_FAILED (errno set; EINVAL where the file system cannot say its extents). */
static void *map_extents(int fd, size_t size) {
    void *big = mmap(NULL, size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (big == MAP_FAILED) {
        return MAP_FAILED;
    }
    off_t at = 0;
    while ((size_t)at < size) {
        off_t d = lseek(fd, at, SEEK_DATA);
        if (d < 0) {
            if (errno == ENXIO) {
                break; /* no data past at */
            }
            int e = errno;
            munmap(big, size);
            errno = e;
            return MAP_FAILED;
        }
        off_t e = lseek(fd, d, SEEK_HOLE);
        if (e < 0 || (size_t)e > size) {
            e = (off_t)size;
        }
        off_t lo = d & ~(off_t)4095;
        if (e > lo && mmap((char *)big + lo, (size_t)(e - lo), PROT_READ | PROT_WRITE,
                           MAP_PRIVATE | MAP_FIXED, fd, lo) == MAP_FAILED) {
            int er = errno;
            munmap(big, size);
            errno = er;
            return MAP_FAILED;
        }
        at = e > d ? e : d + 4096;
    }
    return big;
}

int loupe_recover_trace(int fd, const loupe_recover_options *o, loupe_trace_result *res) {
    if (res != NULL) {
        if (loupe__result_check(res, "loupe_recover_trace") != 0) {
            return LOUPE_EINVALID;
        }
        loupe__result_reset(res);
    }
    if (o == NULL || o->log_dir == NULL || o->log_dir[0] == 0 || fd < 0) {
        return loupe__err(LOUPE_EINVALID, "loupe_recover_trace: %s",
                          fd < 0 ? "fd is negative" : "options with a log_dir are required");
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        return loupe__err(LOUPE_EINVALID, "loupe_recover_trace: fd %d: %s", fd, strerror(errno));
    }
    size_t size = (size_t)st.st_size;
    if (S_ISDIR(st.st_mode)) {
        return loupe__err(LOUPE_EINVALID, "loupe_recover_trace: fd %d is a directory", fd);
    }
    if (size == 0) {
        return loupe__err(LOUPE_ENO_TRACE,
                          "loupe_recover_trace: the program never started a session (its "
                          "recording region is empty)");
    }
    if (size == 1) {
        /* region.c's mark: no room for the region's first pages when the process started */
        return loupe__err(LOUPE_ENO_TRACE,
                          "loupe_recover_trace: the process recorded into its own memory, which "
                          "died with it: its regions' file system (/dev/shm) had no room for its "
                          "region when it started (the count of its events is unknown)");
    }
    if (size < sizeof(loupe__region_hdr)) {
        return loupe__err(LOUPE_EFORMAT,
                          "loupe_recover_trace: %zu bytes: too short to be a loupe recording "
                          "region (its header alone is %zu bytes)",
                          size, sizeof(loupe__region_hdr));
    }
    void *r = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
    if (r == MAP_FAILED) {
        return loupe__err(LOUPE_EIO, "loupe_recover_trace: cannot map %zu bytes: %s (errno %d)",
                          size, strerror(errno), errno);
    }
    const loupe__region_hdr *h = r;
    int rc = 0;
    loupe_model *m = NULL;
    /* before the first goto out: out frees its list (a stopped region's early exit freed an
     * uninitialised pointer: loupe record's SIGSEGV on the region of an image that exec'd from a
     * signal handler during its exit's write) */
    cut_walk cw = {0};
    /* A region cut short (a copy that stopped early, a dump on a full disk): what the file holds
     * is read, its chunks wholly inside it and the parts before them (descriptors, chunk
     * table, names: the first 10% or so); the rest reads as empty, and the chunks in use past
     * the cut are counted as lost (cut_lost). */
    uint64_t cut_at = 0, cut_needs = 0;
    size_t file_size = size;
    if (memcmp(h->magic, "LOUPERGN", 8) == 0 && h->version == LOUPE__REGION_VERSION &&
        file_needs(h) > size && h->total_size < ((uint64_t)1 << 44)) {
        const uint64_t chunk_bytes = LOUPE__CHUNK_SLOTS * sizeof(loupe__ev);
        cut_needs = file_needs(h);
        cut_at = size >= h->chunk_off
                     ? h->chunk_off + (size - h->chunk_off) / chunk_bytes * chunk_bytes
                     : size / 4096 * 4096; /* whole pages of the parts before the chunks */
    }
    if (memcmp(h->magic, "LOUPERGN", 8) == 0 && h->version == LOUPE__REGION_VERSION &&
        h->total_size > size && h->total_size < ((uint64_t)1 << 44)) {
        /* A compact crash dump: the file over an empty (zero) mapping of the whole region (a
         * cut one: only its part up to cut_at). */
        size_t keep = cut_at != 0 ? (size_t)cut_at : size;
        /* writable and private when cut: cut_thread empties the chunks past the cut in this
         * copy (copy on write: the file is never changed) */
        int prot = cut_at != 0 ? PROT_READ | PROT_WRITE : PROT_READ;
        void *big = mmap(NULL, (size_t)h->total_size, prot,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (big == MAP_FAILED ||
            (keep > 0 && mmap(big, keep, prot, (cut_at != 0 ? MAP_PRIVATE : MAP_SHARED) | MAP_FIXED,
                              fd, 0) == MAP_FAILED)) {
            int e = errno;
            if (big != MAP_FAILED) {
                munmap(big, (size_t)h->total_size);
            }
            rc = loupe__err(LOUPE_EIO, "loupe_recover_trace: cannot map %llu bytes: %s (errno %d)",
                            (unsigned long long)h->total_size, strerror(e), e);
            goto out;
        }
        munmap(r, size);
        r = big;
        size = (size_t)((const loupe__region_hdr *)big)->total_size;
        h = r;
    }
    int live = 0; /* the region read from the program's own file: its holes are not read */
    if (memcmp(h->magic, "LOUPERGN", 8) == 0 && h->version == LOUPE__REGION_VERSION &&
        h->dumped == 0 && h->total_size == size) {
        void *x = map_extents(fd, size);
        if (x != MAP_FAILED) {
            munmap(r, size);
            r = x;
            h = r;
            live = 1;
        } /* else (a file system without SEEK_DATA): read as mapped, as before */
    }
    if (memcmp(h->magic, "LOUPERGN", 8) == 0 && h->version != LOUPE__REGION_VERSION) {
        rc = loupe__err(LOUPE_EFORMAT,
                        "loupe_recover_trace: the region's layout is version %u, this loupe "
                        "reads version %u only (recover it with the loupe that recorded it)",
                        (unsigned)h->version, (unsigned)LOUPE__REGION_VERSION);
        goto out;
    }
    if (!header_ok(h, size)) {
        rc = loupe__err(LOUPE_EFORMAT,
                        "loupe_recover_trace: not a loupe recording region, or its header is "
                        "damaged (%zu bytes)",
                        size);
        goto out;
    }
    if (h->state == 0 || (h->stopped && !h->active)) {
        rc = loupe__err(LOUPE_ENO_TRACE, "loupe_recover_trace: %s",
                        h->state == 0 ? "the program never started a session"
                                      : "the program stopped its session and wrote its trace");
        goto out;
    }
    /* Ticks to ns: the program's own latest (ticks, ns) pair against its start (the keeper
     * refreshes it every millisecond), else this process's rate (the same machine's TSC). */
    double tpn = 1.0;
    if (h->use_tsc) {
        if (h->rate_mono > h->start_mono + 1000000 && h->rate_ticks > h->start_ticks) {
            tpn = (double)(h->rate_ticks - h->start_ticks) / (double)(h->rate_mono - h->start_mono);
        } else {
            loupe__clock_init();
            tpn = loupe__ticks_per_ns();
        }
    }
    char host[256], cause[600];
    loupe__hostname(host, sizeof host);
    snprintf(cause, sizeof cause, "%s", o->cause != NULL ? o->cause : "the program died");
    loupe_kv meta[1] = {{"loupe_recovered", cause}};
    loupe__collect_params p = {
        .state = h->state,
        .start_ticks = h->start_ticks,
        .stop_ns = UINT64_MAX / 4,
        .stop_ticks = UINT64_MAX,
        .ticks_per_ns = tpn,
        .use_tsc = h->use_tsc,
        .origin_unix_ns = h->origin_unix_ns,
        .pid = h->pid,
        .process_name = o->process_name != NULL ? o->process_name : "",
        .host = host,
        .metadata = meta,
        .metadata_count = 1,
        .region = r,
        .foreign = 1,
        .func_include =
            o->function_filter != NULL && o->function_filter[0] != NULL ? o->function_filter : NULL,
        .func_exclude = o->function_exclude != NULL && o->function_exclude[0] != NULL
                            ? o->function_exclude
                            : NULL,
        .func_min_ns = o->function_min_duration_ns,
        .func_filtering = (o->function_filter != NULL && o->function_filter[0] != NULL) ||
                          (o->function_exclude != NULL && o->function_exclude[0] != NULL) ||
                          o->function_depth != 0 || o->function_min_duration_ns != 0,
    };
    cw = (cut_walk){(loupe__region_hdr *)r, cut_at, 0, 0, live, 0, 0, NULL, 0, 0, 0};
    int walk = cut_at != 0 || (live && h->shm_anon_chunks != 0);
    if (walk) {
        loupe__threads_each_in(r, cut_thread, &cw);
    }
    loupe__mb *mb = loupe__mb_new();
    const char *sample_spool = NULL;
    if (mb == NULL ||
        loupe__session_process_meta(mb, o->parent_pid, o->cmdline != NULL ? o->cmdline : "") != 0 ||
        loupe__collect(mb, &p) != 0 || recover_samples(mb, h, p.stop_ns, &sample_spool) != 0 ||
        (walk && (cw.failed || cut_account(mb, &cw, cut_needs, file_size) != 0))) {
        loupe__mb_abort(mb);
        rc = loupe__err(LOUPE_ENOMEM, "loupe_recover_trace: out of memory while collecting");
        goto out;
    }
    m = loupe__mb_finish(mb);
    if (m == NULL) {
        rc = loupe__err(LOUPE_ENOMEM, "loupe_recover_trace: out of memory while collecting");
        goto out;
    }
    loupe__model_lift_process_meta(m);
    rc = o->run_dir != NULL && o->run_dir[0] != 0
             ? loupe__write_run_into(m, o->run_dir, o->file_prefix, loupe__formats(o->formats, 0),
                                     res)
             : loupe__write_run(m, o->log_dir, o->run_name, loupe__formats(o->formats, 0), res);
    if (rc == 0 && h->spool_path[0] != 0 && memchr(h->spool_path, 0, sizeof h->spool_path)) {
        (void)unlink(h->spool_path); /* its chunks were read back into the trace just written */
    }
    if (rc == 0 && sample_spool != NULL) {
        (void)unlink(sample_spool); /* its samples too */
    }
    if (rc == 0 && loupe__result_fill(res, m) != 0) {
        rc = loupe__err(LOUPE_ENOMEM, "loupe_recover_trace: out of memory (the trace was "
                                      "written)");
    }
out:
    free(cw.v);
    loupe_model_free(m);
    munmap(r, size);
    return rc;
}
