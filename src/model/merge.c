/* merge.c: the merged view of a run directory that several processes wrote (loupe record
 * following a process tree, MPI ranks): one model, a process per part, every part's times moved
 * onto one origin. The parts are models read from files (src/import/run.c reads them); this
 * file only copies through the builder, so the merged model is sorted and checked like any other
 * (finish computes depths and lanes again, remaps flows).
 *
 * MPI messages become flows here. libloupe_mpi.so (src/mpi/pmpi.c) puts arg mpi_send_id on a
 * send's zone and mpi_recv_id on the zone where the matching receive completed (MPI_Recv,
 * MPI_Sendrecv, or the MPI_Wait / MPI_Test family call that finished an MPI_Irecv); both ranks
 * compute the same id, and the two ends are in two files. Once the files are one model, each id
 * carried by exactly one send and exactly one receive becomes a flow from the send's slice to
 * the receive's (Perfetto and XProf draw it as an arrow between the ranks). An id with no other
 * end (a rank that dropped events, a run stopped between a send and its receive), or carried by
 * more than one end of a side, gets no flow: counted in the metadata (loupe_mpi_unmatched_*) and
 * a warning, never guessed. */
#include "model/merge.h"

#include "base/array.h"
#include "base/error.h"
#include "model/builder.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *meta_get(const loupe_model *m, const char *key) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, key) == 0) {
            return m->metadata[i].value;
        }
    }
    return NULL;
}

void loupe__model_lift_process_meta(loupe_model *m) {
    if (m == NULL || m->process_count == 0) {
        return;
    }
    loupe_model_process *p = &m->processes[0];
    const char *cmd = meta_get(m, "loupe_cmdline");
    if (cmd != NULL && (p->cmdline == NULL || p->cmdline[0] == 0)) {
        p->cmdline = cmd; /* the model's own string storage: same lifetime */
    }
    const char *pp = meta_get(m, "loupe_parent_pid");
    if (pp != NULL && p->parent_pid == 0) {
        p->parent_pid = strtoull(pp, NULL, 10);
    }
    /* An MPI rank's file (libloupe_mpi.so's metadata): a one-process file's writers leave the
     * process's rank out, its metadata keeps it (the merged run's flows check ranks by it). */
    const char *rank = meta_get(m, "loupe_mpi_rank");
    char *end;
    long long r = rank != NULL ? strtoll(rank, &end, 10) : -1;
    if (rank != NULL && end != rank && *end == 0 && r >= 0 && p->rank < 0) {
        p->rank = r;
    }
}

/* A metadata value as int64; 0 and *ok = 0 when absent or not a whole decimal number. */
static int64_t meta_i64(const loupe_model *m, const char *key, int *ok) {
    const char *v = meta_get(m, key);
    *ok = 0;
    if (v == NULL || v[0] == 0) {
        return 0;
    }
    char *end;
    long long x = strtoll(v, &end, 10);
    if (*end != 0) {
        return 0;
    }
    *ok = 1;
    return (int64_t)x;
}

loupe__clock_fix loupe__clock_fix_of(const loupe_model *m) {
    loupe__clock_fix f;
    memset(&f, 0, sizeof f);
    int ok, ok_end, ok_at, ok_end_at;
    f.offset_ns = meta_i64(m, "loupe_clock_offset_ns", &ok);
    int64_t e = meta_i64(m, "loupe_clock_offset_end_ns", &ok_end);
    int64_t a = meta_i64(m, "loupe_clock_offset_at_ns", &ok_at);
    int64_t b = meta_i64(m, "loupe_clock_offset_end_at_ns", &ok_end_at);
    /* Drift needs both measurements and their times, the second after the first. The times
     * are unix-epoch ns on the file's own clock (docs/mpi.md: what libloupe_mpi.so and `loupe
     * capture` write), so on the file's timeline they are less its origin_unix_ns (a
     * measurement before the trace's start is at a negative time). */
    if (ok && ok_end && ok_at && ok_end_at && a >= 0 && b > a) {
        int64_t o = (int64_t)m->origin_unix_ns;
        f.has_end = 1;
        f.end_ns = e;
        f.at_ns = a - o;
        f.end_at_ns = b - o;
        /* No drift from two measurements that do not tell it: when the offsets differ by no
         * more than their uncertainties together, the difference may be all error (an MPICH
         * run's one slow exchange gave +1.2 ms and -3.2 ms with 2.9 ms of uncertainty, and the
         * interpolation put ranks 0.3-2.5 ms off where no correction was needed). Then the
         * offset is the better measurement's, or their mean when neither is known better.
         * Each measurement's uncertainty: its own key (since 0.5), else for the start an MPI
         * run's round trip at MPI_Init / 2, else the larger of the two. */
        int ok_u, ok_us, ok_ue, ok_rtt;
        int64_t u = meta_i64(m, "loupe_clock_offset_uncertainty_ns", &ok_u);
        int64_t us = meta_i64(m, "loupe_clock_offset_start_uncertainty_ns", &ok_us);
        int64_t ue = meta_i64(m, "loupe_clock_offset_end_uncertainty_ns", &ok_ue);
        int64_t rtt = meta_i64(m, "loupe_clock_sync_round_trip_ns", &ok_rtt);
        us = ok_us ? us : ok_rtt ? rtt / 2 : ok_u ? u : -1;
        ue = ok_ue ? ue : ok_u ? u : -1;
        int64_t d = e > f.offset_ns ? e - f.offset_ns : f.offset_ns - e;
        if (us >= 0 && ue >= 0 && (us > 0 || ue > 0) && d <= us + ue) {
            f.has_end = 0;
            f.offset_ns = us < ue ? f.offset_ns : ue < us ? e : f.offset_ns + (e - f.offset_ns) / 2;
        }
    }
    return f;
}

int64_t loupe_model_clock_offset(const loupe_model *m, uint64_t t_ns) {
    if (m == NULL) {
        return 0;
    }
    loupe__clock_fix f = loupe__clock_fix_of(m);
    return loupe__clock_fix_at(&f, t_ns);
}

int64_t loupe__clock_fix_at(const loupe__clock_fix *f, uint64_t t) {
    int64_t ts = t > (uint64_t)INT64_MAX ? INT64_MAX : (int64_t)t;
    if (!f->has_end || ts <= f->at_ns) {
        return f->offset_ns;
    }
    if (ts >= f->end_at_ns) {
        return f->end_ns;
    }
    double frac = (double)(ts - f->at_ns) / (double)(f->end_at_ns - f->at_ns);
    return f->offset_ns + (int64_t)((double)(f->end_ns - f->offset_ns) * frac);
}

uint64_t loupe__model_timeline_shift(const loupe_model *m) {
    if (m == NULL) {
        return 0;
    }
    int ok;
    int64_t base = meta_i64(m, "loupe_clock_base_unix_ns", &ok);
    if (!ok || base <= 0 || m->origin_unix_ns == 0 || m->origin_unix_ns > (uint64_t)INT64_MAX / 2) {
        return 0;
    }
    loupe__clock_fix f = loupe__clock_fix_of(m);
    int64_t shift = (int64_t)m->origin_unix_ns + loupe__clock_fix_at(&f, m->duration_ns / 2) - base;
    return shift > 0 && shift < ((int64_t)1 << 52) ? (uint64_t)shift : 0;
}

/* One part's time transform: ts + shift + the correction at ts, never below 0. */
typedef struct part_time {
    int64_t shift;
    loupe__clock_fix fix;
} part_time;

static uint64_t move(const part_time *pt, uint64_t ts) {
    int64_t v = (int64_t)ts + pt->shift + loupe__clock_fix_at(&pt->fix, ts);
    return v < 0 ? 0 : (uint64_t)v;
}

/* The merged stack node of part node i (memo: UINT32_MAX - 1 = not yet mapped). Parents are
 * mapped first, iteratively (a deep stack must not recurse deeply). */
static uint32_t map_stack(loupe__mb *mb, const loupe_model *p, const uint32_t *frame_map,
                          uint32_t *memo, uint32_t i) {
    const uint32_t unmapped = UINT32_MAX - 1;
    if (i >= p->stack_node_count) {
        return UINT32_MAX;
    }
    while (memo[i] == unmapped) {
        /* walk up to the outermost node not mapped yet, map it, repeat */
        uint32_t j = i;
        for (uint32_t guard = 0; guard < p->stack_node_count; guard++) {
            uint32_t up = p->stack_nodes[j].parent;
            if (up >= p->stack_node_count || memo[up] != unmapped) {
                break;
            }
            j = up;
        }
        uint32_t up = p->stack_nodes[j].parent;
        uint32_t parent = up >= p->stack_node_count ? UINT32_MAX : memo[up];
        uint32_t f = p->stack_nodes[j].frame;
        memo[j] = loupe__mb_stack(mb, parent, f < p->frame_count ? frame_map[f] : UINT32_MAX);
        if (memo[j] == unmapped) {
            memo[j] = UINT32_MAX;
        }
    }
    return memo[i];
}

static int copy_samples(loupe__mb *mb, const loupe_model *p, const size_t *thread_map,
                        const part_time *pt) {
    if (p->sample_count == 0) {
        return 0;
    }
    uint32_t *frame_map = calloc(p->frame_count + 1, sizeof *frame_map);
    uint32_t *memo = malloc((p->stack_node_count + 1) * sizeof *memo);
    if (frame_map == NULL || memo == NULL) {
        free(frame_map);
        free(memo);
        return loupe__err(LOUPE_ENOMEM, "merging samples: out of memory");
    }
    for (size_t i = 0; i < p->frame_count; i++) {
        loupe_frame f = p->frames[i];
        f.function = loupe__mb_str(mb, f.function ? f.function : "");
        f.file = loupe__mb_str(mb, f.file ? f.file : "");
        f.module = loupe__mb_str(mb, f.module ? f.module : "");
        frame_map[i] = loupe__mb_frame(mb, &f);
    }
    for (size_t i = 0; i < p->stack_node_count; i++) {
        memo[i] = UINT32_MAX - 1;
    }
    int r = 0;
    for (size_t i = 0; i < p->sample_count && r == 0; i++) {
        const loupe_sample *s = &p->samples[i];
        if (s->thread >= p->thread_count) {
            continue;
        }
        uint32_t st =
            s->stack == UINT32_MAX ? UINT32_MAX : map_stack(mb, p, frame_map, memo, s->stack);
        r = loupe__mb_sample(mb, thread_map[s->thread], move(pt, s->ts_ns), st, s->cpu);
    }
    free(frame_map);
    free(memo);
    return r;
}

/* One end of an MPI message: the id and the merged builder's (thread, slice) that carries it. */
typedef struct msg_end {
    uint64_t id;
    size_t thread, slice;
} msg_end;

typedef struct msg_ends {
    msg_end *v[2]; /* [0] sends, [1] receives */
    size_t n[2], cap[2];
} msg_ends;

static const char *const msg_keys[2] = {"mpi_send_id", "mpi_recv_id"};

/* Notes slice (thread, slice)'s message ids, if it has any. A reader may give the id back as
 * INT64 (a format without unsigned integers): the same 64 bits. Returns 0 or LOUPE_ENOMEM. */
static int note_ends(msg_ends *e, const loupe_arg *args, size_t nargs, size_t thread,
                     size_t slice) {
    for (size_t i = 0; i < nargs; i++) {
        const loupe_arg *a = &args[i];
        if (a->type != LOUPE_ARG_UINT64 && a->type != LOUPE_ARG_INT64) {
            continue;
        }
        for (int side = 0; side < 2; side++) {
            if (strcmp(a->key, msg_keys[side]) != 0) {
                continue;
            }
            if (loupe__grow((void **)&e->v[side], &e->cap[side], e->n[side] + 1, sizeof(msg_end)) !=
                0) {
                return LOUPE_ENOMEM;
            }
            uint64_t id = a->type == LOUPE_ARG_UINT64 ? a->v.u : (uint64_t)a->v.i;
            e->v[side][e->n[side]++] = (msg_end){id, thread, slice};
        }
    }
    return 0;
}

static int cmp_end(const void *a, const void *b) {
    const msg_end *x = a, *y = b;
    if (x->id != y->id) {
        return x->id < y->id ? -1 : 1;
    }
    if (x->thread != y->thread) {
        return x->thread < y->thread ? -1 : 1;
    }
    return x->slice < y->slice ? -1 : x->slice > y->slice;
}

/* The flows of the noted message ends (see the top of this file), and their counts into the
 * metadata when there was any id. */
static int link_messages(loupe__mb *mb, msg_ends *e) {
    if (e->n[0] == 0 && e->n[1] == 0) {
        return 0;
    }
    qsort(e->v[0], e->n[0], sizeof(msg_end), cmp_end);
    qsort(e->v[1], e->n[1], sizeof(msg_end), cmp_end);
    uint64_t flows = 0, lone[2] = {0, 0}, many[2] = {0, 0};
    size_t i = 0, j = 0;
    int r = 0;
    while (r == 0 && (i < e->n[0] || j < e->n[1])) {
        /* the next id on either side, and how many ends each side has of it */
        uint64_t id = j >= e->n[1] || (i < e->n[0] && e->v[0][i].id <= e->v[1][j].id)
                          ? e->v[0][i].id
                          : e->v[1][j].id;
        size_t i0 = i, j0 = j;
        while (i < e->n[0] && e->v[0][i].id == id) {
            i++;
        }
        while (j < e->n[1] && e->v[1][j].id == id) {
            j++;
        }
        size_t ns = i - i0, nr = j - j0;
        if (ns == 1 && nr == 1) {
            const msg_end *s = &e->v[0][i0], *d = &e->v[1][j0];
            /* 63 bits: the Chrome JSON writer writes flow ids modulo 2^63, so the id read
             * back is the id written */
            uint64_t fid = id & (UINT64_MAX >> 1);
            r = loupe__mb_flow(mb, fid ? fid : 1, s->thread, s->slice, d->thread, d->slice);
            flows++;
        } else if (ns == 0 || nr == 0) {
            lone[0] += ns;
            lone[1] += nr;
        } else {
            many[0] += ns;
            many[1] += nr;
        }
    }
    char buf[32];
    const char *keys[5] = {"loupe_mpi_flows", "loupe_mpi_unmatched_sends",
                           "loupe_mpi_unmatched_recvs", "loupe_mpi_ambiguous_sends",
                           "loupe_mpi_ambiguous_recvs"};
    uint64_t vals[5] = {flows, lone[0], lone[1], many[0], many[1]};
    for (int k = 0; k < 5 && r == 0; k++) {
        snprintf(buf, sizeof buf, "%llu", (unsigned long long)vals[k]);
        r = loupe__mb_metadata(mb, keys[k], buf);
    }
    if (r == 0 && (lone[0] != 0 || lone[1] != 0)) {
        r = loupe__mb_warn(mb,
                           "MPI messages: %llu sends and %llu receives have no other end in "
                           "this run (a rank dropped events or stopped early): no flow drawn "
                           "for them",
                           (unsigned long long)lone[0], (unsigned long long)lone[1]);
    }
    if (r == 0 && (many[0] != 0 || many[1] != 0)) {
        r = loupe__mb_warn(mb,
                           "MPI messages: %llu sends and %llu receives share their id with "
                           "another end of the same side: no flow drawn for them",
                           (unsigned long long)many[0], (unsigned long long)many[1]);
    }
    return r;
}

/* Copies part p (its processes from process index base on) into the builder, noting its
 * message ends in ends. */
static int copy_part(loupe__mb *mb, const loupe_model *p, const char *name, const part_time *pt,
                     msg_ends *ends) {
    size_t np = p->process_count ? p->process_count : 1;
    size_t *proc_map = calloc(np, sizeof *proc_map);
    size_t *thread_map = calloc(p->thread_count + 1, sizeof *thread_map);
    if (proc_map == NULL || thread_map == NULL) {
        free(proc_map);
        free(thread_map);
        return loupe__err(LOUPE_ENOMEM, "merging %s: out of memory", name);
    }
    int r = 0;
    for (size_t i = 0; i < np && r == 0; i++) {
        const loupe_model_process *src = p->process_count ? &p->processes[i] : NULL;
        size_t at = loupe__mb_process_add(mb, src ? src->pid : p->pid);
        if (at == SIZE_MAX) {
            r = LOUPE_ENOMEM;
            break;
        }
        proc_map[i] = at;
        loupe_model_process *d = loupe__mb_process_at(mb, at);
        d->name = loupe__mb_str(mb, src && src->name  ? src->name
                                    : p->process_name ? p->process_name
                                                      : "");
        d->host = loupe__mb_str(mb, src && src->host ? src->host : p->host ? p->host : "");
        d->label = loupe__mb_str(mb, src && src->label ? src->label : "");
        if (d->label != NULL && d->label[0] == 0 && src != NULL && src->rank >= 0) {
            /* an MPI rank's one-process file keeps no label: the session's ("rank N (host)") */
            char label[320];
            const char *h = meta_get(p, "loupe_mpi_host");
            snprintf(label, sizeof label, h != NULL && h[0] ? "rank %lld (%.256s)" : "rank %lld",
                     (long long)src->rank, h);
            d->label = loupe__mb_str(mb, label);
        }
        d->cmdline = loupe__mb_str(mb, src && src->cmdline ? src->cmdline : "");
        d->parent_pid = src ? src->parent_pid : 0;
        d->rank = src ? src->rank : -1;
    }
    for (size_t t = 0; t < p->thread_count && r == 0; t++) {
        const loupe_model_thread *st = &p->threads[t];
        size_t nt = loupe__mb_thread_add(mb, st->tid);
        if (nt == SIZE_MAX) {
            r = LOUPE_ENOMEM;
            break;
        }
        thread_map[t] = nt;
        loupe__mb_thread_name(mb, nt, st->name ? st->name : "");
        loupe_model_thread *dt = loupe__mb_thread_at(mb, nt);
        dt->kind = st->kind;
        dt->device = st->device;
        dt->events_recorded = st->events_recorded;
        dt->events_dropped = st->events_dropped;
        dt->capacity_needed = st->capacity_needed;
        dt->process = st->process < np ? proc_map[st->process] : proc_map[0];
        for (size_t s = 0; s < st->slice_count && r == 0; s++) {
            const loupe_slice *ss = &st->slices[s];
            size_t k = loupe__mb_slice(mb, nt), nargs;
            const loupe_arg *args = loupe_slice_args(st, s, &nargs);
            if (k == SIZE_MAX ||
                (nargs != 0 && loupe__mb_slice_args(mb, nt, k, args, (uint32_t)nargs) != 0)) {
                r = LOUPE_ENOMEM;
                break;
            }
            loupe_slice *ds = loupe__mb_slice_at(mb, nt, k);
            uint64_t a = move(pt, ss->start_ns), b = move(pt, ss->start_ns + ss->dur_ns);
            ds->start_ns = a;
            ds->dur_ns = b > a ? b - a : 0;
            ds->name = loupe__mb_str(mb, ss->name ? ss->name : "");
            loupe__mb_slice_category(mb, nt, k, loupe_slice_category(p, ss));
            ds->flags = ss->flags;
            r = note_ends(ends, args, nargs, nt, k);
        }
        for (size_t s = 0; s < st->instant_count && r == 0; s++) {
            const loupe_instant *in = &st->instants[s];
            r = loupe__mb_instant(mb, nt, move(pt, in->ts_ns), in->name ? in->name : "", in->args,
                                  in->arg_count);
        }
        for (size_t s = 0; s < st->off_cpu_count && r == 0; s++) {
            const loupe_interval *iv = &st->off_cpu[s];
            uint64_t a = move(pt, iv->start_ns), b = move(pt, iv->start_ns + iv->dur_ns);
            r = loupe__mb_off_cpu_kind(mb, nt, a, b > a ? b - a : 0, iv->kind);
        }
    }
    for (size_t i = 0; i < p->counter_count && r == 0; i++) {
        loupe_counter_sample c = p->counters[i];
        c.ts_ns = move(pt, c.ts_ns);
        c.name = loupe__mb_str(mb, c.name ? c.name : "");
        c.process = c.process < np ? proc_map[c.process] : proc_map[0];
        r = loupe__mb_counter(mb, &c);
    }
    for (size_t i = 0; i < p->flow_count && r == 0; i++) {
        const loupe_flow *f = &p->flows[i];
        if (f->from_thread < p->thread_count && f->to_thread < p->thread_count) {
            r = loupe__mb_flow(mb, f->id, thread_map[f->from_thread], f->from_slice,
                               thread_map[f->to_thread], f->to_slice);
        }
    }
    if (r == 0) {
        r = copy_samples(mb, p, thread_map, pt);
    }
    for (size_t i = 0; i < p->warning_count && r == 0; i++) {
        r = loupe__mb_warn(mb, "%s: %s", name, p->warnings[i]);
    }
    free(proc_map);
    free(thread_map);
    if (r == 0 && loupe__mb_failed(mb)) {
        r = LOUPE_ENOMEM;
    }
    return r == LOUPE_ENOMEM ? loupe__err(LOUPE_ENOMEM, "merging %s: out of memory", name) : r;
}

/* The parts' loupe_module_build_ids into one: each "<hex> <path>" line once, in the parts'
 * order (a path another part gave another build-id keeps both lines; the reader of the list
 * takes the first). 0 or LOUPE_ENOMEM. */
static int merge_build_ids(loupe__mb *mb, loupe_model *const *parts, size_t n) {
    char *all = NULL;
    size_t len = 0, cap = 0;
    for (size_t i = 0; i < n; i++) {
        const char *v = meta_get(parts[i], "loupe_module_build_ids");
        for (const char *p = v; p != NULL && *p;) {
            const char *eol = strchr(p, '\n');
            size_t l = eol != NULL ? (size_t)(eol - p) : strlen(p);
            int seen = 0;
            for (const char *q = all; q != NULL && q < all + len && !seen;) {
                const char *qe = memchr(q, '\n', (size_t)(all + len - q));
                size_t ql = qe != NULL ? (size_t)(qe - q) : (size_t)(all + len - q);
                seen = ql == l && memcmp(q, p, l) == 0;
                q = qe != NULL ? qe + 1 : all + len;
            }
            if (!seen && l != 0) {
                if (loupe__grow((void **)&all, &cap, len + l + 2, 1) != 0) {
                    free(all);
                    return loupe__err(LOUPE_ENOMEM, "merging: out of memory");
                }
                if (len != 0) {
                    all[len++] = '\n';
                }
                memcpy(all + len, p, l);
                len += l;
                all[len] = 0;
            }
            p = eol != NULL ? eol + 1 : p + l;
        }
    }
    int r = all != NULL ? loupe__mb_metadata(mb, "loupe_module_build_ids", all) : 0;
    free(all);
    return r;
}

int loupe__model_merge(loupe_model *const *parts, const char *const *names, size_t n,
                       loupe_model **out) {
    *out = NULL;
    if (n == 0) {
        return loupe__err(LOUPE_EINVALID, "merging: no part to merge");
    }
    part_time *pts = calloc(n, sizeof *pts);
    loupe__mb *mb = loupe__mb_new();
    if (pts == NULL || mb == NULL) {
        free(pts);
        loupe__mb_abort(mb);
        return loupe__err(LOUPE_ENOMEM, "merging %zu parts: out of memory", n);
    }
    /* The reference origin: the earliest part's start on the run's clock (its wall-clock origin
     * plus its correction at its ts 0). A part without an origin stays where it is. */
    int64_t origin = INT64_MAX;
    for (size_t i = 0; i < n; i++) {
        pts[i].fix = loupe__clock_fix_of(parts[i]);
        if (parts[i]->origin_unix_ns != 0) {
            int64_t o = (int64_t)parts[i]->origin_unix_ns + loupe__clock_fix_at(&pts[i].fix, 0);
            origin = o < origin ? o : origin;
        }
    }
    if (origin == INT64_MAX) {
        origin = 0;
    }
    loupe_model *m = loupe__mb_model(mb);
    const loupe_model *first = parts[0];
    m->pid = first->pid;
    m->process_name = loupe__mb_str(mb, first->process_name ? first->process_name : "");
    m->host = loupe__mb_str(mb, first->host ? first->host : "");
    m->clock = loupe__mb_str(mb, first->clock ? first->clock : "");
    m->tsc_ghz = first->tsc_ghz;
    m->origin_unix_ns = (uint64_t)(origin > 0 ? origin : 0);
    m->sample_period_ns = first->sample_period_ns;
    uint64_t end = 0;
    int r = 0;
    msg_ends ends;
    memset(&ends, 0, sizeof ends);
    for (size_t i = 0; i < n && r == 0; i++) {
        const loupe_model *p = parts[i];
        pts[i].shift = p->origin_unix_ns != 0 ? (int64_t)p->origin_unix_ns - origin : 0;
        if (p->origin_unix_ns == 0 && n > 1) {
            r = loupe__mb_warn(mb,
                               "%s: no origin_unix_ns (a trace without wall-clock time): its "
                               "times are not moved onto the run's clock",
                               names[i]);
        }
        if (r == 0) {
            r = copy_part(mb, p, names[i], &pts[i], &ends);
        }
        uint64_t e = move(&pts[i], p->duration_ns);
        end = e > end ? e : end;
        m = loupe__mb_model(mb);
        m->unmatched_ends += p->unmatched_ends;
        m->samples_lost += p->samples_lost;
        if (p->sample_period_ns != 0 && m->sample_period_ns == 0) {
            m->sample_period_ns = p->sample_period_ns;
        }
    }
    /* The first part's metadata, then each other part's keys the first lacks; not the clock
     * corrections, which the merged times have already had; the modules' build-ids of every
     * part (one line per module path). */
    for (size_t i = n; i-- > 0 && r == 0;) {
        for (size_t k = 0; k < parts[i]->metadata_count && r == 0; k++) {
            const char *key = parts[i]->metadata[k].key;
            if (strncmp(key, "loupe_clock_offset_", 19) == 0 ||
                strcmp(key, "loupe_module_build_ids") == 0) {
                continue;
            }
            r = loupe__mb_metadata(mb, key, parts[i]->metadata[k].value);
        }
    }
    if (r == 0) {
        r = merge_build_ids(mb, parts, n);
    }
    if (r == 0) {
        r = link_messages(mb, &ends);
    }
    free(ends.v[0]);
    free(ends.v[1]);
    free(pts);
    if (r != 0) {
        loupe__mb_abort(mb);
        return r;
    }
    m = loupe__mb_model(mb);
    m->duration_ns = end;
    loupe_model *done = loupe__mb_finish(mb);
    if (done == NULL) {
        return loupe__err(LOUPE_ENOMEM, "merging %zu parts: out of memory", n);
    }
    *out = done;
    return 0;
}
