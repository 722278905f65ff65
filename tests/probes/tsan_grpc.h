/* tsan_grpc.h: ThreadSanitizer's suppressions for the programs of the test suite that run the
 * profiler server, which serves gRPC on its port by default. Include it in one file per program
 * (it defines the function TSan's runtime asks for; testutil.c and probes/server_probe.c do).
 *
 * gRPC's C core and abseil come from Debian uninstrumented, so TSan sees only half of their
 * synchronisation and reports races inside them (Epoll1Poller::DoEpollWait,
 * GraphCycles::GetId). Those are suppressed; a race with a frame in loupe's own code
 * (src/server/) is still reported. */
#ifndef LOUPE_TESTS_TSAN_GRPC_H
#define LOUPE_TESTS_TSAN_GRPC_H

const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) {
    return "race:libgrpc.so\nrace:libgpr.so\nrace:libabsl_\n";
}

#endif
