/* chrome.c: one decoded buffer as Chrome JSON in Mosaic's layout (loupe_gpu_write_chrome_json):
 * pid = 1 + SM, tid = 1 + trace index, as jax's profiler.py dump() writes them, so tools reading
 * Mosaic traces read these. ts in µs (3 decimals: ns exact) from the earliest trace start; B/E
 * for regions, i for instants, an instant "loupe: truncated" (args: dropped, needed_entries) at
 * the end of each truncated trace; M process/thread names; loss figures in "metadata".
 */
#include "base/error.h"
#include "export/sink.h"

#include <loupe/gpu.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void ev_head(loupe__sink *s, const char *ph, uint64_t pid, uint64_t tid) {
    loupe__puts(s, ",\n{\"ph\":\"");
    loupe__puts(s, ph);
    loupe__puts(s, "\",\"pid\":");
    loupe__put_u64(s, pid);
    loupe__puts(s, ",\"tid\":");
    loupe__put_u64(s, tid);
}

static void put_meta_u64(loupe__sink *s, const char *k, uint64_t v, int first) {
    if (!first) {
        loupe__puts(s, ",");
    }
    loupe__put_jstr(s, k);
    loupe__puts(s, ":");
    loupe__put_u64(s, v);
}

int loupe_gpu_write_chrome_json(const loupe_gpu_decoded *d, const char *path) {
    if (d == NULL || path == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_gpu_write_chrome_json: NULL argument");
    }
    size_t plen = strlen(path);
    int gz = plen > 3 && strcmp(path + plen - 3, ".gz") == 0;
    loupe__sink s;
    int r = loupe__sink_open_file(&s, path, gz);
    if (r != 0) {
        return loupe__err_prefix(r, "loupe_gpu_write_chrome_json");
    }
    uint64_t origin = UINT64_MAX;
    for (size_t i = 0; i < d->trace_count; i++) {
        if (d->traces[i].gt_start_ns < origin) {
            origin = d->traces[i].gt_start_ns;
        }
    }
    loupe__puts(&s, "{\"displayTimeUnit\":\"ns\",\"metadata\":{");
    put_meta_u64(&s, "traces", d->trace_count, 1);
    put_meta_u64(&s, "traces_empty", d->traces_empty, 0);
    put_meta_u64(&s, "events", d->events, 0);
    put_meta_u64(&s, "events_dropped", d->events_dropped, 0);
    put_meta_u64(&s, "traces_truncated", d->traces_truncated, 0);
    put_meta_u64(&s, "needed_entries", d->needed_entries, 0);
    put_meta_u64(&s, "entries_per_trace", d->spec.entries_per_trace, 0);
    put_meta_u64(&s, "overhead_cycles", d->overhead_cycles, 0);
    put_meta_u64(&s, "origin_globaltimer_ns", d->trace_count ? origin : 0, 0);
    loupe__puts(&s, ",\"ghz\":");
    loupe__put_double(&s, d->ghz);
    loupe__puts(&s, ",\"ghz_source\":");
    loupe__put_jstr(&s, d->ghz_measured ? "measured" : "assumed");
    loupe__puts(&s, ",\"layout\":");
    loupe__put_jstr(&s, d->spec.layout == LOUPE_GPU_LAYOUT_MOSAIC ? "mosaic" : "loupe");
    loupe__puts(&s, "},\n\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":0,\"tid\":0,\"name\":"
                    "\"process_name\",\"args\":{\"name\":\"loupe gpu-decode\"}}");
    const char *sw = d->spec.scope == 32 ? "warp" : "warpgroup";
    char buf[128];
    /* Process names once per SM: traces are few enough (one per warp at most) for a scan. */
    for (size_t i = 0; i < d->trace_count; i++) {
        const loupe_gpu_trace *tr = &d->traces[i];
        int seen = 0;
        for (size_t j = 0; j < i && !seen; j++) {
            seen = d->traces[j].smid == tr->smid;
        }
        if (!seen) {
            ev_head(&s, "M", 1 + (uint64_t)tr->smid, 0);
            snprintf(buf, sizeof buf, "SM %u", tr->smid);
            loupe__puts(&s, ",\"name\":\"process_name\",\"args\":{\"name\":");
            loupe__put_jstr(&s, buf);
            loupe__puts(&s, "}}");
        }
        ev_head(&s, "M", 1 + (uint64_t)tr->smid, 1 + (uint64_t)tr->index);
        snprintf(buf, sizeof buf, "block %u %s %u", tr->block_linear, sw, tr->trace_in_block);
        loupe__puts(&s, ",\"name\":\"thread_name\",\"args\":{\"name\":");
        loupe__put_jstr(&s, buf);
        loupe__puts(&s, "}}");
    }
    for (size_t i = 0; i < d->trace_count; i++) {
        const loupe_gpu_trace *tr = &d->traces[i];
        uint64_t pid = 1 + (uint64_t)tr->smid, tid = 1 + (uint64_t)tr->index;
        for (size_t k = 0; k < tr->event_count; k++) {
            const loupe_gpu_event *e = &tr->events[k];
            ev_head(&s,
                    e->kind == LOUPE_GPU_BEGIN ? "B"
                    : e->kind == LOUPE_GPU_END ? "E"
                                               : "i",
                    pid, tid);
            loupe__puts(&s, ",\"ts\":");
            loupe__put_us(&s, e->ts_ns - origin);
            loupe__puts(&s, ",\"name\":");
            loupe__put_jstr(&s, e->name);
            if (e->kind == LOUPE_GPU_INSTANT) {
                loupe__puts(&s, ",\"s\":\"t\"");
            }
            if (e->synthetic) {
                loupe__puts(&s, ",\"args\":{\"loupe_truncated\":true}");
            }
            loupe__puts(&s, "}");
        }
        if (tr->truncated) {
            uint64_t last =
                tr->event_count ? tr->events[tr->event_count - 1].ts_ns : tr->gt_start_ns;
            ev_head(&s, "i", pid, tid);
            loupe__puts(&s, ",\"s\":\"t\",\"ts\":");
            loupe__put_us(&s, last - origin);
            loupe__puts(&s, ",\"name\":\"loupe: truncated\",\"args\":{\"events_dropped\":");
            loupe__put_u64(&s, tr->events_dropped);
            loupe__puts(&s, ",\"needed_entries\":");
            loupe__put_u64(&s, d->needed_entries);
            loupe__puts(&s, "}}");
        }
    }
    loupe__puts(&s, "\n]}\n");
    r = loupe__sink_close(&s);
    if (r != 0) {
        return loupe__err_prefix(r, "loupe_gpu_write_chrome_json");
    }
    return 0;
}
