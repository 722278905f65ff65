/* collect.h: the collector (collect.c): thread buffers → trace model, at stop. The slot format
 * it reads is written in record.c and loupe/detail/hot.h. */
#ifndef LOUPE_MODEL_COLLECT_H
#define LOUPE_MODEL_COLLECT_H

#include <loupe/model.h>
#include <stddef.h>
#include <stdint.h>

struct loupe__mb;

typedef struct loupe__collect_params {
    uint64_t state;       /* the session's state word: buffers recorded under it are collected */
    uint64_t start_ticks; /* clock ticks at the session start (ts 0) */
    uint64_t stop_ns;     /* the stop, in ns after the start */
    uint64_t stop_ticks;  /* clock ticks at the stop: later events are not the session's */
    double ticks_per_ns;
    int use_tsc;
    uint64_t origin_unix_ns;
    uint64_t pid;
    const char *process_name;
    const char *host;
    const loupe_kv *metadata;
    size_t metadata_count;
    /* The region to read: NULL = this process's own. Set with foreign = 1 for a region mapped
     * from outside after its program died (recover.c): its pointers are the dead program's
     * (rebased by the header's base_addr), names come from its name table, zones still open end
     * at their thread's last event, and the trace ends at the last event of any thread. */
    void *region;
    int foreign;
    /* Function tracing's filters (the session's copies; NULL / 0 = none): a call is kept when
     * func_include is NULL or its symbol, or one of the calls it is inside, matches one of its
     * fnmatch(3) globs, unless its own symbol matches one of func_exclude; a kept call shorter
     * than func_min_ns is dropped too, unless it holds an annotation zone. Dropped calls are
     * counted with the hot path's --depth ones in the metadata loupe_functions_filtered, written
     * when func_filtering is set. */
    const char *const *func_include; /* NULL-terminated */
    const char *const *func_exclude; /* NULL-terminated */
    uint64_t func_min_ns;
    int func_filtering;
} loupe__collect_params;

/* Adds the session's host threads (slices, instants, counters, flows, loss counts) and the
 * process fields to the model under construction in mb (the session adds its other sources and
 * finishes it). Call with the registry lock held (loupe__registry_lock_take) and the gate closed:
 * both asserted. 0, or LOUPE_ENOMEM with the detail set (mb is then failed: abort it). */
int loupe__collect(struct loupe__mb *mb, const loupe__collect_params *p);

#endif
