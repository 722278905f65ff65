/* mpi_check.c: checks the rank files of an mpi_app run (tests/mpi_record.sh).
 * usage: mpi_check RUN_DIR NRANKS ITER SHIFTED_FROM SHIFT_NS
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

static int64_t meta_i64(const loupe_model *m, const char *key, int rank) {
    const char *v = meta(m, key);
    if (v == NULL) {
        FAIL("rank %d: no metadata %s", rank, key);
    }
    return strtoll(v, NULL, 10);
}

static const loupe_arg *arg(const loupe_slice *s, const char *key) {
    for (uint32_t i = 0; i < s->arg_count; i++) {
        if (strcmp(s->args[i].key, key) == 0) {
            return &s->args[i];
        }
    }
    return NULL;
}

static int64_t arg_int(const loupe_slice *s, const char *key) {
    const loupe_arg *a = arg(s, key);
    if (a == NULL) {
        return INT64_MIN;
    }
    return a->type == LOUPE_ARG_UINT64 ? (int64_t)a->v.u : a->v.i;
}

typedef struct msg {
    uint64_t id;
    int rank, peer;
} msg;

int main(int argc, char **argv) {
    if (argc != 6 && argc != 7) {
        fprintf(stderr, "usage: mpi_check RUN_DIR NRANKS ITER SHIFTED_FROM SHIFT_NS\n");
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
                for (int k = 0; k < 9; k++) {
                    got[k] += strcmp(s->name, names[k]) == 0;
                }
                if (strcmp(s->name, "MPI_Allreduce") == 0 && arg_int(s, "seq") != next_seq++) {
                    FAIL("rank %d: MPI_Allreduce #%" PRId64 " has seq %" PRId64, r, next_seq - 1,
                         arg_int(s, "seq"));
                }
                if (strcmp(s->name, "MPI_Barrier") == 0) {
                    if (arg_int(s, "seq") != 1 || arg_int(s, "comm_size") != n) {
                        FAIL("rank %d: MPI_Barrier seq %" PRId64 " comm_size %" PRId64, r,
                             arg_int(s, "seq"), arg_int(s, "comm_size"));
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
                const loupe_arg *sid = arg(s, "mpi_send_id"), *rid = arg(s, "mpi_recv_id");
                if (sid != NULL && nsend < (size_t)n * (size_t)iter) {
                    sends[nsend++] = (msg){sid->v.u, r, (int)arg_int(s, "peer")};
                }
                if (rid != NULL && nrecv < (size_t)n * (size_t)iter) {
                    recvs[nrecv++] = (msg){rid->v.u, r, (int)arg_int(s, "source")};
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
    printf("mpi_check: %d ranks: %zu messages matched, offsets within their uncertainty, "
           "barrier consistent (last in %" PRId64 " ns before first out)\n",
           n, nsend, bar_first_out - bar_last_in);
    free(sends);
    free(recvs);
    return 0;
}
