/* mpi_check.c: checks the rank files of an mpi_app run (tests/mpi_record.sh).
 * usage: mpi_check RUN_DIR NRANKS ITER SHIFTED_FROM SHIFT_NS [SLACK_NS]
 *        mpi_check RUN_DIR NRANKS completions    (a run of `mpi_app completions`; NRANKS may
 *                                                 be 1: its messages to itself are flows too)
 * (ranks >= SHIFTED_FROM ran with LOUPE_TEST_CLOCK_SHIFT_NS=SHIFT_NS). Reads each
 * rankNNNN.trace.json.gz and checks, printing the first failure and exiting 1:
 *   - metadata: loupe_mpi_rank = the file's rank, loupe_mpi_size = NRANKS;
 *   - exact zone counts per rank (compute, MPI_Send, MPI_Irecv, MPI_Wait, MPI_Allreduce: ITER
 *     each; MPI_Init, MPI_Barrier, MPI_Finalize: 1; loupe clock sync: 2);
 *   - MPI_Allreduce's seq args are 1..ITER in order, MPI_Barrier's is 1;
 *   - message ids: NRANKS * ITER sends, each matched by exactly one receive, on the rank the send
 *     named as peer, whose receive names the sender as source;
 *   - clocks: each rank's measured offset is -(its shift) to within its recorded uncertainty
 *     (half the smallest round trip: Cristian's bound); with the offsets applied, no rank leaves
 *     the MPI_Barrier before the last one entered it (200 us allowed for the trace clock's own
 *     error: its origin and TSC rate, plus twice the largest offset uncertainty, since two ranks'
 *     offsets may each be off by up to it), while without them the shifted ranks would be SHIFT_NS
 * off.
 */
#include <inttypes.h>
#include <loupe/loupe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "mpi_check: " __VA_ARGS__);                                                \
        fprintf(stderr, "\n");                                                                     \
        exit(1);                                                                                   \
    } while (0)

static const char *meta(const loupe_model *m, const char *key) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, key) == 0) {
            return m->metadata[i].value;
        }
    }
    return NULL;
}

static const char *meta_or(const loupe_model *m, const char *key) {
    const char *v = meta(m, key);
    return v != NULL ? v : "(none)";
}

static int64_t meta_i64(const loupe_model *m, const char *key, int rank) {
    const char *v = meta(m, key);
    if (v == NULL) {
        FAIL("rank %d: no metadata %s", rank, key);
    }
    return strtoll(v, NULL, 10);
}

/* s: one of th's slices. */
static const loupe_arg *arg(const loupe_model_thread *th, const loupe_slice *s, const char *key) {
    size_t n;
    const loupe_arg *args = loupe_slice_args(th, (size_t)(s - th->slices), &n);
    for (size_t i = 0; i < n; i++) {
        if (strcmp(args[i].key, key) == 0) {
            return &args[i];
        }
    }
    return NULL;
}

static int64_t arg_int(const loupe_model_thread *th, const loupe_slice *s, const char *key) {
    const loupe_arg *a = arg(th, s, key);
    if (a == NULL) {
        return INT64_MIN;
    }
    return a->type == LOUPE_ARG_UINT64 ? (int64_t)a->v.u : a->v.i;
}

/* The merged view of the run: exactly `want` flows, each from a zone with an mpi_send_id to one
 * with the same mpi_recv_id, on the tracks of the ranks that the ends' peer / source args name;
 * exactly want_self of them from a rank to itself. */
static void check_flows(const char *run, size_t want, size_t want_self) {
    loupe_model *m = NULL;
    int rc = loupe_trace_read(run, &m);
    if (rc != 0) {
        FAIL("%s: %s: %s", run, loupe_strerror(rc), loupe_last_error());
    }
    if (m->flow_count != want) {
        FAIL("merged run: %zu flows, want %zu (loupe_mpi_flows %s, unmatched sends %s, "
             "receives %s)",
             m->flow_count, want, meta_or(m, "loupe_mpi_flows"),
             meta_or(m, "loupe_mpi_unmatched_sends"), meta_or(m, "loupe_mpi_unmatched_recvs"));
    }
    size_t self = 0;
    for (size_t i = 0; i < m->flow_count; i++) {
        const loupe_flow *f = &m->flows[i];
        const loupe_model_thread *a = &m->threads[f->from_thread], *b = &m->threads[f->to_thread];
        const loupe_slice *s = &a->slices[f->from_slice], *d = &b->slices[f->to_slice];
        const loupe_model_process *pa = &m->processes[a->process], *pb = &m->processes[b->process];
        /* the flow's id is the message's, to 63 bits (src/model/merge.c); a zone may carry
         * several ids of one side (an MPI_Startall's sends, an MPI_Waitall's receives) */
        int sent = 0, same = 0;
        size_t sn, dn;
        const loupe_arg *sa = loupe_slice_args(a, f->from_slice, &sn);
        const loupe_arg *da = loupe_slice_args(b, f->to_slice, &dn);
        for (size_t k = 0; k < sn; k++) {
            sent |=
                strcmp(sa[k].key, "mpi_send_id") == 0 && (sa[k].v.u & (UINT64_MAX >> 1)) == f->id;
        }
        for (size_t k = 0; k < dn; k++) {
            same |=
                strcmp(da[k].key, "mpi_recv_id") == 0 && (da[k].v.u & (UINT64_MAX >> 1)) == f->id;
        }
        if (!sent || strncmp(s->name, "MPI_", 4) != 0) {
            FAIL("flow %zu starts at %s, which has not its id as mpi_send_id", i, s->name);
        }
        /* the peer arg, where the zone has one (MPI_Startall's has not), names the receiver's
         * rank: another rank's, or its own for a message to itself */
        int64_t peer = arg(a, s, "peer") != NULL ? arg_int(a, s, "peer") : pb->rank;
        if (!same || pa->rank < 0 || pb->rank < 0 || peer != pb->rank) {
            FAIL("flow %zu: %s on rank %" PRId64 " (peer %" PRId64 ") to %s on rank %" PRId64 "%s",
                 i, s->name, pa->rank, peer, d->name, pb->rank,
                 same ? "" : ", which has not the send's id");
        }
        self += pa->rank == pb->rank;
    }
    if (self != want_self) {
        FAIL("merged run: %zu flows from a rank to itself, want %zu", self, want_self);
    }
    loupe_model_free(m);
}

static loupe_model *read_rank(const char *run, int r, int n) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%04d.trace.json.gz", run, r);
    loupe_model *m = NULL;
    int rc = loupe_trace_read(path, &m);
    if (rc != 0) {
        FAIL("%s: %s", loupe_strerror(rc), loupe_last_error());
    }
    if (meta_i64(m, "loupe_mpi_rank", r) != r || meta_i64(m, "loupe_mpi_size", r) != n) {
        FAIL("rank %d: metadata says rank %s of %s", r, meta(m, "loupe_mpi_rank"),
             meta(m, "loupe_mpi_size"));
    }
    return m;
}

/* What `mpi_app completions` does on each rank (tests/mpi/mpi_app.c's completions()): per zone
 * name, how many zones (-1: timing decides, at least 1), the sum of their completed args, the
 * receives they completed (mpi_recv_id args), the sends they made (mpi_send_id args). */
typedef struct want_zone {
    const char *name;
    int count;
    int64_t completed;
    int recv_ids, send_ids;
} want_zone;

static const want_zone completion_zones[] = {
    {"MPI_Irecv", 7, 0, 0, 0},      {"MPI_Isend", 8, 0, 0, 8},
    {"MPI_Waitany", 4, 4, 2, 0},    {"MPI_Waitsome", -1, 4, 2, 0},
    {"MPI_Testall", -1, 2, 1, 0},   {"MPI_Testany", -1, 2, 1, 0},
    {"MPI_Testsome", -1, 2, 1, 0},  {"MPI_Send_init", 1, 0, 0, 0},
    {"MPI_Recv_init", 1, 0, 0, 0},  {"MPI_Startall", 3, 0, 0, 3},
    {"MPI_Start", 2, 0, 0, 1},      {"MPI_Request_free", 2, 0, 0, 0},
    {"MPI_Recv", 1, 0, 1, 0},       {"MPI_Waitall", 5, 14, 3, 0},
    {"MPI_Wait", 4, 4, 1, 0},       {"MPI_Ibarrier", 1, 0, 0, 0},
    {"MPI_Ibcast", 1, 0, 0, 0},     {"MPI_Ireduce", 1, 0, 0, 0},
    {"MPI_Iallreduce", 2, 0, 0, 0}, {"MPI_Iallgather", 1, 0, 0, 0},
    {"MPI_Ialltoall", 1, 0, 0, 0},  {"MPI_Igather", 1, 0, 0, 0},
    {"MPI_Iscatter", 1, 0, 0, 0},   {"MPI_Barrier", 1, 0, 0, 0}};
enum { N_COMPLETION_ZONES = sizeof completion_zones / sizeof completion_zones[0] };

/* The non-blocking collectives MPI_Waitall completed (arg <name> = seq 1 each) */
static const char *const icolls[] = {"MPI_Ibarrier",   "MPI_Ibcast",     "MPI_Ireduce",
                                     "MPI_Iallreduce", "MPI_Iallgather", "MPI_Ialltoall",
                                     "MPI_Igather",    "MPI_Iscatter"};

static void check_completions(const char *run, int n) {
    for (int r = 0; r < n; r++) {
        loupe_model *m = read_rank(run, r, n);
        int count[N_COMPLETION_ZONES] = {0}, recv_ids[N_COMPLETION_ZONES] = {0};
        int send_ids[N_COMPLETION_ZONES] = {0}, waitall_colls = 0, wait_iallreduce = 0;
        int64_t completed[N_COMPLETION_ZONES] = {0};
        int testall_done = 0;
        int64_t iallreduce_seq = 0;
        for (size_t t = 0; t < m->thread_count; t++) {
            for (size_t i = 0; i < m->threads[t].slice_count; i++) {
                const loupe_slice *s = &m->threads[t].slices[i];
                const loupe_model_thread *st = &m->threads[t];
                int k = 0;
                while (k < N_COMPLETION_ZONES && strcmp(s->name, completion_zones[k].name) != 0) {
                    k++;
                }
                if (k == N_COMPLETION_ZONES) {
                    continue;
                }
                count[k]++;
                int64_t c = arg_int(st, s, "completed");
                completed[k] += c == INT64_MIN ? 0 : c;
                size_t na;
                const loupe_arg *sa = loupe_slice_args(st, i, &na);
                for (size_t a = 0; a < na; a++) {
                    recv_ids[k] += strcmp(sa[a].key, "mpi_recv_id") == 0;
                    send_ids[k] += strcmp(sa[a].key, "mpi_send_id") == 0;
                }
                if (strcmp(s->name, "MPI_Testall") == 0) {
                    if (c != 0 && c != 2) {
                        FAIL("rank %d: an MPI_Testall completed %" PRId64 ", want 0 or 2", r, c);
                    }
                    testall_done += c == 2;
                }
                if (strncmp(s->name, "MPI_I", 5) == 0 && strcmp(s->name, "MPI_Irecv") != 0 &&
                    strcmp(s->name, "MPI_Isend") != 0) {
                    int64_t want = strcmp(s->name, "MPI_Iallreduce") == 0 ? ++iallreduce_seq : 1;
                    if (arg_int(st, s, "seq") != want || arg_int(st, s, "comm_size") != n) {
                        FAIL("rank %d: %s seq %" PRId64 " comm_size %" PRId64 ", want %" PRId64
                             " and %d",
                             r, s->name, arg_int(st, s, "seq"), arg_int(st, s, "comm_size"), want,
                             n);
                    }
                }
                /* one MPI_Waitall completed the 8 collectives (the others persistent requests) */
                if (strcmp(s->name, "MPI_Waitall") == 0 && arg_int(st, s, "completed") == 8) {
                    waitall_colls++;
                    for (size_t j = 0; j < sizeof icolls / sizeof icolls[0]; j++) {
                        if (arg_int(st, s, icolls[j]) != 1) {
                            FAIL("rank %d: MPI_Waitall says it completed %s #%" PRId64 ", want #1",
                                 r, icolls[j], arg_int(st, s, icolls[j]));
                        }
                    }
                }
                if (strcmp(s->name, "MPI_Wait") == 0 && arg(st, s, "MPI_Iallreduce") != NULL) {
                    wait_iallreduce++;
                    if (arg_int(st, s, "MPI_Iallreduce") != 2) {
                        FAIL("rank %d: MPI_Wait completed MPI_Iallreduce #%" PRId64 ", want #2", r,
                             arg_int(st, s, "MPI_Iallreduce"));
                    }
                }
            }
        }
        for (int k = 0; k < N_COMPLETION_ZONES; k++) {
            const want_zone *w = &completion_zones[k];
            if ((w->count >= 0 ? count[k] != w->count : count[k] < 1) ||
                completed[k] != w->completed || recv_ids[k] != w->recv_ids ||
                send_ids[k] != w->send_ids) {
                FAIL("rank %d: %d %s zones (want %d), completed %" PRId64 " (want %" PRId64
                     "), %d receives (want %d), %d sends (want %d)",
                     r, count[k], w->name, w->count, completed[k], w->completed, recv_ids[k],
                     w->recv_ids, send_ids[k], w->send_ids);
            }
        }
        if (waitall_colls != 1 || wait_iallreduce != 1) {
            FAIL("rank %d: %d MPI_Waitall completed the 8 collectives, %d MPI_Wait an "
                 "MPI_Iallreduce, want 1 each",
                 r, waitall_colls, wait_iallreduce);
        }
        if (testall_done != 1) {
            FAIL("rank %d: %d MPI_Testall calls completed both requests, want 1", r, testall_done);
        }
        loupe_model_free(m);
    }
    /* per rank: 7 non-blocking, 4 persistent, 1 to itself */
    int self = n == 1 ? 12 : n; /* 1 rank: its ring is itself too */
    check_flows(run, (size_t)n * 12, (size_t)self);
    printf("mpi_check: %d ranks: every completion call, persistent request and non-blocking "
           "collective counted, %d messages as flows (%d to the sender itself)\n",
           n, n * 12, self);
}

typedef struct msg {
    uint64_t id;
    int rank, peer;
} msg;

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[3], "completions") == 0) {
        check_completions(argv[1], atoi(argv[2]));
        return 0;
    }
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: mpi_check RUN_DIR NRANKS ITER SHIFTED_FROM SHIFT_NS [SLACK_NS]\n"
                        "       mpi_check RUN_DIR NRANKS completions\n");
        return 2;
    }
    const char *run = argv[1];
    int n = atoi(argv[2]), iter = atoi(argv[3]), shifted_from = atoi(argv[4]);
    int64_t shift = strtoll(argv[5], NULL, 10);
    /* How far a rank may seem to leave MPI_Barrier before the last one entered it: the clock
     * offsets' error plus the gap between a wrapper's timestamp and the call (default 200 us;
     * the 16-rank run, 8 ranks a core, passes more) */
    int64_t slack = argc == 7 ? strtoll(argv[6], NULL, 10) : 200000;
    msg *sends = calloc((size_t)n * (size_t)iter + 1, sizeof *sends);
    msg *recvs = calloc((size_t)n * (size_t)iter + 1, sizeof *recvs);
    size_t nsend = 0, nrecv = 0;
    int64_t bar_last_in = INT64_MIN, bar_first_out = INT64_MAX;
    int64_t raw_last_in = INT64_MIN, raw_first_out = INT64_MAX;
    int64_t unc_max = 0; /* the largest offset uncertainty: two ranks may each be off by it */
    for (int r = 0; r < n; r++) {
        loupe_model *m = read_rank(run, r, n);
        int64_t off = meta_i64(m, "loupe_clock_offset_ns", r);
        int64_t unc = meta_i64(m, "loupe_clock_offset_uncertainty_ns", r);
        int64_t want = r >= shifted_from ? -shift : 0;
        unc_max = unc > unc_max ? unc : unc_max;
        if (off - want > unc || want - off > unc) {
            FAIL("rank %d: clock offset %" PRId64 " ns, want %" PRId64 " +- %" PRId64, r, off, want,
                 unc);
        }
        const char *names[] = {"compute",     "MPI_Send",      "MPI_Irecv",
                               "MPI_Wait",    "MPI_Allreduce", "MPI_Init",
                               "MPI_Barrier", "MPI_Finalize",  "loupe clock sync"};
        int want_n[] = {iter, iter, iter, iter, iter, 1, 1, 1, 2};
        int got[9] = {0};
        int64_t next_seq = 1;
        for (size_t t = 0; t < m->thread_count; t++) {
            for (size_t i = 0; i < m->threads[t].slice_count; i++) {
                const loupe_slice *s = &m->threads[t].slices[i];
                const loupe_model_thread *st = &m->threads[t];
                for (int k = 0; k < 9; k++) {
                    got[k] += strcmp(s->name, names[k]) == 0;
                }
                if (strcmp(s->name, "MPI_Allreduce") == 0 && arg_int(st, s, "seq") != next_seq++) {
                    FAIL("rank %d: MPI_Allreduce #%" PRId64 " has seq %" PRId64, r, next_seq - 1,
                         arg_int(st, s, "seq"));
                }
                if (strcmp(s->name, "MPI_Barrier") == 0) {
                    if (arg_int(st, s, "seq") != 1 || arg_int(st, s, "comm_size") != n) {
                        FAIL("rank %d: MPI_Barrier seq %" PRId64 " comm_size %" PRId64, r,
                             arg_int(st, s, "seq"), arg_int(st, s, "comm_size"));
                    }
                    int64_t in = (int64_t)m->origin_unix_ns + (int64_t)s->start_ns;
                    int64_t out = in + (int64_t)s->dur_ns;
                    raw_last_in = in > raw_last_in ? in : raw_last_in;
                    raw_first_out = out < raw_first_out ? out : raw_first_out;
                    in += off;
                    out += off;
                    bar_last_in = in > bar_last_in ? in : bar_last_in;
                    bar_first_out = out < bar_first_out ? out : bar_first_out;
                }
                const loupe_arg *sid = arg(st, s, "mpi_send_id"), *rid = arg(st, s, "mpi_recv_id");
                if (sid != NULL && nsend < (size_t)n * (size_t)iter) {
                    sends[nsend++] = (msg){sid->v.u, r, (int)arg_int(st, s, "peer")};
                }
                if (rid != NULL && nrecv < (size_t)n * (size_t)iter) {
                    recvs[nrecv++] = (msg){rid->v.u, r, (int)arg_int(st, s, "source")};
                }
            }
        }
        for (int k = 0; k < 9; k++) {
            if (got[k] != want_n[k]) {
                FAIL("rank %d: %d %s zones, want %d", r, got[k], names[k], want_n[k]);
            }
        }
        loupe_model_free(m);
    }
    if (nsend != (size_t)n * (size_t)iter || nrecv != nsend) {
        FAIL("%zu sends and %zu receives with ids, want %d each", nsend, nrecv, n * iter);
    }
    for (size_t i = 0; i < nsend; i++) {
        int matches = 0;
        for (size_t j = 0; j < nrecv; j++) {
            if (recvs[j].id == sends[i].id) {
                matches++;
                if (recvs[j].rank != sends[i].peer || recvs[j].peer != sends[i].rank) {
                    FAIL("message %" PRIu64 ": sent by %d to %d, received by %d from %d",
                         sends[i].id, sends[i].rank, sends[i].peer, recvs[j].rank, recvs[j].peer);
                }
            }
        }
        if (matches != 1) {
            FAIL("message %" PRIu64 " from rank %d: %d receives, want 1", sends[i].id,
                 sends[i].rank, matches);
        }
    }
    if (bar_last_in > bar_first_out + slack + 2 * unc_max) {
        FAIL("with the offsets applied, a rank left MPI_Barrier %" PRId64
             " ns before the last entered it (allowed: %" PRId64 " + 2 x %" PRId64 " ns)",
             bar_last_in - bar_first_out, slack, unc_max);
    }
    if (shift > 1000000 && shifted_from < n && raw_last_in <= raw_first_out) {
        FAIL("without the offsets the barrier looks consistent: the injected shift did nothing");
    }
    check_flows(run, nsend, 0);
    printf("mpi_check: %d ranks: %zu messages matched (and as flows), offsets within their "
           "uncertainty, "
           "barrier consistent (last in %" PRId64 " ns before first out)\n",
           n, nsend, bar_first_out - bar_last_in);
    free(sends);
    free(recvs);
    return 0;
}
