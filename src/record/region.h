/* region.h: the recording region (region.c): one mapping per process holding the header, the
 * chunk table, the thread descriptors and the chunks (layout in record.h). */
#ifndef LOUPE_RECORD_REGION_H
#define LOUPE_RECORD_REGION_H

#include <stddef.h>
#include <stdint.h>

#include <loupe/export.h>

/* The region layout for a capacity of nchunks chunks and max_threads descriptors: fills the
 * header's offsets and sizes (total_size included). */
struct loupe__region_hdr;
void loupe__region_layout(struct loupe__region_hdr *h, uint64_t nchunks, uint64_t max_threads);

/* Makes sure the process has a region whose chunks hold session_slots slots: maps one at the
 * first call (the memfd named by LOUPE_RECORD_SHM_FD when `loupe record` set it for this
 * process, else anonymous memory), and a larger one when a later session asks for more (the old
 * one stays mapped: live threads move over at their next event). 0, or LOUPE_ENOMEM with the
 * detail: the size, errno, and the capacity that would fit. */
int loupe__region_ensure(uint64_t session_slots);

/* Populates chunks [populated, upto) (MADV_POPULATE_WRITE, else a touch per page). Called by the
 * session at its start and by the keeper, never on the record path. */
void loupe__region_populate(uint64_t upto);

/* The chunks and descriptors still mapped: [0, loupe__chunk_end) and [0, loupe__desc_end) (the
 * region's nchunks and max_threads until loupe__region_fit_as() gave the rest back). Takes past
 * them are refused, as at the region's end. */
extern uint64_t loupe__chunk_end, loupe__desc_end;
/* Counts the regions mapped and forgotten (a fork child's new region may lie at the parent's
 * address): what a cache of the region's pages is for (names.c). */
extern uint64_t loupe__region_gen;

/* The program lowers its RLIMIT_AS to limit bytes (the preload's setrlimit/prlimit): the
 * chunks and descriptors never handed out are unmapped until the region is within an eighth of
 * the limit (32 MiB at least; 16 chunks and 1,024 descriptors are kept): the program keeps the
 * address space it would have had, less that share, and events past the smaller capacity are
 * dropped and counted. UINT64_MAX does nothing. Thread-safety: any thread but a signal
 * handler's (it takes the keeper's lock). */
LOUPE_API void loupe__region_fit_as(uint64_t limit);

/* A shared region (loupe__region_shared()): makes the pages of [a, a + len) exist in the file
 * (MADV_POPULATE_WRITE), so that touching them cannot SIGBUS. 0, or -1 when the file system
 * has no room for them (errno kept). Anonymous regions, and kernels before 5.14: 0 at once.
 * Async-signal-safe (one system call). */
int loupe__region_back(void *a, size_t len);
/* A shared region: backs chunk c, just taken from the bump cursor past the populated ones, and
 * its table entry. A chunk the file has no room for is remapped over with anonymous memory and
 * marked LOUPE__META_ANON (the header's shm_anon_chunks counts it). 0, or -1 when neither
 * worked (its entry's page could not be had, or the mapping failed; shm_refused counts it):
 * the taker must not use it. Async-signal-safe. */
int loupe__chunk_back(uint32_t c);

/* A fork child: the region is the parent's (maybe shared with `loupe record`): unmap it and
 * forget it. */
void loupe__region_forget(void);

/* Non-zero when the region is the memfd `loupe record` maps too. */
int loupe__region_shared(void);

#endif
