/* test_server_grpc.c: the gRPC service's place in the server's state machine (loupe/server.h):
 * grpc_port out of range, gRPC on the HTTP port by default (and off with LOUPE_SERVER_GRPC_OFF),
 * a free port reported beside the HTTP one, both gone after a stop and a restart on the same
 * ports, a grpc_port that collides with the HTTP port (nothing left running, the HTTP port free
 * again), and LOUPE_EUNSUPPORTED in a build without gRPC. The one port's routing (router.c) on
 * the wire: HTTP/2's preface gets the HTTP/2 server's SETTINGS frame, a request line gets
 * HTTP/1.1, and 70 connections that send nothing, or part of the preface, neither hold up the
 * others nor stay open. The protocol itself is checked with the real clients in
 * tests/grpc_validate.sh. Every server is on 127.0.0.1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/loupe.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* ThreadSanitizer's suppressions for gRPC's uninstrumented libraries: testutil.c's
 * (probes/tsan_grpc.h). */

static void test_range(void **state) {
    (void)state;
    int bad[] = {-3, 65536};
    for (size_t i = 0; i < 2; i++) {
        char want[160];
        snprintf(want, sizeof want,
                 "loupe_start_server: grpc_port %d is out of range (0: gRPC on the HTTP port, "
                 "1..65535: a port of its own, -1: a free port, -2: no gRPC)",
                 bad[i]);
        int rc = loupe_start_server_ex(&(loupe_server_options){.grpc_port = bad[i]});
        assert_int_equal(rc, LOUPE_EINVALID); /* checked before what the build has */
        assert_string_equal(loupe_last_error(), want);
        assert_int_equal(loupe_server_port(), 0);
        assert_int_equal(loupe_server_grpc_port(), 0);
    }
}

static void test_ports(void **state) {
    (void)state;
    /* the default: gRPC on the HTTP port, as jax.profiler.start_server(port) (HTTP alone in a
     * build without gRPC) */
    assert_int_equal(loupe_start_server(0), 0);
    assert_true(loupe_server_port() > 0);
#if LOUPE_TEST_WITH_GRPC
    assert_int_equal(loupe_server_grpc_port(), loupe_server_port());
#else
    assert_int_equal(loupe_server_grpc_port(), 0);
#endif
    assert_int_equal(loupe_stop_server(), 0);
    /* LOUPE_SERVER_GRPC_OFF: HTTP alone, as loupe_start_server() was in 0.4 */
    assert_int_equal(
        loupe_start_server_ex(&(loupe_server_options){.grpc_port = LOUPE_SERVER_GRPC_OFF}), 0);
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

#if LOUPE_TEST_WITH_GRPC
/* A connection to 127.0.0.1:port, or -1. */
static int dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* Reads until n bytes, EOF or 60 s of silence (a bound for a hung test, not a timing check):
 * the bytes read. */
static size_t read_some(int fd, char *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 60000) <= 0) {
            break;
        }
        ssize_t k = recv(fd, buf + got, n - got, 0);
        if (k <= 0) {
            break;
        }
        got += (size_t)k;
    }
    return got;
}

/* 1 when the peer closed the connection (EOF or a reset) within 60 s. */
static int closed_by_server(int fd) {
    char b[64];
    for (;;) {
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, 60000) <= 0) {
            return 0;
        }
        ssize_t k = recv(fd, b, sizeof b, 0);
        if (k <= 0) {
            return 1;
        }
    }
}

#endif

/* The one port, on the wire: HTTP/2's preface reaches gRPC's HTTP/2 server, which answers with
 * its SETTINGS frame (RFC 9113 section 3.4: a frame of type 0x4 on stream 0); a request line
 * reaches libmicrohttpd; silent and half-preface connections, more of them than the router keeps
 * waiting (64), hold up neither and are all closed by the server. */
static void test_one_port(void **state) {
    (void)state;
#if LOUPE_TEST_WITH_GRPC
    assert_int_equal(loupe_start_server(0), 0);
    int port = loupe_server_port();
    enum { SILENT = 70 };
    int silent[SILENT];
    for (int i = 0; i < SILENT; i++) {
        silent[i] = dial(port);
        assert_true(silent[i] >= 0);
        if (i % 2 == 1) { /* part of the preface, then nothing */
            assert_int_equal(send(silent[i], "PRI * HTTP/2", 12, MSG_NOSIGNAL), 12);
        }
    }
    int h2 = dial(port);
    assert_true(h2 >= 0);
    /* the client preface and an empty SETTINGS frame (length 0, type 4, flags 0, stream 0) */
    static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\4\0\0\0\0\0";
    assert_int_equal(send(h2, preface, sizeof preface - 1, MSG_NOSIGNAL), sizeof preface - 1);
    unsigned char frame[9];
    assert_int_equal(read_some(h2, (char *)frame, sizeof frame), sizeof frame);
    assert_int_equal(frame[3], 0x4);                                /* SETTINGS */
    assert_int_equal(frame[5] | frame[6] | frame[7] | frame[8], 0); /* stream 0 */
    int h1 = dial(port);
    assert_true(h1 >= 0);
    static const char get[] = "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    assert_int_equal(send(h1, get, sizeof get - 1, MSG_NOSIGNAL), sizeof get - 1);
    char reply[16] = {0};
    assert_int_equal(read_some(h1, reply, 15), 15);
    assert_string_equal(reply, "HTTP/1.1 200 OK");
    close(h1);
    close(h2);
    for (int i = 0; i < SILENT; i++) {
        if (!closed_by_server(silent[i])) {
            fail_msg("connection %d (%s) is still open after 60 s", i,
                     i % 2 ? "part of the preface" : "silent");
        }
        close(silent[i]);
    }
    assert_int_equal(loupe_stop_server(), 0);
#else
    skip();
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_range),
        cmocka_unit_test(test_ports),
        cmocka_unit_test(test_one_port),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
