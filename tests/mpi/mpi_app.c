/* mpi_app.c: the MPI program of the MPI tests (tests/mpi_record.sh). ITER rounds of: a "compute"
 * zone that rank r spends (r + 1) * 30 ms in (a known imbalance: the last rank arrives last at
 * every MPI_Allreduce), an MPI_Allreduce, a ring exchange (MPI_Irecv from the left, MPI_Send
 * to the right, MPI_Wait); then one MPI_Barrier. Linked with libloupe for its own zones;
 * its MPI calls are recorded by libloupe_mpi.so, which `loupe record` preloads.
 * `mpi_app completions`: the rest of the Wait/Test family, persistent requests, a message to
 * itself and the non-blocking collectives,
 * each a known number of times (completions() says how many; tests/mpi/mpi_check.c checks). */
#include <loupe/loupe.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ITER = 5 };

static void spin_ms(int ms) {
    struct timespec t = {0, (long)ms * 1000000L};
    nanosleep(&t, NULL);
}

/* n messages to the right and n from the left on tags tag, tag + 1, ...: rq[0..n) the
 * receives, rq[n..2n) the sends. */
static void post(int n, int tag, int *in, int *out, MPI_Request *rq, int rank, int size) {
    for (int k = 0; k < n; k++) {
        out[k] = rank * 100 + k;
        MPI_Irecv(&in[k], 1, MPI_INT, (rank + size - 1) % size, tag + k, MPI_COMM_WORLD, &rq[k]);
    }
    for (int k = 0; k < n; k++) {
        MPI_Isend(&out[k], 1, MPI_INT, (rank + 1) % size, tag + k, MPI_COMM_WORLD, &rq[n + k]);
    }
}

/* Per rank: 7 messages out, 7 in (MPI_Isend / MPI_Irecv), completed by MPI_Waitany (4 calls,
 * 2 receives), MPI_Waitsome (until 4 completed: 2 receives), MPI_Testall, MPI_Testany and
 * MPI_Testsome (tested until their 2 completed: 1 receive each); then 4 messages each way on
 * persistent requests (MPI_Send_init / MPI_Recv_init, 3 MPI_Startall and 2 MPI_Start) and one
 * message to itself (MPI_Isend, MPI_Recv); then each non-blocking
 * collective once, all 8 completed by one MPI_Waitall, and an MPI_Iallreduce #2 completed by
 * MPI_Wait; an MPI_Barrier last. The Test calls' counts depend on timing; what they completed
 * does not. */
static void completions(int rank, int size) {
    int in[4], out[4], idx[4], done, flag, oc;
    MPI_Request rq[4];
    post(2, 10, in, out, rq, rank, size);
    for (int k = 0; k < 4; k++) {
        MPI_Waitany(4, rq, &idx[0], MPI_STATUS_IGNORE);
    }
    post(2, 20, in, out, rq, rank, size);
    for (done = 0; done < 4; done += oc) {
        MPI_Waitsome(4, rq, &oc, idx, MPI_STATUSES_IGNORE);
    }
    post(1, 30, in, out, rq, rank, size);
    for (flag = 0; !flag;) {
        MPI_Testall(2, rq, &flag, MPI_STATUSES_IGNORE);
    }
    post(1, 40, in, out, rq, rank, size);
    for (done = 0; done < 2;) {
        MPI_Testany(2, rq, &idx[0], &flag, MPI_STATUS_IGNORE);
        done += flag && idx[0] != MPI_UNDEFINED;
    }
    post(1, 50, in, out, rq, rank, size);
    MPI_Status st[2];
    for (done = 0; done < 2; done += oc) {
        MPI_Testsome(2, rq, &oc, idx, st);
    }
    /* persistent requests: a receive from the left and a send to the right on tag 60, started
     * 3 times by MPI_Startall (completed by MPI_Waitall), once by two MPI_Start (completed by
     * two MPI_Wait); an MPI_Waitall of the two, inactive by then, completes nothing */
    MPI_Request pr[2];
    MPI_Recv_init(&in[0], 1, MPI_INT, (rank + size - 1) % size, 60, MPI_COMM_WORLD, &pr[0]);
    MPI_Send_init(&out[0], 1, MPI_INT, (rank + 1) % size, 60, MPI_COMM_WORLD, &pr[1]);
    for (int k = 0; k < 3; k++) {
        MPI_Startall(2, pr);
        MPI_Waitall(2, pr, MPI_STATUSES_IGNORE);
    }
    MPI_Start(&pr[0]);
    MPI_Start(&pr[1]);
    MPI_Wait(&pr[0], MPI_STATUS_IGNORE);
    MPI_Wait(&pr[1], MPI_STATUS_IGNORE);
    MPI_Waitall(2, pr, MPI_STATUSES_IGNORE);
    MPI_Request_free(&pr[0]);
    MPI_Request_free(&pr[1]);
    /* a message to itself: MPI_Isend, MPI_Recv, MPI_Wait */
    MPI_Request self;
    MPI_Isend(&out[1], 1, MPI_INT, rank, 70, MPI_COMM_WORLD, &self);
    MPI_Recv(&in[1], 1, MPI_INT, rank, 70, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Wait(&self, MPI_STATUS_IGNORE);
    /* every operation its own buffers: none may touch another pending one's */
    long v = rank, bc = rank, one = 0;
    int r1 = 0, r2 = 0, r3 = 0;
    long *buf = calloc((size_t)size * 5, sizeof *buf);
    long *gathered = buf, *to = buf + size, *got = buf + 2 * size, *gat = buf + 3 * size;
    long *sc = buf + 4 * size;
    MPI_Request c[8], w;
    MPI_Ibarrier(MPI_COMM_WORLD, &c[0]);
    MPI_Ibcast(&bc, 1, MPI_LONG, 0, MPI_COMM_WORLD, &c[1]);
    MPI_Ireduce(&rank, &r1, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD, &c[2]);
    MPI_Iallreduce(&rank, &r2, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &c[3]);
    MPI_Iallgather(&v, 1, MPI_LONG, gathered, 1, MPI_LONG, MPI_COMM_WORLD, &c[4]);
    MPI_Ialltoall(to, 1, MPI_LONG, got, 1, MPI_LONG, MPI_COMM_WORLD, &c[5]);
    MPI_Igather(&v, 1, MPI_LONG, gat, 1, MPI_LONG, 0, MPI_COMM_WORLD, &c[6]);
    MPI_Iscatter(sc, 1, MPI_LONG, &one, 1, MPI_LONG, 0, MPI_COMM_WORLD, &c[7]);
    MPI_Waitall(8, c, MPI_STATUSES_IGNORE);
    MPI_Iallreduce(&rank, &r3, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &w);
    MPI_Wait(&w, MPI_STATUS_IGNORE);
    free(buf);
    MPI_Barrier(MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1 && strcmp(argv[1], "completions") == 0) {
        completions(rank, size);
        MPI_Finalize();
        return 0;
    }
    if (argc > 1) { /* mpi_app ZONES: the scale run (docs/scale.md): ZONES empty zones, timed */
        long zones = atol(argv[1]);
        struct timespec t0, t1;
        MPI_Barrier(MPI_COMM_WORLD);
        /* The thread's CPU time: what a zone costs the rank. Wall time would count the time
         * slices other ranks get when there are more ranks than cores. */
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        for (long i = 0; i < zones; i++) {
            LOUPE_ZONE("tiny");
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t1);
        double ns = (double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec);
        printf("rank %d: %ld zones, %.2f ns per zone\n", rank, zones, ns / (double)zones);
        MPI_Finalize();
        return 0;
    }
    long sum = 0;
    for (int i = 0; i < ITER; i++) {
        {
            LOUPE_ZONE("compute");
            spin_ms((rank + 1) * 30);
        }
        long v = rank, r = 0;
        MPI_Allreduce(&v, &r, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
        int out = rank * 100 + i, in = -1;
        MPI_Request rq;
        MPI_Irecv(&in, 1, MPI_INT, (rank + size - 1) % size, 7, MPI_COMM_WORLD, &rq);
        MPI_Send(&out, 1, MPI_INT, (rank + 1) % size, 7, MPI_COMM_WORLD);
        MPI_Wait(&rq, MPI_STATUS_IGNORE);
        sum += r + in;
    }
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
        printf("sum %ld\n", sum);
    }
    MPI_Finalize();
    return 0;
}
