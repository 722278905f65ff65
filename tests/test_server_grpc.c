/* test_server_grpc.c: the gRPC service's place in the server's state machine (loupe/server.h):
 * grpc_port out of range, a free port reported beside the HTTP one, both gone after a stop and a
 * restart on the same ports, a grpc_port that collides with the HTTP port (nothing left running,
 * the HTTP port free again), and LOUPE_EUNSUPPORTED in a build without gRPC. The protocol itself
 * is checked with the real clients in tests/grpc_validate.sh. Every server is on 127.0.0.1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/loupe.h>
#include <stdio.h>
#include <string.h>

/* ThreadSanitizer (the tsan stage runs this test): gRPC's C core and abseil come from Debian
 * uninstrumented, so TSan sees only half of their synchronisation and reports races inside them
 * (Epoll1Poller::DoEpollWait). Those are suppressed; a race with a frame in loupe's own code
 * (src/server/grpc.c) is still reported. */
const char *__tsan_default_suppressions(void);
const char *__tsan_default_suppressions(void) {
    return "race:libgrpc.so\nrace:libgpr.so\nrace:libabsl_\n";
}

static void test_range(void **state) {
    (void)state;
    int bad[] = {-2, 65536};
    for (size_t i = 0; i < 2; i++) {
        char want[160];
        snprintf(want, sizeof want,
                 "loupe_start_server: grpc_port %d is out of range (0: no gRPC, 1..65535, -1: a "
                 "free port)",
                 bad[i]);
        int rc = loupe_start_server_ex(&(loupe_server_options){.grpc_port = bad[i]});
#if LOUPE_TEST_WITH_GRPC
        assert_int_equal(rc, LOUPE_EINVALID);
        assert_string_equal(loupe_last_error(), want);
#else
        (void)want;
        assert_int_equal(rc, LOUPE_EUNSUPPORTED);
#endif
        assert_int_equal(loupe_server_port(), 0);
        assert_int_equal(loupe_server_grpc_port(), 0);
    }
}

static void test_ports(void **state) {
    (void)state;
    /* no grpc_port: HTTP only, as loupe_start_server() always was */
    assert_int_equal(loupe_start_server(0), 0);
    assert_true(loupe_server_port() > 0);
    assert_int_equal(loupe_server_grpc_port(), 0);
    assert_int_equal(loupe_stop_server(), 0);
    int rc =
        loupe_start_server_ex(&(loupe_server_options){.grpc_port = LOUPE_SERVER_GRPC_ANY_PORT});
#if LOUPE_TEST_WITH_GRPC
    assert_int_equal(rc, 0);
    int http = loupe_server_port(), grpc = loupe_server_grpc_port();
    assert_true(http > 0);
    assert_true(grpc > 0);
    assert_int_not_equal(http, grpc);
    assert_int_equal(loupe_stop_server(), 0);
    assert_int_equal(loupe_server_port(), 0);
    assert_int_equal(loupe_server_grpc_port(), 0);
    /* the same ports again: both were freed */
    assert_int_equal(
        loupe_start_server_ex(&(loupe_server_options){.port = http, .grpc_port = grpc}), 0);
    assert_int_equal(loupe_server_port(), http);
    assert_int_equal(loupe_server_grpc_port(), grpc);
    assert_int_equal(loupe_stop_server(), 0);
    /* gRPC on the HTTP port: an error, nothing runs, the HTTP port is free again */
    char want[200];
    snprintf(want, sizeof want,
             "loupe_start_server (gRPC): cannot listen on 127.0.0.1 port %d: Address already in "
             "use (errno 98); another process holds the port",
             http);
    rc = loupe_start_server_ex(&(loupe_server_options){.port = http, .grpc_port = http});
    assert_int_equal(rc, LOUPE_EIO);
    assert_string_equal(loupe_last_error(), want);
    assert_int_equal(loupe_server_port(), 0);
    assert_int_equal(loupe_stop_server(), LOUPE_ENO_SERVER);
    assert_int_equal(loupe_start_server(http), 0);
    assert_int_equal(loupe_stop_server(), 0);
#else
    assert_int_equal(rc, LOUPE_EUNSUPPORTED);
    assert_string_equal(loupe_last_error(),
                        "loupe_start_server: grpc_port -1: this build of loupe has no gRPC "
                        "service (LOUPE_WITH_GRPC=OFF: configure with libgrpc-dev, "
                        "libprotobuf-c-dev and protobuf-c-compiler installed)");
    assert_int_equal(loupe_server_port(), 0);
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_ports),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
