/* chrome_json_samples.c: the CPU samples of a model in Chrome JSON, after "traceEvents"
 * (loupe__write_chrome_json() calls it before closing the top-level object).
 *
 * The Trace Event Format's own form (Google doc "Trace Event Format", sections "StackFrames
 * Dictionary" and "Global Samples"):
 *   "stackFrames": {"<id>": {"name", "category", "parent"}}: one entry per stack node, id = node
 *     index + 1, "name" the function, "category" the module (the format's "library name"),
 *     "parent" the caller's id (absent at the outermost frame); loupe adds "file", "line",
 *     "inlined" (1) and "offset" (the module offset, a hex string: JSON numbers are doubles)
 *     when known.
 *   "samples": [{"pid", "tid", "ts" (µs, ns exact), "cpu" (when known), "name": "cpu",
 *     "sf" (the leaf's id; absent when no stack was taken), "weight": 1}].
 *   "loupeSamples": {"period_ns", "lost", "off_cpu": [{"pid", "tid", "start_ns", "dur_ns",
 *     "kind" ("waiting" or "preempted"; absent when unknown)}]}: what the format has no field for
 * (viewers skip unknown top-level keys). Nothing is written when the model has no samples, no
 * losses and no off-CPU intervals.
 */
#include "export/writers.h"

#include <stdint.h>
#include <string.h>

static int has_samples(const loupe_model *m) {
    if (m->sample_count > 0 || m->samples_lost > 0) {
        return 1;
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        if (m->threads[t].off_cpu_count > 0) {
            return 1;
        }
    }
    return 0;
}

static void put_hex(loupe__sink *s, uint64_t v) {
    char buf[24];
    int n = snprintf(buf, sizeof buf, "\"0x%llx\"", (unsigned long long)v);
    loupe__put(s, buf, (size_t)n);
}

/* "pid":P,"tid":T of a thread: its process's pid (pid when unknown), its tid (pid for 0). */
static void put_pid_tid(loupe__sink *s, const loupe_model *m, const uint64_t *wt, size_t t,
                        uint64_t pid) {
    const loupe_model_thread *th = &m->threads[t];
    uint64_t tpid = th->process < m->process_count ? m->processes[th->process].pid : pid;
    loupe__puts(s, "\"pid\":");
    loupe__put_u64(s, tpid ? tpid : pid);
    loupe__puts(s, ",\"tid\":");
    uint64_t tid = wt != NULL ? wt[t] : th->tid;
    loupe__put_u64(s, tid ? tid : pid);
}

void loupe__write_chrome_samples(const loupe_model *m, loupe__sink *s, const uint64_t *wt) {
    if (!has_samples(m)) {
        return;
    }
    uint64_t pid = m->pid ? m->pid : 1;
    loupe__puts(s, ",\n\"stackFrames\":{");
    for (size_t n = 0; n < m->stack_node_count; n++) {
        const loupe_stack_node *sn = &m->stack_nodes[n];
        if (sn->frame >= m->frame_count) {
            continue;
        }
        const loupe_frame *f = &m->frames[sn->frame];
        loupe__puts(s, n > 0 ? ",\n\"" : "\n\"");
        loupe__put_u64(s, n + 1);
        loupe__puts(s, "\":{\"name\":");
        loupe__put_jstr(s, f->function);
        loupe__puts(s, ",\"category\":");
        loupe__put_jstr(s, f->module);
        if (sn->parent < m->stack_node_count) {
            loupe__puts(s, ",\"parent\":\"");
            loupe__put_u64(s, (uint64_t)sn->parent + 1);
            loupe__puts(s, "\"");
        }
        if (f->file[0] != 0) {
            loupe__puts(s, ",\"file\":");
            loupe__put_jstr(s, f->file);
        }
        if (f->line != 0) {
            loupe__puts(s, ",\"line\":");
            loupe__put_u64(s, f->line);
        }
        if (f->inlined != 0) {
            loupe__puts(s, ",\"inlined\":1");
        }
        if (f->module_offset != 0) {
            loupe__puts(s, ",\"offset\":");
            put_hex(s, f->module_offset);
        }
        loupe__puts(s, "}");
    }
    loupe__puts(s, "},\n\"samples\":[");
    int first = 1;
    for (size_t i = 0; i < m->sample_count; i++) {
        const loupe_sample *smp = &m->samples[i];
        if (smp->thread >= m->thread_count) {
            continue;
        }
        loupe__puts(s, first ? "\n{" : ",\n{");
        first = 0;
        put_pid_tid(s, m, wt, smp->thread, pid);
        loupe__puts(s, ",\"ts\":");
        loupe__put_us(s, smp->ts_ns);
        if (smp->cpu != UINT32_MAX) {
            loupe__puts(s, ",\"cpu\":");
            loupe__put_u64(s, smp->cpu);
        }
        loupe__puts(s, ",\"name\":\"cpu\"");
        if (smp->stack < m->stack_node_count) {
            loupe__puts(s, ",\"sf\":\"");
            loupe__put_u64(s, (uint64_t)smp->stack + 1);
            loupe__puts(s, "\"");
        }
        loupe__puts(s, ",\"weight\":1}");
    }
    loupe__puts(s, "],\n\"loupeSamples\":{\"period_ns\":");
    loupe__put_u64(s, m->sample_period_ns);
    loupe__puts(s, ",\"lost\":");
    loupe__put_u64(s, m->samples_lost);
    loupe__puts(s, ",\"off_cpu\":[");
    first = 1;
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        for (size_t i = 0; i < th->off_cpu_count; i++) {
            loupe__puts(s, first ? "{" : ",{");
            first = 0;
            put_pid_tid(s, m, wt, t, pid);
            loupe__puts(s, ",\"start_ns\":");
            loupe__put_u64(s, th->off_cpu[i].start_ns);
            loupe__puts(s, ",\"dur_ns\":");
            loupe__put_u64(s, th->off_cpu[i].dur_ns);
            if (th->off_cpu[i].kind == LOUPE_OFF_CPU_WAITING) {
                loupe__puts(s, ",\"kind\":\"waiting\"");
            } else if (th->off_cpu[i].kind == LOUPE_OFF_CPU_PREEMPTED) {
                loupe__puts(s, ",\"kind\":\"preempted\"");
            }
            loupe__puts(s, "}");
        }
    }
    loupe__puts(s, "]}");
}
