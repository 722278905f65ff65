/* region.h: the recording region (region.c): one mapping per process holding the header, the
 * chunk table, the thread descriptors and the chunks (layout in record.h). */
#ifndef LOUPE_RECORD_REGION_H
#define LOUPE_RECORD_REGION_H

#include <stddef.h>
#include <stdint.h>

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

/* A fork child: the region is the parent's (maybe shared with `loupe record`): unmap it and
 * forget it. */
void loupe__region_forget(void);

/* Non-zero when the region is the memfd `loupe record` maps too. */
int loupe__region_shared(void);

#endif
