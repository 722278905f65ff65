/* server_probe.c: a long-running process with loupe's profiler server, for the script tests
 * that capture it with other tools (tests/grpc_*.sh): jax.collect_profile, XProf's capture
 * route, `loupe capture`.
 *
 *   server_probe HTTP_PORT GRPC_PORT [LOG_DIR]   (0 / -1: free ports)
 *
 * With LOG_DIR a local trace (loupe_start_trace) runs from the start, so captures meet a busy
 * session.
 * Prints "ready http=<port> grpc=<port>" once both listen, then records zones until SIGTERM or
 * SIGINT: "zone <n>" (n = 0, 1, 2, ... zero-padded to 6 digits) lasting about 4 ms each, 1 ms
 * apart, so a capture window holds a run of consecutive numbers and a missing zone shows as a
 * gap. On the signal it stops the server and exits 0. */
#include "tsan_grpc.h" /* TSan: the server serves gRPC */

#include <loupe/loupe.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile sig_atomic_t done;

static void on_signal(int sig) {
    (void)sig;
    done = 1;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: server_probe HTTP_PORT GRPC_PORT [LOG_DIR]\n");
        return 2;
    }
    struct sigaction sa = {.sa_handler = on_signal};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    loupe_server_options o = {.port = atoi(argv[1]), .grpc_port = atoi(argv[2])};
    int rc = loupe_start_server_ex(&o);
    if (rc != 0) {
        fprintf(stderr, "server_probe: %s: %s\n", loupe_strerror(rc), loupe_last_error());
        return 1;
    }
    if (argc == 4 && (rc = loupe_start_trace(&(loupe_trace_options){.log_dir = argv[3]})) != 0) {
        fprintf(stderr, "server_probe: %s: %s\n", loupe_strerror(rc), loupe_last_error());
        return 1;
    }
    printf("ready http=%d grpc=%d\n", loupe_server_port(), loupe_server_grpc_port());
    fflush(stdout);
    for (unsigned long n = 0; !done; n++) {
        char name[32];
        snprintf(name, sizeof name, "zone %06lu", n);
        {
            LOUPE_ZONE_DYN(name);
            sleep_ms(4);
        }
        sleep_ms(1);
    }
    if (argc == 4) {
        (void)loupe_stop_trace(NULL);
    }
    rc = loupe_stop_server();
    if (rc != 0) {
        fprintf(stderr, "server_probe: stop: %s: %s\n", loupe_strerror(rc), loupe_last_error());
        return 1;
    }
    return 0;
}
