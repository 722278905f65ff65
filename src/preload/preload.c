/* preload.c: libloupe_preload.so, what `loupe record` preloads (LD_PRELOAD) into the traced
 * program. Its constructor starts a session from the environment that `loupe record` sets; an
 * atexit handler (after main returns or exit() is called) stops it and writes a small
 * result file that `loupe record` reads to report the run directory and the counts.
 *
 * Environment (set by loupe record; documented in docs/record.md):
 *   LOUPE_RECORD_DIR            log_dir (required: without it the library does nothing)
 *   LOUPE_RECORD_LEVEL          host tracer level 0..3
 *   LOUPE_RECORD_BUFFER_EVENTS  each thread's limit in events
 *   LOUPE_RECORD_SESSION_EVENTS the session's capacity in events
 *   LOUPE_RECORD_OVERFLOW       "first" or "last"
 *   LOUPE_RECORD_PERFETTO       "1": also perfetto_trace.json.gz
 *   LOUPE_RECORD_LAZY           "1": lazy_buffers (populate buffers as they fill)
 *   LOUPE_RECORD_FORMATS        the files to write: a comma list of format names
 *   LOUPE_RECORD_SAMPLE_HZ      CPU sampling rate (0 or unset: off)
 *   LOUPE_RECORD_SAMPLE_STACKS  "dwarf", "fp" or "none"
 *                               (loupe_format_parse_list()); unset = the default set
 *   LOUPE_RECORD_FILTER         function_filter globs, one a line
 *   LOUPE_RECORD_EXCLUDE        function_exclude globs, one a line
 *   LOUPE_RECORD_DEPTH          function_depth
 *   LOUPE_RECORD_MIN_DURATION_NS function_min_duration_ns
 *   LOUPE_RECORD_RESULT         path of the result file: "started=1" once the session started
 *                               (so loupe record can tell a program the preload never reached:
 *                               a static or setuid one), the counts at exit (only the first process
 * writes it: the variable is removed at its start) LOUPE_RECORD_RUN_DIR        the run directory
 * loupe record made: every process writes <host>.<pid><suffix> into it (file_prefix, run_dir)
 *   LOUPE_RECORD_FILE_PREFIX    the first process's file-name prefix instead of <host>.<pid>
 *                               (an MPI rank's rank0003: docs/mpi.md); removed at its start
 *   LOUPE_RECORD_FOLLOW         "1": follow the process tree (keep LD_PRELOAD and these
 *                               variables for exec'd programs; a fork()ed child starts a
 *                               session of its own in the atfork child handler)
 * It sets LOUPE_RECORD=1 for the program (so a program that starts its own trace can tell it is
 * being recorded). Without LOUPE_RECORD_FOLLOW it removes itself from LD_PRELOAD so that programs
 * the traced one execs are not traced. A program linked with libloupe.so shares the same library
 * (the loader matches the soname), so its annotations land in this session.
 */
#include <loupe/loupe.h>
#include <stdio.h>
#include <stdlib.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

static char result_path[4096];
static int started;
static pid_t started_pid;

static void strip_preload(void) {
    const char *lp = getenv("LD_PRELOAD");
    if (lp == NULL) {
        return;
    }
    char out[8192], entry[4096];
    size_t n = 0;
    for (const char *p = lp; *p;) {
        size_t len = strcspn(p, ": ");
        if (len > 0 && len < sizeof entry) {
            memcpy(entry, p, len);
            entry[len] = 0;
            if (strstr(entry, "libloupe_preload.so") == NULL &&
                strstr(entry, "libloupe.so") == NULL && strstr(entry, "libloupe_mpi.so") == NULL &&
                n + len + 2 < sizeof out) {
                if (n > 0) {
                    out[n++] = ':';
                }
                memcpy(out + n, entry, len);
                n += len;
            }
        }
        p += len;
        while (*p == ':' || *p == ' ') {
            p++;
        }
    }
    out[n] = 0;
    if (n == 0) {
        unsetenv("LD_PRELOAD");
    } else {
        setenv("LD_PRELOAD", out, 1);
    }
}

static void loupe_preload_stop(void);

/* The globs of LOUPE_RECORD_FILTER / _EXCLUDE, kept for the process's life (small; the session
 * copies them): reachable from here, so that a leak checker does not count them. */
static const char *const *filter_globs, *const *exclude_globs;

/* A NULL-terminated array of the lines of an environment variable (globs), or NULL when it is
 * unset or empty. */
static const char *const *env_lines(const char *name) {
    const char *v = getenv(name);
    if (v == NULL || v[0] == 0) {
        return NULL;
    }
    size_t n = 1;
    for (const char *p = v; *p; p++) {
        n += *p == '\n';
    }
    char *copy = strdup(v);
    const char **arr = calloc(n + 1, sizeof(*arr));
    if (copy == NULL || arr == NULL) {
        free(copy);
        free(arr);
        return NULL;
    }
    size_t k = 0;
    for (char *tok = strtok(copy, "\n"); tok != NULL; tok = strtok(NULL, "\n")) {
        arr[k++] = tok;
    }
    return arr;
}

/* The first line of the result file: the session started (truncates what a run left). */
static void mark_started(void) {
    FILE *f = result_path[0] ? fopen(result_path, "w") : NULL;
    if (f != NULL) {
        fputs("started=1\n", f);
        fclose(f);
    }
}

/* The options, kept for a fork()ed child's session (their strings are copies here: a child
 * must not depend on the environment the program may have changed). */
static loupe_trace_options opts;
static char opt_dir[4096], opt_run_dir[4096], opt_prefix[512];
static int following;

/* "<host>.<pid>" for this process. */
static void set_prefix(void) {
    char host[256] = "";
    (void)gethostname(host, sizeof host - 1);
    snprintf(opt_prefix, sizeof opt_prefix, "%s.%ld", host[0] ? host : "localhost", (long)getpid());
}

static void start_session(void) {
    int r = loupe_start_trace(&opts);
    if (r != 0) {
        fprintf(stderr, "loupe: could not start tracing (pid %ld): %s: %s\n", (long)getpid(),
                loupe_strerror(r), loupe_last_error());
        return;
    }
    started = 1;
    started_pid = getpid();
}

/* A fork()ed child under follow: a session of its own, into its own region (libloupe's own
 * atfork child handler, registered before this one and so run first, forgot the parent's).
 * The rule (docs/record.md): this runs before fork() returns in the child, and calls malloc,
 * mmap and pthread_create; glibc makes those safe in the child of a multithreaded parent (its
 * fork resets malloc's arena locks and the stdio locks: glibc's posix/fork.c), and loupe uses
 * no lock of the program's. Nothing of the parent's recording is copied: the child's region
 * starts empty. */
static void child_after_fork(void) {
    started = 0;
    if (!following) {
        return;
    }
    result_path[0] = 0; /* the result file is the first process's */
    set_prefix();
    start_session();
}

__attribute__((constructor)) static void loupe_preload_start(void) {
    const char *dir = getenv("LOUPE_RECORD_DIR");
    if (dir == NULL || dir[0] == 0) {
        return;
    }
    const char *fw = getenv("LOUPE_RECORD_FOLLOW");
    following = fw != NULL && strcmp(fw, "1") == 0;
    if (!following) {
        strip_preload();
    }
    const char *rp = getenv("LOUPE_RECORD_RESULT");
    snprintf(result_path, sizeof result_path, "%s", rp ? rp : "");
    unsetenv("LOUPE_RECORD_RESULT"); /* later processes of the tree write only their files */
    loupe_trace_options o;
    memset(&o, 0, sizeof o);
    snprintf(opt_dir, sizeof opt_dir, "%s", dir);
    o.log_dir = opt_dir;
    const char *rd = getenv("LOUPE_RECORD_RUN_DIR");
    if (rd != NULL && rd[0]) {
        snprintf(opt_run_dir, sizeof opt_run_dir, "%s", rd);
        o.run_dir = opt_run_dir;
        const char *fp = getenv("LOUPE_RECORD_FILE_PREFIX");
        if (fp != NULL && fp[0]) {
            snprintf(opt_prefix, sizeof opt_prefix, "%s", fp); /* an MPI rank's rank0003 */
        } else {
            set_prefix();
        }
        o.file_prefix = opt_prefix;
    }
    unsetenv("LOUPE_RECORD_FILE_PREFIX"); /* the processes this one runs: <host>.<pid> */
    const char *lv = getenv("LOUPE_RECORD_LEVEL");
    if (lv != NULL && lv[0]) {
        int l = atoi(lv);
        o.host_tracer_level = l == 0 ? LOUPE_LEVEL_NONE : l;
    }
    const char *be = getenv("LOUPE_RECORD_BUFFER_EVENTS");
    if (be != NULL && be[0]) {
        o.buffer_events = (uint32_t)strtoul(be, NULL, 10);
    }
    const char *se = getenv("LOUPE_RECORD_SESSION_EVENTS");
    if (se != NULL && se[0]) {
        o.session_events = strtoull(se, NULL, 10);
    }
    const char *ov = getenv("LOUPE_RECORD_OVERFLOW");
    if (ov != NULL && strcmp(ov, "last") == 0) {
        o.overflow = LOUPE_OVERFLOW_KEEP_LAST;
    }
    const char *lz = getenv("LOUPE_RECORD_LAZY");
    o.lazy_buffers = lz != NULL && strcmp(lz, "1") == 0;
    const char *pf = getenv("LOUPE_RECORD_PERFETTO");
    o.create_perfetto_trace = pf != NULL && strcmp(pf, "1") == 0;
    const char *fm = getenv("LOUPE_RECORD_FORMATS");
    if (fm != NULL && fm[0] && loupe_format_parse_list(fm, &o.formats) != 0) {
        /* loupe record checked the list already: this is someone setting the variable by hand. */
        fprintf(stderr, "loupe: LOUPE_RECORD_FORMATS: %s: writing the default set\n",
                loupe_last_error());
    }
    const char *sh = getenv("LOUPE_RECORD_SAMPLE_HZ");
    if (sh != NULL) {
        o.sampling_hz = (uint32_t)strtoul(sh, NULL, 10);
    }
    const char *ss = getenv("LOUPE_RECORD_SAMPLE_STACKS");
    if (ss != NULL) {
        o.sampling_stacks = strcmp(ss, "fp") == 0     ? LOUPE_SAMPLING_STACKS_FP
                            : strcmp(ss, "none") == 0 ? LOUPE_SAMPLING_STACKS_NONE
                                                      : LOUPE_SAMPLING_STACKS_DWARF;
    }
    /* loupe record --spool[=DIR]: set (even empty: the log directory) means a spool */
    o.spool_dir = getenv("LOUPE_RECORD_SPOOL");
    o.function_tracing = 1;
    filter_globs = env_lines("LOUPE_RECORD_FILTER");
    exclude_globs = env_lines("LOUPE_RECORD_EXCLUDE");
    o.function_filter = filter_globs;
    o.function_exclude = exclude_globs;
    const char *dp = getenv("LOUPE_RECORD_DEPTH");
    if (dp != NULL && dp[0]) {
        o.function_depth = (uint32_t)strtoul(dp, NULL, 10);
    }
    const char *md = getenv("LOUPE_RECORD_MIN_DURATION_NS");
    if (md != NULL && md[0]) {
        o.function_min_duration_ns = strtoull(md, NULL, 10);
    }
    if (!following) {
        unsetenv("LOUPE_RECORD_DIR"); /* children do not start sessions of their own */
    }
    setenv("LOUPE_RECORD", "1", 1);
    opts = o;
    start_session();
    if (!started) {
        return;
    }
    mark_started();
    (void)atexit(loupe_preload_stop); /* a forked child inherits it: it stops its own session */
    if (following) {
        (void)pthread_atfork(NULL, NULL, child_after_fork);
    }
    loupe_set_thread_name("main");
}

/* In libloupe (src/export/rundir.c): the last run directory written in this process. */
const char *loupe__last_run_dir(char *buf, size_t size);
/* In libloupe (src/session/session.c): the kept trace's counts. */
int loupe__kept_counts(loupe_trace_result *res);

/* Registered with atexit() right after the start, so it runs before libloupe's own exit check
 * (which warns about sessions nobody stopped). */
static void loupe_preload_stop(void) {
    /* A child the program forked inherits this handler: without follow it is not recorded (its
     * session is closed at fork); with follow it stops its own session here, and only the
     * first process has a result file. */
    if (!started || getpid() != started_pid) {
        return;
    }
    started = 0;
    loupe_trace_result res = {.size = sizeof res};
    char run_dir[4096] = "";
    int r = loupe_stop_trace(&res);
    if (r == LOUPE_ENOT_STARTED) {
        /* The program stopped the session itself (loupe_stop_trace_if_active() in its cleanup):
         * its stop wrote the run directory. */
        loupe__last_run_dir(run_dir, sizeof run_dir);
        r = run_dir[0] ? 0 : r;
        if (r == 0) {
            (void)loupe__kept_counts(&res); /* that stop's figures, not zeros */
        }
    } else if (res.run_dir != NULL) {
        snprintf(run_dir, sizeof run_dir, "%s", res.run_dir);
    }
    FILE *f = result_path[0] ? fopen(result_path, "w") : NULL;
    if (r != 0) {
        fprintf(stderr, "loupe: could not write the trace: %s: %s\n", loupe_strerror(r),
                loupe_last_error());
    }
    if (f == NULL) {
        loupe_trace_result_free(&res);
        return;
    }
    fprintf(f, "status=%d\nerror=%s\nrun_dir=%s\n", r, r ? loupe_last_error() : "", run_dir);
    for (size_t i = 0; i < res.file_count; i++) { /* file.<format name>=<path> */
        const loupe_format_desc *d = loupe_format_by_bit(res.files[i].format);
        fprintf(f, "file.%s=%s\n", d != NULL ? d->name : "?", res.files[i].path);
    }
    fprintf(f,
            "events_recorded=%llu\nevents_dropped=%llu\nunmatched_ends=%llu\n"
            "truncated_zones=%llu\nthreads=%zu\n",
            (unsigned long long)res.events_recorded, (unsigned long long)res.events_dropped,
            (unsigned long long)res.unmatched_ends, (unsigned long long)res.truncated_zones,
            res.thread_count);
    uint64_t need = 0, total = 0;
    for (size_t i = 0; i < res.thread_count; i++) {
        if (res.threads[i].capacity_needed > need) {
            need = res.threads[i].capacity_needed;
        }
        /* each thread holds whole chunks of the session's capacity */
        uint64_t c = res.threads[i].capacity_needed;
        total += (c + LOUPE_CHUNK_EVENTS - 1) / LOUPE_CHUNK_EVENTS * LOUPE_CHUNK_EVENTS;
    }
    fprintf(f, "capacity_needed=%llu\nsession_needed=%llu\n", (unsigned long long)need,
            (unsigned long long)total);
    fclose(f);
    loupe_trace_result_free(&res);
}
