/* sample_spool.c: the samples' spool (sample_spool.h): written by the sampler thread with plain
 * write(2) in batches of up to 256 KiB, never mapped (a full tmpfs is then an ENOSPC to handle,
 * not a SIGBUS), never from the program's threads; read back by a recovery after the program
 * died. The reader treats the file as hostile (the program may have died of a wild write, or
 * the file may have been cut): every size and count is checked before it is used.
 */
#include "record/sample_spool.h"

#include "record/sample.h"

#include "base/elf_id.h"
#include "base/ownfd.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BATCH (256u * 1024u)
#define MAX_PCS 128u
#define MAX_BUILD_ID 64u
#define MAX_PATH 4096u

typedef struct ss_head {
    uint16_t magic, type;
    uint32_t size;
} ss_head;

static int w_fd = -1;
static char w_path[4200];
static uint64_t w_cap, w_fail_at; /* the cap; a simulated ENOSPC past this size (tests) */
static uint64_t w_size;           /* bytes in the file (whole records) */
static unsigned char w_buf[BATCH];
static size_t w_len;
static uint64_t w_batch_samples, w_batch_offs; /* in w_buf: dropped if its write fails */
static loupe__sspool_hdr w_hdr;
static int w_status_dirty;
static uint64_t w_mod_gen = UINT64_MAX;
static uint64_t w_lost = UINT64_MAX;

static uint64_t env_u64(const char *name, uint64_t dflt) {
    const char *v = getenv(name);
    if (v == NULL || v[0] == 0) {
        return dflt;
    }
    char *end;
    unsigned long long n = strtoull(v, &end, 10);
    return *end == 0 ? (uint64_t)n : dflt;
}

static int write_all(int fd, const void *p, size_t n) {
    const unsigned char *c = p;
    while (n > 0) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR) {
            continue;
        }
        if (k <= 0) {
            if (k == 0) {
                errno = ENOSPC; /* a write that makes no progress: what a full file system does */
            }
            return -1;
        }
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

int loupe__sspool_open(const char *path, uint64_t pid, uint64_t origin_mono, uint32_t hz,
                       int stacks, const char *note) {
    loupe__sspool_remove();
    int fd = loupe__fd_open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600, "the sample spool");
    if (fd < 0) {
        return -1;
    }
    memset(&w_hdr, 0, sizeof w_hdr);
    memcpy(w_hdr.magic, "LOUPESMP", 8);
    w_hdr.version = 1;
    w_hdr.header_size = LOUPE__SSPOOL_HEADER;
    w_hdr.pid = pid;
    w_hdr.origin_mono = origin_mono;
    w_hdr.hz = hz;
    w_hdr.stacks = (uint32_t)stacks;
    snprintf(w_hdr.note, sizeof w_hdr.note, "%s", note);
    static unsigned char page[LOUPE__SSPOOL_HEADER];
    memset(page, 0, sizeof page);
    memcpy(page, &w_hdr, sizeof w_hdr);
    if (write_all(fd, page, sizeof page) != 0) {
        int e = errno;
        loupe__fd_close(fd);
        (void)unlink(path);
        errno = e;
        return -1;
    }
    w_fd = fd;
    snprintf(w_path, sizeof w_path, "%s", path);
    w_cap = env_u64("LOUPE_SAMPLE_SPOOL_MAX_BYTES", LOUPE__SSPOOL_DEFAULT_MAX);
    w_fail_at = env_u64("LOUPE_TEST_SAMPLE_SPOOL_ENOSPC", UINT64_MAX);
    w_size = LOUPE__SSPOOL_HEADER;
    w_len = 0;
    w_batch_samples = w_batch_offs = 0;
    w_status_dirty = 0;
    w_mod_gen = UINT64_MAX;
    w_lost = UINT64_MAX;
    return 0;
}

int loupe__sspool_on(void) {
    return w_fd >= 0;
}

int loupe__sspool_fd(void) {
    return w_fd;
}

void loupe__sspool_shared_close(void) {
    loupe__fd_close(w_fd); /* w_fd stays: the sampler's own table has the same number */
}

static void stop_spool(int err) {
    char lost[160];
    if (err == EBADF && loupe__fd_lost(lost, sizeof lost) > 0) {
        snprintf(w_hdr.reason, sizeof w_hdr.reason,
                 "%s, and %.300s could not be opened again after %llu bytes", lost, w_path,
                 (unsigned long long)w_size);
    } else {
        snprintf(w_hdr.reason, sizeof w_hdr.reason,
                 "write to %.400s failed after %llu bytes: %s (errno %d)", w_path,
                 (unsigned long long)w_size, strerror(err), err);
    }
    w_hdr.stopped = 1;
    w_hdr.dropped_samples += w_batch_samples;
    w_hdr.dropped_offs += w_batch_offs;
    w_status_dirty = 1;
    w_len = 0;
    w_batch_samples = w_batch_offs = 0;
    /* a short write left part of a record: cut back to the last whole one (never a file of
     * the program's at the number) */
    if (loupe__fd_ok(w_fd)) {
        (void)!ftruncate(w_fd, (off_t)w_size);
    }
}

static void write_batch(void) {
    if (w_len == 0 || w_hdr.stopped) {
        w_len = 0;
        return;
    }
    int rc;
    if (w_size + w_len > w_fail_at) {
        errno = ENOSPC;
        rc = -1;
    } else if (loupe__fd_keep(&w_fd, w_path, O_WRONLY, w_size, "the sample spool") != 0) {
        /* the program closed the number and the file is gone: the spool ends, said */
        errno = EBADF;
        rc = -1;
    } else {
        rc = write_all(w_fd, w_buf, w_len);
    }
    if (rc != 0) {
        stop_spool(errno);
        return;
    }
    w_size += w_len;
    w_len = 0;
    w_batch_samples = w_batch_offs = 0;
}

/* Room for a record of size bytes in the file's bound; a record that does not fit is dropped
 * (the caller counts it). */
static unsigned char *reserve(uint16_t type, size_t size) {
    if (w_fd < 0 || w_hdr.stopped || w_size + w_len + size > w_cap) {
        return NULL;
    }
    if (w_len + size > sizeof w_buf) {
        write_batch();
        if (w_hdr.stopped) {
            return NULL;
        }
    }
    unsigned char *p = w_buf + w_len;
    ss_head h = {LOUPE__SSPOOL_MAGIC, type, (uint32_t)size};
    memcpy(p, &h, sizeof h);
    memset(p + sizeof h, 0, size - sizeof h);
    w_len += size;
    return p + sizeof h;
}

void loupe__sspool_sample(uint64_t ts, uint32_t tid, uint32_t cpu, const uint64_t *pcs,
                          uint32_t n) {
    if (w_fd < 0) {
        return;
    }
    n = n > MAX_PCS ? MAX_PCS : n;
    unsigned char *p = reserve(LOUPE__SSPOOL_SAMPLE, 8 + 24 + (size_t)n * 8);
    if (p == NULL) {
        w_hdr.dropped_samples++;
        w_status_dirty = 1;
        return;
    }
    w_batch_samples++;
    memcpy(p, &ts, 8);
    memcpy(p + 8, &tid, 4);
    memcpy(p + 12, &cpu, 4);
    memcpy(p + 16, &n, 4);
    memcpy(p + 24, pcs, (size_t)n * 8);
}

void loupe__sspool_off(uint64_t tid, uint64_t start, uint64_t end, unsigned kind) {
    if (w_fd < 0) {
        return;
    }
    unsigned char *p = reserve(LOUPE__SSPOOL_OFF, 8 + 32);
    if (p == NULL) {
        w_hdr.dropped_offs++;
        w_status_dirty = 1;
        return;
    }
    uint32_t k = kind;
    w_batch_offs++;
    memcpy(p, &tid, 8);
    memcpy(p + 8, &start, 8);
    memcpy(p + 16, &end, 8);
    memcpy(p + 24, &k, 4);
}

void loupe__sspool_name(uint64_t tid, const char comm[16]) {
    unsigned char *p = reserve(LOUPE__SSPOOL_NAME, 8 + 24);
    if (p != NULL) {
        memcpy(p, &tid, 8);
        memcpy(p + 8, comm, 16);
    }
}

void loupe__sspool_lost(uint64_t total) {
    if (total == w_lost) {
        return;
    }
    unsigned char *p = reserve(LOUPE__SSPOOL_LOST, 16);
    if (p != NULL) {
        memcpy(p, &total, 8);
        w_lost = total;
    }
}

/* ---- the module map (dl_iterate_phdr: the objects the loader has mapped) ---- */
static int gen_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    uint64_t *gen = arg;
    if (size >= offsetof(struct dl_phdr_info, dlpi_subs) + sizeof info->dlpi_subs) {
        *gen = (uint64_t)info->dlpi_adds * 1000003u + (uint64_t)info->dlpi_subs;
    }
    return 1; /* the counters are the same in every entry: the first is enough */
}

/* The GNU build-id note of a loaded object (ELF gABI notes: namesz, descsz, type, 4-aligned),
 * read from its PT_NOTE segments, which are mapped (they lie in the first PT_LOAD). */
static uint32_t build_id(const struct dl_phdr_info *info, unsigned char out[MAX_BUILD_ID]) {
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) {
            continue;
        }
        const unsigned char *p = (const unsigned char *)(info->dlpi_addr + ph->p_vaddr);
        size_t left = ph->p_memsz;
        while (left >= sizeof(ElfW(Nhdr))) {
            ElfW(Nhdr) nh;
            memcpy(&nh, p, sizeof nh);
            size_t name = (nh.n_namesz + 3u) & ~3u, desc = (nh.n_descsz + 3u) & ~3u;
            if (sizeof nh + name + desc > left) {
                break;
            }
            if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
                memcmp(p + sizeof nh, "GNU", 4) == 0 && nh.n_descsz <= MAX_BUILD_ID) {
                memcpy(out, p + sizeof nh + name, nh.n_descsz);
                return nh.n_descsz;
            }
            p += sizeof nh + name + desc;
            left -= sizeof nh + name + desc;
        }
    }
    return 0;
}

static int mod_cb(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    (void)arg;
    char exe[MAX_PATH];
    const char *path = info->dlpi_name;
    if (path == NULL || path[0] == 0) {
        /* the main program: its loader entry has no name */
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n <= 0) {
            return 0;
        }
        exe[n] = 0;
        path = exe;
    }
    size_t plen = strlen(path);
    if (path[0] != '/' || plen >= MAX_PATH) {
        return 0; /* the vDSO ("linux-vdso.so.1"): no file to read */
    }
    uint64_t lo = UINT64_MAX, hi = 0, off = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD) {
            if (ph->p_vaddr < lo) {
                lo = ph->p_vaddr;
                off = ph->p_offset;
            }
            if (ph->p_vaddr + ph->p_memsz > hi) {
                hi = ph->p_vaddr + ph->p_memsz;
            }
        }
    }
    if (lo == UINT64_MAX) {
        return 0;
    }
    /* as an MMAP2 record says it: page-aligned start and file offset */
    uint64_t start = (info->dlpi_addr + lo) & ~(uint64_t)4095;
    uint64_t pgoff = off & ~(uint64_t)4095, len = info->dlpi_addr + hi - start;
    unsigned char bid[MAX_BUILD_ID];
    uint32_t nbid = build_id(info, bid), np = (uint32_t)plen;
    size_t body = 32 + nbid + plen;
    unsigned char *p = reserve(LOUPE__SSPOOL_MODULE, 8 + ((body + 7) & ~(size_t)7));
    if (p != NULL) {
        memcpy(p, &start, 8);
        memcpy(p + 8, &len, 8);
        memcpy(p + 16, &pgoff, 8);
        memcpy(p + 24, &nbid, 4);
        memcpy(p + 28, &np, 4);
        memcpy(p + 32, bid, nbid);
        memcpy(p + 32 + nbid, path, plen);
    }
    return 0;
}

void loupe__sspool_modules(void) {
    if (w_fd < 0 || w_hdr.stopped) {
        return;
    }
    uint64_t gen = 0;
    dl_iterate_phdr(gen_cb, &gen);
    if (gen == w_mod_gen) {
        return;
    }
    w_mod_gen = gen;
    dl_iterate_phdr(mod_cb, NULL);
}

void loupe__sspool_flush(void) {
    if (w_fd < 0) {
        return;
    }
    write_batch();
    if (w_status_dirty) {
        /* the status part of the header: its page is allocated (written at the open), so this
         * pwrite needs no room on a full file system */
        size_t at = offsetof(loupe__sspool_hdr, dropped_samples);
        if (loupe__fd_keep(&w_fd, w_path, O_WRONLY, w_size, "the sample spool") == 0) {
            (void)!pwrite(w_fd, (const char *)&w_hdr + at, sizeof w_hdr - at, (off_t)at);
        }
        w_status_dirty = 0;
    }
}

uint64_t loupe__sspool_dropped(void) {
    return w_hdr.dropped_samples + w_hdr.dropped_offs;
}

const char *loupe__sspool_reason(void) {
    return w_hdr.reason;
}

void loupe__sspool_remove(void) {
    if (w_fd >= 0 || w_path[0]) {
        loupe__fd_close(w_fd);
        w_fd = -1;
        (void)unlink(w_path);
    }
    w_path[0] = 0;
}

void loupe__sspool_forget(void) {
    if (w_fd >= 0) {
        loupe__fd_close(w_fd);
        w_fd = -1;
    }
    w_path[0] = 0;
}

/* ---- reading ---- */
static int add_map(loupe__sspool_read *r, uint64_t start, uint64_t len, uint64_t pgoff,
                   const char *path, size_t plen, const unsigned char *bid, uint32_t nbid) {
    for (size_t i = 0; i < r->nmaps; i++) {
        if (r->maps[i].start == start && strlen(r->maps[i].file) == plen &&
            memcmp(r->maps[i].file, path, plen) == 0) {
            return 0; /* the same object, written again when the map changed */
        }
    }
    if (r->nmaps % 64 == 0) {
        loupe__map *m = realloc(r->maps, (r->nmaps + 64) * sizeof *m);
        if (m == NULL) {
            return -1;
        }
        r->maps = m;
    }
    char *f = malloc(plen + 1);
    if (f == NULL) {
        return -1;
    }
    memcpy(f, path, plen);
    f[plen] = 0;
    loupe__map *m = &r->maps[r->nmaps++];
    memset(m, 0, sizeof *m);
    *m = (loupe__map){.start = start, .len = len, .pgoff = pgoff, .file = f, .build_id_len = nbid};
    memcpy(m->build_id, bid, nbid);
    return 0;
}

/* 1: a valid record head at p (magic, a known type, a size that fits and is its type's). */
static int head_ok(const unsigned char *p, size_t left, ss_head *h) {
    if (left < sizeof *h) {
        return 0;
    }
    memcpy(h, p, sizeof *h);
    if (h->magic != LOUPE__SSPOOL_MAGIC || h->size < 16 || h->size % 8 != 0) {
        return 0;
    }
    switch (h->type) {
    case LOUPE__SSPOOL_SAMPLE:
        return h->size >= 32 && h->size <= 32 + MAX_PCS * 8;
    case LOUPE__SSPOOL_OFF:
        return h->size == 40;
    case LOUPE__SSPOOL_NAME:
        return h->size == 32;
    case LOUPE__SSPOOL_LOST:
        return h->size == 16;
    case LOUPE__SSPOOL_MODULE:
        return h->size >= 48 && h->size <= 8 + 32 + MAX_BUILD_ID + MAX_PATH + 8;
    default:
        return 0;
    }
}

static void seen_at(loupe__sspool_read *r, uint64_t t) {
    const uint64_t day = 86400ull * 1000000000ull;
    if (t >= r->origin_mono && t - r->origin_mono <= day && t > r->last_mono) {
        r->last_mono = t;
    }
}

/* One record's body: 1 kept, 0 not valid, -1 out of memory. */
static int take(loupe__sspool_read *r, const ss_head *h, const unsigned char *b) {
    size_t body = h->size - sizeof *h;
    switch (h->type) {
    case LOUPE__SSPOOL_SAMPLE: {
        uint64_t ts;
        uint32_t tid, cpu, n, pad;
        memcpy(&ts, b, 8);
        memcpy(&tid, b + 8, 4);
        memcpy(&cpu, b + 12, 4);
        memcpy(&n, b + 16, 4);
        memcpy(&pad, b + 20, 4);
        if (n > MAX_PCS || body != 24 + (size_t)n * 8 || pad != 0 || tid == 0) {
            return 0;
        }
        uint64_t pcs[MAX_PCS];
        memcpy(pcs, b + 24, (size_t)n * 8);
        if (loupe__sample_inject(r->origin_mono, tid, ts, cpu, pcs, n) != 0) {
            return -1;
        }
        r->samples++;
        seen_at(r, ts);
        return 1;
    }
    case LOUPE__SSPOOL_OFF: {
        uint64_t v[3];
        uint32_t kind, pad;
        memcpy(v, b, 24);
        memcpy(&kind, b + 24, 4);
        memcpy(&pad, b + 28, 4);
        if (v[0] == 0 || v[2] <= v[1] || kind > 3 || pad != 0) {
            return 0;
        }
        if (loupe__sample_inject_off(v[0], v[1], v[2], kind) != 0) {
            return -1;
        }
        r->offs++;
        seen_at(r, v[2]);
        return 1;
    }
    case LOUPE__SSPOOL_NAME: {
        uint64_t tid;
        char comm[16];
        memcpy(&tid, b, 8);
        memcpy(comm, b + 8, 16);
        if (tid == 0 || memchr(comm, 0, 16) == NULL) {
            return 0;
        }
        if (loupe__sample_inject_name(tid, comm) != 0) {
            return -1;
        }
        r->names++;
        return 1;
    }
    case LOUPE__SSPOOL_LOST: {
        uint64_t lost;
        memcpy(&lost, b, 8);
        r->lost = lost > r->lost ? lost : r->lost; /* a running total */
        return 1;
    }
    case LOUPE__SSPOOL_MODULE: {
        uint64_t v[3];
        uint32_t nbid, np;
        memcpy(v, b, 24);
        memcpy(&nbid, b + 24, 4);
        memcpy(&np, b + 28, 4);
        if (nbid > MAX_BUILD_ID || np == 0 || np >= MAX_PATH || 32 + (size_t)nbid + np > body ||
            v[1] == 0 || v[0] + v[1] < v[0]) {
            return 0;
        }
        const char *path = (const char *)b + 32 + nbid;
        if (path[0] != '/' || memchr(path, 0, np) != NULL) {
            return 0;
        }
        return add_map(r, v[0], v[1], v[2], path, np, b + 32, nbid) == 0 ? 1 : -1;
    }
    default:
        return 0;
    }
}

int loupe__sspool_parse(const unsigned char *buf, size_t size, loupe__sspool_read *r) {
    memset(r, 0, sizeof *r);
    loupe__sspool_hdr h;
    if (size < LOUPE__SSPOOL_HEADER || buf == NULL) {
        return -1;
    }
    memcpy(&h, buf, sizeof h);
    if (memcmp(h.magic, "LOUPESMP", 8) != 0 || h.version != 1 ||
        h.header_size != LOUPE__SSPOOL_HEADER || h.hz == 0 || h.hz > 1000000) {
        return -1;
    }
    h.note[sizeof h.note - 1] = 0;
    h.reason[sizeof h.reason - 1] = 0;
    r->pid = h.pid;
    r->origin_mono = h.origin_mono;
    r->hz = h.hz;
    r->stacks = h.stacks;
    memcpy(r->note, h.note, sizeof r->note);
    r->dropped_samples = h.dropped_samples;
    r->dropped_offs = h.dropped_offs;
    memcpy(r->reason, h.reason, sizeof r->reason);
    loupe__sample_restore(h.hz, h.origin_mono, h.note);
    size_t at = LOUPE__SSPOOL_HEADER, bad_from = 0;
    int in_bad = 0; /* inside a stretch of bytes that is no record: counted once */
    while (at < size) {
        ss_head rh;
        size_t left = size - at;
        if (!head_ok(buf + at, left, &rh)) {
            if (!in_bad) {
                bad_from = at;
            }
            if (left < 8) {
                r->skipped += !in_bad;
                r->skipped_bytes += left;
                in_bad = 1;
                break;
            }
            r->skipped += !in_bad;
            in_bad = 1;
            r->skipped_bytes += 8;
            at += 8;
            continue;
        }
        if (rh.size > left) {
            /* cut short: the program died in the middle of a write, or the file was cut */
            if (!in_bad) {
                bad_from = at;
            }
            r->skipped += !in_bad;
            r->skipped_bytes += left;
            in_bad = 1;
            break;
        }
        int k = take(r, &rh, buf + at + sizeof rh);
        if (k < 0) {
            r->skipped++;
            r->skipped_bytes += size - at;
            return -1;
        }
        if (k == 0) {
            if (!in_bad) {
                bad_from = at;
            }
            r->skipped += !in_bad;
            r->skipped_bytes += rh.size;
            in_bad = 1;
        } else {
            in_bad = 0;
        }
        at += rh.size;
    }
    if (in_bad && bad_from != 0 && size - bad_from <= LOUPE__SSPOOL_CUT_MAX && r->skipped != 0 &&
        r->skipped_bytes >= size - bad_from) {
        /* the bytes after the last whole record are one record cut by the end of the file (a
         * death in the middle of a write, the one place a spool ends that way): said apart */
        r->skipped--;
        r->skipped_bytes -= size - bad_from;
        r->cut_bytes = size - bad_from;
    }
    loupe__sample_inject_lost(r->lost);
    return 0;
}

void loupe__sspool_read_free(loupe__sspool_read *r) {
    for (size_t i = 0; i < r->nmaps; i++) {
        free(r->maps[i].file);
    }
    free(r->maps);
    r->maps = NULL;
    r->nmaps = 0;
}

#ifdef LOUPE_HAVE_LIBDW
/* 1 when the file's GNU build-id note is not id; 0 when it is, or when the file cannot tell
 * (gone, not ELF, no such note). */
static int build_id_differs(const char *path, const unsigned char *id, uint32_t n) {
    unsigned char got[MAX_BUILD_ID];
    size_t k = loupe__elf_build_id(path, got, sizeof got);
    return k != 0 && (k != n || memcmp(got, id, n) != 0);
}
#endif

size_t loupe__sspool_keep_same_files(loupe__sspool_read *r) {
    size_t dropped = 0;
#ifdef LOUPE_HAVE_LIBDW
    size_t w = 0;
    for (size_t i = 0; i < r->nmaps; i++) {
        loupe__map *m = &r->maps[i];
        if (m->build_id_len != 0 && build_id_differs(m->file, m->build_id, m->build_id_len)) {
            free(m->file);
            dropped++;
        } else {
            r->maps[w++] = *m;
        }
    }
    r->nmaps = w;
#else
    (void)r;
#endif
    return dropped;
}
