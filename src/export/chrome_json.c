/* chrome_json.c: the Chrome Trace Event Format writer (the Trace Event Format document, and
 * Perfetto's JSON importer: perfetto src/trace_processor/importers/json/json_trace_parser.cc).
 *
 * Object form, streamed event by event:
 *   {"displayTimeUnit":"ns","metadata":{...},"traceEvents":[
 *     M process_name per process (and process_labels, loupe_process: see put_process_meta),
 *     M thread_name + thread_sort_index per thread,
 *     X slices per thread in start order (parents first), i instants, C counters]}
 * - Each track and counter under its process's pid (processes[0]: the model's pid, 1 when 0);
 *   GPU tracks under a pid per device (model/tracks.h). An async track: b and e per slice (the e
 *   right after its b) and n per instant, id = the track's tid as a hex string for lane 0 (the
 *   slice's depth) and one id per other lane, with "loupe_track_id" = the track's (put_async_id:
 *   no two overlapping slices share an id), cat = its first slice's category (readers key async
 *   tracks by (pid, cat, id)), "loupe_track" = its name on b and n.
 * - ts/dur in µs from the trace origin, printed with exactly 3 decimals: ns exact (Perfetto's
 *   json_trace_tokenizer.cc parses them as doubles: ts×1000 < 2^53 keeps ns exact for 104 days).
 * - Slices are X events (no B/E pairing problems); equal starts are ordered longer first.
 * - Flows: flow v2 (bind_id + flow_out / flow_in on both X events) when neither slice has another
 *   v2 flow; otherwise both ends as flow v1 s / f events (integer ids, cat "flow", bp "e"), so
 *   that none is lost.
 * - Loss accounting and the clock go in "metadata" (string values), or in "otherData" for the
 *   Perfetto variant: a top-level "metadata" makes Perfetto's UI show a blank trace
 *   (jax-ml/jax#10843); Perfetto skips otherData.
 * - Flow ids are written modulo 2^63 (see flow_id()).
 * - Every string is escaped (sink.c): any name gives valid JSON.
 * - Integer args beyond +-2^53 are strings of their digits, with "loupe_types": {"<key>":
 *   "int64" | "uint64"} in the same args (JavaScript would round the number); loupe's reader
 *   gives them back typed. An integer counter value beyond +-2^53 likewise ("value": "<digits>",
 *   "loupe_types": {"value": "int64"}). Events at or beyond 2^62 ns, which the reader refuses, are
 * left out.
 */
#include "export/writers.h"
#include "model/tracks.h"

#include <loupe/loupe.h>
#include <stdlib.h>
#include <string.h>

static void put_kv_str(loupe__sink *s, int *first, const char *k, const char *v) {
    loupe__puts(s, *first ? "" : ",");
    *first = 0;
    loupe__put_jstr(s, k);
    loupe__put(s, ":", 1);
    loupe__put_jstr(s, v);
}

static void put_kv_u64(loupe__sink *s, int *first, const char *k, uint64_t v) {
    char tmp[32];
    snprintf(tmp, sizeof tmp, "%llu", (unsigned long long)v);
    put_kv_str(s, first, k, tmp);
}

/* Integers a JavaScript number (an IEEE double) cannot hold exactly: |v| > 2^53. */
#define JS_SAFE ((uint64_t)1 << 53)

static int big_int(const loupe_arg *a) {
    return (a->type == LOUPE_ARG_INT64 &&
            (a->v.i > (int64_t)JS_SAFE || a->v.i < -(int64_t)JS_SAFE)) ||
           (a->type == LOUPE_ARG_UINT64 && a->v.u > JS_SAFE);
}

static void put_args(loupe__sink *s, const loupe_arg *args, size_t n, uint32_t flags) {
    loupe__puts(s, ",\"args\":{");
    int first = 1, big = 0;
    for (uint32_t i = 0; i < n; i++) {
        const loupe_arg *a = &args[i];
        loupe__puts(s, first ? "" : ",");
        first = 0;
        loupe__put_jstr(s, a->key);
        loupe__put(s, ":", 1);
        if (big_int(a)) {
            /* Beyond 2^53 as a string of its exact digits (a browser's JSON.parse rounds
             * INT64_MAX to 9223372036854776000), typed by "loupe_types" below. */
            big = 1;
            loupe__put(s, "\"", 1);
            if (a->type == LOUPE_ARG_INT64) {
                loupe__put_i64(s, a->v.i);
            } else {
                loupe__put_u64(s, a->v.u);
            }
            loupe__put(s, "\"", 1);
            continue;
        }
        switch (a->type) {
        case LOUPE_ARG_INT64:
            loupe__put_i64(s, a->v.i);
            break;
        case LOUPE_ARG_UINT64:
            loupe__put_u64(s, a->v.u);
            break;
        case LOUPE_ARG_DOUBLE:
            loupe__put_double(s, a->v.d);
            break;
        case LOUPE_ARG_BOOL:
            loupe__puts(s, a->v.b ? "true" : "false");
            break;
        case LOUPE_ARG_STRING:
        default:
            loupe__put_jstr(s, a->type == LOUPE_ARG_STRING ? a->v.s : "");
            break;
        }
    }
    if (big) {
        loupe__puts(s, ",\"loupe_types\":{");
        int f = 1;
        for (uint32_t i = 0; i < n; i++) {
            if (big_int(&args[i])) {
                loupe__puts(s, f ? "" : ",");
                f = 0;
                loupe__put_jstr(s, args[i].key);
                loupe__puts(s, args[i].type == LOUPE_ARG_INT64 ? ":\"int64\"" : ":\"uint64\"");
            }
        }
        loupe__put(s, "}", 1);
    }
    if (flags & LOUPE_SLICE_TRUNCATED) {
        loupe__puts(s, first ? "" : ",");
        loupe__puts(s, "\"loupe_truncated\":true");
    }
    loupe__put(s, "}", 1);
}

/* The readers' bound (import/chrome_json.c): a ts, dur or end at or beyond 2^62 ns (146 years)
 * is refused there, so it is not written here either (the model of a trace loupe recorded never
 * holds one; a model read from another tool's file may). */
#define NS_LIMIT ((uint64_t)1 << 62)

static int in_bound(uint64_t start, uint64_t dur) {
    return start < NS_LIMIT && dur < NS_LIMIT && start + dur < NS_LIMIT;
}

static void put_head(loupe__sink *s, const char *ph, uint64_t pid, uint64_t tid) {
    loupe__puts(s, ",\n{\"ph\":\"");
    loupe__puts(s, ph);
    loupe__puts(s, "\",\"pid\":");
    loupe__put_u64(s, pid);
    loupe__puts(s, ",\"tid\":");
    loupe__put_u64(s, tid);
}

/* Flow ids are written below 2^63: strict JSON parsers (jansson) refuse larger integers, and
 * ids only pair the two ends, which the same mask keeps paired. */
static uint64_t flow_id(uint64_t id) {
    return id & (uint64_t)INT64_MAX;
}

/* The pid of process p: processes[0]'s is the model's (1 when unknown, as Chrome needs one). */
static uint64_t proc_pid(const loupe_model *m, size_t p) {
    if (p == 0 || p >= m->process_count) {
        return m->pid ? m->pid : 1;
    }
    return m->processes[p].pid;
}

/* A track's loss-accounting key prefix: loupe_[pid_<pid>_]{thread,async}_<tid>_ (the pid part
 * for processes other than processes[0]; GPU tracks are processes[0]'s, as the reader puts
 * them). */
static void acct_key(const loupe_model *m, const loupe_model_thread *th, uint64_t tid,
                     const char *field, char *k, size_t n) {
    const char *what = th->kind == LOUPE_TRACK_ASYNC ? "async" : "thread";
    if (th->process == 0 || th->kind == LOUPE_TRACK_GPU) {
        snprintf(k, n, "loupe_%s_%llu_%s", what, (unsigned long long)tid, field);
    } else {
        snprintf(k, n, "loupe_pid_%llu_%s_%llu_%s", (unsigned long long)proc_pid(m, th->process),
                 what, (unsigned long long)tid, field);
    }
}

/* The cat of an async track's b / e / n events: the reader keys async tracks by (pid, cat, id),
 * so one track's events share one (its first slice's category). */
static const char *async_cat(const loupe_model *m, const loupe_model_thread *th) {
    return th->slice_count > 0 ? loupe_slice_category(m, &th->slices[0]) : "";
}

/* An async event's id: the track's tid as a hex string (exact for any uint64; Perfetto's and
 * loupe's readers take "0x..." ids as hex) for the track's lane 0, and for lane k > 0 (the
 * slice's depth: the model puts overlapping async slices on separate lanes) the tid with k in
 * bits 48..63, named back to the track by "loupe_track_id". Viewers pair b and e per id, last
 * in first out (Perfetto's json_trace_parser.cc, chrome://tracing's trace_event_importer.js):
 * two overlapping slices under one id would be paired crosswise, while the slices of one lane
 * never overlap. A tid at or above 2^48 (none of loupe's: tracks.h) keeps one id. */
static uint64_t lane_id(const loupe_model_thread *th, uint32_t lane) {
    if (lane == 0 || th->tid >> 48 != 0 || lane >= 1u << 16) {
        return th->tid;
    }
    return th->tid | (uint64_t)lane << 48;
}

static void put_async_id(loupe__sink *s, const loupe_model *m, const loupe_model_thread *th,
                         uint32_t lane) {
    char id[32];
    uint64_t v = lane_id(th, lane);
    snprintf(id, sizeof id, "0x%llx", (unsigned long long)v);
    loupe__puts(s, ",\"id\":");
    loupe__put_jstr(s, id);
    if (v != th->tid) {
        snprintf(id, sizeof id, "0x%llx", (unsigned long long)th->tid);
        loupe__puts(s, ",\"loupe_track_id\":");
        loupe__put_jstr(s, id);
    }
    loupe__puts(s, ",\"cat\":");
    loupe__put_jstr(s, async_cat(m, th));
}

/* What a process has beyond its name: "process_labels" (the Trace Event Format's M event,
 * args.labels: Chrome's about:tracing shows it beside the name) when it has a label, and loupe's
 * own "loupe_process" M event (args host, label, cmdline, parent_pid, rank; viewers skip an M
 * name they do not know) when any of them is set, so that the reader gives them back. */
static void put_process_meta(loupe__sink *s, const loupe_model *m, size_t p, uint64_t pid) {
    if (p >= m->process_count) {
        return;
    }
    const loupe_model_process *pr = &m->processes[p];
    const char *host = pr->host != NULL ? pr->host : "";
    const char *label = pr->label != NULL ? pr->label : "";
    const char *cmd = pr->cmdline != NULL ? pr->cmdline : "";
    if (label[0]) {
        put_head(s, "M", pid, pid);
        loupe__puts(s, ",\"name\":\"process_labels\",\"args\":{\"labels\":");
        loupe__put_jstr(s, label);
        loupe__puts(s, "}}");
    }
    if (!host[0] && !label[0] && !cmd[0] && pr->parent_pid == 0 && pr->rank == -1) {
        return;
    }
    put_head(s, "M", pid, pid);
    loupe__puts(s, ",\"name\":\"loupe_process\",\"args\":{\"host\":");
    loupe__put_jstr(s, host);
    loupe__puts(s, ",\"label\":");
    loupe__put_jstr(s, label);
    loupe__puts(s, ",\"cmdline\":");
    loupe__put_jstr(s, cmd);
    loupe__puts(s, ",\"parent_pid\":");
    loupe__put_u64(s, pr->parent_pid);
    loupe__puts(s, ",\"rank\":");
    if (pr->rank < 0) {
        loupe__puts(s, "-");
        loupe__put_u64(s, (uint64_t)0 - (uint64_t)pr->rank);
    } else {
        loupe__put_u64(s, (uint64_t)pr->rank);
    }
    loupe__puts(s, "}}");
}

/* GPU tracks get a process per device ("/device:GPU:<n>", as XProf names device planes), with a
 * pid above Linux's pid_max; host threads keep the process's pid. */
static uint64_t track_pid(const loupe_model_thread *th, uint64_t pid) {
    return th->kind == LOUPE_TRACK_GPU ? LOUPE__GPU_PID_BASE + th->device : pid;
}

static int first_of_device(const loupe_model *m, size_t t) {
    for (size_t i = 0; i < t; i++) {
        if (m->threads[i].kind == LOUPE_TRACK_GPU && m->threads[i].device == m->threads[t].device) {
            return 0;
        }
    }
    return 1;
}

int loupe__write_chrome_json(const loupe_model *m, loupe__sink *s, int perfetto_variant) {
    uint64_t pid = m->pid ? m->pid : 1;
    /* a reused tid: the later thread under a fresh one, its own in thread_name's loupe_tid */
    uint64_t *wt = loupe__model_written_tids(m, NULL);
    if (wt == NULL) {
        return loupe__err(LOUPE_ENOMEM, "Chrome JSON writer: out of memory");
    }
    loupe__puts(s, "{\"displayTimeUnit\":\"ns\",");
    loupe__puts(s, perfetto_variant ? "\"otherData\":{" : "\"metadata\":{");
    int first = 1;
    put_kv_str(s, &first, "loupe_version", LOUPE_VERSION_STRING);
    put_kv_str(s, &first, "clock", m->clock);
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.9f", m->tsc_ghz);
    char *comma = strchr(tmp, ','); /* whatever LC_NUMERIC says */
    if (comma != NULL) {
        *comma = '.';
    }
    put_kv_str(s, &first, "tsc_ghz", tmp);
    put_kv_u64(s, &first, "origin_unix_ns", m->origin_unix_ns);
    put_kv_u64(s, &first, "duration_ns", m->duration_ns);
    put_kv_str(s, &first, "host", m->host);
    put_kv_u64(s, &first, "pid", pid);
    put_kv_u64(s, &first, "events_recorded", loupe_model_events_recorded(m));
    put_kv_u64(s, &first, "events_dropped", loupe_model_events_dropped(m));
    put_kv_u64(s, &first, "unmatched_ends", m->unmatched_ends);
    put_kv_u64(s, &first, "truncated_zones", m->truncated_zones);
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        char k[128];
        if (th->kind == LOUPE_TRACK_ASYNC && th->events_recorded == 0 && th->events_dropped == 0 &&
            th->capacity_needed == 0) {
            continue; /* the reader finds an async track's key only among tracks with events */
        }
        acct_key(m, th, wt[t], "recorded", k, sizeof k);
        put_kv_u64(s, &first, k, th->events_recorded);
        acct_key(m, th, wt[t], "dropped", k, sizeof k);
        put_kv_u64(s, &first, k, th->events_dropped);
        acct_key(m, th, wt[t], "capacity_needed", k, sizeof k);
        put_kv_u64(s, &first, k, th->capacity_needed);
    }
    for (size_t i = 0; i < m->metadata_count; i++) {
        put_kv_str(s, &first, m->metadata[i].key, m->metadata[i].value);
    }
    loupe__puts(s, "},\n\"traceEvents\":[\n{\"ph\":\"M\",\"pid\":");
    loupe__put_u64(s, pid);
    loupe__puts(s, ",\"tid\":");
    loupe__put_u64(s, pid);
    loupe__puts(s, ",\"name\":\"process_name\",\"args\":{\"name\":");
    loupe__put_jstr(s, m->process_name[0] ? m->process_name : "loupe");
    loupe__puts(s, "}}");
    put_process_meta(s, m, 0, pid);
    /* Every other process: its pid, named when it has a name (a process without one still gets
     * its M event, so that a process without tracks keeps its pid). */
    for (size_t p = 1; p < m->process_count; p++) {
        uint64_t ppid = proc_pid(m, p);
        put_head(s, "M", ppid, ppid);
        loupe__puts(s, ",\"name\":\"process_name\",\"args\":{\"name\":");
        loupe__put_jstr(s, m->processes[p].name);
        loupe__puts(s, "}}");
        put_process_meta(s, m, p, ppid);
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        uint64_t ppid = proc_pid(m, th->process);
        uint64_t tid = wt[t] ? wt[t] : ppid;
        uint64_t tpid = track_pid(th, ppid);
        if (th->kind == LOUPE_TRACK_ASYNC) {
            continue; /* named by its events' loupe_track; no thread of its own */
        }
        if (th->kind == LOUPE_TRACK_GPU && first_of_device(m, t)) {
            char dev[48];
            snprintf(dev, sizeof dev, "/device:GPU:%u", th->device);
            put_head(s, "M", tpid, 0);
            loupe__puts(s, ",\"name\":\"process_name\",\"args\":{\"name\":");
            loupe__put_jstr(s, dev);
            loupe__puts(s, "}}");
        }
        if (th->name[0] || wt[t] != th->tid) {
            put_head(s, "M", tpid, tid);
            loupe__puts(s, ",\"name\":\"thread_name\",\"args\":{\"name\":");
            loupe__put_jstr(s, th->name);
            if (wt[t] != th->tid) {
                loupe__puts(s, ",\"loupe_tid\":");
                loupe__put_u64(s, th->tid);
            }
            loupe__puts(s, "}}");
        }
        put_head(s, "M", tpid, tid);
        loupe__puts(s, ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":");
        loupe__put_u64(s, t + 1);
        loupe__puts(s, "}}");
    }
    /* A flow is written as v2 (bind_id on both X events) when neither of its slices carries
     * another v2 flow end; otherwise both its ends are v1 events (v1 and v2 ids are separate
     * spaces in every importer: one end of each kind would lose the arrow). */
    unsigned char *v1 = NULL; /* per flow: 1 = written as v1 */
    size_t **used = NULL;     /* per thread, per slice: flow index + 1 of its v2 end, 0 = none */
    if (m->flow_count > 0) {
        v1 = calloc(m->flow_count, 1);
        used = calloc(m->thread_count, sizeof(*used));
        int oom = v1 == NULL || used == NULL;
        for (size_t t = 0; t < m->thread_count && !oom; t++) {
            used[t] = calloc(m->threads[t].slice_count + 1, sizeof(size_t));
            oom = used[t] == NULL;
        }
        for (size_t f = 0; f < m->flow_count && !oom; f++) {
            const loupe_flow *fl = &m->flows[f];
            size_t *a = &used[fl->from_thread][fl->from_slice];
            size_t *b = &used[fl->to_thread][fl->to_slice];
            if (*a == 0 && *b == 0 && a != b) {
                *a = f + 1;
                *b = f + 1;
            } else {
                v1[f] = 1;
            }
        }
        if (oom) {
            for (size_t t = 0; used != NULL && t < m->thread_count; t++) {
                free(used[t]);
            }
            free(used);
            free(v1);
            free(wt);
            return loupe__err(LOUPE_ENOMEM, "Chrome JSON writer: out of memory");
        }
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        uint64_t ppid = proc_pid(m, th->process);
        uint64_t tid = wt[t] ? wt[t] : ppid;
        uint64_t tpid = track_pid(th, ppid);
        int async = th->kind == LOUPE_TRACK_ASYNC;
        if (async) {
            tid = ppid; /* the id keys the track; tid is only where Chrome wants one */
        }
        const size_t *mark = used != NULL ? used[t] : NULL;
        for (size_t i = 0; i < th->slice_count; i++) {
            const loupe_slice *sl = &th->slices[i];
            if (!in_bound(sl->start_ns, sl->dur_ns)) {
                continue;
            }
            put_head(s, async ? "b" : "X", tpid, tid);
            loupe__puts(s, ",\"ts\":");
            loupe__put_us(s, sl->start_ns);
            if (async) {
                /* b right before its e, under its lane's id: any reader pairs them */
                put_async_id(s, m, th, sl->depth);
                loupe__puts(s, ",\"loupe_track\":");
                loupe__put_jstr(s, th->name);
            } else {
                loupe__puts(s, ",\"dur\":");
                loupe__put_us(s, sl->dur_ns);
            }
            loupe__puts(s, ",\"name\":");
            loupe__put_jstr(s, sl->name);
            if (async) {
                /* the category is the track's (async_cat) */
            } else if (loupe_slice_category(m, sl)[0]) {
                loupe__puts(s, ",\"cat\":");
                loupe__put_jstr(s, loupe_slice_category(m, sl));
            }
            if (mark != NULL && mark[i] != 0) {
                const loupe_flow *fl = &m->flows[mark[i] - 1];
                loupe__puts(s, ",\"bind_id\":");
                loupe__put_u64(s, flow_id(fl->id));
                loupe__puts(s, fl->to_thread == t && fl->to_slice == i ? ",\"flow_in\":true"
                                                                       : ",\"flow_out\":true");
            }
            size_t nargs;
            const loupe_arg *args = loupe_slice_args(th, i, &nargs);
            if (nargs > 0 || (sl->flags & LOUPE_SLICE_TRUNCATED)) {
                put_args(s, args, nargs, sl->flags);
            }
            loupe__put(s, "}", 1);
            if (async) {
                put_head(s, "e", tpid, tid);
                loupe__puts(s, ",\"ts\":");
                loupe__put_us(s, sl->start_ns + sl->dur_ns);
                put_async_id(s, m, th, sl->depth);
                loupe__puts(s, ",\"name\":");
                loupe__put_jstr(s, sl->name);
                loupe__put(s, "}", 1);
            }
        }
        for (size_t i = 0; i < th->instant_count; i++) {
            const loupe_instant *in = &th->instants[i];
            if (!in_bound(in->ts_ns, 0)) {
                continue;
            }
            put_head(s, async ? "n" : "i", tpid, tid);
            if (async) {
                put_async_id(s, m, th, 0);
                loupe__puts(s, ",\"loupe_track\":");
                loupe__put_jstr(s, th->name);
            } else {
                loupe__puts(s, ",\"s\":\"t\"");
            }
            loupe__puts(s, ",\"ts\":");
            loupe__put_us(s, in->ts_ns);
            loupe__puts(s, ",\"name\":");
            loupe__put_jstr(s, in->name);
            if (in->arg_count > 0) {
                put_args(s, in->args, in->arg_count, 0);
            }
            loupe__put(s, "}", 1);
        }
    }
    /* Flows not expressible as v2: flow v1 s/f, bound to the slice enclosing ts (bp "e"); a
     * child starting at the same ns as its parent would take the arrow (a v1 limitation). */
    for (size_t f = 0; f < m->flow_count; f++) {
        if (!v1[f]) {
            continue;
        }
        const loupe_flow *fl = &m->flows[f];
        for (int end = 0; end < 2; end++) {
            size_t th_i = end == 0 ? fl->from_thread : fl->to_thread;
            size_t sl_i = end == 0 ? fl->from_slice : fl->to_slice;
            const loupe_model_thread *th = &m->threads[th_i];
            uint64_t ppid = proc_pid(m, th->process);
            put_head(s, end == 0 ? "s" : "f", track_pid(th, ppid), wt[th_i] ? wt[th_i] : ppid);
            loupe__puts(s, ",\"ts\":");
            loupe__put_us(s, th->slices[sl_i].start_ns);
            loupe__puts(s, ",\"id\":");
            loupe__put_u64(s, flow_id(fl->id));
            loupe__puts(s, ",\"cat\":\"flow\",\"name\":\"flow\",\"bp\":\"e\"}");
        }
    }
    for (size_t t = 0; used != NULL && t < m->thread_count; t++) {
        free(used[t]);
    }
    free(used);
    free(v1);
    for (size_t i = 0; i < m->counter_count; i++) {
        const loupe_counter_sample *c = &m->counters[i];
        if (!in_bound(c->ts_ns, 0)) {
            continue;
        }
        uint64_t cpid = proc_pid(m, c->process);
        put_head(s, "C", cpid, cpid);
        loupe__puts(s, ",\"ts\":");
        loupe__put_us(s, c->ts_ns);
        loupe__puts(s, ",\"name\":");
        loupe__put_jstr(s, c->name);
        loupe__puts(s, ",\"args\":{\"value\":");
        if (c->is_double) {
            loupe__put_double(s, c->d);
        } else if (!perfetto_variant && (c->i > (int64_t)JS_SAFE || c->i < -(int64_t)JS_SAFE)) {
            /* as an argument's: a string of its exact digits, typed (a JavaScript number would
             * round it; loupe's reader gives it back exactly). Not for Perfetto's importer,
             * which takes a counter's numeric args only (and holds them as doubles anyway). */
            loupe__put(s, "\"", 1);
            loupe__put_i64(s, c->i);
            loupe__puts(s, "\",\"loupe_types\":{\"value\":\"int64\"}");
        } else {
            loupe__put_i64(s, c->i);
        }
        loupe__puts(s, "}}");
    }
    loupe__puts(s, "\n]");
    loupe__write_chrome_samples(m, s, wt); /* "stackFrames", "samples": after the events */
    loupe__puts(s, "}\n");
    free(wt);
    return 0;
}
