/* test_server_link.c: the Perfetto link host (loupe_serve_perfetto_link() in loupe/server.h) and
 * `loupe view`: one fetch of the file ends the wait (other paths, OPTIONS and POST do not), the
 * CORS header, the timeout, a busy port, and the session option create_perfetto_link. Ports are
 * picked free (-1) except where 9001 itself is the point. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <loupe/loupe.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct link_run {
    const char *path;
    uint32_t timeout_ms;
    int port;
    char url[600];
    int ready;
    int rc;
    char err[1024];
    pthread_mutex_t lock;
} link_run;

static void on_ready(const char *url, void *user) {
    link_run *l = user;
    pthread_mutex_lock(&l->lock);
    snprintf(l->url, sizeof l->url, "%s", url);
    l->ready = 1;
    pthread_mutex_unlock(&l->lock);
}

static void *link_thread(void *p) {
    link_run *l = p;
    loupe_link_options o = {
        .timeout_ms = l->timeout_ms, .port = l->port, .on_ready = on_ready, .user = l};
    l->rc = loupe_serve_perfetto_link(l->path, &o);
    snprintf(l->err, sizeof l->err, "%s", loupe_last_error());
    return NULL;
}

/* Waits (at most 5 s) for the link's URL; returns the local http URL inside it. */
static const char *wait_ready(link_run *l) {
    for (int i = 0; i < 500; i++) {
        pthread_mutex_lock(&l->lock);
        int r = l->ready;
        pthread_mutex_unlock(&l->lock);
        if (r) {
            const char *u = strstr(l->url, "url=");
            assert_non_null(u);
            return u + 4;
        }
        usleep(10000);
    }
    fail_msg("the link never became ready");
    return NULL;
}

typedef struct resp {
    long status;
    char *body;
    size_t len;
    char acao[128];
} resp;

static size_t on_body(char *p, size_t s, size_t n, void *u) {
    resp *r = u;
    r->body = realloc(r->body, r->len + s * n + 1);
    memcpy(r->body + r->len, p, s * n);
    r->len += s * n;
    r->body[r->len] = 0;
    return s * n;
}

static size_t on_header(char *p, size_t s, size_t n, void *u) {
    resp *r = u;
    const char *k = "Access-Control-Allow-Origin: ";
    if (strncasecmp(p, k, strlen(k)) == 0) {
        snprintf(r->acao, sizeof r->acao, "%.*s", (int)strcspn(p + strlen(k), "\r\n"),
                 p + strlen(k));
    }
    return s * n;
}

static resp get(const char *url, const char *method) {
    resp r;
    memset(&r, 0, sizeof r);
    CURL *e = curl_easy_init();
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &r);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 10000L);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    if (method != NULL) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, method);
    }
    if (curl_easy_perform(e) == CURLE_OK) {
        curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &r.status);
    }
    curl_easy_cleanup(e);
    return r;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static char *dir;
static char file[512];

static int setup(void **state) {
    (void)state;
    dir = tu_tmpdir("srv_link");
    snprintf(file, sizeof file, "%s/perfetto_trace.json.gz", dir);
    tu_write_file(file, "{\"traceEvents\":[]}");
    return 0;
}

static int teardown(void **state) {
    (void)state;
    tu_rmtree(dir);
    free(dir);
    return 0;
}

static void test_served_once(void **state) {
    (void)state;
    link_run l = {.path = file, .timeout_ms = 20000, .port = -1};
    pthread_mutex_init(&l.lock, NULL);
    pthread_t th;
    pthread_create(&th, NULL, link_thread, &l);
    const char *u = wait_ready(&l);
    assert_true(strncmp(l.url, "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:", 49) == 0);
    assert_non_null(strstr(l.url, "/perfetto_trace.json.gz"));
    char other[700];
    snprintf(other, sizeof other, "%.*s/favicon.ico", (int)(strrchr(u, '/') - u), u);
    /* what does not end the wait: another path, the UI's POST probe, a CORS preflight */
    resp r = get(other, NULL);
    assert_int_equal(r.status, 404);
    free(r.body);
    r = get(u, "POST");
    assert_int_equal(r.status, 405);
    free(r.body);
    r = get(u, "OPTIONS");
    assert_int_equal(r.status, 204);
    assert_string_equal(r.acao, "https://ui.perfetto.dev");
    free(r.body);
    /* the fetch */
    r = get(u, NULL);
    assert_int_equal(r.status, 200);
    assert_string_equal(r.acao, "https://ui.perfetto.dev");
    assert_string_equal(r.body, "{\"traceEvents\":[]}");
    free(r.body);
    double t0 = now_s();
    pthread_join(th, NULL);
    assert_true(now_s() - t0 < 3.0);
    assert_int_equal(l.rc, 0);
    /* and it is gone */
    r = get(u, NULL);
    assert_int_equal(r.status, 0);
    free(r.body);
}

static void test_timeout(void **state) {
    (void)state;
    link_run l = {.path = file, .timeout_ms = 300, .port = -1};
    pthread_mutex_init(&l.lock, NULL);
    double t0 = now_s();
    link_thread(&l);
    double took = now_s() - t0;
    assert_true(took >= 0.29 && took < 3.0);
    assert_int_equal(l.rc, LOUPE_EIO);
    char want[800];
    snprintf(want, sizeof want,
             "Perfetto link: timed out after 300 ms: nobody fetched %s (open the link in a "
             "browser on this machine, or through ssh -L 9001:127.0.0.1:9001)",
             l.url);
    assert_string_equal(l.err, want);
}

static int listen_any(int *port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fd, 1), 0);
    socklen_t sl = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &sl);
    *port = ntohs(a.sin_port);
    return fd;
}

static void test_busy_port(void **state) {
    (void)state;
    int port;
    int fd = listen_any(&port);
    loupe_link_options o = {.timeout_ms = 100, .port = port};
    assert_int_equal(loupe_serve_perfetto_link(file, &o), LOUPE_EIO);
    char want[300];
    snprintf(want, sizeof want,
             "Perfetto link: cannot listen on 127.0.0.1 port %d: Address already in use (errno "
             "%d); another process holds the port",
             port, EADDRINUSE);
    assert_string_equal(loupe_last_error(), want);
    close(fd);
}

static void test_bad_args(void **state) {
    (void)state;
    assert_int_equal(loupe_serve_perfetto_link(NULL, NULL), LOUPE_EINVALID);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/with space.json", dir);
    assert_int_equal(loupe_serve_perfetto_link(bad, NULL), LOUPE_EINVALID);
    assert_non_null(strstr(loupe_last_error(), "\"with space.json\" cannot go into the URL"));
    snprintf(bad, sizeof bad, "%s/missing.json", dir);
    assert_int_equal(loupe_serve_perfetto_link(bad, NULL), LOUPE_EIO);
    assert_non_null(strstr(loupe_last_error(), "No such file or directory"));
    loupe_link_options o = {.port = 70000};
    assert_int_equal(loupe_serve_perfetto_link(file, &o), LOUPE_EINVALID);
}

/* The session option: the stop writes perfetto_trace.json.gz and then serves it; nobody
 * fetches, so the stop returns the link's error (9001 busy or the timeout), with the files
 * written and the session IDLE. */
static void test_session_option(void **state) {
    (void)state;
    loupe_trace_options o = {
        .log_dir = dir, .create_perfetto_link = 1, .perfetto_link_timeout_ms = 200};
    assert_int_equal(loupe_start_trace(&o), 0);
    { LOUPE_ZONE("linked"); }
    loupe_trace_result r = {.size = sizeof r};
    double t0 = now_s();
    int rc = loupe_stop_trace(&r);
    assert_true(now_s() - t0 < 5.0);
    assert_int_equal(rc, LOUPE_EIO);
    const char *e = loupe_last_error();
    assert_true(strstr(e, "timed out after 200 ms") != NULL || strstr(e, "port 9001") != NULL);
    assert_non_null(strstr(e, "the trace was written: "));
    struct stat st;
    assert_int_equal(stat(loupe_trace_result_path(&r, LOUPE_FORMAT_PERFETTO_JSON), &st), 0);
    assert_int_equal(loupe_is_tracing(), 0);
    assert_int_equal(loupe_start_trace(&(loupe_trace_options){.log_dir = dir}), 0);
    assert_int_equal(loupe_stop_trace(NULL), 0);
    loupe_trace_result_free(&r);
}

static void test_view_cli(void **state) {
    (void)state;
    char cmd[1400], *out = NULL;
    /* a run directory: perfetto_trace.json.gz is picked; nobody fetches: exit 1 after 1 s */
    snprintf(cmd, sizeof cmd, "%s view %s --timeout-s 1 --port -1 2>&1", tu_cli(), dir);
    double t0 = now_s();
    assert_int_equal(tu_run(cmd, &out), 1);
    assert_true(now_s() - t0 < 5.0);
    assert_non_null(strstr(out, "Open URL in browser: https://ui.perfetto.dev/#!/?url=http://"
                                "127.0.0.1:"));
    assert_non_null(strstr(out, "/perfetto_trace.json.gz\n"));
    assert_non_null(strstr(out, "loupe view: Perfetto link: timed out after 1000 ms"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s view %s/nothing-here 2>&1", tu_cli(), dir);
    assert_int_equal(tu_run(cmd, &out), 1);
    assert_non_null(strstr(out, "nothing-here: No such file or directory"));
    free(out);
    snprintf(cmd, sizeof cmd, "%s view 2>&1", tu_cli());
    assert_int_equal(tu_run(cmd, &out), 2);
    free(out);
}

int main(void) {
    curl_global_init(CURL_GLOBAL_DEFAULT);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_served_once),    cmocka_unit_test(test_timeout),
        cmocka_unit_test(test_busy_port),      cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_session_option), cmocka_unit_test(test_view_cli),
    };
    int r = cmocka_run_group_tests(tests, setup, teardown);
    curl_global_cleanup();
    return r;
}
