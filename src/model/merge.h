/* merge.h: several models (one per process file of a run directory) into one multi-process
 * model, and the process metadata a session writes (internal to libloupe; src/import/run.c and
 * the session use it). */
#ifndef LOUPE_MODEL_MERGE_H
#define LOUPE_MODEL_MERGE_H

#include <loupe/model.h>
#include <stddef.h>
#include <stdint.h>

/* Sets m->processes[0].cmdline, parent_pid and rank from the metadata keys "loupe_cmdline",
 * "loupe_parent_pid" and "loupe_mpi_rank" where they are unset ("" / 0 / -1): how a process's
 * command line, parent and MPI rank travel through every format (metadata round-trips
 * everywhere). m may be NULL. */
void loupe__model_lift_process_meta(loupe_model *m);

/* A linear clock correction of one part (the MPI engineer's clock offsets, docs/formats.md):
 * offset_ns is added to the part's timestamps; with has_end, the offset goes linearly from
 * offset_ns at at_ns to end_ns at end_at_ns (the two measurements' times on the part's
 * timeline, ns from its origin: negative before it), and is the nearer measurement's outside
 * them. */
typedef struct loupe__clock_fix {
    int64_t offset_ns;
    int has_end;
    int64_t end_ns;
    int64_t at_ns, end_at_ns;
} loupe__clock_fix;

/* Reads a part's correction from its metadata ("loupe_clock_offset_ns", optionally
 * "loupe_clock_offset_end_ns", "loupe_clock_offset_at_ns", "loupe_clock_offset_end_at_ns", the
 * last two unix-epoch ns on the part's own clock): all zero when it has none. Drift only where
 * the two offsets differ by more than their uncertainties together (loupe_model_clock_offset()
 * in loupe/model.h says the rule). */
loupe__clock_fix loupe__clock_fix_of(const loupe_model *m);
/* The offset at the part's own time t (ns). */
int64_t loupe__clock_fix_at(const loupe__clock_fix *f, uint64_t t);

/* The run's timeline base: metadata "loupe_clock_base_unix_ns", unix-epoch ns on the run's
 * reference clock (the clock the part's loupe_clock_offset_* put it on), one value shared by
 * every file of a run: loupe record sets it for a process tree (its own start), libloupe_mpi.so
 * for MPI ranks (the earliest rank's corrected start), loupe capture for the hosts of a capture
 * (the moment before its first request). Writers whose consumers line files up by their times
 * (XProf's multi-host view: each file's line timestamps, docs/formats.md "One timeline") put
 * m's times at ts + this shift: the part's origin plus its correction at the middle of the trace,
 * less the base. 0 when m has no base or no origin_unix_ns, or when the shift would be negative
 * (a part that started before the base) or 2^52 ns (52 days: a base from another run; XProf
 * computes timestamp_ns * 1000 in int64) or more. */
uint64_t loupe__model_timeline_shift(const loupe_model *m);

/* Merges n parts (each one process file: processes, threads, slices, instants, counters, flows,
 * samples with their frames and stacks, off-CPU intervals, loss counts, warnings prefixed with
 * names[i]) into a new model (*out): every part's processes are processes of their own (two
 * parts with one pid stay two), its timestamps moved onto the earliest part's origin
 * (origin_unix_ns: one host, one wall clock) plus its clock correction. The model's own pid,
 * name and host are the first part's; its metadata is the first part's, each other part's keys
 * that it lacks added, less the parts' clock corrections (loupe_clock_offset_*: its times are on
 * the reference clock already, so a writer's timeline shift and a second merge add none).
 * Returns 0, LOUPE_EINVALID (n == 0), LOUPE_ENOMEM. */
int loupe__model_merge(loupe_model *const *parts, const char *const *names, size_t n,
                       loupe_model **out);

#endif
