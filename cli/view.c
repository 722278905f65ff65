/* view.c: `loupe view`, the Perfetto link: serves one trace on 127.0.0.1:9001 for
 * ui.perfetto.dev, prints the link, and exits once the UI fetched it or after a timeout
 * (loupe_serve_perfetto_link() in loupe/server.h does the serving).
 *
 * PATH is a trace file, a run directory or a log_dir. In a directory, the file the UI shows best
 * is picked: perfetto_trace.json.gz (no top-level "metadata"; loupe capture --merge writes its
 * merged trace there too), then a *.pftrace, then the *.trace.json.gz loupe_trace_find() gives.
 *
 * Signals: the link is served on a thread of its own while the main thread waits in sigwait()
 * for SIGINT, SIGTERM, SIGHUP (blocked in every thread, so libmicrohttpd's threads never take
 * them) or the server's end (SIGUSR1 from that thread). A signal ends loupe view as
 * interrupted, 128 + the signal number, after removing the temporary .pftrace a conversion made;
 * it is never reported as a timeout.
 */
#include "cli.h"

#include <loupe/loupe.h>

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: loupe view PATH [--timeout-s S] [--port P] [--open]\n"
            "\n"
            "Serves a trace once on http://127.0.0.1:9001 for the Perfetto UI and prints\n"
            "  https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/<file>\n"
            "Open it in a browser on this machine (from another machine: ssh -L\n"
            "9001:127.0.0.1:9001 first). loupe view exits once the UI fetched the file.\n"
            "\n"
            "PATH is a trace file, a run directory, or a log_dir (its newest run). In a\n"
            "directory: perfetto_trace.json.gz first, then *.pftrace, then *.trace.json.gz.\n"
            "\n"
            "options:\n"
            "  --timeout-s S  give up after S seconds without a fetch (default 300)\n"
            "  --port P       serve on another port (the UI fetches only from 9001; for tests);\n"
            "                 0 picks a free port (the link names it)\n"
            "  --open         also open the link with xdg-open (or open), where there is one\n"
            "  -h, --help     show this help\n"
            "\n"
            "exit status: 0 the trace was fetched, 1 timed out or port busy (the message says\n"
            "which), 2 bad usage, 128 + N interrupted by signal N (130 SIGINT, 143 SIGTERM,\n"
            "129 SIGHUP; a temporary conversion is removed)\n");
}

/* A file in dir whose name ends with suffix (or equals it when exact); 0 when found. */
static int find_in(const char *dir, const char *name, int exact, char *out, size_t size) {
    DIR *d = opendir(dir);
    if (d == NULL) {
        return -1;
    }
    struct dirent *e;
    int found = -1;
    while ((e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name), s = strlen(name);
        int match =
            exact ? strcmp(e->d_name, name) == 0 : l > s && strcmp(e->d_name + l - s, name) == 0;
        if (match) {
            int n = snprintf(out, size, "%s/%s", dir, e->d_name);
            found = n > 0 && (size_t)n < size ? 0 : -1;
            break;
        }
    }
    closedir(d);
    return found;
}

static void on_ready(const char *url, void *user) {
    int open_it = *(int *)user;
    printf("Open URL in browser: %s\n", url);
    fflush(stdout);
    const char *at = strstr(url, "http://127.0.0.1:");
    if (at != NULL) {
        fprintf(stderr, "loupe view: listening on 127.0.0.1 port %ld\n",
                strtol(at + strlen("http://127.0.0.1:"), NULL, 10));
    }
    if (open_it) {
        const char *opener = access("/usr/bin/xdg-open", X_OK) == 0 ? "xdg-open"
                             : access("/usr/bin/open", X_OK) == 0   ? "open"
                                                                    : NULL;
        if (opener == NULL) {
            fprintf(stderr, "loupe view: --open: no xdg-open or open here; open the link by "
                            "hand\n");
            return;
        }
        char cmd[1200];
        snprintf(cmd, sizeof cmd, "%s '%s' >/dev/null 2>&1 &", opener, url);
        if (system(cmd) != 0) {
            fprintf(stderr, "loupe view: --open: %s failed; open the link by hand\n", opener);
        }
    }
}

#if LOUPE_CLI_WITH_SERVER
/* The serving thread: loupe_serve_perfetto_link(), then SIGUSR1 to the waiting main thread. */
typedef struct serve_job {
    const char *file;
    loupe_link_options o;
    pthread_t main;
    int rc;
    char err[1024];
} serve_job;

static void *serve(void *arg) {
    serve_job *j = arg;
    j->rc = loupe_serve_perfetto_link(j->file, &j->o);
    if (j->rc != 0) {
        snprintf(j->err, sizeof j->err, "%s", loupe_last_error()); /* thread-local: copied */
    }
    pthread_kill(j->main, SIGUSR1);
    return NULL;
}
#endif

int loupe_cmd_view(int argc, char **argv) {
#if !LOUPE_CLI_WITH_SERVER
    (void)argc;
    (void)argv;
    (void)usage;
    (void)find_in;
    (void)on_ready;
    fprintf(stderr, "loupe view: this build of loupe has no profiler server, so it cannot serve "
                    "the Perfetto link (rebuild with -DLOUPE_WITH_SERVER=ON); open the trace in "
                    "ui.perfetto.dev by hand\n");
    return 2;
#else
    const char *path = NULL;
    long timeout_s = 300, port = 0; /* 0: the link's default, 9001 */
    int open_it = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--open") == 0) {
            open_it = 1;
        } else if (strcmp(a, "--timeout-s") == 0 || strcmp(a, "--port") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "loupe view: %s needs a value\n", a);
                return 2;
            }
            char *end;
            long v = strtol(argv[++i], &end, 10);
            int is_port = a[2] == 'p';
            if (*argv[i] == 0 || *end != 0 || v < (is_port ? -1 : 1) ||
                v > (is_port ? 65535 : 86400)) {
                fprintf(stderr, "loupe view: %s: \"%s\" is out of range\n", a, argv[i]);
                return 2;
            }
            if (is_port && v == 0) {
                v = -1; /* a free port: the link options' -1 (0 there means 9001) */
            }
            *(is_port ? &port : &timeout_s) = v;
        } else if (a[0] == '-' && a[1] != 0) {
            fprintf(stderr, "loupe view: unknown option %s\nRun 'loupe view --help'.\n", a);
            return 2;
        } else if (path == NULL) {
            path = a;
        } else {
            fprintf(stderr, "loupe view: one PATH only (got \"%s\" too)\n", a);
            return 2;
        }
    }
    if (path == NULL) {
        fprintf(stderr, "loupe view: no PATH given (a trace file, run directory or log_dir)\n");
        return 2;
    }
    char file[4096];
    struct stat st;
    if (stat(path, &st) != 0) {
        fprintf(stderr, "loupe view: %s: %s\n", path, strerror(errno));
        return 1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(file, sizeof file, "%s", path);
    } else {
        /* PATH itself first, then the run directory loupe_trace_find() picks in a log_dir. */
        char run[4096], found[4096];
        snprintf(run, sizeof run, "%s", path);
        int have = loupe_trace_find(path, found, sizeof found) == 0;
        struct stat fst;
        int merged = have && stat(found, &fst) == 0 && S_ISDIR(fst.st_mode);
        if (merged) {
            /* a run of several processes (loupe record following a tree): the merged model,
             * never one process's perfetto file */
            snprintf(file, sizeof file, "%s", found);
            have = 0;
        }
        if (have) {
            char *slash = strrchr(found, '/');
            if (slash != NULL) {
                snprintf(run, sizeof run, "%.*s", (int)(slash - found), found);
            }
        }
        /* The names the run directory gives them (the registry, loupe/writer.h). */
        const char *pjson = loupe_format_by_bit(LOUPE_FORMAT_PERFETTO_JSON)->suffix;
        const char *pproto = loupe_format_by_bit(LOUPE_FORMAT_PERFETTO_PROTO)->suffix;
        if (!merged && find_in(path, pjson, 1, file, sizeof file) != 0 &&
            find_in(path, pproto, 0, file, sizeof file) != 0 &&
            find_in(run, pjson, 1, file, sizeof file) != 0 &&
            find_in(run, pproto, 0, file, sizeof file) != 0) {
            if (!have) {
                fprintf(stderr, "loupe view: %s\n", loupe_last_error());
                return 1;
            }
            snprintf(file, sizeof file, "%s", found);
        }
    }
    /* Perfetto's UI shows a blank trace for Chrome JSON with a top-level "metadata" key (which
     * <host>.trace.json.gz has: jax-ml/jax#10843) and cannot read XPlane: serve those as a
     * .pftrace converted into a temporary directory. */
    char tmpdir[] = "/tmp/loupe-view-XXXXXX";
    int converted = 0;
    const loupe_format_desc *pproto = loupe_format_by_bit(LOUPE_FORMAT_PERFETTO_PROTO);
    const char *pjson = loupe_format_by_bit(LOUPE_FORMAT_PERFETTO_JSON)->suffix;
    const char *base = strrchr(file, '/') != NULL ? strrchr(file, '/') + 1 : file;
    size_t fl = strlen(file), pl = strlen(pproto->suffix);
    int perfetto_ready =
        (fl >= pl && strcmp(file + fl - pl, pproto->suffix) == 0) || strcmp(base, pjson) == 0;
    if (!perfetto_ready) {
        loupe_model *m = NULL;
        if (loupe_trace_read(file, &m) != 0) {
            fprintf(stderr, "loupe view: %s\n", loupe_last_error());
            return 1;
        }
        if (mkdtemp(tmpdir) == NULL) {
            fprintf(stderr, "loupe view: cannot create %s: %s\n", tmpdir, strerror(errno));
            loupe_model_free(m);
            return 1;
        }
        char out[64];
        snprintf(out, sizeof out, "%s/trace%s", tmpdir, pproto->suffix);
        int w = loupe_trace_write(m, out, LOUPE_FILE_PERFETTO_PROTO);
        loupe_model_free(m);
        if (w != 0) {
            fprintf(stderr, "loupe view: converting %s: %s\n", file, loupe_last_error());
            rmdir(tmpdir);
            return 1;
        }
        fprintf(stderr, "loupe view: %s converted to Perfetto's format for the UI\n", file);
        snprintf(file, sizeof file, "%s", out);
        converted = 1;
    }
    serve_job job = {.file = file,
                     .o = {.timeout_ms = (uint32_t)timeout_s * 1000u,
                           .port = (int)port,
                           .on_ready = on_ready,
                           .user = &open_it},
                     .main = pthread_self()};
    sigset_t set, old;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGUSR1);
    pthread_sigmask(SIG_BLOCK, &set, &old); /* before the thread: it and its threads inherit it */
    fprintf(stderr, "loupe view: serving %s (waiting up to %ld s)\n", file, timeout_s);
    pthread_t th;
    int sig = 0, started = 1;
    if (pthread_create(&th, NULL, serve, &job) != 0) {
        started = 0;
        job.rc = -1;
        snprintf(job.err, sizeof job.err, "cannot start the serving thread");
        sig = SIGUSR1;
    }
    while (sig != SIGUSR1) {
        if (sigwait(&set, &sig) != 0) {
            sig = 0;
            continue;
        }
        if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
            if (converted) {
                unlink(file);
                rmdir(tmpdir);
            }
            fprintf(stderr, "loupe view: interrupted by %s: the trace was not fetched%s\n",
                    sig == SIGINT    ? "SIGINT"
                    : sig == SIGTERM ? "SIGTERM"
                                     : "SIGHUP",
                    converted ? " (the temporary conversion is removed)" : "");
            fflush(stdout);
            fflush(stderr);
            /* the serving thread is still in its wait: end the process, not the thread */
            _exit(128 + sig);
        }
    }
    if (started) {
        pthread_join(th, NULL);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    int r = job.rc;
    if (converted) {
        unlink(file);
        rmdir(tmpdir);
    }
    if (r != 0) {
        fprintf(stderr, "loupe view: %s\n", job.err);
        return 1;
    }
    fprintf(stderr, "loupe view: the trace was fetched; done\n");
    return 0;
#endif
}
