/* flame.h: the call tree the folded-stack (folded.c) and SVG flame graph (svg.c) writers share:
 * one node per distinct stack of zone names, rooted at one node per track (thread or GPU track).
 * Built in one pass over each track's slices (start order, parents first, with depths), so its
 * memory is the distinct stacks, and a stack is never held as a string: a node is (parent, name).
 * Stacks deeper than LOUPE__FLAME_MAX_DEPTH zones end in one "[deeper zones]" node that holds
 * the rest of that subtree (its total and self time are the zone at that depth's duration), so
 * that a line of folded output or a column of the SVG has at most that many frames and the
 * output is O(slices * LOUPE__FLAME_MAX_DEPTH) bytes, not O(slices * depth) (30k nested zones
 * would otherwise print 450M frames).
 */
#ifndef LOUPE_EXPORT_FLAME_H
#define LOUPE_EXPORT_FLAME_H

#include <loupe/model.h>
#include <stddef.h>
#include <stdint.h>

/* Zones per stack below the track's root; perf's default for call chains is 127
 * (kernel.perf_event_max_stack), flamegraph.pl draws a frame 16 px tall: 1024 frames is already
 * a 16k px graph. */
#define LOUPE__FLAME_MAX_DEPTH 1024
#define LOUPE__FLAME_DEEPER "[deeper zones]"
#define LOUPE__FLAME_DEEPER_FRAMES "[deeper frames]" /* the same cut for sampled stacks */
#define LOUPE__FLAME_NO_STACK "[no stack]" /* a sample without a stack (as loupe summary) */
#define LOUPE__FLAME_NONE ((size_t)-1)

typedef struct loupe__flame_node {
    const char *name;  /* a zone name (the model's), or the track's label (owned by the tree) */
    size_t parent;     /* LOUPE__FLAME_NONE for a track's root */
    uint32_t depth;    /* 0 for a root */
    uint64_t total_ns; /* summed durations of the slices in this stack (a root: of its
                          top-level slices) */
    uint64_t self_ns;  /* total minus the direct children's */
    uint64_t hash;     /* private: of (parent, name), for the table */
} loupe__flame_node;

typedef struct loupe__flame {
    loupe__flame_node *nodes; /* in first-appearance order: a parent before its children */
    size_t count, cap;
    size_t *slots; /* open addressing over (parent, name): index + 1, 0 = empty */
    size_t slot_cap;
    char **labels; /* the roots' labels, malloc'd */
    size_t label_count;
    int samples;  /* 1: built from the CPU samples: total_ns and self_ns are sample counts */
    char **owned; /* names made for frames without a function ("module+0xoffset"), malloc'd */
    size_t owned_count;
} loupe__flame;

/* Builds the tree of m: one root per track, labelled with the track's name ("thread <tid>" when
 * unnamed; "GPU <device> track <tid>" for an unnamed GPU track), with " (tid <tid>)" appended
 * when two tracks would get the same label, so that each track stays its own root. Returns 0 or
 * LOUPE_ENOMEM (detail set, *f freed). */
int loupe__flame_build(const loupe_model *m, loupe__flame *f);
/* The same tree from the CPU samples (f->samples = 1): one root per thread with samples, a node
 * per distinct stack of frames (outermost first) named by function ("module+0xoffset" or
 * "[unknown]" without one, as `loupe summary`'s hot functions; "[no stack]" for a sample
 * without a stack), total_ns / self_ns counting samples (self: the samples whose innermost
 * frame it is). Stacks deeper than LOUPE__FLAME_MAX_DEPTH frames end in "[deeper frames]".
 * Returns 0 or LOUPE_ENOMEM (detail set, *f freed). */
int loupe__flame_build_samples(const loupe_model *m, loupe__flame *f);
/* Which weight a writer uses for LOUPE_FLAME_WEIGHT_AUTO: samples when m has samples and no
 * slices, time otherwise (1 = samples). */
int loupe__flame_use_samples(const loupe_model *m, int weight);
void loupe__flame_free(loupe__flame *f);

#endif
