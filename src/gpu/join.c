/* join.c: decoded in-kernel timelines joining the session (loupe_gpu_session_add), and the GPU
 * part of the collector (loupe__gpu_collect): each launch is a copy of its decoded buffer,
 * turned into LOUPE_TRACK_GPU tracks at the stop.
 *
 * Alignment: a launch's globaltimer axis is shifted so that its earliest trace start lands on
 * the launch's host start (the caller's, or CUPTI's kernel record, or - a lower bound - the
 * time of the add call minus the launch's span). Traces keep their globaltimer offsets to each
 * other: blocks are never aligned on raw cycles (yalue/cuda_scheduling_examiner_mirror#18).
 * Tracks: a trace's events nest (the decoder guarantees it), but traces of one SM or block run
 * at the same time, so BY_SM / BY_BLOCK give a group extra lines ("SM 3 #2") when a trace
 * overlaps the ones already on a line.
 */
#include "base/clock.h"
#include "base/error.h"
#include "gpu/gpu_internal.h"
#include "model/builder.h"

#include <loupe/gpu.h>
#include <loupe/trace.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct launch {
    loupe_gpu_decoded *d;
    loupe_gpu_add_options o;
    char *kernel;
    uint64_t added_unix_ns;
    struct launch *next;
} launch;

static pthread_mutex_t gpu_lock = PTHREAD_MUTEX_INITIALIZER;
static launch *launches, **launches_tail = &launches;
static size_t launch_count;
/* Set by the session (loupe__gpu_session_open/close), read and written under gpu_lock: an add
 * either lands before the close, and the stop collects it, or sees the session closed and fails;
 * none can land in the list after the stop took it. */
static int session_open;

static void free_launches(launch *l) {
    while (l != NULL) {
        launch *n = l->next;
        loupe_gpu_decoded_free(l->d);
        free(l->kernel);
        free(l);
        l = n;
    }
}

void loupe__gpu_session_open(void) {
    pthread_mutex_lock(&gpu_lock);
    free_launches(launches); /* an unstopped capture's, or a failed collection's */
    launches = NULL;
    launches_tail = &launches;
    launch_count = 0;
    session_open = 1;
    pthread_mutex_unlock(&gpu_lock);
}

void loupe__gpu_session_close(void) {
    pthread_mutex_lock(&gpu_lock);
    session_open = 0;
    pthread_mutex_unlock(&gpu_lock);
}

static int is_open(void) {
    pthread_mutex_lock(&gpu_lock);
    int o = session_open;
    pthread_mutex_unlock(&gpu_lock);
    return o;
}

int loupe_gpu_session_add(const loupe_gpu_decoded *d, const loupe_gpu_add_options *opts) {
    if (d == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_gpu_session_add: decoded is NULL");
    }
    loupe_gpu_add_options o = {0};
    if (opts != NULL) {
        o = *opts;
    }
    if ((unsigned)o.tracks > LOUPE_GPU_TRACKS_BY_TRACE) {
        return loupe__err(LOUPE_EINVALID, "loupe_gpu_session_add: track mode %d is unknown",
                          (int)o.tracks);
    }
    if (o.device > 255) {
        return loupe__err(LOUPE_EINVALID, "loupe_gpu_session_add: device %u is above 255",
                          o.device);
    }
    static const char idle[] = "loupe_gpu_session_add: the session is IDLE; call it between "
                               "loupe_start_trace() and loupe_stop_trace()";
    if (!is_open()) { /* saves the copy; checked again under the lock below */
        return loupe__err(LOUPE_ENOT_STARTED, "%s", idle);
    }
    launch *l = calloc(1, sizeof(*l));
    if (l == NULL || (l->d = loupe__gpu_decoded_clone(d)) == NULL ||
        (l->kernel = strdup(o.kernel_name != NULL ? o.kernel_name : "kernel")) == NULL) {
        if (l != NULL) {
            loupe_gpu_decoded_free(l->d);
        }
        free(l);
        return loupe__err(LOUPE_ENOMEM, "loupe_gpu_session_add: out of memory");
    }
    l->o = o;
    l->o.kernel_name = l->kernel;
    l->added_unix_ns = loupe__realtime_ns();
    pthread_mutex_lock(&gpu_lock);
    int open = session_open;
    if (open) {
        *launches_tail = l;
        launches_tail = &l->next;
        launch_count++;
    }
    pthread_mutex_unlock(&gpu_lock);
    if (!open) { /* the stop came while the buffer was copied */
        free_launches(l);
        return loupe__err(LOUPE_ENOT_STARTED, "%s", idle);
    }
    return 0;
}

/* ---- collection ---- */

typedef struct line {
    uint32_t device;
    char *group;
    unsigned number; /* 1 = the group's first line */
    uint64_t last_end_ns;
    size_t thread; /* model thread index */
} line;

typedef struct lines {
    line *v;
    size_t n, cap;
    uint32_t next_tid[256];
} lines;

static size_t find_line(loupe__mb *mb, lines *ls, uint32_t dev, const char *group, uint64_t start,
                        uint64_t end) {
    unsigned count = 0;
    for (size_t i = 0; i < ls->n; i++) {
        line *l = &ls->v[i];
        if (l->device == dev && strcmp(l->group, group) == 0) {
            count++;
            if (l->last_end_ns <= start) {
                l->last_end_ns = end;
                return l->thread;
            }
        }
    }
    if (ls->n == ls->cap) {
        size_t nc = ls->cap ? ls->cap * 2 : 64;
        line *nv = realloc(ls->v, nc * sizeof(*nv));
        if (nv == NULL) {
            return SIZE_MAX;
        }
        ls->v = nv;
        ls->cap = nc;
    }
    line *l = &ls->v[ls->n];
    l->group = strdup(group);
    if (l->group == NULL) {
        return SIZE_MAX;
    }
    l->device = dev;
    l->number = count + 1;
    l->last_end_ns = end;
    uint32_t n = ++ls->next_tid[dev];
    l->thread = loupe__mb_thread(mb, LOUPE__GPU_TID(dev, n));
    if (l->thread == SIZE_MAX) {
        free(l->group);
        return SIZE_MAX;
    }
    ls->n++;
    loupe_model_thread *th = loupe__mb_thread_at(mb, l->thread);
    th->kind = LOUPE_TRACK_GPU;
    th->device = dev;
    char name[300];
    if (l->number > 1) {
        snprintf(name, sizeof name, "%s #%u", group, l->number);
    } else {
        snprintf(name, sizeof name, "%s", group);
    }
    loupe__mb_thread_name(mb, l->thread, name);
    return l->thread;
}

static int add_trace(loupe__mb *mb, size_t ti, const loupe_gpu_decoded *d,
                     const loupe_gpu_trace *tr, int64_t shift) {
    size_t stack[512];
    size_t depth = 0;
#define HOST(ts) ((uint64_t)((int64_t)(ts) + shift < 0 ? 0 : (int64_t)(ts) + shift))
    for (size_t k = 0; k < tr->event_count; k++) {
        const loupe_gpu_event *e = &tr->events[k];
        uint64_t ts = HOST(e->ts_ns);
        if (e->kind == LOUPE_GPU_BEGIN) {
            size_t si = loupe__mb_slice(mb, ti);
            if (si == SIZE_MAX) {
                return -1;
            }
            loupe_slice *s = loupe__mb_slice_at(mb, ti, si);
            s->start_ns = ts;
            s->name = loupe__mb_str(mb, e->name);
            loupe__mb_slice_category(mb, ti, si, "gpu");
            if (depth < sizeof stack / sizeof stack[0]) {
                stack[depth] = si;
            }
            depth++;
        } else if (e->kind == LOUPE_GPU_END) {
            if (depth == 0) {
                continue; /* the decoder never emits this */
            }
            depth--;
            if (depth < sizeof stack / sizeof stack[0]) {
                loupe_slice *s = loupe__mb_slice_at(mb, ti, stack[depth]);
                s->dur_ns = ts - s->start_ns;
                if (e->synthetic) {
                    s->flags |= LOUPE_SLICE_TRUNCATED;
                }
            }
        } else if (loupe__mb_instant(mb, ti, ts, e->name, NULL, 0) != 0) {
            return -1;
        }
    }
    loupe_model_thread *th = loupe__mb_thread_at(mb, ti);
    th->events_recorded += tr->events_recorded;
    th->events_dropped += tr->events_dropped;
    if (tr->truncated) {
        loupe_arg args[3] = {
            {.key = "events_dropped", .type = LOUPE_ARG_UINT64, .v.u = tr->events_dropped},
            {.key = "needed_entries", .type = LOUPE_ARG_UINT64, .v.u = d->needed_entries},
            {.key = "trace", .type = LOUPE_ARG_UINT64, .v.u = tr->index},
        };
        uint64_t last = tr->event_count ? tr->events[tr->event_count - 1].ts_ns : tr->gt_end_ns;
        if (loupe__mb_instant(mb, ti, HOST(last), "loupe: truncated", args, 3) != 0) {
            return -1;
        }
        if (d->needed_entries > th->capacity_needed) {
            th->capacity_needed = d->needed_entries;
        }
    }
#undef HOST
    return loupe__mb_failed(mb) ? -1 : 0;
}

int loupe__gpu_collect(loupe__mb *mb, uint64_t origin_unix_ns, uint64_t stop_ns) {
    pthread_mutex_lock(&gpu_lock);
    launch *list = launches;
    launches = NULL;
    launches_tail = &launches;
    launch_count = 0;
    pthread_mutex_unlock(&gpu_lock);
    lines ls;
    memset(&ls, 0, sizeof ls);
    int failed = mb == NULL; /* no model to add to: the launches are dropped all the same */
    unsigned n = 0;
    for (launch *l = list; l != NULL && !failed; l = l->next, n++) {
        const loupe_gpu_decoded *d = l->d;
        uint64_t min_gt = UINT64_MAX, max_end = 0;
        for (size_t i = 0; i < d->trace_count; i++) {
            if (d->traces[i].gt_start_ns < min_gt) {
                min_gt = d->traces[i].gt_start_ns;
            }
            if (d->traces[i].gt_end_ns > max_end) {
                max_end = d->traces[i].gt_end_ns;
            }
        }
        if (d->trace_count == 0) {
            min_gt = max_end = 0;
        }
        uint64_t start = l->o.launch_start_unix_ns;
        const char *how = "caller";
        if (start == 0 && l->o.cupti_correlation_id != 0) {
            start = loupe__cupti_kernel_start_unix(l->o.cupti_correlation_id);
            how = "cupti";
        }
        if (start == 0) {
            start = l->added_unix_ns - (max_end - min_gt);
            how = "end at loupe_gpu_session_add (lower bound)";
        }
        int64_t shift = (int64_t)(start - origin_unix_ns) - (int64_t)min_gt;
        for (size_t i = 0; i < d->trace_count && !failed; i++) {
            const loupe_gpu_trace *tr = &d->traces[i];
            char group[256];
            const char *sw = d->spec.scope == 32 ? "warp" : "warpgroup";
            switch (l->o.tracks) {
            case LOUPE_GPU_TRACKS_BY_SM:
                snprintf(group, sizeof group, "SM %u", tr->smid);
                break;
            case LOUPE_GPU_TRACKS_BY_BLOCK:
                snprintf(group, sizeof group, "%s block %u", l->kernel, tr->block_linear);
                break;
            default:
                snprintf(group, sizeof group, "%s block %u %s %u", l->kernel, tr->block_linear, sw,
                         tr->trace_in_block);
                break;
            }
            uint64_t s0 = tr->gt_start_ns, s1 = tr->gt_end_ns;
            size_t ti = find_line(mb, &ls, l->o.device, group, s0, s1 > s0 ? s1 : s0 + 1);
            failed = ti == SIZE_MAX || add_trace(mb, ti, d, tr, shift) != 0;
        }
        char key[64], val[512];
        snprintf(key, sizeof key, "gpu_launch_%u", n);
        snprintf(val, sizeof val,
                 "%s on GPU %u: %zu traces, %llu events, %llu dropped, needed_entries %u, "
                 "%.6f GHz (%s), overhead %u cycles, aligned by %s",
                 l->kernel, l->o.device, d->trace_count, (unsigned long long)d->events,
                 (unsigned long long)d->events_dropped, d->needed_entries, d->ghz,
                 d->ghz_measured ? "measured" : "assumed", d->overhead_cycles, how);
        if (!failed && loupe__mb_metadata(mb, key, val) != 0) {
            failed = 1;
        }
    }
    for (size_t i = 0; i < ls.n; i++) {
        free(ls.v[i].group);
    }
    free(ls.v);
    free_launches(list);
    if (!failed) {
        failed = loupe__cupti_collect(mb, origin_unix_ns, stop_ns) != 0;
    }
    return failed ? loupe__err(LOUPE_ENOMEM, "out of memory while adding the GPU tracks") : 0;
}
