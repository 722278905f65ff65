/* perfetto_samples.c: the CPU samples of a model in the Perfetto protobuf (.pftrace), written
 * after the track events by loupe__write_perfetto_proto() on a sequence of their own.
 *
 * The packets are those Perfetto's own CPU profiler (traced_perf) writes, so that the Perfetto UI
 * shows them as the process's and threads' CPU samples with a flame graph
 * (google/perfetto protos/perfetto/trace/profiling/profile_packet.proto PerfSample,
 * profile_common.proto Frame / Mapping / Callstack / InternedString,
 * interned_data/interned_data.proto):
 *   - sequence 2 (trusted_packet_sequence_id), its first packet flags=CLEARED, the others
 *     flags=NEEDS (their interned data belongs to that generation);
 *   - TracePacket.timestamp (field 8) absolute, no timestamp_clock_id: the trace clock
 *     (BOOTTIME), B + ts where B is the same base as the track events' (origin_unix_ns);
 *   - TracePacket.perf_sample (field 66): cpu 1 (when known), pid 2, tid 3, callstack_iid 4
 *     (absent when the sample has no stack);
 *   - interned data in the packet that first needs it: InternedData.function_names (5),
 *     frames (6), callstacks (7), mapping_paths (17), mappings (19). A Frame is
 *     {iid 1, function_name_id 2, mapping_id 3, rel_pc 4 = module_offset}; a Mapping
 *     {iid 1, path_string_ids 7} with the module path split at '/' into components (Perfetto
 *     joins them back with a '/' before each); a Callstack {iid 1, frame_ids 2} lists frames
 *     outermost first ("bottom frame first", profile_common.proto). Iids: frame i + 1 for frame i
 *     and its function name, stack node n + 1 for the callstack that ends at node n.
 *   - What Perfetto has no field for travels in a first INSTANT TrackEvent "loupe_samples"
 *     (inline name, on the process track, uuid 1) with dict debug annotations: "samples"
 *     {period_ns, lost}, "frames" (per frame iid with a file, line, inlined flag or a module
 *     that is not an absolute path: {file, line, inlined, module}) and "off_cpu" (per thread
 *     track uuid: entries named by start_ns, uint value dur_ns), the intervals of unknown kind;
 *     "off_cpu_waiting" and "off_cpu_preempted", the same for the other two kinds, only when a
 *     thread has one (a file written before the kinds has only "off_cpu": all unknown, which
 *     is what they are). The reader restores these.
 * Memory: two bits per frame and stack node (defined yet?) and a pointer table of the modules.
 */
#include "base/array.h"
#include "base/hash.h"
#include "base/pb.h"
#include "export/writers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SAMPLES_SEQ 2
enum {
    TP_TIMESTAMP = 8,
    TP_SEQ_ID = 10,
    TP_TRACK_EVENT = 11,
    TP_INTERNED_DATA = 12,
    TP_SEQ_FLAGS = 13,
    TP_PERF_SAMPLE = 66
};
enum {
    IN_FUNCTION_NAMES = 5,
    IN_FRAMES = 6,
    IN_CALLSTACKS = 7,
    IN_MAPPING_PATHS = 17,
    IN_MAPPINGS = 19
};

typedef struct swriter {
    const loupe_model *m;
    loupe__sink *s;
    loupe__pb pkt, in, ev;
    uint8_t *frame_done, *node_done;
    const char **mods; /* module pointer table (the model's strings are interned) */
    uint64_t *mod_iid;
    size_t mod_cap, mod_count;
    uint32_t *chain;
    size_t chain_cap;
    char key[32];
    int oom;
} swriter;

static void put_packet(swriter *w) {
    uint8_t hdr[11];
    hdr[0] = 0x0A; /* field 1, Trace.packet, length-delimited */
    size_t n = 1 + loupe__pb_put_varint_at(hdr + 1, w->pkt.len);
    loupe__put(w->s, (const char *)hdr, n);
    loupe__put(w->s, (const char *)w->pkt.p, w->pkt.len);
}

/* The mapping iid of a module, defined in this packet when new; 0 for "" (no mapping). */
static uint64_t mapping_of(swriter *w, const char *mod) {
    if (mod == NULL || mod[0] == 0) {
        return 0;
    }
    if ((w->mod_count + 1) * 2 > w->mod_cap) {
        size_t nc = w->mod_cap ? w->mod_cap * 2 : 64;
        const char **nm = calloc(nc, sizeof(*nm));
        uint64_t *ni = calloc(nc, sizeof(*ni));
        if (nm == NULL || ni == NULL) {
            free(nm);
            free(ni);
            w->oom = 1;
            return 0;
        }
        for (size_t i = 0; i < w->mod_cap; i++) {
            if (w->mods[i] != NULL) {
                size_t j = loupe__hash_bytes(&w->mods[i], sizeof(char *)) & (nc - 1);
                while (nm[j] != NULL) {
                    j = (j + 1) & (nc - 1);
                }
                nm[j] = w->mods[i];
                ni[j] = w->mod_iid[i];
            }
        }
        free(w->mods);
        free(w->mod_iid);
        w->mods = nm;
        w->mod_iid = ni;
        w->mod_cap = nc;
    }
    size_t j = loupe__hash_bytes(&mod, sizeof(char *)) & (w->mod_cap - 1);
    while (w->mods[j] != NULL) {
        if (w->mods[j] == mod) {
            return w->mod_iid[j];
        }
        j = (j + 1) & (w->mod_cap - 1);
    }
    uint64_t iid = ++w->mod_count;
    w->mods[j] = mod;
    w->mod_iid[j] = iid;
    /* The path components, each an InternedString {iid 1, str 2} of mapping_paths; their iids are
     * iid << 12 | component (a module path has far fewer than 4096 components; past that the
     * rest is one component). */
    size_t mk = loupe__pb_begin(&w->in, IN_MAPPINGS);
    loupe__pb_uint(&w->in, 1, iid); /* Mapping.iid */
    loupe__pb *paths = &w->pkt;     /* scratch: the packet is built after */
    paths->len = 0;
    const char *p = mod[0] == '/' ? mod + 1 : mod;
    for (uint64_t c = 0; *p != 0 || c == 0; c++) {
        const char *slash = c < 4095 ? strchr(p, '/') : NULL;
        size_t n = slash != NULL ? (size_t)(slash - p) : strlen(p);
        uint64_t piid = iid << 12 | c;
        loupe__pb_uint(&w->in, 7, piid); /* Mapping.path_string_ids, one tag each */
        size_t pm = loupe__pb_begin(paths, IN_MAPPING_PATHS);
        loupe__pb_uint(paths, 1, piid);
        loupe__pb_bytes(paths, 2, p, n);
        loupe__pb_end(paths, pm);
        p += n;
        if (*p == '/') {
            p++;
        }
        if (*p == 0) {
            break;
        }
    }
    loupe__pb_end(&w->in, mk);
    if (paths->len > 0 && loupe__pb_reserve(&w->in, paths->len)) {
        memcpy(w->in.p + w->in.len, paths->p, paths->len);
        w->in.len += paths->len;
    }
    return iid;
}

static void define_frame(swriter *w, uint32_t f) {
    if (w->frame_done[f]) {
        return;
    }
    w->frame_done[f] = 1;
    const loupe_frame *fr = &w->m->frames[f];
    uint64_t mapping = mapping_of(w, fr->module);
    size_t mk = loupe__pb_begin(&w->in, IN_FUNCTION_NAMES);
    loupe__pb_uint(&w->in, 1, (uint64_t)f + 1); /* InternedString.iid */
    loupe__pb_str(&w->in, 2, fr->function);     /* InternedString.str */
    loupe__pb_end(&w->in, mk);
    mk = loupe__pb_begin(&w->in, IN_FRAMES);
    loupe__pb_uint(&w->in, 1, (uint64_t)f + 1); /* Frame.iid */
    loupe__pb_uint(&w->in, 2, (uint64_t)f + 1); /* Frame.function_name_id */
    if (mapping != 0) {
        loupe__pb_uint(&w->in, 3, mapping); /* Frame.mapping_id */
    }
    loupe__pb_uint(&w->in, 4, fr->module_offset); /* Frame.rel_pc */
    loupe__pb_end(&w->in, mk);
}

/* Defines the callstack ending at node (and its frames) when not yet defined. */
static void define_stack(swriter *w, uint32_t node) {
    const loupe_model *m = w->m;
    if (w->node_done[node]) {
        return;
    }
    w->node_done[node] = 1;
    size_t n = 0;
    for (uint32_t k = node; k != UINT32_MAX && k < m->stack_node_count && n < m->stack_node_count;
         k = m->stack_nodes[k].parent) {
        if (loupe__grow((void **)&w->chain, &w->chain_cap, n + 1, sizeof(uint32_t)) != 0) {
            w->oom = 1;
            return;
        }
        w->chain[n++] = m->stack_nodes[k].frame;
    }
    for (size_t i = 0; i < n; i++) {
        if (w->chain[i] < m->frame_count) {
            define_frame(w, w->chain[i]);
        }
    }
    size_t mk = loupe__pb_begin(&w->in, IN_CALLSTACKS);
    loupe__pb_uint(&w->in, 1, (uint64_t)node + 1); /* Callstack.iid */
    for (size_t i = n; i-- > 0;) {
        if (w->chain[i] < m->frame_count) {
            loupe__pb_uint(&w->in, 2, (uint64_t)w->chain[i] + 1); /* frame_ids, outermost first */
        }
    }
    loupe__pb_end(&w->in, mk);
}

static void ann_uint(loupe__pb *b, const char *name, uint64_t v) {
    size_t mk = loupe__pb_begin(b, 11); /* DebugAnnotation.dict_entries */
    loupe__pb_str(b, 10, name);         /* DebugAnnotation.name */
    loupe__pb_uint(b, 3, v);            /* DebugAnnotation.uint_value */
    loupe__pb_end(b, mk);
}

/* The debug annotation of one kind's off-CPU intervals: "off_cpu" (unknown, always written, as
 * before the kinds), "off_cpu_waiting" or "off_cpu_preempted" (only when a thread has one). */
static void put_off_cpu(swriter *w, loupe_off_cpu_kind kind) {
    static const char *const names[] = {"off_cpu", "off_cpu_waiting", "off_cpu_preempted"};
    const loupe_model *m = w->m;
    loupe__pb *b = &w->ev;
    int any = kind == LOUPE_OFF_CPU_UNKNOWN;
    for (size_t t = 0; t < m->thread_count && !any; t++) {
        for (size_t i = 0; i < m->threads[t].off_cpu_count && !any; i++) {
            any = m->threads[t].off_cpu[i].kind == kind;
        }
    }
    if (!any) {
        return;
    }
    size_t a = loupe__pb_begin(b, 4);
    loupe__pb_str(b, 10, names[kind]);
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        size_t d = SIZE_MAX;
        for (size_t i = 0; i < th->off_cpu_count; i++) {
            if (th->off_cpu[i].kind != kind) {
                continue;
            }
            if (d == SIZE_MAX) {
                snprintf(w->key, sizeof w->key, "%zu", t + 2); /* track uuid (perfetto_proto.c) */
                d = loupe__pb_begin(b, 11);
                loupe__pb_str(b, 10, w->key);
            }
            snprintf(w->key, sizeof w->key, "%llu", (unsigned long long)th->off_cpu[i].start_ns);
            ann_uint(b, w->key, th->off_cpu[i].dur_ns);
        }
        if (d != SIZE_MAX) {
            loupe__pb_end(b, d);
        }
    }
    loupe__pb_end(b, a);
}

/* The "loupe_samples" instant: what Perfetto's packets have no field for. */
static void put_extras(swriter *w, uint64_t base) {
    const loupe_model *m = w->m;
    loupe__pb *b = &w->ev;
    b->len = 0;
    loupe__pb_uint(b, 9, 3);  /* TrackEvent.type = TYPE_INSTANT */
    loupe__pb_uint(b, 11, 1); /* TrackEvent.track_uuid: the process */
    loupe__pb_str(b, 23, "loupe_samples");
    size_t a = loupe__pb_begin(b, 4); /* TrackEvent.debug_annotations */
    loupe__pb_str(b, 10, "samples");
    ann_uint(b, "period_ns", m->sample_period_ns);
    ann_uint(b, "lost", m->samples_lost);
    loupe__pb_end(b, a);
    a = loupe__pb_begin(b, 4);
    loupe__pb_str(b, 10, "frames");
    for (size_t f = 0; f < m->frame_count; f++) {
        const loupe_frame *fr = &m->frames[f];
        int odd_module = fr->module[0] != 0 && fr->module[0] != '/';
        if (fr->file[0] == 0 && fr->line == 0 && fr->inlined == 0 && !odd_module) {
            continue;
        }
        snprintf(w->key, sizeof w->key, "%zu", f + 1);
        size_t d = loupe__pb_begin(b, 11);
        loupe__pb_str(b, 10, w->key);
        size_t e = loupe__pb_begin(b, 11);
        loupe__pb_str(b, 10, "file");
        loupe__pb_str(b, 6, fr->file); /* DebugAnnotation.string_value */
        loupe__pb_end(b, e);
        ann_uint(b, "line", fr->line);
        ann_uint(b, "inlined", fr->inlined);
        if (odd_module) {
            e = loupe__pb_begin(b, 11);
            loupe__pb_str(b, 10, "module");
            loupe__pb_str(b, 6, fr->module);
            loupe__pb_end(b, e);
        }
        loupe__pb_end(b, d);
    }
    loupe__pb_end(b, a);
    put_off_cpu(w, LOUPE_OFF_CPU_UNKNOWN);
    put_off_cpu(w, LOUPE_OFF_CPU_WAITING);
    put_off_cpu(w, LOUPE_OFF_CPU_PREEMPTED);
    loupe__pb *p = &w->pkt;
    p->len = 0;
    loupe__pb_uint(p, TP_TIMESTAMP, base);
    loupe__pb_uint(p, TP_SEQ_ID, SAMPLES_SEQ);
    loupe__pb_uint(p, TP_SEQ_FLAGS, 1); /* SEQ_INCREMENTAL_STATE_CLEARED */
    loupe__pb_bytes(p, TP_TRACK_EVENT, b->p, b->len);
    put_packet(w);
}

int loupe__write_perfetto_samples(const loupe_model *m, loupe__sink *s, uint64_t base) {
    if (m->sample_count == 0 && m->samples_lost == 0) {
        int any = 0;
        for (size_t t = 0; t < m->thread_count && !any; t++) {
            any = m->threads[t].off_cpu_count > 0;
        }
        if (!any) {
            return 0;
        }
    }
    swriter w;
    memset(&w, 0, sizeof w);
    w.m = m;
    w.s = s;
    w.frame_done = calloc(m->frame_count + 1, 1);
    w.node_done = calloc(m->stack_node_count + 1, 1);
    if (w.frame_done == NULL || w.node_done == NULL) {
        w.oom = 1;
    }
    if (!w.oom) {
        put_extras(&w, base);
    }
    for (size_t i = 0; i < m->sample_count && !w.oom && s->err == 0; i++) {
        const loupe_sample *smp = &m->samples[i];
        if (smp->thread >= m->thread_count) {
            continue;
        }
        const loupe_model_thread *th = &m->threads[smp->thread];
        uint64_t pid = th->process < m->process_count ? m->processes[th->process].pid : m->pid;
        w.in.len = 0;
        int has_stack = smp->stack < m->stack_node_count;
        if (has_stack) {
            define_stack(&w, smp->stack);
        }
        loupe__pb *p = &w.pkt;
        p->len = 0;
        loupe__pb_uint(p, TP_TIMESTAMP, base + smp->ts_ns);
        loupe__pb_uint(p, TP_SEQ_ID, SAMPLES_SEQ);
        loupe__pb_uint(p, TP_SEQ_FLAGS, 2); /* SEQ_NEEDS_INCREMENTAL_STATE */
        if (w.in.len > 0) {
            loupe__pb_bytes(p, TP_INTERNED_DATA, w.in.p, w.in.len);
        }
        size_t ps = loupe__pb_begin(p, TP_PERF_SAMPLE);
        if (smp->cpu != UINT32_MAX) {
            loupe__pb_uint(p, 1, smp->cpu); /* PerfSample.cpu */
        }
        loupe__pb_uint(p, 2, pid);     /* PerfSample.pid */
        loupe__pb_uint(p, 3, th->tid); /* PerfSample.tid */
        if (has_stack) {
            loupe__pb_uint(p, 4, (uint64_t)smp->stack + 1); /* PerfSample.callstack_iid */
        }
        loupe__pb_end(p, ps);
        put_packet(&w);
    }
    int oom = w.oom || w.pkt.oom || w.in.oom || w.ev.oom;
    loupe__pb_free(&w.pkt);
    loupe__pb_free(&w.in);
    loupe__pb_free(&w.ev);
    free(w.frame_done);
    free(w.node_done);
    free(w.mods);
    free(w.mod_iid);
    free(w.chain);
    return oom ? loupe__err(LOUPE_ENOMEM, "Perfetto writer: out of memory (samples)") : 0;
}
