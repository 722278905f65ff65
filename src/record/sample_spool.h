/* sample_spool.h: the samples' spool (sample_spool.c): under `loupe record` the sampler thread
 * appends every sample, off-CPU interval, thread name and the module map to a file beside the
 * recording region, so that a program that dies (SIGKILL, a crash, _exit()) still has its CPU
 * samples: the recovery (src/session/recover.c) reads the file and symbolises it from the files
 * on disk. A clean stop removes the file (its samples go through the sampler's memory).
 *
 * File layout (native byte order: the file is read on the machine that wrote it): a header of
 * LOUPE__SSPOOL_HEADER bytes (loupe__sspool_hdr, its status part rewritten in place), then
 * records, each an 8-byte head {u16 magic 0x5352, u16 type, u32 size} (size: the whole record,
 * a multiple of 8) and its body:
 *   SAMPLE  u64 ts (CLOCK_MONOTONIC ns), u32 tid, u32 cpu, u32 n, u32 0, u64 pcs[n] (n <= 128,
 *           innermost first: the sampled address, then return addresses)
 *   OFF     u64 tid, start, end (CLOCK_MONOTONIC ns), u32 kind (loupe_off_cpu_kind), u32 0
 *   NAME    u64 tid, char comm[16]
 *   LOST    u64 samples lost so far (the kernel's PERF_RECORD_LOST counts; the latest wins)
 *   MODULE  u64 start, len, pgoff (where the file's loaded segments are mapped), u32 build-id
 *           bytes (<= 64), u32 path bytes (< 4096, no NUL), the build-id, the absolute path
 */
#ifndef LOUPE_RECORD_SAMPLE_SPOOL_H
#define LOUPE_RECORD_SAMPLE_SPOOL_H

#include <stddef.h>
#include <stdint.h>

#define LOUPE__SSPOOL_HEADER 4096u
#define LOUPE__SSPOOL_MAGIC 0x5352u
/* The default bound of one spool file, in bytes (LOUPE_SAMPLE_SPOOL_MAX_BYTES changes it):
 * 256 MiB is about a million 30-frame samples; a /dev/shm file is memory. */
#define LOUPE__SSPOOL_DEFAULT_MAX ((uint64_t)256 << 20)

enum {
    LOUPE__SSPOOL_SAMPLE = 1,
    LOUPE__SSPOOL_OFF = 2,
    LOUPE__SSPOOL_NAME = 3,
    LOUPE__SSPOOL_LOST = 4,
    LOUPE__SSPOOL_MODULE = 5,
};

typedef struct loupe__sspool_hdr {
    char magic[8]; /* "LOUPESMP" */
    uint32_t version, header_size;
    uint64_t pid;
    uint64_t origin_mono; /* the session's ts 0 (CLOCK_MONOTONIC ns) */
    uint32_t hz, stacks;
    char note[448]; /* the session's "loupe_sampling" note */
    /* the status, rewritten in place (pwrite of this part only) */
    uint64_t dropped_samples; /* samples not written: the cap, or the spool stopped */
    uint64_t dropped_offs;    /* off-CPU intervals not written, likewise */
    uint32_t stopped;         /* 1: the spool stopped (reason says why) */
    uint32_t pad;
    char reason[512];
} loupe__sspool_hdr;

/* A file mapped into a process: [start, start + len) holds the file from offset pgoff
 * (PERF_RECORD_MMAP2's addr, len, pgoff). src/session/outside.c makes a Dwfl of a list of them
 * (loupe__maps_dwfl, session/session.h). */
typedef struct loupe__map {
    uint64_t start, len, pgoff;
    char *file;
    uint32_t build_id_len; /* 0: unknown (outside.c's MMAP2 records carry none) */
    unsigned char build_id[64];
} loupe__map;

/* ---- writing (sample.c) ---- */
/* Opens path (O_CREAT | O_TRUNC | O_CLOEXEC, 0600) and writes its header; notes the path for
 * loupe__sspool_remove(). The session's thread, before the sampler thread starts. 0, or -1
 * (errno kept; no spool this session, nothing else changes). */
int loupe__sspool_open(const char *path, uint64_t pid, uint64_t origin_mono, uint32_t hz,
                       int stacks, const char *note);
/* Non-zero while a spool file is open (written or stopped). */
/* The spool file's fd (-1 when none): the sampler thread keeps it in its own fd table. */
int loupe__sspool_fd(void);
/* The sampler thread has the spool in its own fd table: the shared table's fd goes (the program
 * gets its number back). From then on only the sampler thread writes through w_fd; the remove
 * and forget that follow its join only unlink. */
void loupe__sspool_shared_close(void);
int loupe__sspool_on(void);
/* Appends records to the batch (written when it is full and at loupe__sspool_flush()). The
 * sampler thread only. Past the cap, or once a write failed, a sample or interval is counted
 * as dropped instead. */
void loupe__sspool_sample(uint64_t ts, uint32_t tid, uint32_t cpu, const uint64_t *pcs, uint32_t n);
void loupe__sspool_off(uint64_t tid, uint64_t start, uint64_t end, unsigned kind);
void loupe__sspool_name(uint64_t tid, const char comm[16]);
void loupe__sspool_lost(uint64_t total);
/* Writes the module map when the process's loaded objects changed since the last call
 * (dl_iterate_phdr's dlpi_adds / dlpi_subs), every object with a file. The sampler thread. */
void loupe__sspool_modules(void);
/* Writes the batch (one write(2), more only for a short write) and the header's status when it
 * changed. A write error (ENOSPC, EFBIG, EIO) stops the spool: the file is cut back to its last
 * whole record and the reason goes into the header. The sampler thread. */
void loupe__sspool_flush(void);
/* Samples and intervals dropped this session; the reason the spool stopped ("" when none). */
uint64_t loupe__sspool_dropped(void);
const char *loupe__sspool_reason(void);
/* Closes the file and removes it (a clean stop), or only closes it (a fork child: the file is
 * the parent's). No-ops when none is open. */
void loupe__sspool_remove(void);
void loupe__sspool_forget(void);

/* ---- reading (recover.c, the fuzz target) ---- */
typedef struct loupe__sspool_read {
    uint64_t pid, origin_mono;
    uint32_t hz, stacks;
    char note[448];
    uint64_t dropped_samples, dropped_offs;
    char reason[512];
    loupe__map *maps; /* the modules, one entry per (file, start) */
    size_t nmaps;
    uint64_t samples, offs, names, lost; /* what was read */
    uint64_t skipped; /* records that were not valid (not the cut one at the end) */
    uint64_t skipped_bytes;
    uint64_t cut_bytes; /* the bytes of a record cut by the file's end (a death mid-write) */
    uint64_t last_mono; /* the latest sample or interval end (CLOCK_MONOTONIC ns), within a day
                           of origin_mono (a later one is not believed); 0 when none */
} loupe__sspool_read;

/* The largest tail of bytes after the last whole record that is read as one record cut by the
 * file's end (cut_bytes), not as invalid records: a sample with the deepest stack is well below. */
#define LOUPE__SSPOOL_CUT_MAX 8192u

/* Reads a spool image of size bytes into sample.c's store (loupe__sample_restore, then the
 * injections) and r, keeping every valid record: an invalid one (bad magic, type, size or
 * values) is counted in r->skipped and the reading goes on at the next 8-byte boundary that
 * starts a valid record; up to LOUPE__SSPOOL_CUT_MAX bytes after the last valid record are a
 * record cut at the end (r->cut_bytes). 0, or -1 when the header is not
 * a spool's (nothing read) or memory ran out (r->skipped counts the rest). Free r with
 * loupe__sspool_read_free(). Not thread-safe (sample.c's store). */
int loupe__sspool_parse(const unsigned char *buf, size_t size, loupe__sspool_read *r);
void loupe__sspool_read_free(loupe__sspool_read *r);
/* Drops from r->maps every file whose GNU build-id note on disk is not the one the program had
 * mapped (rebuilt or replaced since): its samples keep raw addresses rather than another
 * build's names. A file that is gone, unreadable, or has no build-id is kept (libdwfl then
 * reports what it can). Returns the files dropped; 0 without libdw. */
size_t loupe__sspool_keep_same_files(loupe__sspool_read *r);

#endif
