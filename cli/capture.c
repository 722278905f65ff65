/* capture.c: `loupe capture`, remote capture from one or many profiler servers (docs/server.md).
 *
 * Like XProf's multi-host capture (reference §3, "Client"): every address is captured in
 * parallel (libcurl's multi interface, one thread), each trace is saved as
 * <log_dir>/plugins/profile/<run>/<host>_<port><suffix> on this machine, empty traces and busy or
 * unreachable servers are retried up to --attempts times, and the final error names every address
 * that gave nothing and why. Before each capture the server's /v1/status gives its wall clock;
 * with --merge, those offsets put every process on one timeline in perfetto_trace.json.gz.
 *
 * Uses the public API (the reader, for --merge) and libcurl; no library internals.
 */
#include "cli.h"

#include <loupe/loupe.h>

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <zlib.h>

#define MAX_ADDRS 256
#define STATUS_TIMEOUT_MS 5000L
#define SLACK_MS 60000L /* the profile request's timeout: the duration plus this */

typedef struct target {
    char addr[300]; /* as given, "host:port" */
    char host[256];
    int port;
    /* this attempt */
    char *buf;
    size_t len;
    char empty[8], origin[32];
    char errbuf[CURL_ERROR_SIZE];
    int64_t offset_ns; /* server wall clock minus ours */
    int have_offset;
    uint64_t origin_ns;
    /* outcome */
    int done;      /* saved */
    int permanent; /* failed in a way a retry will not fix */
    char why[512];
    char file[4096];
} target;

/* The formats a profiler server sends (GET /v1/profile?format=): those with a Content-Type. */
static int servable(const loupe_format_desc *d) {
    return d->mime_type != NULL;
}

static void usage(FILE *f) {
    char names[128];
    loupe_cli_format_names(names, sizeof names, servable, " or ");
    const loupe_format_desc *json = loupe_format_by_file_format(LOUPE_FILE_CHROME_JSON);
    fprintf(f, "usage: loupe capture HOST:PORT[,HOST:PORT...] --duration-ms N [options]\n"
               "\n"
               "Captures the next N ms from every profiler server given (loupe_start_server() in\n"
               "the traced programs), in parallel, and writes one run directory\n"
               "  <log_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/\n"
               "with one file per address, named after the format:\n");
    for (size_t i = 0; i < loupe_format_count(); i++) {
        const loupe_format_desc *d = loupe_format_info(i);
        if (servable(d)) {
            fprintf(f, "  %-14s <host>_<port>%s\n", d->name, d->suffix);
        }
    }
    fprintf(f,
            "The last line of the output is the run directory.\n"
            "\n"
            "options:\n"
            "  --duration-ms N  how long to trace, in milliseconds (required, > 0)\n"
            "  --log-dir DIR    where the run directory goes (default: loupe-log)\n"
            "  --level L        host tracer level: 0 nothing, 1 critical, 2 info (default),\n"
            "                   3 verbose\n"
            "  --format F       %s (default: %s)\n",
            names, json->name);
    fprintf(f, "  --attempts K     tries per address while its trace is empty or the server is\n"
               "                   busy or unreachable (default 3)\n"
               "  --token T        send 'Authorization: Bearer T' (servers started with a token)\n"
               "  --merge          also write the perfetto-json file: every process on one\n"
               "                   timeline (each its own pid), clocks aligned with each server's\n"
               "                   reported wall clock (needs --format json)\n"
               "  -h, --help       show this help\n"
               "\n"
               "exit status: 0 every address gave a trace, 1 some gave nothing (the error says\n"
               "which and why; the others' files are kept), 2 bad usage\n");
}

__attribute__((format(printf, 1, 2))) static int bad_usage(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "loupe capture: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nRun 'loupe capture --help' for the options.\n");
    return 2;
}

/* "host:port" with exactly one ':' (or "[v6]:port"), a numeric port 1..65535, a host without
 * '/'. "grpc://" and "http://" prefixes are dropped, as jax.collect_profile does. */
static int parse_addr(const char *in, target *t) {
    const char *s = in;
    if (strncmp(s, "grpc://", 7) == 0 || strncmp(s, "http://", 7) == 0) {
        s += 7;
    }
    snprintf(t->addr, sizeof t->addr, "%s", s);
    const char *colon;
    size_t hl;
    if (s[0] == '[') {
        const char *rb = strchr(s, ']');
        if (rb == NULL || rb[1] != ':') {
            return -1;
        }
        colon = rb + 1;
        hl = (size_t)(colon - s);
    } else {
        colon = strchr(s, ':');
        if (colon == NULL || strchr(colon + 1, ':') != NULL) {
            return -1;
        }
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= sizeof t->host || memchr(s, '/', hl) != NULL) {
        return -1;
    }
    memcpy(t->host, s, hl);
    t->host[hl] = 0;
    const char *p = colon + 1;
    char *end;
    errno = 0;
    long port = strtol(p, &end, 10);
    if (*p < '0' || *p > '9' || *end != 0 || errno != 0 || port < 1 || port > 65535) {
        return -1;
    }
    t->port = (int)port;
    return 0;
}

static size_t on_body(char *p, size_t size, size_t n, void *user) {
    target *t = user;
    size_t add = size * n;
    char *nb = realloc(t->buf, t->len + add + 1);
    if (nb == NULL) {
        return 0;
    }
    memcpy(nb + t->len, p, add);
    t->buf = nb;
    t->len += add;
    t->buf[t->len] = 0;
    return add;
}

static void header_value(const char *line, size_t n, const char *name, char *out, size_t size) {
    size_t k = strlen(name);
    if (n > k + 1 && strncasecmp(line, name, k) == 0 && line[k] == ':') {
        const char *v = line + k + 1;
        size_t vl = n - k - 1;
        while (vl > 0 && (*v == ' ' || *v == '\t')) {
            v++;
            vl--;
        }
        while (vl > 0 && (v[vl - 1] == '\r' || v[vl - 1] == '\n' || v[vl - 1] == ' ')) {
            vl--;
        }
        snprintf(out, size, "%.*s", (int)vl, v);
    }
}

static size_t on_header(char *p, size_t size, size_t n, void *user) {
    target *t = user;
    header_value(p, size * n, "X-Loupe-Empty-Trace", t->empty, sizeof t->empty);
    header_value(p, size * n, "X-Loupe-Origin-Unix-Ns", t->origin, sizeof t->origin);
    return size * n;
}

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static CURL *make_easy(target *t, const char *url, long timeout_ms, struct curl_slist *hdrs) {
    CURL *e = curl_easy_init();
    if (e == NULL) {
        return NULL;
    }
    free(t->buf);
    t->buf = NULL;
    t->len = 0;
    t->empty[0] = 0;
    t->origin[0] = 0;
    t->errbuf[0] = 0;
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->errbuf);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, STATUS_TIMEOUT_MS);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_PRIVATE, t);
    if (hdrs != NULL) {
        curl_easy_setopt(e, CURLOPT_HTTPHEADER, hdrs);
    }
    return e;
}

/* The server's message from a JSON error body: "error: detail", or the status alone. */
static void server_error(const target *t, long status, char *out, size_t size) {
    json_t *j = t->buf ? json_loads(t->buf, 0, NULL) : NULL;
    const char *err = j ? json_string_value(json_object_get(j, "error")) : NULL;
    const char *det = j ? json_string_value(json_object_get(j, "detail")) : NULL;
    if (err != NULL) {
        snprintf(out, size, "HTTP %ld: %s%s%s", status, err, det && det[0] ? " (" : "",
                 det && det[0] ? det : "");
        if (det && det[0]) {
            size_t l = strlen(out);
            if (l + 1 < size) {
                out[l] = ')';
                out[l + 1] = 0;
            }
        }
    } else {
        snprintf(out, size, "HTTP %ld", status);
    }
    json_decref(j);
}

/* Runs every easy handle of m to completion, with a countdown on a terminal. */
static void run_multi(CURLM *m, double end_at) {
    int running = 1;
    int shown = 0;
    while (running) {
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            break;
        }
        if (running) {
            curl_multi_poll(m, NULL, 0, 100, NULL);
        }
        if (end_at > 0 && loupe_cli_tty()) {
            double left = end_at - mono_s();
            fprintf(stderr, "\rcapturing: %5.1f s left ", left > 0 ? left : 0.0);
            shown = 1;
        }
    }
    if (shown) {
        fprintf(stderr, "\r%*s\r", 30, "");
    }
}

typedef struct capture_opts {
    unsigned long duration_ms;
    int level;
    const char *format, *suffix; /* a registry name (loupe/writer.h) and its suffix */
    struct curl_slist *hdrs;
} capture_opts;

/* One attempt for every target not done or permanently failed. Returns how many were tried. */
static int attempt(target *ts, size_t n, const capture_opts *o, const char *run_dir) {
    CURLM *m = curl_multi_init();
    int tried = 0;
    char url[1024];
    /* 1. each server's clock: offset = server time - the midpoint of our request */
    int64_t t0 = now_ns();
    for (size_t i = 0; i < n; i++) {
        target *t = &ts[i];
        if (t->done || t->permanent) {
            continue;
        }
        snprintf(url, sizeof url, "http://%.300s/v1/status", t->addr);
        CURL *e = make_easy(t, url, STATUS_TIMEOUT_MS, o->hdrs);
        if (e != NULL) {
            curl_multi_add_handle(m, e);
        }
        tried++;
    }
    run_multi(m, 0);
    int64_t t1 = now_ns();
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(m, &left)) != NULL) {
        target *t;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
        long status = 0;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
        t->have_offset = 0;
        if (msg->data.result == CURLE_OK && status == 200 && t->buf != NULL) {
            json_t *j = json_loads(t->buf, 0, NULL);
            json_t *u = j ? json_object_get(j, "unix_time_ns") : NULL;
            if (json_is_integer(u)) {
                t->offset_ns = (int64_t)json_integer_value(u) - (t0 + (t1 - t0) / 2);
                t->have_offset = 1;
            }
            json_decref(j);
        }
        curl_multi_remove_handle(m, msg->easy_handle);
        curl_easy_cleanup(msg->easy_handle);
    }
    /* 2. the captures, all at once */
    for (size_t i = 0; i < n; i++) {
        target *t = &ts[i];
        if (t->done || t->permanent) {
            continue;
        }
        snprintf(url, sizeof url,
                 "http://%.300s/v1/profile?duration_ms=%lu&host_tracer_level=%d&format=%.20s",
                 t->addr, o->duration_ms, o->level, o->format);
        CURL *e = make_easy(t, url, (long)o->duration_ms + SLACK_MS, o->hdrs);
        if (e != NULL) {
            curl_multi_add_handle(m, e);
        }
    }
    run_multi(m, mono_s() + (double)o->duration_ms / 1000.0);
    while ((msg = curl_multi_info_read(m, &left)) != NULL) {
        target *t;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&t);
        long status = 0;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &status);
        if (msg->data.result != CURLE_OK) {
            snprintf(t->why, sizeof t->why, "%s",
                     t->errbuf[0] ? t->errbuf : curl_easy_strerror(msg->data.result));
        } else if (status != 200) {
            server_error(t, status, t->why, sizeof t->why);
            /* 409 (busy) and 5xx may pass; a bad request or a wrong token will not */
            t->permanent = status != 409 && status < 500;
        } else if (strcmp(t->empty, "1") == 0) {
            snprintf(t->why, sizeof t->why, "the trace is empty (no event was recorded)");
        } else {
            snprintf(t->file, sizeof t->file, "%.3500s/%.255s_%d%s", run_dir, t->host, t->port,
                     o->suffix);
            FILE *f = fopen(t->file, "wb");
            if (f == NULL || fwrite(t->buf, 1, t->len, f) != t->len || fclose(f) != 0) {
                snprintf(t->why, sizeof t->why, "cannot write %.400s: %s", t->file,
                         strerror(errno));
                t->permanent = 1;
            } else {
                t->done = 1;
                t->origin_ns = strtoull(t->origin, NULL, 10);
                printf("%s: %zu bytes -> %s\n", t->addr, t->len, t->file);
            }
        }
        if (!t->done) {
            fprintf(stderr, "No trace event is collected from %s: %s\n", t->addr, t->why);
        }
        curl_multi_remove_handle(m, msg->easy_handle);
        curl_easy_cleanup(msg->easy_handle);
    }
    curl_multi_cleanup(m);
    return tried;
}

static int make_run_dir(const char *log_dir, char *out, size_t size) {
    char base[4096];
    snprintf(base, sizeof base, "%s/plugins/profile", log_dir);
    for (char *p = base + 1; *p; p++) { /* mkdir -p */
        if (*p == '/') {
            *p = 0;
            mkdir(base, 0777);
            *p = '/';
        }
    }
    if (mkdir(base, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "loupe capture: cannot create %s: %s\n", base, strerror(errno));
        return -1;
    }
    char name[64];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(name, sizeof name, "%Y_%m_%d_%H_%M_%S", &tm);
    for (int i = 0; i < 10000; i++) {
        int w = i == 0 ? snprintf(out, size, "%s/%s", base, name)
                       : snprintf(out, size, "%s/%s_%d", base, name, i);
        if (w < 0 || (size_t)w >= size) {
            break;
        }
        if (mkdir(out, 0777) == 0) {
            return 0;
        }
        if (errno != EEXIST) {
            break;
        }
    }
    fprintf(stderr, "loupe capture: cannot create a run directory under %s: %s\n", base,
            strerror(errno));
    return -1;
}

/* ---- --merge: one Chrome JSON with every process, on the client's clock ---- */

static json_t *meta_event(const char *what, uint64_t pid, uint64_t tid, const char *name) {
    return json_pack("{s:s, s:s, s:I, s:I, s:{s:s}}", "ph", "M", "name", what, "pid",
                     (json_int_t)pid, "tid", (json_int_t)tid, "args", "name", name);
}

/* A slice's args as a JSON object (NULL when none): typed as the model has them. */
static json_t *merge_args(const loupe_arg *args, uint32_t n, int truncated) {
    if (n == 0 && !truncated) {
        return NULL;
    }
    json_t *o = json_object();
    for (uint32_t i = 0; o != NULL && i < n; i++) {
        const loupe_arg *a = &args[i];
        json_t *v;
        switch (a->type) {
        case LOUPE_ARG_INT64:
            v = json_integer((json_int_t)a->v.i);
            break;
        case LOUPE_ARG_UINT64:
            v = a->v.u > (uint64_t)INT64_MAX ? NULL : json_integer((json_int_t)a->v.u);
            if (v == NULL) {
                char digits[24];
                snprintf(digits, sizeof digits, "%llu", (unsigned long long)a->v.u);
                v = json_string(digits);
            }
            break;
        case LOUPE_ARG_DOUBLE:
            v = isfinite(a->v.d) ? json_real(a->v.d) : json_null();
            break;
        case LOUPE_ARG_BOOL:
            v = json_boolean(a->v.b);
            break;
        case LOUPE_ARG_STRING:
        default:
            v = loupe_cli_jstr(a->v.s ? a->v.s : "");
            break;
        }
        json_object_set_new(o, a->key, v);
    }
    if (o != NULL && truncated) {
        json_object_set_new(o, "loupe_truncated", json_true());
    }
    return o;
}

static int merge(target *ts, size_t n, const char *run_dir) {
    loupe_model **ms = calloc(n, sizeof *ms);
    int64_t *origin = calloc(n, sizeof *origin);
    if (ms == NULL || origin == NULL) {
        free(ms);
        free(origin);
        return -1;
    }
    int64_t base = INT64_MAX;
    int rc = 0;
    for (size_t i = 0; i < n; i++) {
        if (!ts[i].done) {
            continue;
        }
        if (loupe_trace_read(ts[i].file, &ms[i]) != 0) {
            fprintf(stderr, "loupe capture: --merge: cannot read %s: %s\n", ts[i].file,
                    loupe_last_error());
            rc = -1;
            continue;
        }
        uint64_t o = ts[i].origin_ns ? ts[i].origin_ns : ms[i]->origin_unix_ns;
        origin[i] = (int64_t)o - (ts[i].have_offset ? ts[i].offset_ns : 0);
        if (origin[i] < base) {
            base = origin[i];
        }
    }
    json_t *events = json_array();
    json_t *loss = json_object(); /* per address: events dropped in that process */
    for (size_t i = 0; i < n; i++) {
        loupe_model *m = ms[i];
        if (m == NULL) {
            continue;
        }
        uint64_t pid = m->pid;
        for (size_t k = 0; k < i; k++) { /* two addresses, one pid (two hosts): keep apart */
            if (ms[k] != NULL && ms[k]->pid == pid) {
                pid += 1000000u * (i + 1);
            }
        }
        double shift_us = (double)(origin[i] - base) / 1000.0;
        char pname[512];
        snprintf(pname, sizeof pname, "%.200s (%.300s)",
                 m->process_name ? m->process_name : "process", ts[i].addr);
        json_array_append_new(events, meta_event("process_name", pid, 0, pname));
        for (size_t t = 0; t < m->thread_count; t++) {
            const loupe_model_thread *th = &m->threads[t];
            if (th->name && th->name[0]) {
                json_array_append_new(events, meta_event("thread_name", pid, th->tid, th->name));
            }
            for (size_t s = 0; s < th->slice_count; s++) {
                const loupe_slice *sl = &th->slices[s];
                json_t *ev = json_pack("{s:s, s:s, s:s, s:I, s:I, s:f, s:f}", "ph", "X", "name",
                                       sl->name, "cat", sl->category ? sl->category : "", "pid",
                                       (json_int_t)pid, "tid", (json_int_t)th->tid, "ts",
                                       shift_us + (double)sl->start_ns / 1000.0, "dur",
                                       (double)sl->dur_ns / 1000.0);
                json_t *args =
                    merge_args(sl->args, sl->arg_count, (sl->flags & LOUPE_SLICE_TRUNCATED) != 0);
                if (ev != NULL && args != NULL) {
                    json_object_set_new(ev, "args", args);
                } else {
                    json_decref(args);
                }
                json_array_append_new(events, ev);
            }
            for (size_t s = 0; s < th->instant_count; s++) {
                const loupe_instant *in = &th->instants[s];
                json_array_append_new(
                    events, json_pack("{s:s, s:s, s:s, s:I, s:I, s:f}", "ph", "i", "s", "t", "name",
                                      in->name, "pid", (json_int_t)pid, "tid", (json_int_t)th->tid,
                                      "ts", shift_us + (double)in->ts_ns / 1000.0));
            }
        }
        /* Flows as v1 s/f events bound to the enclosing slice (ids kept per process). */
        for (size_t f = 0; f < m->flow_count; f++) {
            const loupe_flow *fl = &m->flows[f];
            for (int end = 0; end < 2; end++) {
                const loupe_model_thread *th = &m->threads[end ? fl->to_thread : fl->from_thread];
                const loupe_slice *sl = &th->slices[end ? fl->to_slice : fl->from_slice];
                json_array_append_new(
                    events,
                    json_pack("{s:s, s:I, s:s, s:s, s:s, s:I, s:I, s:f}", "ph", end ? "f" : "s",
                              "id", (json_int_t)((fl->id & 0xffffffffffffull) ^ (pid << 48)), "cat",
                              "flow", "name", "flow", "bp", "e", "pid", (json_int_t)pid, "tid",
                              (json_int_t)th->tid, "ts", shift_us + (double)sl->start_ns / 1000.0));
            }
        }
        json_object_set_new(loss, ts[i].addr,
                            json_integer((json_int_t)loupe_model_events_dropped(m)));
        for (size_t c = 0; c < m->counter_count; c++) {
            const loupe_counter_sample *cs = &m->counters[c];
            json_t *v = cs->is_double ? json_real(cs->d) : json_integer((json_int_t)cs->i);
            json_array_append_new(
                events, json_pack("{s:s, s:s, s:I, s:I, s:f, s:{s:o}}", "ph", "C", "name", cs->name,
                                  "pid", (json_int_t)pid, "tid", (json_int_t)0, "ts",
                                  shift_us + (double)cs->ts_ns / 1000.0, "args", "value", v));
        }
    }
    json_t *doc = json_pack("{s:s, s:o, s:{s:I, s:s, s:o}}", "displayTimeUnit", "ns", "traceEvents",
                            events, "otherData", "origin_unix_ns", (json_int_t)base, "merged_by",
                            "loupe capture --merge", "events_dropped", loss);
    /* 15 significant digits: µs with 3 decimals print as written (no 226.15299999999999) */
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_REAL_PRECISION(15)) : NULL;
    json_decref(doc);
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/%s", run_dir,
             loupe_format_by_bit(LOUPE_FORMAT_PERFETTO_JSON)->suffix);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    gzFile g = text ? gzopen(tmp, "wb1") : NULL;
    int ok = g != NULL && gzwrite(g, text, (unsigned)strlen(text)) > 0;
    if (g != NULL && gzclose(g) != Z_OK) {
        ok = 0;
    }
    if (!ok || rename(tmp, path) != 0) {
        fprintf(stderr, "loupe capture: --merge: cannot write %s\n", path);
        unlink(tmp);
        rc = -1;
    } else {
        printf("merged -> %s\n", path);
    }
    free(text);
    for (size_t i = 0; i < n; i++) {
        loupe_model_free(ms[i]);
    }
    free(ms);
    free(origin);
    return rc;
}

int loupe_cmd_capture(int argc, char **argv) {
    const char *addrs = NULL, *log_dir = "loupe-log", *format = NULL, *token = NULL;
    long duration = 0;
    int have_duration = 0, level = 2, attempts = 3, do_merge = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--merge") == 0) {
            do_merge = 1;
        } else if (a[0] == '-' && a[1] == '-' && v == NULL) {
            return bad_usage("%s needs a value", a);
        } else if (strcmp(a, "--duration-ms") == 0) {
            char *end;
            errno = 0;
            duration = strtol(v, &end, 10);
            if (*v == 0 || *end != 0 || errno != 0) {
                return bad_usage("--duration-ms: \"%s\" is not a whole number of milliseconds", v);
            }
            have_duration = 1;
            i++;
        } else if (strcmp(a, "--log-dir") == 0) {
            log_dir = v;
            i++;
        } else if (strcmp(a, "--format") == 0) {
            format = v;
            i++;
        } else if (strcmp(a, "--token") == 0) {
            token = v;
            i++;
        } else if (strcmp(a, "--level") == 0) {
            if (strlen(v) != 1 || v[0] < '0' || v[0] > '3') {
                return bad_usage("--level: \"%s\" is not 0, 1, 2 or 3", v);
            }
            level = v[0] - '0';
            i++;
        } else if (strcmp(a, "--attempts") == 0) {
            char *end;
            long k = strtol(v, &end, 10);
            if (*v == 0 || *end != 0 || k < 1 || k > 100) {
                return bad_usage("--attempts: \"%s\" is not a number from 1 to 100", v);
            }
            attempts = (int)k;
            i++;
        } else if (a[0] == '-' && a[1] != 0) {
            return bad_usage("unknown option %s", a);
        } else if (addrs == NULL) {
            addrs = a;
        } else {
            return bad_usage("Unknown positional argument encountered: %s", a);
        }
    }
    if (addrs == NULL || addrs[0] == 0) {
        return bad_usage("No service address provided.");
    }
    if (!have_duration) {
        return bad_usage("--duration-ms is required (how long to trace, in milliseconds)");
    }
    if (duration <= 0) {
        return bad_usage("duration_ms must be greater than zero.");
    }
    const loupe_format_desc *fd = format != NULL
                                      ? loupe_format_by_name(format)
                                      : loupe_format_by_file_format(LOUPE_FILE_CHROME_JSON);
    if (fd == NULL || !servable(fd)) {
        char names[128];
        loupe_cli_format_names(names, sizeof names, servable, " or ");
        return bad_usage("--format: \"%s\" is not %s", format, names);
    }
    if (do_merge && fd->file_format != LOUPE_FILE_CHROME_JSON) {
        return bad_usage("--merge needs --format %s",
                         loupe_format_by_file_format(LOUPE_FILE_CHROME_JSON)->name);
    }
    static target ts[MAX_ADDRS];
    size_t n = 0;
    char *list = strdup(addrs);
    if (list == NULL) {
        return 1;
    }
    char *save = NULL;
    for (char *tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_ADDRS) {
            free(list);
            return bad_usage("more than %d addresses", MAX_ADDRS);
        }
        memset(&ts[n], 0, sizeof ts[n]);
        if (parse_addr(tok, &ts[n]) != 0) {
            fprintf(stderr, "loupe capture: Could not interpret \"%s\" as a host-port pair.\n",
                    tok);
            free(list);
            return 2;
        }
        n++;
    }
    free(list);
    if (n == 0) {
        return bad_usage("No service address provided.");
    }
    char run_dir[4096];
    if (make_run_dir(log_dir, run_dir, sizeof run_dir) != 0) {
        return 1;
    }
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct curl_slist *hdrs = NULL;
    if (token != NULL) {
        char h[600];
        snprintf(h, sizeof h, "Authorization: Bearer %.500s", token);
        hdrs = curl_slist_append(NULL, h);
    }
    capture_opts o = {(unsigned long)duration, level, fd->name, fd->suffix, hdrs};
    int made = 0;
    for (int a = 0; a < attempts; a++) {
        made++;
        if (a > 0) {
            fprintf(stderr, "No trace event is collected. Automatically retrying.\n");
        }
        fprintf(stderr, "Starting to trace for %ld ms. Remaining attempt(s): %d\n", duration,
                attempts - a - 1);
        if (attempt(ts, n, &o, run_dir) == 0) {
            break;
        }
        int pending = 0;
        for (size_t i = 0; i < n; i++) {
            pending += !ts[i].done && !ts[i].permanent;
        }
        if (pending == 0) {
            break;
        }
    }
    curl_slist_free_all(hdrs);
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        free(ts[i].buf);
        ts[i].buf = NULL;
        ok += ts[i].done != 0;
    }
    int rc = 0;
    if (ok == 0) {
        fprintf(stderr,
                "loupe capture: No trace event is collected after %d attempt(s). Perhaps, you "
                "want to try again (with more attempts?).\nTip: increase number of attempts "
                "with --attempts.\n",
                made);
        rc = 1;
    }
    if (ok < n) {
        fprintf(stderr, "loupe capture: no trace from %zu of %zu address(es):\n", n - ok, n);
        for (size_t i = 0; i < n; i++) {
            if (!ts[i].done) {
                fprintf(stderr, "  %s: %s\n", ts[i].addr, ts[i].why);
            }
        }
        rc = 1;
    }
    if (ok > 0 && do_merge && merge(ts, n, run_dir) != 0) {
        rc = 1;
    }
    curl_global_cleanup();
    printf("%s\n", run_dir);
    return rc;
}
