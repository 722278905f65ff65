/* test_server_capture.c: `loupe capture` against real servers in child processes: input errors
 * in the user's words, a 3-process capture merged into one trace with 3 pids, retries of empty
 * traces and unreachable addresses with a message for each and a final error naming them, and a
 * token (a 401 is not retried), clock offsets measured across two servers one of which runs 5 s
 * ahead, over HTTP and over gRPC (the run directory read whole puts a moment both mark at its
 * true time), and CPU samples
 * in a capture (on by default, off with --sample-hz 0). Each child runs loupe_start_server(0) and
 * reports its port through a pipe; every child is bounded by alarm() and killed at the end of its
 * test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <arpa/inet.h>
#include <loupe/loupe.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct child {
    pid_t pid;
    int port;
} child;

/* busy: records a zone per ms; else records nothing. token: NULL for none. */
static child spawn(int busy, const char *token) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        alarm(60); /* a child never outlives a broken test by more than this */
        loupe_server_options o = {.token = token};
        int port = loupe_start_server_ex(&o) == 0 ? loupe_server_port() : -1;
        if (write(p[1], &port, sizeof port) != (ssize_t)sizeof port) {
            _exit(3);
        }
        close(p[1]);
        loupe_set_thread_name("child-main");
        for (int i = 0; i < 60000; i++) {
            if (busy) {
                LOUPE_ZONE("child_work");
                LOUPE_ARG_I64("iteration", i); /* survives --merge */
            }
            usleep(1000);
        }
        _exit(0);
    }
    close(p[1]);
    child c = {pid, -1};
    assert_int_equal(read(p[0], &c.port, sizeof c.port), (ssize_t)sizeof c.port);
    close(p[0]);
    assert_true(c.port > 0);
    return c;
}

static void reap(child *c, size_t n) {
    for (size_t i = 0; i < n; i++) {
        kill(c[i].pid, SIGKILL);
        waitpid(c[i].pid, NULL, 0);
    }
}

static char *dir;

static int setup(void **state) {
    (void)state;
    dir = tu_tmpdir("srv_capture_cli");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmtree(dir);
    free(dir);
    return 0;
}

static void expect(const char *args, int status, const char *text) {
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s capture %s 2>&1", tu_cli(), args);
    int rc = tu_run(cmd, &out);
    if (rc != status || strstr(out, text) == NULL) {
        fail_msg("'%s' gave %d:\n%s\nexpected %d and: %s", cmd, rc, out, status, text);
    }
    free(out);
}

static void test_input_errors(void **state) {
    (void)state;
    expect("x --duration-ms 10", 2, "Could not interpret \"x\" as a host-port pair.");
    expect("a:1:2 --duration-ms 10", 2, "Could not interpret \"a:1:2\" as a host-port pair.");
    expect("h:99999 --duration-ms 10", 2, "Could not interpret \"h:99999\" as a host-port pair.");
    expect("h/x:80 --duration-ms 10", 2, "Could not interpret \"h/x:80\" as a host-port pair.");
    expect("127.0.0.1:9,:80 --duration-ms 10", 2,
           "Could not interpret \":80\" as a host-port pair.");
    expect("127.0.0.1:9 --duration-ms 0", 2, "duration_ms must be greater than zero.");
    expect("127.0.0.1:9 --duration-ms -5", 2, "duration_ms must be greater than zero.");
    expect("--duration-ms 10", 2, "No service address provided.");
    expect("127.0.0.1:9", 2, "--duration-ms is required");
    expect("127.0.0.1:9 --duration-ms 10 --format svg", 2,
           "--format: \"svg\" is not json, xplane or perfetto");
    expect("127.0.0.1:9 --duration-ms 10 --max-mb 0", 2,
           "--max-mb: \"0\" is not a number of MiB from 1 to 1048576");
    expect("127.0.0.1:9 --duration-ms 10 --sample-hz fast", 2,
           "--sample-hz: \"fast\" is not a rate in Hz from 0 (off) to 100000");
    expect("127.0.0.1:9 --duration-ms 10 --sample-hz 100001", 2,
           "--sample-hz: \"100001\" is not a rate in Hz from 0 (off) to 100000");
}

/* The last line of out. */
static void last_line(const char *out, char *buf, size_t size) {
    size_t n = strlen(out);
    while (n > 0 && out[n - 1] == '\n') {
        n--;
    }
    size_t s = n;
    while (s > 0 && out[s - 1] != '\n') {
        s--;
    }
    snprintf(buf, size, "%.*s", (int)(n - s), out + s);
}

static void test_three_processes_merged(void **state) {
    (void)state;
    child c[3];
    for (int i = 0; i < 3; i++) {
        c[i] = spawn(1, NULL);
    }
    char cmd[2048], *out = NULL;
    snprintf(cmd, sizeof cmd,
             "%s capture 127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d --duration-ms 200 --log-dir %s "
             "--merge 2>&1",
             tu_cli(), c[0].port, c[1].port, c[2].port, dir);
    int rc = tu_run(cmd, &out);
    reap(c, 3);
    if (rc != 0) {
        fail_msg("%s\n%s", cmd, out);
    }
    assert_non_null(strstr(out, "Starting to trace for 200 ms. Remaining attempt(s): 2"));
    char run[1024], path[1400];
    last_line(out, run, sizeof run);
    assert_non_null(strstr(run, "/plugins/profile/"));
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/127.0.0.1_%d.%d.trace.json.gz", run, c[i].port,
                 (int)c[i].pid);
        loupe_model *m = NULL;
        assert_int_equal(loupe_trace_read(path, &m), 0);
        assert_int_equal(m->pid, c[i].pid);
        loupe_model_free(m);
    }
    snprintf(path, sizeof path, "%s/perfetto_trace.json.gz", run);
    json_t *j = tu_load_json(path);
    json_t *evs = json_object_get(j, "traceEvents");
    int work[3] = {0, 0, 0}, named[3] = {0, 0, 0}, other = 0;
    double lo = 1e18, hi = -1e18;
    for (size_t k = 0; k < json_array_size(evs); k++) {
        json_t *e = json_array_get(evs, k);
        json_int_t pid = json_integer_value(json_object_get(e, "pid"));
        const char *ph = json_string_value(json_object_get(e, "ph"));
        int which = -1;
        for (int i = 0; i < 3; i++) {
            which = pid == c[i].pid ? i : which;
        }
        if (which < 0) {
            other++;
            continue;
        }
        if (strcmp(ph, "X") == 0 &&
            strcmp(json_string_value(json_object_get(e, "name")), "child_work") == 0) {
            work[which]++;
            assert_true(json_is_integer(json_object_get(json_object_get(e, "args"), "iteration")));
            double ts = json_real_value(json_object_get(e, "ts"));
            lo = ts < lo ? ts : lo;
            hi = ts > hi ? ts : hi;
        }
        if (strcmp(ph, "M") == 0 &&
            strcmp(json_string_value(json_object_get(e, "name")), "process_name") == 0) {
            char want[64];
            snprintf(want, sizeof want, "(127.0.0.1:%d)", c[which].port);
            const char *pn = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
            named[which] += strstr(pn, want) != NULL;
        }
    }
    assert_int_equal(other, 0); /* exactly the 3 children's pids */
    for (int i = 0; i < 3; i++) {
        assert_true(work[i] >= 10); /* ~200 zones each at 1 ms, fewer on a loaded machine */
        assert_int_equal(named[i], 1);
    }
    /* one timeline: the three captures ran at the same time, so their zones overlap within a
     * second rather than sitting at three unrelated origins */
    assert_true(lo >= 0.0 && hi - lo < 1.5e6);
    /* loss accounting per address */
    json_t *loss = json_object_get(json_object_get(j, "otherData"), "events_dropped");
    assert_int_equal(json_object_size(loss), 3);
    json_decref(j);
    free(out);
}

/* A port nothing listens on, held: the socket is bound and never listens, so a connect is
 * refused (Linux answers RST for a bound, non-listening port) and no other test's server can take
 * the number meanwhile (a port closed and freed was taken by a parallel test's server under
 * TSan: the capture then connected). *fd: the socket, for the caller to close. */
static int held_dead_port(int *fd) {
    *fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(*fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(*fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t sl = sizeof a;
    getsockname(*fd, (struct sockaddr *)&a, &sl);
    return ntohs(a.sin_port);
}

static void test_retries_and_final_error(void **state) {
    (void)state;
    child idle = spawn(0, NULL);
    int dead_fd;
    int dead = held_dead_port(&dead_fd);
    char cmd[2048], *out = NULL, want[512];
    snprintf(cmd, sizeof cmd,
             "%s capture 127.0.0.1:%d,127.0.0.1:%d --duration-ms 50 --attempts 2 --log-dir %s 2>&1",
             tu_cli(), idle.port, dead, dir);
    int rc = tu_run(cmd, &out);
    reap(&idle, 1);
    close(dead_fd);
    assert_int_equal(rc, 1);
    assert_non_null(strstr(out, "Starting to trace for 50 ms. Remaining attempt(s): 1\n"));
    assert_non_null(strstr(out, "No trace event is collected. Automatically retrying.\n"));
    assert_non_null(strstr(out, "Starting to trace for 50 ms. Remaining attempt(s): 0\n"));
    snprintf(want, sizeof want,
             "No trace event is collected from 127.0.0.1:%d: the trace is empty (no event was "
             "recorded)\n",
             idle.port);
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "loupe capture: No trace event is collected after 2 attempt(s). "
                                "Perhaps, you want to try again (with more attempts?).\nTip: "
                                "increase number of attempts with --attempts.\n"));
    assert_non_null(strstr(out, "loupe capture: no trace from 2 of 2 address(es):\n"));
    snprintf(want, sizeof want, "  127.0.0.1:%d: the trace is empty (no event was recorded)\n",
             idle.port);
    assert_non_null(strstr(out, want));
    snprintf(want, sizeof want, "  127.0.0.1:%d: Failed to connect to 127.0.0.1 port %d", dead,
             dead);
    assert_non_null(strstr(out, want));
    free(out);
}

static void test_token(void **state) {
    (void)state;
    child c = spawn(1, "tok");
    char cmd[2048], *out = NULL, want[512];
    snprintf(cmd, sizeof cmd, "%s capture 127.0.0.1:%d --duration-ms 30 --log-dir %s 2>&1",
             tu_cli(), c.port, dir);
    assert_int_equal(tu_run(cmd, &out), 1);
    snprintf(want, sizeof want,
             "  127.0.0.1:%d: HTTP 401: Unauthorized (this server needs the header "
             "'Authorization: Bearer <token>' with its token)\n",
             c.port);
    assert_non_null(strstr(out, want));
    assert_null(strstr(out, "Remaining attempt(s): 1")); /* a 401 is not retried */
    free(out);
    snprintf(cmd, sizeof cmd,
             "%s capture 127.0.0.1:%d --duration-ms 30 --log-dir %s --token tok --format "
             "perfetto 2>&1",
             tu_cli(), c.port, dir);
    int rc = tu_run(cmd, &out);
    reap(&c, 1);
    if (rc != 0) {
        fail_msg("%s\n%s", cmd, out);
    }
    snprintf(want, sizeof want, "127.0.0.1_%d.%d.pftrace", c.port, (int)c.pid);
    assert_non_null(strstr(out, want));
    free(out);
}

/* ---- clocks across hosts: two servers, one with its clock 5 s ahead ---- */

static int64_t realtime_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* The children of the test running: a failed assertion leaves the test at once, and a child left
 * alive would hold ctest's output pipe until its alarm(). */
static pid_t live[4];
static size_t live_count;

static int kill_live(void **state) {
    (void)state;
    for (size_t i = 0; i < live_count; i++) {
        kill(live[i], SIGKILL);
        waitpid(live[i], NULL, 0);
    }
    live_count = 0;
    return 0;
}

typedef struct marker {
    pid_t pid;
    int port;
    int mark_w;  /* a byte written here: the child records the instant "mark" */
    int truth_r; /* a byte once its capture runs; after the mark [before, after]: its unshifted
                    CLOCK_REALTIME around the instant */
} marker;

/* A server child whose clock is shifted by shift ns (LOUPE_TEST_CLOCK_SHIFT_NS, NULL: none);
 * grpc: with the gRPC service too, whose port it reports. */
static marker spawn_marker(const char *shift, int grpc) {
    int pp[2], mk[2], tr[2];
    assert_int_equal(pipe(pp), 0);
    assert_int_equal(pipe(mk), 0);
    assert_int_equal(pipe(tr), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pp[0]);
        close(mk[1]);
        close(tr[0]);
        alarm(60);
        if (shift != NULL) {
            setenv("LOUPE_TEST_CLOCK_SHIFT_NS", shift, 1); /* read at every clock read */
        }
        loupe_server_options so = {.grpc_port = grpc ? LOUPE_SERVER_GRPC_ANY_PORT : 0};
        int port = loupe_start_server_ex(&so) != 0 ? -1
                   : grpc                          ? loupe_server_grpc_port()
                                                   : loupe_server_port();
        if (write(pp[1], &port, sizeof port) != (ssize_t)sizeof port) {
            _exit(3);
        }
        close(pp[1]);
        while (!loupe_is_tracing()) { /* the capture's session */
            usleep(1000);
        }
        char b = 'r';
        if (write(tr[1], &b, 1) != 1) {
            _exit(4);
        }
        while (read(mk[0], &b, 1) == 1) {
            int64_t t[2];
            t[0] = realtime_ns();
            LOUPE_INSTANT("mark");
            t[1] = realtime_ns();
            if (write(tr[1], t, sizeof t) != (ssize_t)sizeof t) {
                _exit(4);
            }
        }
        _exit(0);
    }
    live[live_count++] = pid;
    close(pp[1]);
    close(mk[0]);
    close(tr[1]);
    marker c = {pid, -1, mk[1], tr[0]};
    assert_int_equal(read(pp[0], &c.port, sizeof c.port), (ssize_t)sizeof c.port);
    close(pp[0]);
    assert_true(c.port > 0);
    return c;
}

static marker markers[2];

/* Once both children's captures run (each says so), both are told to mark at once: on a loaded
 * machine the two captures may start far apart, and the mark must be in both. */
static void *mark_later(void *arg) {
    (void)arg;
    for (int i = 0; i < 2; i++) {
        char b;
        if (read(markers[i].truth_r, &b, 1) != 1) {
            return NULL;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (write(markers[i].mark_w, "m", 1) != 1) {
            return NULL;
        }
    }
    return NULL;
}

static int64_t meta_i64(const loupe_model *m, const char *key) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, key) == 0) {
            return strtoll(m->metadata[i].value, NULL, 10);
        }
    }
    fail_msg("no metadata key %s", key);
    return 0;
}

static const char *meta_str(const loupe_model *m, const char *key);

/* Two servers, one 5 s ahead, captured over HTTP (grpc = 0: GET /v1/clock's round trips, again
 * near the end) or over gRPC (grpc = 1: no clock call; the times loupe's server read the call
 * and sent its reply, which lie within the call, bound the offset; a jax server's reply has
 * only its trace's start and stop: tests/grpc_validate.sh). */
static void clock_offsets(int grpc) {
    markers[0] = spawn_marker(NULL, grpc);
    markers[1] = spawn_marker("5000000000", grpc);
    char cmd[2048], *out = NULL;
    const char *scheme = grpc ? "grpc://" : "";
    snprintf(cmd, sizeof cmd,
             "%s capture %s127.0.0.1:%d,%s127.0.0.1:%d --duration-ms 3000 --log-dir %s "
             "--sample-hz 0 2>&1",
             tu_cli(), scheme, markers[0].port, scheme, markers[1].port, dir);
    pthread_t marking;
    assert_int_equal(pthread_create(&marking, NULL, mark_later, NULL), 0);
    int rc = tu_run(cmd, &out);
    pthread_join(marking, NULL);
    int64_t truth[2][2];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(read(markers[i].truth_r, truth[i], sizeof truth[i]),
                         (ssize_t)sizeof truth[i]);
        close(markers[i].mark_w);
        close(markers[i].truth_r);
    }
    kill_live(NULL);
    if (rc != 0) {
        fail_msg("%s\n%s", cmd, out);
    }
    char run[1024], path[1400];
    last_line(out, run, sizeof run);
    /* each file: the measured offset (ns to add to its times to get ours) is the true one,
     * 0 and -5 s, within its uncertainty: HTTP, half the shortest of the round trips (50 ms at
     * most); gRPC, half the call's round trip less the server's time from reading the call to
     * sending its reply (the times loupe's server sends with it: connecting and moving the
     * bytes; a few ms here, 500 ms allowed for a loaded machine) */
    int64_t unc[2];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/127.0.0.1_%d.%d.%s", run, markers[i].port,
                 (int)markers[i].pid, grpc ? "xplane.pb" : "trace.json.gz");
        loupe_model *m = NULL;
        assert_int_equal(loupe_trace_read(path, &m), 0);
        int64_t off = meta_i64(m, "loupe_clock_offset_ns");
        unc[i] = meta_i64(m, "loupe_clock_offset_uncertainty_ns");
        int64_t want = i == 0 ? 0 : -5000000000;
        int64_t most = grpc ? 500000000 : 50000000;
        if (unc[i] <= 0 || unc[i] > most || llabs(off - want) > unc[i]) {
            fail_msg("server %d: offset %lld ns, uncertainty %lld ns; want %lld\n%s", i,
                     (long long)off, (long long)unc[i], (long long)want, out);
        }
        if (grpc) {
            /* said in the output, in ms (server minus ours: the negated key), and how */
            assert_string_equal(meta_str(m, "loupe_clock_method"), "grpc_call_times");
            char line[256];
            int n = snprintf(line, sizeof line,
                             "127.0.0.1:%d: clock %+.3f ms +- %.3f ms from this machine's (the "
                             "server's request and reply times within the ",
                             markers[i].port, (double)-off / 1e6, (double)unc[i] / 1e6);
            assert_true(n > 0 && (size_t)n < sizeof line);
            if (strstr(out, line) == NULL) {
                fail_msg("no line '%s' in:\n%s", line, out);
            }
            /* at: when the server read the call, on its own (shifted) clock */
            int64_t at = meta_i64(m, "loupe_clock_offset_at_ns");
            if (llabs(at - (realtime_ns() - want)) > 60000000000) {
                fail_msg("server %d: measured at %lld", i, (long long)at);
            }
            loupe_model_free(m);
            continue;
        }
        /* measured again near the capture's end (a tenth of its 3 s left, at most 250 ms: from
         * 2.75 s after the first measurement on, 5 s allowed for a loaded machine): the same
         * offset within the uncertainty (now the larger of the two) plus what the server's
         * trace clock may drift from ours in those seconds (200 us: its TSC rate is calibrated,
         * about 60 ppm at worst over 3 s; measuring that drift is what the end keys are for),
         * both times on the server's own clock (its shift included) */
        int64_t end = meta_i64(m, "loupe_clock_offset_end_ns");
        int64_t at = meta_i64(m, "loupe_clock_offset_at_ns");
        int64_t end_at = meta_i64(m, "loupe_clock_offset_end_at_ns");
        int64_t shifted = realtime_ns() - want;
        if (llabs(end - want) > unc[i] + 200000 || end_at - at < 2750000000 - 1000000 ||
            end_at - at > 8000000000 || llabs(end_at - shifted) > 60000000000) {
            fail_msg(
                "server %d: end offset %lld ns (want %lld +- %lld + 200 us), measured at %lld, "
                "%lld ns after the first",
                i, (long long)end, (long long)want, (long long)unc[i], (long long)end_at,
                (long long)(end_at - at));
        }
        loupe_model_free(m);
    }
    /* the run directory read whole: both marks on this machine's clock, each within its
     * uncertainty (plus 50 us: the origin's own bracket, and the clock reads around it) of the
     * child's true time, 5 s apart without the correction */
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(run, &m), 0);
    assert_int_equal(m->process_count, 2);
    int found[2] = {0, 0};
    for (size_t t = 0; t < m->thread_count; t++) {
        const loupe_model_thread *th = &m->threads[t];
        int which = -1;
        for (int i = 0; i < 2; i++) {
            which = m->processes[th->process].pid == (uint64_t)markers[i].pid ? i : which;
        }
        assert_true(which >= 0);
        for (size_t k = 0; k < th->instant_count; k++) {
            if (strcmp(th->instants[k].name, "mark") != 0) {
                continue;
            }
            found[which]++;
            int64_t at = (int64_t)m->origin_unix_ns + (int64_t)th->instants[k].ts_ns;
            int64_t slack = unc[which] + 50000;
            if (at < truth[which][0] - slack || at > truth[which][1] + slack) {
                fail_msg("server %d: the mark at %lld ns, truth [%lld, %lld], uncertainty %lld",
                         which, (long long)at, (long long)truth[which][0],
                         (long long)truth[which][1], (long long)unc[which]);
            }
        }
    }
    assert_int_equal(found[0], 1);
    assert_int_equal(found[1], 1);
    loupe_model_free(m);
    free(out);
}

static void test_clock_offsets(void **state) {
    (void)state;
    clock_offsets(0);
}

static void test_clock_offsets_grpc(void **state) {
    (void)state;
    if (!LOUPE_TEST_WITH_GRPC) {
        skip(); /* a build without the gRPC service or client */
    }
#if defined(__SANITIZE_THREAD__)
    /* Debian's libgrpc is not built with TSan: its event engine's epoll_create1 on one thread
     * and epoll_wait on its poller thread are ordered by gRPC's own (uninstrumented) locks, which
     * TSan cannot see, so it reports a race inside libgrpc (Epoll1Poller::DoEpollWait) */
    skip();
#endif
    clock_offsets(1);
}

/* ---- a capture samples the CPU ---- */

void spin_hot(volatile uint64_t *x);
__attribute__((noinline)) void spin_hot(volatile uint64_t *x) {
    for (int i = 0; i < 1000000; i++) {
        *x = *x * 6364136223846793005u + 1442695040888963407u;
    }
}

static void *spinner(void *arg) {
    (void)arg;
    volatile uint64_t x = 1;
    for (;;) {
        spin_hot(&x);
    }
    return NULL;
}

/* A server child with a thread that spins in spin_hot() and a main thread that records a zone
 * per ms (so that the trace is not empty). */
static child spawn_spinner(void) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        alarm(60);
        pthread_t th;
        int port = loupe_start_server(0) == 0 && pthread_create(&th, NULL, spinner, NULL) == 0
                       ? loupe_server_port()
                       : -1;
        if (write(p[1], &port, sizeof port) != (ssize_t)sizeof port) {
            _exit(3);
        }
        close(p[1]);
        for (int i = 0; i < 60000; i++) {
            LOUPE_ZONE("child_work");
            usleep(1000);
        }
        _exit(0);
    }
    live[live_count++] = pid;
    close(p[1]);
    child c = {pid, -1};
    assert_int_equal(read(p[0], &c.port, sizeof c.port), (ssize_t)sizeof c.port);
    close(p[0]);
    assert_true(c.port > 0);
    return c;
}

static const char *meta_str(const loupe_model *m, const char *key) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, key) == 0) {
            return m->metadata[i].value;
        }
    }
    return "";
}

/* One capture of c with extra options; the model of its one file. */
static loupe_model *capture_one(const child *c, const char *opts) {
    char cmd[2048], *out = NULL, run[1024], path[1400];
    snprintf(cmd, sizeof cmd, "%s capture 127.0.0.1:%d --duration-ms 500 --log-dir %s %s 2>&1",
             tu_cli(), c->port, dir, opts);
    int rc = tu_run(cmd, &out);
    if (rc != 0) {
        fail_msg("%s\n%s", cmd, out);
    }
    last_line(out, run, sizeof run);
    free(out);
    snprintf(path, sizeof path, "%s/127.0.0.1_%d.%d.trace.json.gz", run, c->port, (int)c->pid);
    loupe_model *m = NULL;
    assert_int_equal(loupe_trace_read(path, &m), 0);
    return m;
}

static void test_capture_samples(void **state) {
    (void)state;
    child c = spawn_spinner();
    loupe_model *m = capture_one(&c, ""); /* the default: the server's 999 Hz */
    const char *note = meta_str(m, "loupe_sampling");
    if (strncmp(note, "unavailable", 11) == 0) {
        loupe_model_free(m);
        kill_live(NULL);
        skip(); /* perf_event_open refused here (perf_event_paranoid, seccomp) */
    }
    assert_non_null(strstr(note, "999 Hz"));
    size_t hot = 0;
    for (size_t i = 0; i < m->sample_count; i++) {
        /* spin_hot anywhere on the stack: in a TSan build its loop's leaf is the runtime's
         * __tsan_read/__tsan_write, called from spin_hot */
        for (uint32_t n = m->samples[i].stack; n != UINT32_MAX; n = m->stack_nodes[n].parent) {
            if (strcmp(m->frames[m->stack_nodes[n].frame].function, "spin_hot") == 0) {
                hot++;
                break;
            }
        }
    }
    /* 500 ms of a spinning thread at 999 Hz: ~500 samples with spin_hot on an idle machine, a
     * handful on a loaded one (the thread runs, and is sampled, only while it has a CPU); the
     * other threads sleep, so most samples are spin_hot's whatever the load */
    assert_int_equal(m->sample_period_ns, 1000000000u / 999u);
    if (hot == 0 || hot * 2 < m->sample_count) {
        fail_msg("%zu of %zu samples in spin_hot (sampling: %s, lost %llu)", hot, m->sample_count,
                 note, (unsigned long long)m->samples_lost);
    }
    loupe_model_free(m);
    m = capture_one(&c, "--sample-hz 0");
    assert_string_equal(meta_str(m, "loupe_sampling"), "off");
    assert_int_equal(m->sample_count, 0);
    loupe_model_free(m);
    kill_live(NULL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_errors),
        cmocka_unit_test(test_three_processes_merged),
        cmocka_unit_test_teardown(test_clock_offsets, kill_live),
        cmocka_unit_test_teardown(test_clock_offsets_grpc, kill_live),
        cmocka_unit_test_teardown(test_capture_samples, kill_live),
        cmocka_unit_test(test_retries_and_final_error),
        cmocka_unit_test(test_token),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
