/* link.c: the Perfetto link host (loupe/server.h, loupe_serve_perfetto_link()).
 *
 * jax's version (jax/_src/profiler.py, _host_perfetto_trace_file) serves the run directory on
 * 127.0.0.1:9001 until the trace is fetched, with no timeout: a link nobody opens blocks forever.
 * Here one libmicrohttpd thread serves one file, and the caller waits on a condition variable until
 * the file was sent completely or the timeout passed. 9001 is the one port Perfetto's content
 * security policy lets the UI fetch from, so when it is taken the error says so.
 */
#include "base/error.h"
#include "base/net.h"
#include "server/server_internal.h"
#include "session/link.h"

#include <loupe/server.h>

#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define ORIGIN "https://ui.perfetto.dev"

typedef struct link_state {
    const char *path;
    char url_path[300]; /* "/<basename>" */
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int fetched;
} link_state;

static char file_marker; /* *con_cls of the request that serves the file */

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)c;
    link_state *ls = cls;
    if (*con_cls == &file_marker && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) {
        pthread_mutex_lock(&ls->lock);
        ls->fetched = 1;
        pthread_cond_broadcast(&ls->cond);
        pthread_mutex_unlock(&ls->lock);
    }
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *text) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)(uintptr_t)text,
                                                             MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, ORIGIN);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/plain");
    if (status == MHD_HTTP_NO_CONTENT) {
        MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET");
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "*");
    } else if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, OPTIONS");
    }
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)version;
    (void)upload_data;
    link_state *ls = cls;
    static char seen;
    if (*con_cls == NULL) {
        *con_cls = &seen;
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        *upload_data_size = 0; /* a body is ignored */
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_OPTIONS) == 0) {
        return reply(c, MHD_HTTP_NO_CONTENT, "");
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0) {
        /* The UI probes for a trace_processor RPC server with POST /status: not us. */
        return reply(c, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET is served here\n");
    }
    if (strcmp(url, ls->url_path) != 0) {
        return reply(c, MHD_HTTP_NOT_FOUND, "not found: this server serves one trace file\n");
    }
    int fd = open(ls->path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        if (fd >= 0) {
            close(fd);
        }
        return reply(c, MHD_HTTP_NOT_FOUND, "the trace file is gone\n");
    }
    struct MHD_Response *r = MHD_create_response_from_fd64((uint64_t)st.st_size, fd);
    if (r == NULL) {
        close(fd);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_ACCESS_CONTROL_ALLOW_ORIGIN, ORIGIN);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/octet-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    *con_cls = &file_marker;
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

/* Characters a file name may have to go into the URL as is. */
static int url_safe(const char *s) {
    if (*s == 0 || strcmp(s, ".") == 0 || strcmp(s, "..") == 0) {
        return 0;
    }
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-' || c == '~')) {
            return 0;
        }
    }
    return 1;
}

static void print_url(const char *url, void *user) {
    (void)user;
    fprintf(stderr, "Open URL in browser: %s\n", url);
}

int loupe_serve_perfetto_link(const char *path, const loupe_link_options *o) {
    loupe_link_options def = {0};
    if (o == NULL) {
        o = &def;
    }
    if (path == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_serve_perfetto_link: path is NULL");
    }
    if (o->port < -1 || o->port > 65535) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_serve_perfetto_link: port %d is out of range (-1..65535)",
                          o->port);
    }
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    if (!url_safe(base) || strlen(base) > 255) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_serve_perfetto_link: the file name \"%.100s\" cannot go into "
                          "the URL as is (use letters, digits, '.', '_', '-'); copy or rename it",
                          base);
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        int e = errno;
        return loupe__err(LOUPE_EIO, "loupe_serve_perfetto_link: cannot serve %s: %s (errno %d)",
                          path, strerror(e), e);
    }
    if (!S_ISREG(st.st_mode)) {
        return loupe__err(LOUPE_EIO, "loupe_serve_perfetto_link: cannot serve %s: %s", path,
                          S_ISDIR(st.st_mode) ? "a directory" : "not a regular file");
    }
    link_state *ls = calloc(1, sizeof *ls);
    if (ls == NULL) {
        return loupe__err(LOUPE_ENOMEM, "loupe_serve_perfetto_link: out of memory");
    }
    ls->path = path;
    snprintf(ls->url_path, sizeof ls->url_path, "/%s", base);
    pthread_mutex_init(&ls->lock, NULL);
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&ls->cond, &a);
    pthread_condattr_destroy(&a);

    int want = o->port == 0 ? LOUPE_PERFETTO_LINK_PORT : o->port < 0 ? 0 : o->port;
    int fd, port;
    /* SO_REUSEADDR as jax: a link served a moment ago leaves 9001 in TIME_WAIT. */
    int r = loupe__listen_socket("127.0.0.1", want, 1, &fd, &port, "Perfetto link");
    if (r != 0) {
        if (want == LOUPE_PERFETTO_LINK_PORT) {
            loupe__err_append("Perfetto's UI fetches traces only from 127.0.0.1:9001: stop what "
                              "listens there (ss -ltnp 'sport = :9001'), or open the file in "
                              "https://ui.perfetto.dev by hand");
        }
        goto out;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_POLL_INTERNAL_THREAD, 0, NULL, NULL, on_request, ls, MHD_OPTION_LISTEN_SOCKET, fd,
        MHD_OPTION_CONNECTION_LIMIT, 16u, MHD_OPTION_CONNECTION_TIMEOUT, 30u,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, ls, MHD_OPTION_END);
    if (d == NULL) {
        close(fd);
        r = loupe__err(LOUPE_EIO, "Perfetto link: libmicrohttpd could not start on port %d", port);
        goto out;
    }
    char url[512];
    snprintf(url, sizeof url, "https://ui.perfetto.dev/#!/?url=http://127.0.0.1:%d%s", port,
             ls->url_path);
    (o->on_ready ? o->on_ready : print_url)(url, o->user);

    uint32_t ms = o->timeout_ms ? o->timeout_ms : LOUPE_PERFETTO_LINK_DEFAULT_TIMEOUT_MS;
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += (time_t)(ms / 1000);
    deadline.tv_nsec += (long)(ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&ls->lock);
    while (!ls->fetched) {
        if (pthread_cond_timedwait(&ls->cond, &ls->lock, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    int fetched = ls->fetched;
    pthread_mutex_unlock(&ls->lock);
    MHD_stop_daemon(d);
    if (!fetched) {
        r = loupe__err(LOUPE_EIO,
                       "Perfetto link: timed out after %u ms: nobody fetched %s (open the link "
                       "in a browser on this machine, or through ssh -L 9001:127.0.0.1:9001)",
                       ms, url);
    }
out:
    pthread_cond_destroy(&ls->cond);
    pthread_mutex_destroy(&ls->lock);
    free(ls);
    return r;
}

int loupe__session_serve_link(const char *path, uint32_t timeout_ms) {
    loupe_link_options lo = {.timeout_ms = timeout_ms};
    return loupe_serve_perfetto_link(path, &lo);
}
