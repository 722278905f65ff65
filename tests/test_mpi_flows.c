/* test_mpi_flows.c: MPI point-to-point messages as flows in the merged view of a run directory
 * (src/model/merge.c). A synthetic two-rank run (rank0000 / rank0001 files as `mpirun loupe
 * record` names them, written by loupe's writers, no MPI needed) carries the args that
 * libloupe_mpi.so (src/mpi/pmpi.c) records: mpi_send_id on sends, mpi_recv_id where a receive
 * completed. Reading the directory gives exactly one flow per id with one send and one receive,
 * from the send's slice on the sender's track to the receive's on the receiver's; ids without
 * the other end, or with two ends of one side, give none and are counted (metadata, warnings).
 * The flows survive `loupe convert RUN -o x.pftrace`, `-o x.json` and `-o x.xplane.pb` and
 * reading those back; the .json has them as the Chrome / Perfetto JSON importers read flows.
 * A run of one rank file gets the flows of its messages to itself. A rank's own .xplane.pb
 * carries its message ends as XProf flow stats too (exact values), the merged one none.
 * Each rank's process gets its rank and label from the file's loupe_mpi_rank / loupe_mpi_host. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>
#include <jansson.h>

#include <loupe/loupe.h>
#include <loupe/reader.h>
#include <loupe/writer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "model/builder.h"
#include "testutil.h"

/* Message ids: A and B matched (A with its top bit set: the flow id keeps 63 bits), C a send
 * never received, D a receive never sent, E sent twice (an id no rank computes twice: counted
 * as ambiguous, never guessed). */
enum { ID_A_LOW = 0x11, ID_B = 0x22, ID_C = 0x33, ID_D = 0x44, ID_E = 0x55 };
#define ID_A (0x8000000000000000ull | ID_A_LOW)

typedef struct zone {
    uint64_t start, dur;
    const char *name;
    const char *key; /* "mpi_send_id", "mpi_recv_id" or NULL */
    uint64_t id;
} zone;

static const uint64_t origin = 1700000000000000000ull;

/* One rank's file: process pid 100 + rank, one thread, a "step" zone around the MPI zones (so
 * that the merged builder's sort moves slice indices: the flows must follow). */
static void write_rank(const char *dir, int rank, const zone *z, size_t n, loupe_file_format f,
                       const char *suffix) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 100 + (uint64_t)rank;
    m->origin_unix_ns = origin;
    m->duration_ns = 100000;
    size_t p = loupe__mb_process(mb, m->pid);
    loupe__mb_process_at(mb, p)->rank = rank;
    size_t t = loupe__mb_thread_in(mb, p, m->pid);
    char v[16];
    snprintf(v, sizeof v, "%d", rank);
    assert_int_equal(loupe__mb_metadata(mb, "loupe_mpi_rank", v), 0);
    snprintf(v, sizeof v, "node%d", rank);
    assert_int_equal(loupe__mb_metadata(mb, "loupe_mpi_host", v), 0);
    for (size_t i = n; i-- > 0;) { /* backwards: the builder sorts them */
        size_t k = loupe__mb_slice(mb, t);
        loupe_slice *s = loupe__mb_slice_at(mb, t, k);
        s->start_ns = z[i].start;
        s->dur_ns = z[i].dur;
        s->name = loupe__mb_str(mb, z[i].name);
        if (z[i].key != NULL) {
            loupe_arg a[2] = {{.key = "peer", .type = LOUPE_ARG_INT64, .v.i = 1 - rank},
                              {.key = z[i].key, .type = LOUPE_ARG_UINT64, .v.u = z[i].id}};
            assert_int_equal(loupe__mb_slice_args(mb, t, k, a, 2), 0);
        }
    }
    loupe_model *done = loupe__mb_finish(mb);
    assert_non_null(done);
    char path[4096];
    snprintf(path, sizeof path, "%s/rank%04d%s", dir, rank, suffix);
    int rc = loupe_trace_write(done, path, f);
    if (rc != 0) {
        fail_msg("%s: %s", path, loupe_last_error());
    }
    loupe_model_free(done);
}

/* The flow whose send end is slice `from` of pid `from_pid`: asserts there is exactly one and
 * that it ends at slice `to` of pid `to_pid`. */
static void check_flow(const loupe_model *m, uint64_t from_pid, const char *from, uint64_t to_pid,
                       const char *to, uint64_t id) {
    int found = 0;
    for (size_t i = 0; i < m->flow_count; i++) {
        const loupe_flow *f = &m->flows[i];
        assert_true(f->from_thread < m->thread_count && f->to_thread < m->thread_count);
        const loupe_model_thread *a = &m->threads[f->from_thread], *b = &m->threads[f->to_thread];
        assert_true(f->from_slice < a->slice_count && f->to_slice < b->slice_count);
        if (m->processes[a->process].pid != from_pid ||
            strcmp(a->slices[f->from_slice].name, from) != 0) {
            continue;
        }
        found++;
        assert_int_equal(m->processes[b->process].pid, to_pid);
        assert_string_equal(b->slices[f->to_slice].name, to);
        assert_int_equal(f->id, id);
    }
    assert_int_equal(found, 1);
}

static void check_run_flows(const loupe_model *m) {
    assert_int_equal(m->process_count, 2);
    assert_int_equal(m->flow_count, 2);
    check_flow(m, 100, "MPI_Send", 101, "MPI_Recv", ID_A_LOW);
    check_flow(m, 101, "MPI_Isend", 100, "MPI_Wait", ID_B);
}

/* The flows of a Chrome JSON file as the Chrome / Perfetto JSON importers read them (Perfetto's
 * json_trace_parser: "flow v2" is a bind_id with flow_out / flow_in on the two X events; "flow
 * v1" is a ph s event and a ph f event with one id, bound to their enclosing slices by bp "e"):
 * asserts that the file has exactly the flows of check_run_flows(), as v2 (each slice here has
 * one flow end), from the send's X event in one pid to the receive's in the other. */
static void check_json_flows(const char *path) {
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (root == NULL) {
        fail_msg("%s: %s", path, err.text);
    }
    json_t *evs = json_object_get(root, "traceEvents");
    assert_true(json_is_array(evs));
    const char *out_name[2] = {NULL, NULL}, *in_name[2] = {NULL, NULL};
    json_int_t out_pid[2] = {0, 0}, in_pid[2] = {0, 0};
    uint64_t out_id[2] = {0, 0}, in_id[2] = {0, 0};
    size_t nout = 0, nin = 0, v1 = 0, i;
    json_t *e;
    json_array_foreach(evs, i, e) {
        const char *ph = json_string_value(json_object_get(e, "ph"));
        v1 += ph != NULL && (strcmp(ph, "s") == 0 || strcmp(ph, "f") == 0);
        json_t *bind = json_object_get(e, "bind_id");
        if (bind == NULL) {
            continue;
        }
        assert_string_equal(ph, "X");
        assert_true(json_is_integer(bind));
        int out = json_is_true(json_object_get(e, "flow_out"));
        int in = json_is_true(json_object_get(e, "flow_in"));
        assert_true(out != in);
        size_t *n = out ? &nout : &nin;
        assert_true(*n < 2);
        (out ? out_name : in_name)[*n] = json_string_value(json_object_get(e, "name"));
        (out ? out_pid : in_pid)[*n] = json_integer_value(json_object_get(e, "pid"));
        (out ? out_id : in_id)[*n] = (uint64_t)json_integer_value(bind);
        (*n)++;
    }
    assert_int_equal(v1, 0);
    assert_int_equal(nout, 2);
    assert_int_equal(nin, 2);
    for (size_t k = 0; k < 2; k++) {
        size_t j = in_id[0] == out_id[k] ? 0 : 1;
        assert_int_equal(in_id[j], out_id[k]);
        assert_true(in_pid[j] != out_pid[k]);
        int a = strcmp(out_name[k], "MPI_Send") == 0;
        assert_string_equal(out_name[k], a ? "MPI_Send" : "MPI_Isend");
        assert_string_equal(in_name[j], a ? "MPI_Recv" : "MPI_Wait");
        assert_int_equal(out_pid[k], a ? 100 : 101);
        assert_int_equal(out_id[k], a ? ID_A_LOW : ID_B);
    }
    json_decref(root);
}

/* A run directory tu_dir/name (made) into dir. */
static void run_dir(char *dir, size_t size, const char *name) {
    snprintf(dir, size, "%s/%s", tu_dir, name);
    assert_int_equal(mkdir(dir, 0755), 0);
}

static void test_run_dir_flows(void **state) {
    (void)state;
    char dir[4096], cmd[16384];
    run_dir(dir, sizeof dir, "run");
    const zone r0[] = {{1000, 9000, "step", NULL, 0},
                       {2000, 100, "MPI_Send", "mpi_send_id", ID_A},
                       {3000, 100, "MPI_Send", "mpi_send_id", ID_C},
                       {4000, 100, "MPI_Irecv", NULL, 0},
                       {5000, 100, "MPI_Send", "mpi_send_id", ID_E},
                       {6000, 100, "MPI_Ssend", "mpi_send_id", ID_E},
                       {7000, 500, "MPI_Wait", "mpi_recv_id", ID_B}};
    const zone r1[] = {{1500, 9000, "step", NULL, 0},
                       {2050, 200, "MPI_Recv", "mpi_recv_id", ID_A},
                       {4500, 100, "MPI_Isend", "mpi_send_id", ID_B},
                       {6500, 100, "MPI_Recv", "mpi_recv_id", ID_E},
                       {8000, 100, "MPI_Recv", "mpi_recv_id", ID_D}};
    /* two formats: the ids must come back from either reader */
    write_rank(dir, 0, r0, sizeof r0 / sizeof r0[0], LOUPE_FILE_CHROME_JSON, ".trace.json.gz");
    write_rank(dir, 1, r1, sizeof r1 / sizeof r1[0], LOUPE_FILE_PERFETTO_PROTO, ".pftrace");

    loupe_model *m = NULL;
    int rc = loupe_trace_read(dir, &m);
    if (rc != 0) {
        fail_msg("%s: %s", dir, loupe_last_error());
    }
    check_run_flows(m);
    /* the ranks from each file's loupe_mpi_rank, labelled as the session labels them */
    for (size_t i = 0; i < 2; i++) {
        const loupe_model_process *pr = &m->processes[i];
        assert_int_equal(pr->rank, (int64_t)pr->pid - 100);
        assert_string_equal(pr->label, pr->pid == 100 ? "rank 0 (node0)" : "rank 1 (node1)");
    }
    assert_string_equal(tu_meta(m, "loupe_mpi_flows", "(none)"), "2");
    assert_string_equal(tu_meta(m, "loupe_mpi_unmatched_sends", "(none)"), "1");
    assert_string_equal(tu_meta(m, "loupe_mpi_unmatched_recvs", "(none)"), "1");
    assert_string_equal(tu_meta(m, "loupe_mpi_ambiguous_sends", "(none)"), "2");
    assert_string_equal(tu_meta(m, "loupe_mpi_ambiguous_recvs", "(none)"), "1");
    assert_int_equal(m->warning_count, 2);
    assert_string_equal(m->warnings[0],
                        "MPI messages: 1 sends and 1 receives have no other end in this run (a "
                        "rank dropped events or stopped early): no flow drawn for them");
    assert_string_equal(m->warnings[1],
                        "MPI messages: 2 sends and 1 receives share their id with another end of "
                        "the same side: no flow drawn for them");
    loupe_model_free(m);

    /* through the CLI, as users convert a run, and back */
    const char *outs[] = {"x.pftrace", "x.json", "x.xplane.pb"};
    for (size_t i = 0; i < 3; i++) {
        char out[4096];
        snprintf(out, sizeof out, "%s/%s", tu_dir, outs[i]);
        snprintf(cmd, sizeof cmd, "'%s' convert '%s' -o '%s'", tu_cli(), dir, out);
        char *o = NULL;
        int st = tu_run(cmd, &o);
        if (st != 0) {
            fail_msg("%s: status %d: %s", cmd, st, o);
        }
        free(o);
        if (strcmp(outs[i], "x.json") == 0) {
            check_json_flows(out);
        }
        loupe_model *back = tu_read_back(out);
        check_run_flows(back);
        loupe_model_free(back);
    }
}

/* ---- a minimal protobuf walk of an .xplane.pb (xplane.proto: XSpace.planes 1; XPlane.lines 3,
 * event_metadata 4, stat_metadata 5; XLine.events 4; XEvent.metadata_id 1, stats 4; XStat
 * metadata_id 1, uint64_value 3; the metadata maps' entries key 1, value 2 with id 1, name 2) ----
 */
typedef struct pbr {
    const unsigned char *p, *end;
} pbr;

static uint64_t pb_varint(pbr *r) {
    uint64_t v = 0;
    for (int sh = 0; r->p < r->end && sh < 64; sh += 7) {
        unsigned char b = *r->p++;
        v |= (uint64_t)(b & 0x7f) << sh;
        if (!(b & 0x80)) {
            break;
        }
    }
    return v;
}

/* The next field: its number, wire type, varint value or bytes (sub). 0 at the end. */
static int pb_next(pbr *r, unsigned *num, uint64_t *v, pbr *sub) {
    if (r->p >= r->end) {
        return 0;
    }
    uint64_t key = pb_varint(r);
    *num = (unsigned)(key >> 3);
    switch (key & 7) {
    case 0:
        *v = pb_varint(r);
        break;
    case 1:
        r->p += 8;
        break;
    case 2: {
        uint64_t n = pb_varint(r);
        assert_true(n <= (uint64_t)(r->end - r->p));
        sub->p = r->p;
        sub->end = r->p + n;
        r->p += n;
        break;
    }
    case 5:
        r->p += 4;
        break;
    default:
        fail_msg("wire type %u", (unsigned)(key & 7));
    }
    return 1;
}

/* An XPlane metadata map's entry: its id and name (into name). */
static uint64_t pb_meta(pbr e, char *name, size_t size) {
    unsigned num;
    uint64_t v = 0, id = 0;
    pbr sub, val;
    name[0] = 0;
    while (pb_next(&e, &num, &v, &sub)) {
        if (num != 2) {
            continue;
        }
        while (pb_next(&sub, &num, &v, &val)) {
            if (num == 1) {
                id = v;
            } else if (num == 2) {
                snprintf(name, size, "%.*s", (int)(val.end - val.p), (const char *)val.p);
            }
        }
    }
    return id;
}

/* Every stat named "flow" in an .xplane.pb: "<event name>=<value in hex>" lines, in file order,
 * into out. Returns how many. */
static int xplane_flow_stats(const char *path, char *out, size_t size) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static unsigned char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    assert_true(n < sizeof buf);
    pbr space = {buf, buf + n}, plane, line, item;
    unsigned num;
    uint64_t v;
    int count = 0;
    out[0] = 0;
    while (pb_next(&space, &num, &v, &plane)) {
        if (num != 1) {
            continue;
        }
        /* the plane's metadata first (a plane may list them after its lines) */
        uint64_t flow_id = 0;
        char names[64][64];
        uint64_t ids[64];
        size_t nn = 0;
        pbr pl = plane;
        while (pb_next(&pl, &num, &v, &item)) {
            char name[64];
            if (num == 5 && (v = pb_meta(item, name, sizeof name)) != 0 &&
                strcmp(name, "flow") == 0) {
                flow_id = v;
            } else if (num == 4 && nn < 64) {
                ids[nn] = pb_meta(item, names[nn], sizeof names[nn]);
                nn++;
            }
        }
        pl = plane;
        while (flow_id != 0 && pb_next(&pl, &num, &v, &line)) {
            if (num != 3) {
                continue;
            }
            pbr ev;
            while (pb_next(&line, &num, &v, &ev)) {
                if (num != 4) {
                    continue;
                }
                uint64_t eid = 0;
                pbr st;
                while (pb_next(&ev, &num, &v, &st)) {
                    if (num == 1) {
                        eid = v;
                    }
                    if (num != 4) {
                        continue;
                    }
                    uint64_t smid = 0, sv = 0;
                    pbr x;
                    while (pb_next(&st, &num, &v, &x)) {
                        smid = num == 1 ? v : smid;
                        sv = num == 3 ? v : sv;
                    }
                    if (smid == flow_id) {
                        const char *en = "?";
                        for (size_t k = 0; k < nn; k++) {
                            en = ids[k] == eid ? names[k] : en;
                        }
                        size_t l = strlen(out);
                        snprintf(out + l, size - l, "%s=%llx\n", en, (unsigned long long)sv);
                        count++;
                    }
                }
            }
        }
    }
    return count;
}

/* A rank's own .xplane.pb (no flows in its model: the ends are args) writes each message end as
 * XProf's flow stat too (src/export/xplane.c put_message_flow): tsl's XFlow encoding, the id's
 * low 56 bits shifted left by 2 and the direction in bits 0-1 (kFlowOut 2 on a send, kFlowIn 1
 * on a receive), ContextType 0. Read back, the file gives the same args (the reader skips the
 * stat); the merged run's .xplane.pb (loupe's own flows) has none. */
static void test_rank_xplane_flow_stats(void **state) {
    (void)state;
    char dir[4096], path[4200];
    run_dir(dir, sizeof dir, "xrun");
    const zone r0[] = {{1000, 9000, "step", NULL, 0},
                       {2000, 100, "MPI_Send", "mpi_send_id", ID_A},
                       {7000, 500, "MPI_Wait", "mpi_recv_id", ID_B}};
    write_rank(dir, 0, r0, 3, LOUPE_FILE_XPLANE, ".xplane.pb");
    snprintf(path, sizeof path, "%s/rank0000.xplane.pb", dir);
    char got[1024], want[256];
    int n = xplane_flow_stats(path, got, sizeof got);
    snprintf(want, sizeof want, "MPI_Send=%llx\nMPI_Wait=%llx\n",
             (unsigned long long)(((ID_A & ((1ull << 56) - 1)) << 2) | 2),
             (unsigned long long)(((uint64_t)ID_B << 2) | 1));
    assert_int_equal(n, 2);
    assert_string_equal(got, want);
    assert_string_equal(got, "MPI_Send=46\nMPI_Wait=89\n"); /* 0x11 << 2 | 2, 0x22 << 2 | 1 */
    loupe_model *back = tu_read_back(path);
    size_t args = 0, flows_args = 0;
    for (size_t t = 0; t < back->thread_count; t++) {
        for (size_t i = 0; i < back->threads[t].slice_count; i++) {
            size_t na = 0;
            const loupe_arg *sa = loupe_slice_args(&back->threads[t], i, &na);
            args += na;
            for (size_t a = 0; a < na; a++) {
                flows_args += strcmp(sa[a].key, "flow") == 0;
            }
        }
    }
    assert_int_equal(args, 4); /* peer and the id, on each of the two */
    assert_int_equal(flows_args, 0);
    loupe_model_free(back);
    /* the run merged (one flow: A's receive is not in it; B's send neither): loupe's flows */
    write_rank(dir, 1, (const zone[]){{2050, 200, "MPI_Recv", "mpi_recv_id", ID_A}}, 1,
               LOUPE_FILE_XPLANE, ".xplane.pb");
    char out[4096], cmd[16384], *o = NULL;
    snprintf(out, sizeof out, "%s/merged.xplane.pb", tu_dir);
    snprintf(cmd, sizeof cmd, "'%s' convert '%s' -o '%s'", tu_cli(), dir, out);
    int st = tu_run(cmd, &o);
    if (st != 0) {
        fail_msg("%s: status %d: %s", cmd, st, o);
    }
    free(o);
    assert_int_equal(xplane_flow_stats(out, got, sizeof got), 0);
    loupe_model *merged = tu_read_back(out);
    assert_int_equal(merged->flow_count, 1);
    loupe_model_free(merged);
}

/* A run of one rank file (mpirun -np 1): its messages to itself are flows too (the merge runs
 * for one rank's file), from the send's slice to the receive's on the same track. */
static void test_one_rank_self(void **state) {
    (void)state;
    char dir[4096];
    run_dir(dir, sizeof dir, "one");
    const zone z[] = {{1000, 9000, "step", NULL, 0},
                      {2000, 100, "MPI_Isend", "mpi_send_id", ID_B},
                      {3000, 100, "MPI_Recv", "mpi_recv_id", ID_B},
                      {4000, 100, "MPI_Send", "mpi_send_id", ID_C}};
    write_rank(dir, 0, z, sizeof z / sizeof z[0], LOUPE_FILE_XPLANE, ".xplane.pb");
    loupe_model *m = NULL;
    int rc = loupe_trace_read(dir, &m);
    if (rc != 0) {
        fail_msg("%s: %s", dir, loupe_last_error());
    }
    assert_int_equal(m->process_count, 1);
    assert_int_equal(m->flow_count, 1);
    check_flow(m, 100, "MPI_Isend", 100, "MPI_Recv", ID_B);
    assert_int_equal(m->flows[0].from_thread, m->flows[0].to_thread);
    assert_string_equal(tu_meta(m, "loupe_mpi_flows", "(none)"), "1");
    assert_string_equal(tu_meta(m, "loupe_mpi_unmatched_sends", "(none)"), "1");
    assert_string_equal(tu_meta(m, "loupe_mpi_unmatched_recvs", "(none)"), "0");
    assert_int_equal(m->processes[0].rank, 0);
    assert_int_equal(m->warning_count, 1);
    loupe_model_free(m);
}

/* A run whose files carry no message ids gets no MPI metadata at all. */
static void test_run_without_ids(void **state) {
    (void)state;
    char dir[4096];
    run_dir(dir, sizeof dir, "plain");
    const zone z[] = {{1000, 100, "work", NULL, 0}};
    write_rank(dir, 0, z, 1, LOUPE_FILE_CHROME_JSON, ".trace.json.gz");
    write_rank(dir, 1, z, 1, LOUPE_FILE_CHROME_JSON, ".trace.json.gz");
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(dir, &m), 0);
    assert_int_equal(m->process_count, 2);
    assert_int_equal(m->flow_count, 0);
    assert_int_equal(m->warning_count, 0);
    assert_string_equal(tu_meta(m, "loupe_mpi_flows", "(none)"), "(none)");
    loupe_model_free(m);
}

/* A one-thread model with origin 1e18 ns and the metadata pairs kv[0..n). */
static loupe_model *clock_model(const char *const *kv, size_t n) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->origin_unix_ns = 1000000000000000000ull;
    m->duration_ns = 1000000000;
    (void)loupe__mb_thread(mb, 1);
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(loupe__mb_metadata(mb, kv[2 * i], kv[2 * i + 1]), 0);
    }
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

/* loupe_model_clock_offset(): drift only where the two measurements tell it. Measured at 0.1 s
 * and 0.9 s of a 1 s trace (origin 1e18). */
static void test_clock_offset_drift_rule(void **state) {
    (void)state;
    assert_int_equal(loupe_model_clock_offset(NULL, 0), 0);
    /* MPICH's case (issue 21): +1.2 ms, then -3.2 ms, with only the larger uncertainty known,
     * 2.9 ms: 4.4 ms apart is within 2 x 2.9 ms, so no drift is inferred; neither measurement is
     * known better: their mean throughout (0.4 interpolated, 4.4 ms over the run) */
    static const char *const both_bad[] = {"loupe_clock_offset_ns",
                                           "1200000",
                                           "loupe_clock_offset_at_ns",
                                           "1000000000100000000",
                                           "loupe_clock_offset_end_ns",
                                           "-3200000",
                                           "loupe_clock_offset_end_at_ns",
                                           "1000000000900000000",
                                           "loupe_clock_offset_uncertainty_ns",
                                           "2900000"};
    loupe_model *m = clock_model(both_bad, 5);
    assert_int_equal(loupe_model_clock_offset(m, 100000000), -1000000);
    assert_int_equal(loupe_model_clock_offset(m, 900000000), -1000000);
    loupe_model_free(m);
    /* the same offsets with each measurement's own uncertainty, 2.9 ms and 3 us: 4.4 ms apart is
     * beyond their 2.903 ms, so it is drift: linear between them */
    static const char *const told[] = {"loupe_clock_offset_ns",
                                       "1200000",
                                       "loupe_clock_offset_at_ns",
                                       "1000000000100000000",
                                       "loupe_clock_offset_end_ns",
                                       "-3200000",
                                       "loupe_clock_offset_end_at_ns",
                                       "1000000000900000000",
                                       "loupe_clock_offset_uncertainty_ns",
                                       "2900000",
                                       "loupe_clock_offset_start_uncertainty_ns",
                                       "2900000",
                                       "loupe_clock_offset_end_uncertainty_ns",
                                       "3000"};
    m = clock_model(told, 7);
    assert_int_equal(loupe_model_clock_offset(m, 100000000), 1200000);
    assert_int_equal(loupe_model_clock_offset(m, 500000000), -1000000);
    assert_int_equal(loupe_model_clock_offset(m, 900000000), -3200000);
    assert_int_equal(loupe_model_clock_offset(m, 950000000), -3200000); /* the nearer outside */
    loupe_model_free(m);
    /* 0.5 ms apart with 2.9 ms and 3 us: not told; the better (the end's) offset throughout */
    static const char *const better_end[] = {"loupe_clock_offset_ns",
                                             "200000",
                                             "loupe_clock_offset_at_ns",
                                             "1000000000100000000",
                                             "loupe_clock_offset_end_ns",
                                             "-300000",
                                             "loupe_clock_offset_end_at_ns",
                                             "1000000000900000000",
                                             "loupe_clock_offset_uncertainty_ns",
                                             "2900000",
                                             "loupe_clock_offset_start_uncertainty_ns",
                                             "2900000",
                                             "loupe_clock_offset_end_uncertainty_ns",
                                             "3000"};
    m = clock_model(better_end, 7);
    assert_int_equal(loupe_model_clock_offset(m, 0), -300000);
    assert_int_equal(loupe_model_clock_offset(m, 100000000), -300000);
    loupe_model_free(m);
    /* an MPI file of 0.4 (round trip at MPI_Init 10 us, the larger uncertainty 2.9 ms: the end
     * was the slow one): 0.5 ms apart, not told; the start's offset */
    static const char *const mpi04[] = {"loupe_clock_offset_ns",
                                        "200000",
                                        "loupe_clock_offset_at_ns",
                                        "1000000000100000000",
                                        "loupe_clock_offset_end_ns",
                                        "-300000",
                                        "loupe_clock_offset_end_at_ns",
                                        "1000000000900000000",
                                        "loupe_clock_offset_uncertainty_ns",
                                        "2900000",
                                        "loupe_clock_sync_round_trip_ns",
                                        "10000"};
    m = clock_model(mpi04, 6);
    assert_int_equal(loupe_model_clock_offset(m, 800000000), 200000);
    loupe_model_free(m);
    /* real drift, told: 0 to 100 us with 5 us at each end */
    static const char *const drift[] = {"loupe_clock_offset_ns",
                                        "0",
                                        "loupe_clock_offset_at_ns",
                                        "1000000000100000000",
                                        "loupe_clock_offset_end_ns",
                                        "100000",
                                        "loupe_clock_offset_end_at_ns",
                                        "1000000000900000000",
                                        "loupe_clock_offset_uncertainty_ns",
                                        "5000"};
    m = clock_model(drift, 5);
    assert_int_equal(loupe_model_clock_offset(m, 500000000), 50000);
    loupe_model_free(m);
    /* one measurement: constant */
    static const char *const one[] = {"loupe_clock_offset_ns", "-5000000000"};
    m = clock_model(one, 1);
    assert_int_equal(loupe_model_clock_offset(m, 123), -5000000000LL);
    loupe_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_run_dir_flows, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_one_rank_self, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_run_without_ids, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_rank_xplane_flow_stats, tu_setup, tu_teardown),
        cmocka_unit_test(test_clock_offset_drift_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
