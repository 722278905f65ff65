/* test_server_capture.c: `loupe capture` against real servers in child processes: input errors
 * in the user's words, a 3-process capture merged into one trace with 3 pids, retries of empty
 * traces and unreachable addresses with a message for each and a final error naming them, and a
 * token (a 401 is not retried). Each child runs loupe_start_server(0) and reports its port
 * through a pipe; every child is bounded by alarm() and killed at the end of its test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <arpa/inet.h>
#include <loupe/loupe.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
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
        snprintf(path, sizeof path, "%s/127.0.0.1_%d.trace.json.gz", run, c[i].port);
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

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t sl = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &sl);
    close(fd); /* nothing listens there now */
    return ntohs(a.sin_port);
}

static void test_retries_and_final_error(void **state) {
    (void)state;
    child idle = spawn(0, NULL);
    int dead = free_port();
    char cmd[2048], *out = NULL, want[512];
    snprintf(cmd, sizeof cmd,
             "%s capture 127.0.0.1:%d,127.0.0.1:%d --duration-ms 50 --attempts 2 --log-dir %s 2>&1",
             tu_cli(), idle.port, dead, dir);
    int rc = tu_run(cmd, &out);
    reap(&idle, 1);
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
    snprintf(want, sizeof want, "127.0.0.1_%d.pftrace", c.port);
    assert_non_null(strstr(out, want));
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_input_errors),
        cmocka_unit_test(test_three_processes_merged),
        cmocka_unit_test(test_retries_and_final_error),
        cmocka_unit_test(test_token),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
