/* mpi_app.c: the MPI program of the MPI tests (tests/mpi_record.sh). ITER rounds of: a "compute"
 * zone that rank r spends (r + 1) * 30 ms in (a known imbalance: the last rank arrives last at
 * every MPI_Allreduce), an MPI_Allreduce, a ring exchange (MPI_Irecv from the left, MPI_Send
 * to the right, MPI_Wait); then one MPI_Barrier. Linked with libloupe for its own zones;
 * its MPI calls are recorded by libloupe_mpi.so, which `loupe record` preloads. */
#include <loupe/loupe.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { ITER = 5 };

static void spin_ms(int ms) {
    struct timespec t = {0, (long)ms * 1000000L};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc > 1) { /* mpi_app ZONES: the scale run (docs/scale.md): ZONES empty zones, timed */
        long zones = atol(argv[1]);
        struct timespec t0, t1;
        MPI_Barrier(MPI_COMM_WORLD);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (long i = 0; i < zones; i++) {
            LOUPE_ZONE("tiny");
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
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
