/* server.c: the profiler server (loupe/server.h, protocol in docs/server.md).
 *
 * libmicrohttpd runs it: one listening thread plus one thread per connection (at most
 * MAX_CONNECTIONS), so a capture that sleeps for its duration blocks only its own connection and
 * status requests keep flowing. The listening socket is made here rather than by libmicrohttpd so
 * that a bind failure reaches the caller with its errno (jax only logs it: jax/_src/profiler.py
 * start_server).
 *
 * A capture runs the process's one session through session/capture.h: a local trace (or another
 * capture) makes it a 409 and is not touched. Its model is written into memory by the format's
 * writer (src/export/writers.h) and sent as the response body: the trace lands where the client
 * is, not on the server's disk (as tsl's profiler_service_impl.cc writes it).
 *
 * Locks: srv_lock serialises start/stop; wait_lock + wait_cond let stop wake captures that are
 * sleeping out their duration. Handlers read the configuration (token, limits) without a lock:
 * it is written before the daemon starts and freed only after MHD_stop_daemon() has joined every
 * connection thread.
 *
 * No client takes the server away from the others (DESIGN.md invariant 6):
 * - Every connection has a slot (conns[], from libmicrohttpd's connection notifications) that
 *   holds its request's state: nothing is allocated per request that a request cut short could
 *   leak, and the in-flight count drops when the connection goes, whatever state it was in.
 * - The request head (request line and headers) must arrive within HEAD_TOTAL_MS, with no gap
 *   over HEAD_IDLE_S: the reaper thread shuts down a connection still sending its head after
 *   that (libmicrohttpd bounds only idle time), so slow-drip clients cannot hold the slots.
 * - libmicrohttpd takes up to MAX_CONNECTIONS sockets; a capture while more than MAX_REQUESTS
 *   requests are in hand is answered 503 rather than closed without a reply, and /v1/status and
 *   /v1/clock are answered whatever the count (64 request heads that never end held it).
 * - An HTTP/1.1 request without exactly one Host header is answered 400 (RFC 9112 3.2).
 * - A query with more than QUERY_ARGS_MAX parameters is answered 400 before libmicrohttpd
 *   stores them (each takes a record in its 32 KiB per-connection pool; 20 KB of '&' exhausted
 *   it and the connection was closed with no reply).
 * - The bearer token is checked first; a NUL byte in the request line, in an escape (%00) or in
 *   the Authorization header is refused, not cut at.
 * - A capture whose client has gone (EOF on its socket) is ended at once, not slept out.
 */
#include "session/capture.h"
#include "session/session.h"
#include "base/clock.h"
#include "base/error.h"
#include "base/fs.h"
#include "export/registry.h"
#include "export/writers.h"
#include "server/grpc.h"
#include "server/query.h"
#include "server/router.h"
#include "server/server_internal.h"
#include "base/net.h"

#include <loupe/loupe.h>
#include <loupe/server.h>

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_REQUESTS 64         /* requests handled at once; one more is answered 503 */
#define MAX_CONNECTIONS 256     /* sockets (one thread each); libmicrohttpd closes more on accept */
#define CONNECTION_TIMEOUT_S 30 /* idle while a request is answered (a capture's wait is not) */
#define HEAD_IDLE_S 5           /* idle while the request head arrives */
#define HEAD_TOTAL_MS 5000      /* the whole request head, however slowly it drips */
#define REAP_MS 100             /* how often the reaper looks */
#define QUERY_ARGS_MAX 32       /* query parameters (loupe's take 4) */
#define URI_MAX 8192            /* the request target, in bytes */
#define PEER_POLL_MS 100        /* how often a capture checks that its client is still there */
#define TOKEN_MAX 255
#define STOP_GRACE_MS 2000 /* how long a stop lets responses in flight finish */
#define BODY_MAX 0         /* GET requests carry no body; any body is refused with 413 */

static pthread_mutex_t srv_lock = PTHREAD_MUTEX_INITIALIZER;
static struct MHD_Daemon *daemon_;
static int srv_port; /* 0 while STOPPED; atomic reads */
static char srv_addr[INET6_ADDRSTRLEN];
static char srv_token[TOKEN_MAX + 1];
static uint32_t srv_max_ms;
static int cfg_port; /* srv_port for the handlers: set before the daemon starts */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static pthread_mutex_t wait_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wait_cond;
static int stopping;
static int in_flight; /* requests between their URI and their completion; under wait_lock */

/* One per connection (libmicrohttpd's socket context). used, fd, head_ns and cut are shared with
 * the reaper under conn_lock; counted under wait_lock; the rest belongs to the connection's
 * thread. */
typedef struct conn {
    int used;
    int fd;
    uint64_t head_ns; /* CLOCK_MONOTONIC ns when the current request head began; 0: complete */
    int cut;          /* shut down by the reaper */
    int counted;      /* this request is in in_flight */
    /* the request in progress */
    char *uri;           /* the raw request target (malloc'd), NULL when over URI_MAX */
    const char *mhd_uri; /* libmicrohttpd's own copy in its read buffer (the NUL check) */
    size_t uri_len, args;
    int started;
    size_t body;
} conn;

static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
static conn conns[MAX_CONNECTIONS];
static pthread_t reaper;
static int reaper_run; /* under wait_lock */

/* A forked child has the parent's state but not its threads: it has no server. The listening
 * socket is closed in the child so that the parent's stop frees the port. */
static void atfork_child(void) {
    loupe__router_atfork_child();
    if (daemon_ != NULL) {
        const union MHD_DaemonInfo *di = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_LISTEN_FD);
        if (di != NULL) {
            close(di->listen_fd);
        }
    }
    daemon_ = NULL;
    srv_port = 0;
    stopping = 0;
    in_flight = 0;
    reaper_run = 0;
    for (size_t i = 0; i < MAX_CONNECTIONS; i++) {
        free(conns[i].uri);
    }
    memset(conns, 0, sizeof conns);
    pthread_mutex_init(&srv_lock, NULL);
    pthread_mutex_init(&wait_lock, NULL);
    pthread_mutex_init(&conn_lock, NULL);
    /* The condition variable too: a parent's thread (the reaper, a capture) may have been
     * waiting on it at the fork, and glibc's broadcast in the child would wait for that waiter,
     * which does not exist here, forever. */
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&wait_cond, &a);
    pthread_condattr_destroy(&a);
}

static void init_once(void) {
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(&wait_cond, &a);
    pthread_condattr_destroy(&a);
    (void)pthread_atfork(NULL, NULL, atfork_child);
}

/* ---- responses ---- */

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* The request leaves in_flight (at its completion, or when its connection goes first). */
static void uncount(conn *k) {
    pthread_mutex_lock(&wait_lock);
    if (k->counted) {
        k->counted = 0;
        in_flight--;
        pthread_cond_broadcast(&wait_cond);
    }
    pthread_mutex_unlock(&wait_lock);
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code) {
    (void)cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        conn *k = NULL;
        pthread_mutex_lock(&conn_lock);
        for (size_t i = 0; i < MAX_CONNECTIONS && k == NULL; i++) {
            k = conns[i].used ? NULL : &conns[i];
        }
        if (k != NULL) {
            memset(k, 0, sizeof *k);
            k->used = 1;
            k->fd = ci != NULL ? ci->connect_fd : -1;
            k->head_ns = mono_ns();
        }
        pthread_mutex_unlock(&conn_lock);
        *socket_context = k;
        /* the head's idle bound; raised to CONNECTION_TIMEOUT_S once the head is complete */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HEAD_IDLE_S);
        return;
    }
    conn *k = *socket_context; /* MHD_CONNECTION_NOTIFY_CLOSED */
    if (k == NULL) {
        return;
    }
    uncount(k);
    free(k->uri);
    pthread_mutex_lock(&conn_lock);
    memset(k, 0, sizeof *k);
    pthread_mutex_unlock(&conn_lock);
    *socket_context = NULL;
}

/* Shuts down the connections whose request head is older than HEAD_TOTAL_MS (the connection's
 * thread then sees the socket end and libmicrohttpd closes it). The fd is the connection's as
 * long as its slot is used: the slot is cleared (under conn_lock) before libmicrohttpd closes
 * the socket. */
static void *reap(void *arg) {
    (void)arg;
    pthread_mutex_lock(&wait_lock);
    while (reaper_run) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_nsec += REAP_MS * 1000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&wait_cond, &wait_lock, &t);
        pthread_mutex_unlock(&wait_lock);
        pthread_mutex_lock(&conn_lock);
        uint64_t now = mono_ns(); /* under the lock: no head_ns set after it */
        for (size_t i = 0; i < MAX_CONNECTIONS; i++) {
            conn *k = &conns[i];
            if (k->used && !k->cut && k->fd >= 0 && k->head_ns != 0 && now > k->head_ns &&
                now - k->head_ns > (uint64_t)HEAD_TOTAL_MS * 1000000u) {
                shutdown(k->fd, SHUT_RDWR);
                k->cut = 1;
            }
        }
        pthread_mutex_unlock(&conn_lock);
        pthread_mutex_lock(&wait_lock);
    }
    pthread_mutex_unlock(&wait_lock);
    return NULL;
}

static conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

/* The request line has arrived (its headers may still be on the way). Keeps the raw target for
 * loupe's own query parser, counts the request in flight, and empties an over-long query before
 * libmicrohttpd parses it: libmicrohttpd 0.9.75 (src/microhttpd/connection.c,
 * parse_initial_message_line) calls this with a pointer into its own writable request-line
 * buffer, then cuts the target at '?' and stores one record per '&'-separated parameter in the
 * connection's pool; with the query emptied there it stores none, and the handler answers 400
 * from the copy kept here. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *c) {
    (void)cls;
    conn *k = conn_of(c);
    if (k == NULL) {
        return NULL;
    }
    free(k->uri);
    k->uri = NULL;
    k->mhd_uri = uri;
    k->uri_len = strlen(uri);
    k->started = 0;
    k->body = 0;
    k->args = 0;
    const char *q = strchr(uri, '?');
    for (const char *p = q; p != NULL; p = strchr(p + 1, '&')) {
        k->args++;
    }
    if (k->args > QUERY_ARGS_MAX) {
        ((char *)(uintptr_t)q)[1] = 0;
    }
    if (k->uri_len <= URI_MAX) {
        k->uri = strdup(uri); /* NULL (out of memory): the handler closes the connection */
    }
    pthread_mutex_lock(&wait_lock);
    if (!k->counted) {
        k->counted = 1;
        in_flight++;
    }
    pthread_mutex_unlock(&wait_lock);
    return k;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)toe;
    conn *k = *con_cls;
    if (k == NULL) {
        return;
    }
    *con_cls = NULL;
    uncount(k);
    free(k->uri);
    k->uri = NULL;
    k->mhd_uri = NULL;
    /* keep-alive: the next request's head is timed from now */
    pthread_mutex_lock(&conn_lock);
    k->head_ns = mono_ns();
    pthread_mutex_unlock(&conn_lock);
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)HEAD_IDLE_S);
}

static enum MHD_Result send_body(struct MHD_Connection *c, unsigned status, char *body, size_t len,
                                 const char *type) {
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (status == MHD_HTTP_UNAUTHORIZED) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"loupe\"");
    } else if (status == MHD_HTTP_METHOD_NOT_ALLOWED) {
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, "GET");
    }
    enum MHD_Result ret = MHD_queue_response(c, status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result send_json(struct MHD_Connection *c, unsigned status, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (s == NULL) {
        return MHD_NO;
    }
    /* jansson allocates with malloc unless told otherwise; libmicrohttpd frees with free. */
    size_t n = strlen(s);
    char *body = malloc(n + 2);
    if (body == NULL) {
        free(s);
        return MHD_NO;
    }
    memcpy(body, s, n);
    body[n] = '\n';
    body[n + 1] = 0;
    free(s);
    return send_body(c, status, body, n + 1, "application/json");
}

/* {"status": N, "error": <message>, "detail": <detail>} */
static enum MHD_Result send_error(struct MHD_Connection *c, unsigned status, const char *error,
                                  const char *detail) {
    json_t *j = json_pack("{s:i, s:s, s:s}", "status", (int)status, "error", error, "detail",
                          detail ? detail : "");
    if (j == NULL) {
        return MHD_NO;
    }
    return send_json(c, status, j);
}

/* ---- endpoints ---- */

const char *loupe__state_name(int state) {
    return state == LOUPE__TRACING ? "TRACING" : state == LOUPE__CAPTURING ? "CAPTURING" : "IDLE";
}

static enum MHD_Result on_status(struct MHD_Connection *c) {
    char host[256];
    loupe__hostname(host, sizeof host);
    int state = loupe__session_state();
    json_t *fmts = json_array();
    /* The formats GET /v1/profile sends (format=), from the registry: a row without a writer in
     * this build is left out. */
    for (size_t i = 0; i < loupe_format_count(); i++) {
        if (loupe__query_servable(i) && loupe__format_row(loupe_format_info(i))->write != NULL) {
            json_array_append_new(fmts, json_string(loupe_format_info(i)->name));
        }
    }
    json_t *j = json_pack("{s:I, s:s, s:s, s:s, s:b, s:b, s:I, s:i, s:I, s:o, s:b}", "pid",
                          (json_int_t)getpid(), "host", host, "version", LOUPE_VERSION_STRING,
                          "state", loupe__state_name(state), "tracing", state == LOUPE__TRACING,
                          "capturing", state == LOUPE__CAPTURING, "unix_time_ns",
                          (json_int_t)loupe__realtime_ns(), "port", cfg_port, "max_duration_ms",
                          (json_int_t)srv_max_ms, "formats", fmts, "clock_base", 1);
    if (j == NULL) {
        return MHD_NO;
    }
    return send_json(c, MHD_HTTP_OK, j);
}

/* GET /v1/clock: now on the trace's clock (the capture's origin plus CLOCK_MONOTONIC since its
 * start while one runs, else the wall clock: session.h loupe__trace_unix_ns), the cheapest answer
 * the server has, so that a client's round trips to it measure the offset of this process's
 * clock to its own (Cristian's algorithm: the shortest round trip bounds the error by half of
 * it). */
static enum MHD_Result on_clock(struct MHD_Connection *c) {
    char *body = malloc(64);
    if (body == NULL) {
        return MHD_NO;
    }
    int n = snprintf(body, 64, "{\"unix_time_ns\":%lld}\n", (long long)loupe__trace_unix_ns());
    return send_body(c, MHD_HTTP_OK, body, (size_t)n, "application/json");
}

/* Has the client closed its end (EOF or a reset)? Data it sent ahead (a pipelined request) is
 * left where it is. */
static int peer_gone(int fd) {
    if (fd < 0) {
        return 0;
    }
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

enum { WAIT_DONE, WAIT_STOPPED, WAIT_GONE };

/* Sleeps until deadline (CLOCK_MONOTONIC), a stop, or the client's leaving (looked at every
 * PEER_POLL_MS). */
static int wait_until(const struct timespec *deadline, int fd) {
    int why = WAIT_DONE;
    pthread_mutex_lock(&wait_lock);
    while (!stopping) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        t.tv_nsec += PEER_POLL_MS * 1000000L;
        if (t.tv_nsec >= 1000000000L) {
            t.tv_sec++;
            t.tv_nsec -= 1000000000L;
        }
        int last = t.tv_sec > deadline->tv_sec ||
                   (t.tv_sec == deadline->tv_sec && t.tv_nsec >= deadline->tv_nsec);
        if (pthread_cond_timedwait(&wait_cond, &wait_lock, last ? deadline : &t) == ETIMEDOUT &&
            last) {
            break;
        }
        if (peer_gone(fd)) {
            why = WAIT_GONE;
            break;
        }
    }
    if (stopping) {
        why = WAIT_STOPPED;
    }
    pthread_mutex_unlock(&wait_lock);
    return why;
}

/* gzip (level 1, as the run directory's files) of in[0..n) into a malloc'd buffer. */
static int gzip_mem(const char *in, size_t n, char **out, size_t *out_len) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        return -1;
    }
    size_t cap = deflateBound(&z, (uLong)n) + 64;
    char *buf = malloc(cap);
    if (buf == NULL) {
        deflateEnd(&z);
        return -1;
    }
    z.next_in = (Bytef *)(uintptr_t)in;
    z.avail_in = (uInt)n;
    z.next_out = (Bytef *)buf;
    z.avail_out = (uInt)cap;
    int r = deflate(&z, Z_FINISH);
    *out_len = z.total_out;
    deflateEnd(&z);
    if (r != Z_STREAM_END) {
        free(buf);
        return -1;
    }
    *out = buf;
    return 0;
}

int loupe__model_to_mem(const loupe_model *m, size_t format, char **out, size_t *out_len) {
    const loupe__format *f = loupe__format_row(loupe_format_info(format));
    *out = NULL;
    *out_len = 0;
    if (f->write == NULL) {
        return loupe__err(LOUPE_EUNSUPPORTED, "format %s is not available in this build",
                          f->d.name);
    }
    loupe__sink *s = malloc(sizeof *s);
    if (s == NULL) {
        return loupe__err(LOUPE_ENOMEM, "out of memory");
    }
    loupe__sink_open_mem(s);
    int r = f->write(m, s);
    if (r == 0) {
        r = loupe__sink_close(s); /* a memory sink fails only with LOUPE_ENOMEM */
    } else {
        loupe__sink_discard(s); /* keeps the writer's detail (writers.h) */
    }
    char *mem = s->mem;
    size_t len = s->mem_len;
    free(s);
    if (r != 0) {
        free(mem);
        return loupe__err_prefix(r, "cannot write the %s trace", f->d.name);
    }
    if (mem == NULL) { /* nothing written */
        mem = calloc(1, 1);
        if (mem == NULL) {
            return loupe__err(LOUPE_ENOMEM, "out of memory");
        }
    }
    if (f->d.gzip) {
        char *z;
        size_t zlen;
        int g = gzip_mem(mem, len, &z, &zlen);
        free(mem);
        if (g != 0) {
            return loupe__err(LOUPE_ENOMEM, "out of memory while compressing the trace");
        }
        mem = z;
        len = zlen;
    }
    *out = mem;
    *out_len = len;
    return 0;
}

static enum MHD_Result on_profile(struct MHD_Connection *c, const conn *k, const char *query,
                                  size_t qlen) {
    loupe__query q;
    char err[256];
    if (loupe__query_parse(query, qlen, &q, err, sizeof err) != 0) {
        return send_error(c, MHD_HTTP_BAD_REQUEST, "Bad request", err);
    }
    if (q.duration_ms > srv_max_ms) {
        snprintf(err, sizeof err, "duration_ms: %u is over this server's limit of %u ms",
                 q.duration_ms, srv_max_ms);
        return send_error(c, MHD_HTTP_BAD_REQUEST, "Bad request", err);
    }
    const loupe__format *f = loupe__format_row(loupe_format_info(q.format));
    if (f->write == NULL) {
        snprintf(err, sizeof err, "format: %s is not available in this build of loupe", f->d.name);
        return send_error(c, MHD_HTTP_BAD_REQUEST, "Bad request", err);
    }
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    /* The client's clock measurement (GET /v1/clock), carried in the trace under the keys
     * libloupe_mpi.so writes (docs/mpi.md), so that the run directory's merge aligns it. */
    char off[24], unc[24], at[24], base[24];
    loupe_kv kv[4];
    size_t nkv = 0;
    if (q.have_clock) {
        snprintf(off, sizeof off, "%lld", (long long)q.clock_offset_ns);
        kv[nkv++] = (loupe_kv){"loupe_clock_offset_ns", off};
        if (q.have_uncertainty) {
            snprintf(unc, sizeof unc, "%llu", (unsigned long long)q.clock_uncertainty_ns);
            kv[nkv++] = (loupe_kv){"loupe_clock_offset_uncertainty_ns", unc};
        }
        if (q.have_at) {
            snprintf(at, sizeof at, "%llu", (unsigned long long)q.clock_at_ns);
            kv[nkv++] = (loupe_kv){"loupe_clock_offset_at_ns", at};
        }
    }
    if (q.have_base) { /* the capture's timeline base (model/merge.h), on the client's clock */
        snprintf(base, sizeof base, "%llu", (unsigned long long)q.clock_base_ns);
        kv[nkv++] = (loupe_kv){"loupe_clock_base_unix_ns", base};
    }
    loupe__capture_opts co = {
        .level = q.level, .sampling_hz = q.sample_hz, .metadata = kv, .metadata_count = nkv};
    int r = loupe__capture_start(&co);
    if (r == LOUPE_EALREADY_STARTED) {
        return send_error(c, MHD_HTTP_CONFLICT, loupe_strerror(r), loupe_last_error());
    }
    if (r != 0) {
        return send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, loupe_strerror(r), loupe_last_error());
    }
    deadline.tv_sec += (time_t)(q.duration_ms / 1000);
    deadline.tv_nsec += (long)(q.duration_ms % 1000) * 1000000L;
    if (deadline.tv_nsec >= 1000000000L) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000L;
    }
    int why = wait_until(&deadline, k->fd);
    loupe_model *m = NULL;
    r = loupe__capture_stop(&m);
    if (why == WAIT_GONE) {
        loupe_model_free(m); /* nobody to send it to: the session is free again now */
        return MHD_NO;
    }
    if (why == WAIT_STOPPED) {
        loupe_model_free(m);
        return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "Service unavailable",
                          "the profiler server is stopping; the capture was abandoned");
    }
    if (r != 0) {
        return send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, loupe_strerror(r), loupe_last_error());
    }
    char *body;
    size_t len;
    r = loupe__model_to_mem(m, q.format, &body, &len);
    uint64_t events = loupe_model_events_recorded(m), dropped = loupe_model_events_dropped(m);
    uint64_t origin = m->origin_unix_ns, pid = m->pid;
    loupe_model_free(m);
    if (r != 0) {
        return send_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, loupe_strerror(r), loupe_last_error());
    }
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, body, MHD_RESPMEM_MUST_FREE);
    if (resp == NULL) {
        free(body);
        return MHD_NO;
    }
    char host[256], v[320];
    loupe__hostname(host, sizeof host);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, f->d.mime_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    snprintf(v, sizeof v, "attachment; filename=\"%.200s%s\"", host, f->d.suffix);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)events);
    MHD_add_response_header(resp, "X-Loupe-Events-Recorded", v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)dropped);
    MHD_add_response_header(resp, "X-Loupe-Events-Dropped", v);
    MHD_add_response_header(resp, "X-Loupe-Empty-Trace", events == 0 ? "1" : "0");
    snprintf(v, sizeof v, "%llu", (unsigned long long)origin);
    MHD_add_response_header(resp, "X-Loupe-Origin-Unix-Ns", v);
    snprintf(v, sizeof v, "%llu", (unsigned long long)pid);
    MHD_add_response_header(resp, "X-Loupe-Pid", v);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
    MHD_destroy_response(resp);
    return ret;
}

typedef struct line_after {
    uintptr_t after, next; /* the first header line starting after `after` (0: none) */
} line_after;

static enum MHD_Result next_key(void *cls, enum MHD_ValueKind kind, const char *key,
                                const char *value) {
    (void)kind;
    (void)value;
    line_after *n = cls;
    uintptr_t k = (uintptr_t)key;
    if (k > n->after && (n->next == 0 || k < n->next)) {
        n->next = k;
    }
    return MHD_YES;
}

/* Does the header value v (length n, as libmicrohttpd measured it: up to its first NUL) end
 * before its line does, i.e. did a NUL byte cut it ("Bearer s3cret\0junk")? libmicrohttpd
 * 0.9.75 keeps the head in its read buffer, a NUL for each CR and LF that ended a line
 * (get_next_header_line): after a whole value come 1 or 2 NULs, then the next header's name,
 * or the empty line's NULs. */
static int value_cut(struct MHD_Connection *c, const char *v, size_t n) {
    line_after la = {(uintptr_t)v, 0};
    MHD_get_connection_values(c, MHD_HEADER_KIND, next_key, &la);
    if (la.next != 0) {
        return la.next - ((uintptr_t)v + n) > 2;
    }
    return v[n + 1] != 0; /* the last header: the empty line's NUL follows */
}

/* Constant-time comparison of the Authorization header with "Bearer <token>". A value a NUL
 * byte cut short is refused, not read as the token followed by an ignored tail. */
static int authorized(struct MHD_Connection *c) {
    if (srv_token[0] == 0) {
        return 1;
    }
    const char *h = NULL;
    size_t hl = 0;
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION,
                                      strlen(MHD_HTTP_HEADER_AUTHORIZATION), &h, &hl) != MHD_YES ||
        h == NULL || strlen(h) != hl || value_cut(c, h, hl)) {
        return 0;
    }
    if (strncasecmp(h, "Bearer ", 7) != 0) { /* RFC 7235: the scheme ignores case */
        return 0;
    }
    h += 7;
    while (*h == ' ') { /* 1*SP after the scheme (RFC 9110 section 11.4) */
        h++;
    }
    /* A field value has no trailing whitespace (OWS, RFC 9110 section 5.5): "Bearer tok " is
     * the token "tok" */
    size_t a = strlen(h), b = strlen(srv_token);
    while (a > 0 && (h[a - 1] == ' ' || h[a - 1] == '\t')) {
        a--;
    }
    unsigned diff = a != b;
    for (size_t i = 0; i < b; i++) {
        diff |= (unsigned)(unsigned char)(i < a ? h[i] : 0) ^ (unsigned char)srv_token[i];
    }
    return diff == 0;
}

static enum MHD_Result count_host(void *cls, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
    (void)kind;
    (void)value;
    if (key != NULL && strcasecmp(key, MHD_HTTP_HEADER_HOST) == 0) {
        (*(int *)cls)++;
    }
    return MHD_YES;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)cls;
    (void)version;
    (void)upload_data;
    conn *k = *con_cls;
    if (k == NULL) {
        return MHD_NO; /* no slot: close the connection */
    }
    if (!k->started) {
        k->started = 1;
        pthread_mutex_lock(&conn_lock);
        k->head_ns = 0; /* the head is complete: the reaper leaves it alone */
        pthread_mutex_unlock(&conn_lock);
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)CONNECTION_TIMEOUT_S);
        return MHD_YES;
    }
    if (*upload_data_size != 0) {
        k->body += *upload_data_size;
        *upload_data_size = 0;
        return MHD_YES; /* discarded; answered with 413 below once the body is read */
    }
    if (!authorized(c)) {
        return send_error(c, MHD_HTTP_UNAUTHORIZED, "Unauthorized",
                          "this server needs the header 'Authorization: Bearer <token>' with "
                          "its token");
    }
    char d[160];
    int hosts = 0;
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_host, &hosts);
    if (version != NULL && strcmp(version, MHD_HTTP_VERSION_1_1) == 0 && hosts != 1) {
        /* RFC 9112 section 3.2: "A server MUST respond with a 400 (Bad Request) status code to
         * any HTTP/1.1 request message that lacks a Host header field and to any request
         * message that contains more than one Host header field" */
        snprintf(d, sizeof d, "an HTTP/1.1 request needs one Host header, this one has %d", hosts);
        return send_error(c, MHD_HTTP_BAD_REQUEST, "Bad request", d);
    }
    if (k->args > QUERY_ARGS_MAX) {
        snprintf(d, sizeof d, "the query has %zu parameters; this server reads at most %d", k->args,
                 QUERY_ARGS_MAX);
        return send_error(c, MHD_HTTP_BAD_REQUEST, "Bad request", d);
    }
    if (k->uri == NULL && k->uri_len > URI_MAX) {
        snprintf(d, sizeof d, "the request target is %zu bytes; this server reads at most %d",
                 k->uri_len, URI_MAX);
        return send_error(c, MHD_HTTP_URI_TOO_LONG, "URI too long", d);
    }
    if (k->uri == NULL) {
        return MHD_NO; /* out of memory: close the connection */
    }
    /* A raw NUL in the target: libmicrohttpd hands it on as a C string that ends there
     * ("/v1/status\0junk" would be /v1/status). Its request line keeps the target and, after
     * one space, the version in one buffer (parse_initial_message_line): a version further
     * away than the target's length means bytes after a NUL. */
    if (k->mhd_uri != NULL && version != NULL && version[0] != 0 && version > k->mhd_uri &&
        (size_t)(version - k->mhd_uri) <= URI_MAX * 2u &&
        (size_t)(version - k->mhd_uri) != k->uri_len + 1) {
        return send_error(c, MHD_HTTP_BAD_REQUEST, "Bad request",
                          "the request line holds a NUL byte");
    }
    if (k->body > BODY_MAX) {
        return send_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "Content too large",
                          "requests to the profiler server carry no body");
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0) {
        snprintf(d, sizeof d, "method %.40s is not allowed; use GET", method);
        return send_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "Method not allowed", d);
    }
    /* The path as sent, byte for byte: an escape is not decoded into a match ("/v1/status%00"
     * is not /v1/status). */
    const char *qm = strchr(k->uri, '?');
    size_t plen = qm ? (size_t)(qm - k->uri) : strlen(k->uri);
    const char *query = qm ? qm + 1 : "";
    if (plen == 10 && memcmp(k->uri, "/v1/status", 10) == 0) {
        return on_status(c); /* answered however many requests are in hand: it costs nothing */
    }
    /* A request counts in in_flight from its request line on, so 64 heads that never end (a
     * client that reconnects each time the head bound closes it) held every request's place:
     * /v1/status and /v1/clock, which hold nothing, are answered whatever the count; only a
     * capture waits its turn. */
    pthread_mutex_lock(&wait_lock);
    int busy = in_flight > MAX_REQUESTS;
    pthread_mutex_unlock(&wait_lock);
    if (plen == 11 && memcmp(k->uri, "/v1/profile", 11) == 0) {
        if (busy) {
            snprintf(d, sizeof d, "the server is answering %d requests at once; try again",
                     MAX_REQUESTS);
            return send_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "Service unavailable", d);
        }
        return on_profile(c, k, query, strlen(query));
    }
    if (plen == 9 && memcmp(k->uri, "/v1/clock", 9) == 0) {
        return on_clock(c);
    }
    (void)url;
    snprintf(d, sizeof d, "no such path: %.*s (known: /v1/status, /v1/profile, /v1/clock)",
             (int)(plen < 100 ? plen : 100), k->uri);
    for (char *p = d; *p; p++) {
        if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f) {
            *p = '?';
        }
    }
    return send_error(c, MHD_HTTP_NOT_FOUND, "Not found", d);
}

/* ---- sockets and the state machine ---- */

int loupe_start_server(int port) {
    loupe_server_options o = {.port = port};
    return loupe_start_server_ex(&o);
}

int loupe_start_server_ex(const loupe_server_options *o) {
    (void)pthread_once(&atfork_once, init_once);
    if (o == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_start_server: options is NULL");
    }
    if (o->port < 0 || o->port > 65535) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_server: port %d is out of range (0..65535; 0 picks a free "
                          "port)",
                          o->port);
    }
    if (o->grpc_port < LOUPE_SERVER_GRPC_OFF || o->grpc_port > 65535) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_server: grpc_port %d is out of range (0: gRPC on the HTTP "
                          "port, 1..65535: a port of its own, -1: a free port, -2: no gRPC)",
                          o->grpc_port);
    }
    if (o->token != NULL && strlen(o->token) > TOKEN_MAX) {
        return loupe__err(LOUPE_EINVALID, "loupe_start_server: the token is over %d bytes",
                          TOKEN_MAX);
    }
    const char *addr = o->bind_address ? o->bind_address : "127.0.0.1";
    pthread_mutex_lock(&srv_lock);
    if (daemon_ != NULL) {
        int p = srv_port;
        pthread_mutex_unlock(&srv_lock);
        return loupe__err(LOUPE_ESERVER_RUNNING,
                          "loupe_start_server: a server is RUNNING on %s port %d; call "
                          "loupe_stop_server() first",
                          srv_addr, p);
    }
    int fd, port;
    /* SO_REUSEADDR: a restart on the same port works while served connections are in
     * TIME_WAIT; Linux still refuses the bind while another socket listens there. */
    int r = loupe__listen_socket(addr, o->port, 1, &fd, &port, "loupe_start_server");
    if (r != 0) {
        pthread_mutex_unlock(&srv_lock);
        return r;
    }
    snprintf(srv_addr, sizeof srv_addr, "%s", addr);
    snprintf(srv_token, sizeof srv_token, "%s", o->token ? o->token : "");
    srv_max_ms = o->max_duration_ms ? o->max_duration_ms : LOUPE_SERVER_DEFAULT_MAX_DURATION_MS;
    cfg_port = port;
    stopping = 0;
    /* The gRPC service (grpc.h): on the HTTP port by default, where the router (router.h) hands
     * it the connections that open with HTTP/2's preface, or on a port of its own. Started
     * first, so that a failure of either leaves nothing running. */
    int shared = o->grpc_port == LOUPE_SERVER_GRPC_SAME_PORT && loupe__grpc_available();
    int gport = 0;
    r = o->grpc_port == LOUPE_SERVER_GRPC_OFF ||
                (o->grpc_port == LOUPE_SERVER_GRPC_SAME_PORT && !shared)
            ? 0
            : loupe__grpc_start(addr, o->grpc_port, srv_token, srv_max_ms, shared ? port : 0,
                                &gport);
    if (r != 0) {
        close(fd);
        srv_token[0] = 0;
        pthread_mutex_unlock(&srv_lock);
        return r;
    }
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_CONNECTION_LIMIT, (intptr_t)MAX_CONNECTIONS, NULL},
        {MHD_OPTION_CONNECTION_TIMEOUT, (intptr_t)CONNECTION_TIMEOUT_S, NULL},
        {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_uri, NULL},
        {MHD_OPTION_NOTIFY_COMPLETED, (intptr_t)on_completed, NULL},
        {MHD_OPTION_NOTIFY_CONNECTION, (intptr_t)on_connection, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    const unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                           MHD_USE_POLL | MHD_USE_ITC;
    struct MHD_Daemon *d =
        shared ? MHD_start_daemon(flags | MHD_USE_NO_LISTEN_SOCKET, 0, NULL, NULL, on_request, NULL,
                                  MHD_OPTION_ARRAY, opts, MHD_OPTION_END)
               : MHD_start_daemon(flags, 0, NULL, NULL, on_request, NULL, MHD_OPTION_LISTEN_SOCKET,
                                  fd, MHD_OPTION_ARRAY, opts, MHD_OPTION_END);
    if (d != NULL && shared && loupe__router_start(fd, d) != 0) {
        MHD_stop_daemon(d);
        d = NULL;
    }
    if (d != NULL) {
        pthread_mutex_lock(&wait_lock);
        reaper_run = 1;
        pthread_mutex_unlock(&wait_lock);
        if (pthread_create(&reaper, NULL, reap, NULL) != 0) {
            reaper_run = 0;
            loupe__router_stop(); /* shared: it closes the listening socket */
            MHD_stop_daemon(d);   /* else libmicrohttpd closes the one it was given */
            d = NULL;
            fd = -1;
        }
    }
    if (d == NULL) {
        loupe__grpc_stop_begin();
        loupe__grpc_stop_end();
        if (fd >= 0) {
            close(fd);
        }
        srv_token[0] = 0;
        pthread_mutex_unlock(&srv_lock);
        return loupe__err(LOUPE_EIO,
                          "loupe_start_server: libmicrohttpd could not start on %s "
                          "port %d (threads or memory)",
                          addr, port);
    }
    daemon_ = d;
    __atomic_store_n(&srv_port, port, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&srv_lock);
    return 0;
}

int loupe_stop_server(void) {
    (void)pthread_once(&atfork_once, init_once);
    pthread_mutex_lock(&srv_lock);
    if (daemon_ == NULL) {
        pthread_mutex_unlock(&srv_lock);
        return loupe__err(LOUPE_ENO_SERVER,
                          "loupe_stop_server: the server is STOPPED (no loupe_start_server() is "
                          "active)");
    }
    /* No new connections; captures wake up and answer 503; the requests in flight get up to
     * STOP_GRACE_MS to finish sending before the remaining connections are cut. */
    loupe__router_stop(); /* the one port's accepts, when it serves both protocols */
    MHD_socket lfd = MHD_quiesce_daemon(daemon_);
    loupe__grpc_stop_begin(); /* gRPC's grace runs beside HTTP's */
    struct timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += STOP_GRACE_MS / 1000;
    pthread_mutex_lock(&wait_lock);
    stopping = 1;
    pthread_cond_broadcast(&wait_cond);
    while (in_flight > 0) {
        if (pthread_cond_timedwait(&wait_cond, &wait_lock, &deadline) == ETIMEDOUT) {
            break;
        }
    }
    pthread_mutex_unlock(&wait_lock);
    MHD_stop_daemon(daemon_); /* joins every connection thread */
    pthread_mutex_lock(&wait_lock);
    reaper_run = 0;
    pthread_cond_broadcast(&wait_cond);
    pthread_mutex_unlock(&wait_lock);
    pthread_join(reaper, NULL);
    loupe__grpc_stop_end();
    if (lfd != MHD_INVALID_SOCKET) {
        close(lfd); /* quiesced: the socket is ours to close */
    }
    daemon_ = NULL;
    __atomic_store_n(&srv_port, 0, __ATOMIC_RELEASE);
    srv_token[0] = 0;
    pthread_mutex_lock(&wait_lock);
    stopping = 0;
    pthread_mutex_unlock(&wait_lock);
    pthread_mutex_unlock(&srv_lock);
    return 0;
}

int loupe_server_port(void) {
    return __atomic_load_n(&srv_port, __ATOMIC_ACQUIRE);
}
