/* pmpi.c: libloupe_mpi.so, the MPI profiling-interface library that `loupe record` preloads into
 * a program linked with MPI (docs/mpi.md). Each wrapped MPI_X records a zone named "MPI_X" with
 * its arguments and calls PMPI_X (MPI-4.0 standard, chapter 15 "Tool Support": the profiling
 * interface exists so that a tool can intercept MPI calls by name). Public loupe API only.
 *
 * What it records:
 *   point to point  MPI_Send/Ssend/Isend/Recv/Irecv/Sendrecv, and persistent requests
 *                   (MPI_Send_init/Recv_init, each MPI_Start/Startall one message, see
 *                   "persistent requests" below): args peer, tag, bytes; the
 *                   message's id as arg mpi_send_id on the send's zone and mpi_recv_id on the
 *                   zone where the matching receive completed (Recv, Sendrecv, or the
 *                   Wait/Test call that completed an Irecv): the two ends are in two processes'
 *                   files, so they are not loupe flows in either (a flow joins two slices of one
 *                   model); the run directory's merge (src/model/merge.c) draws the flow from
 *                   each send to the receive with its id.
 *                   Both sides compute the same id from (source world rank, destination world
 *                   rank, tag, n), n being
 *                   the number of earlier messages between that pair with that tag: MPI's
 *                   non-overtaking rule (MPI-4.0 section 3.5) makes the n-th send match the n-th
 *                   receive of such a triple.
 *   completions     MPI_Wait/Test/Waitall/Testall/Waitany/Testany/Waitsome/Testsome (one helper,
 *                   reqset_*): arg completed (the active requests the call completed), requests
 *                   (the array's length, where there is one), an mpi_recv_id per receive it
 *                   completed, and per non-blocking collective it completed an arg named after
 *                   it with its seq ("MPI_Ibcast": 3).
 *   collectives     MPI_Barrier/Bcast/Reduce/Allreduce/Allgather/Alltoall/Gather/Scatter and
 *                   their non-blocking twins MPI_Ibarrier/Ibcast/...: args seq (the how-many-th
 *                   call of that collective in this process, from 1: every rank calls
 *                   collectives on a communicator in the same order, so equal seqs are the same
 *                   operation), bytes, comm_size, root where there is one.
 *   clocks          at MPI_Init and again at MPI_Finalize every rank measures the offset of its
 *                   clock to rank 0's by ping-pong, keeping the exchange with the smallest round
 *                   trip (as Score-P does, and as NTP's clock filter does: the shortest round
 *                   trip has the least queuing asymmetry), and writes it into the trace's
 *                   metadata (keys below) for the run directory's merge to apply.
 *
 * Metadata written (strings; ns are decimal integers):
 *   loupe_mpi_rank, loupe_mpi_size, loupe_mpi_host (MPI_Get_processor_name)
 *   loupe_clock_offset_ns          ns to ADD to this file's times to put them on rank 0's clock
 *   loupe_clock_offset_at_ns       when it was measured: unix-epoch ns on this file's own clock
 *   loupe_clock_offset_end_ns      the same at MPI_Finalize (linear drift between the two)
 *   loupe_clock_offset_end_at_ns
 *   loupe_clock_offset_uncertainty_ns  half the smallest round trip (the larger of the two
 *                                  measurements): the offset is exact to within this
 *   loupe_clock_offset_start_uncertainty_ns, loupe_clock_offset_end_uncertainty_ns  each
 *                                  measurement's own: the merge infers no drift from two
 *                                  offsets that differ by less than their sum
 *   loupe_clock_sync_round_trip_ns the smallest round trip at MPI_Init
 *   loupe_clock_base_unix_ns       the run's timeline base: the earliest rank's session start
 *                                  (a rank without a session yet: the sync's time) on rank 0's
 *                                  clock (an MPI_Allreduce at MPI_Init), one value
 *                                  in every rank's file; each rank's .xplane.pb counts its times
 *                                  from it, so XProf shows the ranks' files aligned
 *
 * The trace's clock is wall-clock time at the session's start plus the monotonic clock since
 * (model.h's origin_unix_ns): this file measures with that same clock (loupe__trace_unix_ns), so
 * an offset also corrects the origin's own error and what NTP slews during the run.
 * LOUPE_TEST_CLOCK_SHIFT_NS (test only, read by libloupe's clock) shifts this process's wall
 * clock by that many ns, so that a test can check the merge removes a known offset.
 *
 * Thread-safety: MPI_THREAD_MULTIPLE programs call these from any thread; the sequence tables
 * are under one mutex (an MPI call costs microseconds; the mutex is not the hot path's).
 */
#include <loupe/loupe.h>
#include <mpi.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LOUPE_MPI_API __attribute__((visibility("default")))

static int world_rank = -1, world_size = 0;
static MPI_Comm sync_comm = MPI_COMM_NULL;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- clock ---- */

/* In libloupe (src/session/session.c): now on the trace's clock, unix-epoch ns. */
int64_t loupe__trace_unix_ns(void);

/* In libloupe: the active session's origin, unix-epoch ns (0: none). */
int64_t loupe__trace_origin_unix_ns(void);

static int64_t clock_ns(void) {
    return loupe__trace_unix_ns();
}

/* Ping-pongs per rank: the minimum of 32 round trips is stable on a loaded node (most of the
 * spread is scheduling; a few exchanges get through without it). */
enum { SYNC_ROUNDS = 32, SYNC_TAG = 4242 };

typedef struct sync_result {
    int64_t offset_ns; /* to add to this rank's clock to get rank 0's */
    int64_t at_ns;     /* this rank's clock at the best exchange's midpoint */
    int64_t rtt_ns;    /* the best exchange's round trip */
} sync_result;

/* Rank 0 answers each rank in turn; rank r sends its time, rank 0 replies with its own, and r
 * takes offset = t0_reply - (send + receive) / 2 from the exchange with the smallest round trip
 * (Cristian's algorithm). Every rank of sync_comm must call it. */
static sync_result clock_sync(void) {
    sync_result res = {0, 0, 0};
    res.at_ns = clock_ns();
    if (sync_comm == MPI_COMM_NULL || world_size < 2) {
        return res;
    }
    PMPI_Barrier(sync_comm);
    for (int r = 1; r < world_size; r++) {
        for (int k = 0; k < SYNC_ROUNDS; k++) {
            int64_t t[2];
            if (world_rank == 0) {
                PMPI_Recv(t, 1, MPI_INT64_T, r, SYNC_TAG, sync_comm, MPI_STATUS_IGNORE);
                t[1] = clock_ns();
                PMPI_Send(&t[1], 1, MPI_INT64_T, r, SYNC_TAG, sync_comm);
            } else if (world_rank == r) {
                int64_t reply;
                t[0] = clock_ns();
                PMPI_Send(&t[0], 1, MPI_INT64_T, 0, SYNC_TAG, sync_comm);
                PMPI_Recv(&reply, 1, MPI_INT64_T, 0, SYNC_TAG, sync_comm, MPI_STATUS_IGNORE);
                t[1] = clock_ns();
                int64_t rtt = t[1] - t[0];
                if (k == 0 || rtt < res.rtt_ns) {
                    int64_t mid = t[0] + rtt / 2;
                    res.rtt_ns = rtt;
                    res.at_ns = mid;
                    res.offset_ns = reply - mid;
                }
            }
        }
    }
    PMPI_Barrier(sync_comm);
    return res;
}

/* In libloupe (src/session/session.c): loupe_set_metadata() for loupe's own MPI and clock keys,
 * which the public call keeps for loupe. */
int loupe__set_metadata_mpi(const char *key, const char *value);

static void meta_i64(const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    (void)loupe__set_metadata_mpi(key, buf);
}

static int64_t init_rtt;

static void after_init(void) {
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    /* Its own communicator: the exchanges never match the program's messages. */
    PMPI_Comm_dup(MPI_COMM_WORLD, &sync_comm);
    char host[MPI_MAX_PROCESSOR_NAME + 1] = "";
    int len = 0;
    PMPI_Get_processor_name(host, &len);
    host[len >= 0 && len <= MPI_MAX_PROCESSOR_NAME ? len : 0] = 0;
    meta_i64("loupe_mpi_rank", world_rank);
    meta_i64("loupe_mpi_size", world_size);
    (void)loupe__set_metadata_mpi("loupe_mpi_host", host);
    sync_result s;
    {
        LOUPE_ZONE("loupe clock sync");
        s = clock_sync();
    }
    init_rtt = s.rtt_ns;
    meta_i64("loupe_clock_offset_ns", s.offset_ns);
    meta_i64("loupe_clock_offset_at_ns", s.at_ns);
    meta_i64("loupe_clock_offset_uncertainty_ns", s.rtt_ns / 2);
    meta_i64("loupe_clock_offset_start_uncertainty_ns", s.rtt_ns / 2);
    meta_i64("loupe_clock_sync_round_trip_ns", s.rtt_ns);
    /* The run's timeline base: the earliest rank's start on rank 0's clock, which every rank's
     * file counts its XPlane times from (model/merge.h), so that XProf's view of the ranks'
     * files together is aligned as the merged run is. */
    /* a rank without a session yet (a program that starts its trace after MPI_Init): now, on
     * its clock, which its session's start will be after */
    int64_t mine = loupe__trace_origin_unix_ns(), base = INT64_MAX;
    mine = (mine > 0 ? mine : clock_ns()) + s.offset_ns;
    if (PMPI_Allreduce(&mine, &base, 1, MPI_INT64_T, MPI_MIN, sync_comm) == MPI_SUCCESS &&
        base > 0 && base != INT64_MAX) {
        meta_i64("loupe_clock_base_unix_ns", base);
    }
}

static void before_finalize(void) {
    if (sync_comm == MPI_COMM_NULL) {
        return;
    }
    sync_result s;
    {
        LOUPE_ZONE("loupe clock sync");
        s = clock_sync();
    }
    meta_i64("loupe_clock_offset_end_ns", s.offset_ns);
    meta_i64("loupe_clock_offset_end_at_ns", s.at_ns);
    meta_i64("loupe_clock_offset_end_uncertainty_ns", s.rtt_ns / 2);
    int64_t rtt = s.rtt_ns > init_rtt ? s.rtt_ns : init_rtt;
    meta_i64("loupe_clock_offset_uncertainty_ns", rtt / 2);
    PMPI_Comm_free(&sync_comm);
    sync_comm = MPI_COMM_NULL;
}

LOUPE_MPI_API int MPI_Init(int *argc, char ***argv) {
    int rc;
    {
        LOUPE_ZONE("MPI_Init");
        rc = PMPI_Init(argc, argv);
    }
    if (rc == MPI_SUCCESS) {
        after_init();
    }
    return rc;
}

LOUPE_MPI_API int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    int rc;
    {
        LOUPE_ZONE("MPI_Init_thread");
        rc = PMPI_Init_thread(argc, argv, required, provided);
    }
    if (rc == MPI_SUCCESS) {
        after_init();
    }
    return rc;
}

LOUPE_MPI_API int MPI_Finalize(void) {
    before_finalize();
    LOUPE_ZONE("MPI_Finalize");
    return PMPI_Finalize();
}

/* ---- message sequence numbers and flow ids ---- */

static uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Counters of messages per (source, destination, tag), open addressing. A process talks to
 * few (peer, tag) pairs; the table grows by doubling. */
typedef struct seq_slot {
    uint64_t key; /* 0 = empty */
    uint64_t count;
} seq_slot;
static seq_slot *seq_tab;
static size_t seq_cap, seq_used;

static uint64_t seq_key(int src, int dst, int tag) {
    uint64_t k = mix(mix(((uint64_t)(uint32_t)src << 32) | (uint32_t)dst) ^ (uint32_t)tag);
    return k ? k : 1;
}

/* The count of earlier messages of (src, dst, tag), then counts this one. Called under lock. */
static uint64_t seq_next(uint64_t key) {
    if (seq_used * 2 >= seq_cap) {
        size_t ncap = seq_cap ? seq_cap * 2 : 256;
        seq_slot *n = calloc(ncap, sizeof *n);
        if (n == NULL) {
            return 0;
        }
        for (size_t i = 0; i < seq_cap; i++) {
            if (seq_tab[i].key != 0) {
                size_t j = (size_t)seq_tab[i].key & (ncap - 1);
                while (n[j].key != 0) {
                    j = (j + 1) & (ncap - 1);
                }
                n[j] = seq_tab[i];
            }
        }
        free(seq_tab);
        seq_tab = n;
        seq_cap = ncap;
    }
    size_t j = (size_t)key & (seq_cap - 1);
    while (seq_tab[j].key != 0 && seq_tab[j].key != key) {
        j = (j + 1) & (seq_cap - 1);
    }
    if (seq_tab[j].key == 0) {
        seq_tab[j].key = key;
        seq_used++;
    }
    return seq_tab[j].count++;
}

/* The world rank of rank r of comm (flows are keyed by world ranks: both sides agree). */
static int world_of(MPI_Comm comm, int r) {
    if (comm == MPI_COMM_WORLD || r < 0) {
        return r;
    }
    MPI_Group g, wg;
    int w = r;
    if (PMPI_Comm_group(comm, &g) == MPI_SUCCESS) {
        PMPI_Comm_group(MPI_COMM_WORLD, &wg);
        PMPI_Group_translate_ranks(g, 1, &r, wg, &w);
        PMPI_Group_free(&g);
        PMPI_Group_free(&wg);
    }
    return w;
}

/* side: 0 a send, 1 a receive. Each side counts in its own slot: a message a rank sends to
 * itself has both ends in this process, and one shared count would give its receive the next
 * message's n. */
static uint64_t flow_id(int src_world, int dst_world, int tag, int side) {
    pthread_mutex_lock(&lock);
    uint64_t key = seq_key(src_world, dst_world, tag);
    uint64_t slot = side ? mix(key ^ 0x9e3779b97f4a7c15ull) : key;
    uint64_t n = seq_next(slot ? slot : 1);
    pthread_mutex_unlock(&lock);
    uint64_t id = mix(key ^ mix(n + 1));
    return id ? id : 1;
}

static int64_t bytes_of(int count, MPI_Datatype t) {
    int size = 0;
    if (t == MPI_DATATYPE_NULL || PMPI_Type_size(t, &size) != MPI_SUCCESS) {
        return 0;
    }
    return (int64_t)count * size;
}

static void send_side(const void *buf, int count, MPI_Datatype t, int dest, int tag,
                      MPI_Comm comm) {
    (void)buf;
    LOUPE_ARG_I64("peer", dest);
    LOUPE_ARG_I64("tag", tag);
    LOUPE_ARG_I64("bytes", bytes_of(count, t));
    if (dest != MPI_PROC_NULL && loupe_is_tracing()) {
        LOUPE_ARG_U64("mpi_send_id", flow_id(world_rank, world_of(comm, dest), tag, 0));
    }
}

/* The receive side of a completed receive: its source and tag from the status. */
static void recv_done(const MPI_Status *st, MPI_Comm comm, MPI_Datatype t) {
    if (st->MPI_SOURCE == MPI_PROC_NULL || st->MPI_SOURCE < 0) {
        return;
    }
    int count = 0;
    if (t != MPI_DATATYPE_NULL && PMPI_Get_count(st, t, &count) == MPI_SUCCESS &&
        count != MPI_UNDEFINED) {
        LOUPE_ARG_I64("bytes_received", bytes_of(count, t));
    }
    LOUPE_ARG_I64("source", st->MPI_SOURCE);
    if (loupe_is_tracing()) {
        LOUPE_ARG_U64("mpi_recv_id",
                      flow_id(world_of(comm, st->MPI_SOURCE), world_rank, st->MPI_TAG, 1));
    }
}

LOUPE_MPI_API int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                           MPI_Comm comm) {
    LOUPE_ZONE("MPI_Send");
    send_side(buf, count, datatype, dest, tag, comm);
    return PMPI_Send(buf, count, datatype, dest, tag, comm);
}

LOUPE_MPI_API int MPI_Ssend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                            MPI_Comm comm) {
    LOUPE_ZONE("MPI_Ssend");
    send_side(buf, count, datatype, dest, tag, comm);
    return PMPI_Ssend(buf, count, datatype, dest, tag, comm);
}

LOUPE_MPI_API int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag,
                            MPI_Comm comm, MPI_Request *request) {
    LOUPE_ZONE("MPI_Isend");
    send_side(buf, count, datatype, dest, tag, comm);
    return PMPI_Isend(buf, count, datatype, dest, tag, comm, request);
}

LOUPE_MPI_API int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag,
                           MPI_Comm comm, MPI_Status *status) {
    LOUPE_ZONE("MPI_Recv");
    LOUPE_ARG_I64("peer", source);
    LOUPE_ARG_I64("tag", tag);
    MPI_Status own;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &own : status;
    int rc = PMPI_Recv(buf, count, datatype, source, tag, comm, st);
    if (rc == MPI_SUCCESS) {
        recv_done(st, comm, datatype);
    }
    return rc;
}

LOUPE_MPI_API int MPI_Sendrecv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, int dest,
                               int sendtag, void *recvbuf, int recvcount, MPI_Datatype recvtype,
                               int source, int recvtag, MPI_Comm comm, MPI_Status *status) {
    LOUPE_ZONE("MPI_Sendrecv");
    send_side(sendbuf, sendcount, sendtype, dest, sendtag, comm);
    MPI_Status own;
    MPI_Status *st = status == MPI_STATUS_IGNORE ? &own : status;
    int rc = PMPI_Sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount,
                           recvtype, source, recvtag, comm, st);
    if (rc == MPI_SUCCESS) {
        recv_done(st, comm, recvtype);
    }
    return rc;
}

/* ---- collectives: one table, one sequence counter per kind ---- */

/* Every rank calls a communicator's collectives, blocking and non-blocking alike, in the same
 * order (MPI-4.0 sections 6.12 "Nonblocking Collective Operations" and 6.14 "Correctness"), so
 * the n-th call of one kind is the same operation on every rank: arg seq = n. A non-blocking
 * one's seq is its own kind's (MPI_Iallreduce #1 is not MPI_Allreduce #1), and the call that
 * completes it (MPI_Wait, MPI_Test... below) carries an arg named after it with that seq
 * ("MPI_Iallreduce": 1), which the run's readers can join on. */
enum {
    C_BARRIER,
    C_BCAST,
    C_REDUCE,
    C_ALLREDUCE,
    C_ALLGATHER,
    C_ALLTOALL,
    C_GATHER,
    C_SCATTER,
    C_IBARRIER,
    C_IBCAST,
    C_IREDUCE,
    C_IALLREDUCE,
    C_IALLGATHER,
    C_IALLTOALL,
    C_IGATHER,
    C_ISCATTER,
    C_COUNT
};
static const char *const coll_name[C_COUNT] = {
    "MPI_Barrier",    "MPI_Bcast",     "MPI_Reduce",  "MPI_Allreduce",
    "MPI_Allgather",  "MPI_Alltoall",  "MPI_Gather",  "MPI_Scatter",
    "MPI_Ibarrier",   "MPI_Ibcast",    "MPI_Ireduce", "MPI_Iallreduce",
    "MPI_Iallgather", "MPI_Ialltoall", "MPI_Igather", "MPI_Iscatter"};
static uint64_t coll_seq[C_COUNT];

/* The args of a collective's zone; returns its seq. */
static int64_t coll_args(int kind, MPI_Comm comm, int64_t bytes, int root) {
    int size = 0;
    PMPI_Comm_size(comm, &size);
    int64_t seq = (int64_t)__atomic_add_fetch(&coll_seq[kind], 1, __ATOMIC_RELAXED);
    LOUPE_ARG_I64("seq", seq);
    LOUPE_ARG_I64("comm_size", size);
    LOUPE_ARG_I64("bytes", bytes);
    if (root >= 0) {
        LOUPE_ARG_I64("root", root);
    }
    return seq;
}

/* ---- requests: what their completion records ---- */

/* Pending requests whose completion carries something: a receive (the flow's end is drawn
 * where it completes) or a non-blocking collective (its name and seq). */
typedef struct pending {
    MPI_Request req;
    MPI_Comm comm;
    MPI_Datatype type; /* a receive's datatype */
    int coll;          /* -1: a receive; else the collective's kind */
    int64_t seq;
} pending;
static pending *pend;
static size_t pend_n, pend_cap;

static void pend_add(pending p) {
    pthread_mutex_lock(&lock);
    if (pend_n == pend_cap) {
        size_t ncap = pend_cap ? pend_cap * 2 : 64;
        pending *n = realloc(pend, ncap * sizeof *n);
        if (n == NULL) {
            pthread_mutex_unlock(&lock);
            return; /* its completion records nothing; the zones are still recorded */
        }
        pend = n;
        pend_cap = ncap;
    }
    pend[pend_n++] = p;
    pthread_mutex_unlock(&lock);
}

/* Takes req's entry out of the table: 1 when it was pending. */
static int pend_take(MPI_Request req, pending *out) {
    int found = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = pend_n; i-- > 0;) {
        if (pend[i].req == req) {
            *out = pend[i];
            pend[i] = pend[--pend_n];
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    return found;
}

/* A non-blocking collective's start: its request is pending until a Wait/Test completes it. */
static int coll_started(int kind, int64_t seq, int rc, const MPI_Request *request) {
    if (rc == MPI_SUCCESS && loupe_is_tracing()) {
        pend_add((pending){*request, MPI_COMM_NULL, MPI_DATATYPE_NULL, kind, seq});
    }
    return rc;
}

LOUPE_MPI_API int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag,
                            MPI_Comm comm, MPI_Request *request) {
    LOUPE_ZONE("MPI_Irecv");
    LOUPE_ARG_I64("peer", source);
    LOUPE_ARG_I64("tag", tag);
    LOUPE_ARG_I64("bytes", bytes_of(count, datatype));
    int rc = PMPI_Irecv(buf, count, datatype, source, tag, comm, request);
    if (rc == MPI_SUCCESS && loupe_is_tracing()) {
        pend_add((pending){*request, comm, datatype, -1, 0});
    }
    return rc;
}

/* ---- persistent requests (MPI-4.0 section 3.9 "Persistent Communication Requests") ----
 *
 * MPI_Send_init / MPI_Recv_init make an inactive request; each MPI_Start (or MPI_Startall) of it
 * is one message, which behaves as an MPI_Isend / MPI_Irecv would (same matching, same
 * non-overtaking order), so a started send gets the next mpi_send_id of its (source,
 * destination, tag) on the Start's zone, and a started receive is pending until the Wait/Test
 * call that completes it. A completed persistent request keeps its handle (it is inactive, not
 * MPI_REQUEST_NULL): the table remembers whether it is active, so that completing an inactive
 * one (which returns at once, an empty status) counts nothing. MPI_Request_free forgets it. */
typedef struct persistent {
    MPI_Request req;
    MPI_Comm comm;
    MPI_Datatype type;
    int count, peer, tag;
    int recv; /* 1: made by MPI_Recv_init */
    int active;
} persistent;
static persistent *pers;
static size_t pers_n, pers_cap;

static void pers_add(persistent p) {
    pthread_mutex_lock(&lock);
    if (pers_n == pers_cap) {
        size_t ncap = pers_cap ? pers_cap * 2 : 16;
        persistent *n = realloc(pers, ncap * sizeof *n);
        if (n == NULL) {
            pthread_mutex_unlock(&lock);
            return; /* its starts record no ids; the zones are still recorded */
        }
        pers = n;
        pers_cap = ncap;
    }
    pers[pers_n++] = p;
    pthread_mutex_unlock(&lock);
}

/* Looks req up (under lock); NULL when it is not a persistent request. */
static persistent *pers_find(MPI_Request req) {
    for (size_t i = 0; i < pers_n; i++) {
        if (pers[i].req == req) {
            return &pers[i];
        }
    }
    return NULL;
}

/* A Start of req: marks it active and copies it to *out; 0 when req is not one of ours. */
static int pers_start(MPI_Request req, persistent *out) {
    pthread_mutex_lock(&lock);
    persistent *p = pers_find(req);
    if (p != NULL) {
        p->active = 1;
        *out = *p;
    }
    pthread_mutex_unlock(&lock);
    return p != NULL;
}

/* A completion of req: 1 when it was active (a request that is not persistent always is), and
 * a persistent one is inactive from now on. */
static int pers_complete(MPI_Request req) {
    pthread_mutex_lock(&lock);
    persistent *p = pers_find(req);
    int active = p == NULL || p->active;
    if (p != NULL) {
        p->active = 0;
    }
    pthread_mutex_unlock(&lock);
    return active;
}

static void pers_drop(MPI_Request req) {
    pthread_mutex_lock(&lock);
    persistent *p = pers_find(req);
    if (p != NULL) {
        *p = pers[--pers_n];
    }
    pthread_mutex_unlock(&lock);
}

/* After a request completed (its handle was req before the call): the flow's end if it was a
 * receive, the collective's name and seq if it was one. Returns 1 when req was active. */
static int completed(MPI_Request req, const MPI_Status *st) {
    if (req == MPI_REQUEST_NULL || !pers_complete(req)) {
        return 0;
    }
    pending p;
    if (pend_n > 0 && pend_take(req, &p)) {
        if (p.coll < 0) {
            recv_done(st, p.comm, p.type);
        } else {
            LOUPE_ARG_I64(coll_name[p.coll], p.seq);
        }
    }
    return 1;
}

LOUPE_MPI_API int MPI_Send_init(const void *buf, int count, MPI_Datatype datatype, int dest,
                                int tag, MPI_Comm comm, MPI_Request *request) {
    LOUPE_ZONE("MPI_Send_init");
    LOUPE_ARG_I64("peer", dest);
    LOUPE_ARG_I64("tag", tag);
    LOUPE_ARG_I64("bytes", bytes_of(count, datatype));
    int rc = PMPI_Send_init(buf, count, datatype, dest, tag, comm, request);
    if (rc == MPI_SUCCESS) {
        pers_add((persistent){*request, comm, datatype, count, dest, tag, 0, 0});
    }
    return rc;
}

LOUPE_MPI_API int MPI_Recv_init(void *buf, int count, MPI_Datatype datatype, int source, int tag,
                                MPI_Comm comm, MPI_Request *request) {
    LOUPE_ZONE("MPI_Recv_init");
    LOUPE_ARG_I64("peer", source);
    LOUPE_ARG_I64("tag", tag);
    LOUPE_ARG_I64("bytes", bytes_of(count, datatype));
    int rc = PMPI_Recv_init(buf, count, datatype, source, tag, comm, request);
    if (rc == MPI_SUCCESS) {
        pers_add((persistent){*request, comm, datatype, count, source, tag, 1, 0});
    }
    return rc;
}

/* Before starting req: a send's args (peer, tag, bytes when one is started alone, as
 * MPI_Isend's zone has them; its mpi_send_id always). Returns 1 when req is a persistent
 * receive (*p: its entry), pending once started. */
static int start_one(MPI_Request req, int alone, persistent *p) {
    if (!pers_start(req, p)) {
        return 0;
    }
    if (alone) {
        LOUPE_ARG_I64("peer", p->peer);
        LOUPE_ARG_I64("tag", p->tag);
        LOUPE_ARG_I64("bytes", bytes_of(p->count, p->type));
    }
    if (!p->recv && p->peer != MPI_PROC_NULL && loupe_is_tracing()) {
        LOUPE_ARG_U64("mpi_send_id", flow_id(world_rank, world_of(p->comm, p->peer), p->tag, 0));
    }
    return p->recv && p->peer != MPI_PROC_NULL && loupe_is_tracing();
}

LOUPE_MPI_API int MPI_Start(MPI_Request *request) {
    LOUPE_ZONE("MPI_Start");
    persistent p;
    int recv = start_one(*request, 1, &p);
    int rc = PMPI_Start(request);
    if (rc == MPI_SUCCESS && recv) {
        pend_add((pending){*request, p.comm, p.type, -1, 0});
    }
    return rc;
}

/* MPI_Startall: arg requests, and an mpi_send_id per send it started; the receives it started
 * pending (their entries kept on the stack for the usual few, else allocated: out of memory,
 * their completions record nothing). */
LOUPE_MPI_API int MPI_Startall(int count, MPI_Request array_of_requests[]) {
    LOUPE_ZONE("MPI_Startall");
    LOUPE_ARG_I64("requests", count);
    enum { SMALL = 16 };
    persistent small[SMALL];
    unsigned char small_recv[SMALL];
    size_t n = count > 0 ? (size_t)count : 0;
    persistent *p = n <= SMALL ? small : malloc(n * sizeof *p);
    unsigned char *recv = n <= SMALL ? small_recv : malloc(n);
    for (size_t i = 0; i < n; i++) {
        persistent own;
        int r = start_one(array_of_requests[i], 0, p != NULL ? &p[i] : &own);
        if (recv != NULL) {
            recv[i] = (unsigned char)r;
        }
    }
    int rc = PMPI_Startall(count, array_of_requests);
    for (size_t i = 0; rc == MPI_SUCCESS && p != NULL && recv != NULL && i < n; i++) {
        if (recv[i]) {
            pend_add((pending){array_of_requests[i], p[i].comm, p[i].type, -1, 0});
        }
    }
    if (p != small) {
        free(p);
    }
    if (recv != small_recv) {
        free(recv);
    }
    return rc;
}

/* MPI_Request_free: a persistent request (or a pending one) is forgotten with its handle. */
LOUPE_MPI_API int MPI_Request_free(MPI_Request *request) {
    LOUPE_ZONE("MPI_Request_free");
    MPI_Request req = *request;
    pending p;
    if (req != MPI_REQUEST_NULL && pend_n > 0) {
        (void)pend_take(req, &p);
    }
    pers_drop(req);
    return PMPI_Request_free(request);
}

/* One completion call of the Wait/Test family. Copies of the handles before the call (a
 * completion sets them to MPI_REQUEST_NULL), and statuses of our own when the caller ignores
 * them (the source and tag of a receive are in its status); 64 on the stack cover the usual
 * halo exchange. */
enum { REQS_SMALL = 64 };
typedef struct reqset {
    int n;
    MPI_Request *before;
    MPI_Status *sts; /* the statuses the call is given */
    MPI_Status *caller;
    MPI_Request before_small[REQS_SMALL];
    MPI_Status sts_small[REQS_SMALL];
} reqset;

/* Before the call: n requests (reqs), statuses (caller's; *ignore when the caller passed
 * MPI_STATUS(ES)_IGNORE) of which the call writes nsts at most (1 for Wait, Test, Waitany,
 * Testany; n for the others). Records arg requests when the call takes an array. Out of memory,
 * the call goes on as asked and records nothing (n = 0). */
static void reqset_open(reqset *s, int n, const MPI_Request *reqs, int many, int nsts,
                        MPI_Status *caller, int ignored) {
    if (many) {
        LOUPE_ARG_I64("requests", n);
    }
    s->n = n > 0 ? n : 0;
    s->caller = caller;
    s->before = s->n <= REQS_SMALL ? s->before_small : malloc((size_t)s->n * sizeof *s->before);
    s->sts = caller;
    if (ignored && s->before != NULL) {
        s->sts = nsts <= REQS_SMALL ? s->sts_small : malloc((size_t)nsts * sizeof *s->sts);
    }
    if (s->before == NULL || s->sts == NULL) {
        if (s->before != s->before_small) {
            free(s->before);
        }
        s->before = s->before_small;
        s->sts = caller;
        s->n = 0;
    }
    for (int i = 0; i < s->n; i++) {
        s->before[i] = reqs[i];
    }
}

/* After the call: ndone requests completed (MPI_UNDEFINED: none), the k-th of them the request
 * idx[k] (k itself when idx is NULL) with status sts[k]. Records arg completed (how many of
 * them were active: an inactive request completes at once, empty) and what each completion
 * carries. */
static void reqset_close(reqset *s, int rc, int ndone, const int *idx) {
    if (rc == MPI_SUCCESS) {
        int n = 0;
        for (int k = 0; ndone != MPI_UNDEFINED && k < ndone; k++) {
            int i = idx != NULL ? idx[k] : k;
            if (i >= 0 && i < s->n) {
                n += completed(s->before[i], &s->sts[k]);
            }
        }
        LOUPE_ARG_I64("completed", n);
    }
    if (s->before != s->before_small) {
        free(s->before);
    }
    if (s->sts != s->caller && s->sts != s->sts_small) {
        free(s->sts);
    }
}

LOUPE_MPI_API int MPI_Wait(MPI_Request *request, MPI_Status *status) {
    LOUPE_ZONE("MPI_Wait");
    reqset s;
    reqset_open(&s, 1, request, 0, 1, status, status == MPI_STATUS_IGNORE);
    int rc = PMPI_Wait(request, s.sts);
    reqset_close(&s, rc, 1, NULL);
    return rc;
}

LOUPE_MPI_API int MPI_Test(MPI_Request *request, int *flag, MPI_Status *status) {
    LOUPE_ZONE("MPI_Test");
    reqset s;
    reqset_open(&s, 1, request, 0, 1, status, status == MPI_STATUS_IGNORE);
    int rc = PMPI_Test(request, flag, s.sts);
    reqset_close(&s, rc, rc == MPI_SUCCESS && *flag ? 1 : 0, NULL);
    return rc;
}

/* Waitall and Testall: the statuses by request index (completion k is request k). */
LOUPE_MPI_API int MPI_Waitall(int count, MPI_Request array_of_requests[],
                              MPI_Status array_of_statuses[]) {
    LOUPE_ZONE("MPI_Waitall");
    reqset s;
    reqset_open(&s, count, array_of_requests, 1, count, array_of_statuses,
                array_of_statuses == MPI_STATUSES_IGNORE);
    int rc = PMPI_Waitall(count, array_of_requests, s.sts);
    reqset_close(&s, rc, rc == MPI_SUCCESS ? s.n : 0, NULL);
    return rc;
}

LOUPE_MPI_API int MPI_Testall(int count, MPI_Request array_of_requests[], int *flag,
                              MPI_Status array_of_statuses[]) {
    LOUPE_ZONE("MPI_Testall");
    reqset s;
    reqset_open(&s, count, array_of_requests, 1, count, array_of_statuses,
                array_of_statuses == MPI_STATUSES_IGNORE);
    int rc = PMPI_Testall(count, array_of_requests, flag, s.sts);
    reqset_close(&s, rc, rc == MPI_SUCCESS && *flag ? s.n : 0, NULL);
    return rc;
}

/* Waitany and Testany: index MPI_UNDEFINED when every request was inactive (none completed). */
LOUPE_MPI_API int MPI_Waitany(int count, MPI_Request array_of_requests[], int *index,
                              MPI_Status *status) {
    LOUPE_ZONE("MPI_Waitany");
    reqset s;
    reqset_open(&s, count, array_of_requests, 1, 1, status, status == MPI_STATUS_IGNORE);
    int rc = PMPI_Waitany(count, array_of_requests, index, s.sts);
    reqset_close(&s, rc, rc == MPI_SUCCESS && *index != MPI_UNDEFINED ? 1 : 0, index);
    return rc;
}

LOUPE_MPI_API int MPI_Testany(int count, MPI_Request array_of_requests[], int *index, int *flag,
                              MPI_Status *status) {
    LOUPE_ZONE("MPI_Testany");
    reqset s;
    reqset_open(&s, count, array_of_requests, 1, 1, status, status == MPI_STATUS_IGNORE);
    int rc = PMPI_Testany(count, array_of_requests, index, flag, s.sts);
    reqset_close(&s, rc, rc == MPI_SUCCESS && *flag && *index != MPI_UNDEFINED ? 1 : 0, index);
    return rc;
}

/* Waitsome and Testsome share their signature: one body, the PMPI call passed in. outcount
 * MPI_UNDEFINED when every request was inactive. */
typedef int (*some_fn)(int, MPI_Request[], int *, int[], MPI_Status[]);
static int some(some_fn call, int incount, MPI_Request reqs[], int *outcount, int indices[],
                MPI_Status statuses[]) {
    reqset s;
    reqset_open(&s, incount, reqs, 1, incount, statuses, statuses == MPI_STATUSES_IGNORE);
    int rc = call(incount, reqs, outcount, indices, s.sts);
    reqset_close(&s, rc, rc == MPI_SUCCESS ? *outcount : 0, indices);
    return rc;
}

LOUPE_MPI_API int MPI_Waitsome(int incount, MPI_Request array_of_requests[], int *outcount,
                               int array_of_indices[], MPI_Status array_of_statuses[]) {
    LOUPE_ZONE("MPI_Waitsome");
    return some(PMPI_Waitsome, incount, array_of_requests, outcount, array_of_indices,
                array_of_statuses);
}

LOUPE_MPI_API int MPI_Testsome(int incount, MPI_Request array_of_requests[], int *outcount,
                               int array_of_indices[], MPI_Status array_of_statuses[]) {
    LOUPE_ZONE("MPI_Testsome");
    return some(PMPI_Testsome, incount, array_of_requests, outcount, array_of_indices,
                array_of_statuses);
}

/* ---- the collectives' wrappers: a zone, coll_args, the call ---- */

LOUPE_MPI_API int MPI_Barrier(MPI_Comm comm) {
    LOUPE_ZONE("MPI_Barrier");
    coll_args(C_BARRIER, comm, 0, -1);
    return PMPI_Barrier(comm);
}

LOUPE_MPI_API int MPI_Bcast(void *buffer, int count, MPI_Datatype datatype, int root,
                            MPI_Comm comm) {
    LOUPE_ZONE("MPI_Bcast");
    coll_args(C_BCAST, comm, bytes_of(count, datatype), root);
    return PMPI_Bcast(buffer, count, datatype, root, comm);
}

LOUPE_MPI_API int MPI_Reduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                             MPI_Op op, int root, MPI_Comm comm) {
    LOUPE_ZONE("MPI_Reduce");
    coll_args(C_REDUCE, comm, bytes_of(count, datatype), root);
    return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
}

LOUPE_MPI_API int MPI_Allreduce(const void *sendbuf, void *recvbuf, int count,
                                MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
    LOUPE_ZONE("MPI_Allreduce");
    coll_args(C_ALLREDUCE, comm, bytes_of(count, datatype), -1);
    return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
}

LOUPE_MPI_API int MPI_Allgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                                void *recvbuf, int recvcount, MPI_Datatype recvtype,
                                MPI_Comm comm) {
    LOUPE_ZONE("MPI_Allgather");
    coll_args(C_ALLGATHER, comm, bytes_of(sendcount, sendtype), -1);
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

LOUPE_MPI_API int MPI_Alltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                               void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
    LOUPE_ZONE("MPI_Alltoall");
    coll_args(C_ALLTOALL, comm, bytes_of(sendcount, sendtype), -1);
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
}

LOUPE_MPI_API int MPI_Gather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                             void *recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                             MPI_Comm comm) {
    LOUPE_ZONE("MPI_Gather");
    coll_args(C_GATHER, comm, bytes_of(sendcount, sendtype), root);
    return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

LOUPE_MPI_API int MPI_Scatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                              void *recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                              MPI_Comm comm) {
    LOUPE_ZONE("MPI_Scatter");
    coll_args(C_SCATTER, comm, bytes_of(recvcount, recvtype), root);
    return PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
}

/* The non-blocking twins: the same args (seq of their own kind), then pending until completed. */

LOUPE_MPI_API int MPI_Ibarrier(MPI_Comm comm, MPI_Request *request) {
    LOUPE_ZONE("MPI_Ibarrier");
    int64_t seq = coll_args(C_IBARRIER, comm, 0, -1);
    return coll_started(C_IBARRIER, seq, PMPI_Ibarrier(comm, request), request);
}

LOUPE_MPI_API int MPI_Ibcast(void *buffer, int count, MPI_Datatype datatype, int root,
                             MPI_Comm comm, MPI_Request *request) {
    LOUPE_ZONE("MPI_Ibcast");
    int64_t seq = coll_args(C_IBCAST, comm, bytes_of(count, datatype), root);
    return coll_started(C_IBCAST, seq, PMPI_Ibcast(buffer, count, datatype, root, comm, request),
                        request);
}

LOUPE_MPI_API int MPI_Ireduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype datatype,
                              MPI_Op op, int root, MPI_Comm comm, MPI_Request *request) {
    LOUPE_ZONE("MPI_Ireduce");
    int64_t seq = coll_args(C_IREDUCE, comm, bytes_of(count, datatype), root);
    return coll_started(C_IREDUCE, seq,
                        PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request),
                        request);
}

LOUPE_MPI_API int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count,
                                 MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                                 MPI_Request *request) {
    LOUPE_ZONE("MPI_Iallreduce");
    int64_t seq = coll_args(C_IALLREDUCE, comm, bytes_of(count, datatype), -1);
    return coll_started(C_IALLREDUCE, seq,
                        PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request),
                        request);
}

/* MPI_Iallgather and MPI_Ialltoall share their signature: one body, the PMPI call passed in. */
typedef int (*iall_fn)(const void *, int, MPI_Datatype, void *, int, MPI_Datatype, MPI_Comm,
                       MPI_Request *);
static int iall(int kind, iall_fn call, const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                MPI_Request *request) {
    int64_t seq = coll_args(kind, comm, bytes_of(sendcount, sendtype), -1);
    int rc = call(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
    return coll_started(kind, seq, rc, request);
}

LOUPE_MPI_API int MPI_Iallgather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                                 void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                                 MPI_Request *request) {
    LOUPE_ZONE("MPI_Iallgather");
    return iall(C_IALLGATHER, PMPI_Iallgather, sendbuf, sendcount, sendtype, recvbuf, recvcount,
                recvtype, comm, request);
}

LOUPE_MPI_API int MPI_Ialltoall(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                                void *recvbuf, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                                MPI_Request *request) {
    LOUPE_ZONE("MPI_Ialltoall");
    return iall(C_IALLTOALL, PMPI_Ialltoall, sendbuf, sendcount, sendtype, recvbuf, recvcount,
                recvtype, comm, request);
}

LOUPE_MPI_API int MPI_Igather(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                              void *recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                              MPI_Comm comm, MPI_Request *request) {
    LOUPE_ZONE("MPI_Igather");
    int64_t seq = coll_args(C_IGATHER, comm, bytes_of(sendcount, sendtype), root);
    return coll_started(C_IGATHER, seq,
                        PMPI_Igather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                     root, comm, request),
                        request);
}

LOUPE_MPI_API int MPI_Iscatter(const void *sendbuf, int sendcount, MPI_Datatype sendtype,
                               void *recvbuf, int recvcount, MPI_Datatype recvtype, int root,
                               MPI_Comm comm, MPI_Request *request) {
    LOUPE_ZONE("MPI_Iscatter");
    int64_t seq = coll_args(C_ISCATTER, comm, bytes_of(recvcount, recvtype), root);
    return coll_started(C_ISCATTER, seq,
                        PMPI_Iscatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                      root, comm, request),
                        request);
}
