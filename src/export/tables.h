/* tables.h: the intern tables and model walks the sample writers share (tables.c): pprof.c's
 * profile.proto and fdo.c's compiler sample profiles. */
#ifndef LOUPE_EXPORT_TABLES_H
#define LOUPE_EXPORT_TABLES_H

#include <loupe/model.h>
#include <stddef.h>
#include <stdint.h>

/* An open-addressing u64 -> u32 map (values 1.., 0 = empty slot). Zero-initialise to start. */
typedef struct loupe__u64map {
    uint64_t *keys;
    uint32_t *vals;
    size_t cap, count;
} loupe__u64map;

/* The value of key, 0 when absent. */
uint32_t loupe__u64map_get(const loupe__u64map *m, uint64_t key);
/* Puts key -> val (val != 0; key not yet in m); -1 on out-of-memory (m unchanged). */
int loupe__u64map_put(loupe__u64map *m, uint64_t key, uint32_t val);
void loupe__u64map_free(loupe__u64map *m);

/* A table of distinct strings, each at an index (0.., in order of first add), its bytes kept
 * NUL-ended. Zero-initialise to start; oom is sticky. */
typedef struct loupe__strtab {
    char *chars;
    size_t chars_len, chars_cap;
    size_t *off; /* entry i at chars + off[i], length off[i + 1] - off[i] - 1 */
    uint32_t count, off_cap;
    uint32_t *slot; /* hash -> index + 1 */
    size_t slot_cap;
    int oom;
} loupe__strtab;

/* The index of the n bytes at p, added when new; 0 on out-of-memory (with t->oom set). */
uint32_t loupe__strtab_add(loupe__strtab *t, const char *p, size_t n);
/* Entry i (i < t->count) and its length. */
const char *loupe__strtab_at(const loupe__strtab *t, uint32_t i, size_t *len);
void loupe__strtab_free(loupe__strtab *t);

/* The inline group of stack node k (k < m->stack_node_count): k and its callers while a frame
 * is inlined into the next (loupe_frame.inlined: the frames of one address), at most max nodes.
 * Returns their count and sets *next to the node after them (UINT32_MAX or an index out of range
 * at the outermost). */
uint32_t loupe__stack_group(const loupe_model *m, uint32_t k, uint32_t max, uint32_t *next);

/* The module (a loupe_frame.module of m) of the program itself, for a run of one program or a
 * process tree: of the process with the most samples (a tree's wrapper scripts and shells have
 * few), the module whose base name is that process's name, else the module of the outermost
 * frame of its first sample with a stack. NULL when neither has one. */
const char *loupe__main_module(const loupe_model *m);

/* The build-id (lowercase hex) the run saw for the module at path module: its line in the
 * metadata loupe_module_build_ids ("<hex> <path>" per module, written by the sampler's
 * collector: src/record/sample.c). 1 with hex set (NUL-terminated, size bytes at most), 0 when
 * the trace has none for it (a trace of 0.4 or of another tool, a module without one). */
int loupe__ran_build_id(const loupe_model *m, const char *module, char *hex, size_t size);

#endif
