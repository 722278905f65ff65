/* session.c: the session state machine (trace.h): start, stop, the kept trace, metadata, the
 * scoped form, and fork handling.
 *
 * One mutex serialises start/stop/write_last (from any thread). The hot path never takes it:
 * it reads the state word (loupe__state) that start opens and stop closes. A stop always ends
 * the session before it writes anything, so a failed write never leaves it "started" (the jax
 * bug this contract fixes); the collected model is kept until the next start.
 */
#include "base/clock.h"
#include "base/error.h"
#include "base/fs.h"
#include "export/writers.h"
#include "gpu/gpu_internal.h"
#include "model/builder.h"
#include "model/merge.h"
#include "record/collect.h"
#include "record/record.h"
#include "record/sample.h"
#include "record/spool.h"
#include "session/capture.h"
#include "session/link.h"
#include "session/session.h"

#include <assert.h>
#include <loupe/fdo.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t session_lock = PTHREAD_MUTEX_INITIALIZER;
static int active;
static int capturing; /* the active session is a profiler-server capture (capture.h) */
static uint64_t session_state;
static uint64_t start_ticks, start_mono_ns, start_real_ns;
static char *opt_log_dir, *opt_run_name;
static char *opt_run_dir, *opt_file_prefix; /* NULL: a new run directory, host-named files */
static int opt_perfetto;
static int opt_link; /* create_perfetto_link */
static uint32_t opt_link_ms;
static unsigned opt_formats;
/* Function tracing's filters (options' function_filter ... function_min_duration_ns), copied. */
static char **opt_func_include, **opt_func_exclude;
static uint64_t opt_func_min_ns;
static int opt_func_filtering;

/* The hooks' filter table (record.c): every function of the objects loaded now, decided once. */
typedef struct ftab_build {
    char **inc, **exc;
    int full;
} ftab_build;

static int any_glob(char **globs, const char *name) {
    for (size_t i = 0; globs != NULL && globs[i] != NULL; i++) {
        if (fnmatch(globs[i], name, 0) == 0) {
            return 1;
        }
    }
    return 0;
}

static void ftab_fn(uintptr_t addr, const char *name, void *arg) {
    ftab_build *b = arg;
    unsigned d = (any_glob(b->inc, name) ? LOUPE__FD_INCLUDE : 0u) |
                 (any_glob(b->exc, name) ? LOUPE__FD_EXCLUDE : 0u);
    if (d != 0 && loupe__ftab_add(addr, d) != 0) {
        b->full = 1;
    }
}

static void ftab_range(uintptr_t lo, uintptr_t hi, void *arg) {
    ftab_build *b = arg;
    if (loupe__ftab_add_range(lo, hi) != 0) {
        b->full = 1;
    }
}

/* With the gate closed: the table for the session's globs, or none (all decided at the stop)
 * when there are none or more matches than it holds. */
static void ftab_prepare(char **inc, char **exc) {
    loupe__ftab_clear();
    if (inc == NULL && exc == NULL) {
        return;
    }
    ftab_build b = {inc, exc, 0};
    loupe__symbols_each(ftab_fn, ftab_range, &b);
    if (!b.full) {
        loupe__ftab_enable(inc != NULL);
    } else {
        loupe__ftab_clear();
    }
}

static void globs_free(char **v) {
    for (size_t i = 0; v != NULL && v[i] != NULL; i++) {
        free(v[i]);
    }
    free(v);
}

/* A copy of a NULL-terminated glob array (NULL for NULL or an empty one); 0, or -1 when out of
 * memory (*out NULL then). */
static int globs_dup(const char *const *v, char ***out) {
    size_t n = 0;
    *out = NULL;
    while (v != NULL && v[n] != NULL) {
        n++;
    }
    if (n == 0) {
        return 0;
    }
    char **c = calloc(n + 1, sizeof(*c));
    if (c == NULL) {
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        c[i] = strdup(v[i]);
        if (c[i] == NULL) {
            globs_free(c);
            return -1;
        }
    }
    *out = c;
    return 0;
}
static uint32_t opt_sampling_hz;
static int opt_sampling_stacks;

static loupe_model *kept;
static int kept_perfetto;
static unsigned kept_formats;

static pthread_mutex_t meta_lock = PTHREAD_MUTEX_INITIALIZER;
static loupe_kv meta[256];
static size_t meta_count;

/* A capture's own metadata (capture.h): strdup()'d, set and cleared under session_lock; only a
 * capture has any, and its collection appends them to the process's table. */
static loupe_kv cap_meta[LOUPE__CAPTURE_META_MAX];
static size_t cap_meta_count;
static void free_meta_str(const char *s);

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* fork(): every lock a child could need is taken first (in the order the stop takes them:
 * session, keeper, registry, tails), so that no other thread holds one across the fork. */
static void fork_prepare(void) {
    pthread_mutex_lock(&session_lock);
    loupe__keeper_pause();
    loupe__registry_lock_take();
    loupe__rec_tail_lock(1);
    loupe__sample_fork_prepare();
}

static void fork_parent(void) {
    loupe__sample_fork_parent();
    loupe__rec_tail_lock(0);
    loupe__registry_lock_give();
    loupe__keeper_resume();
    pthread_mutex_unlock(&session_lock);
}

/* The child is not tracing: the gate is closed and the session is over for it. The region is
 * the parent's (under `loupe record` even shared with the recorder): the child forgets it, and
 * a session it starts maps a region of its own. */
static void fork_child(void) {
    loupe__rec_forget_in_child();
    loupe__sample_forget_in_child();
    active = 0;
    capturing = 0;
    cap_meta_count = 0; /* the parent's capture: its strings stay the parent's (not freed) */
    /* The forking thread took the locks in fork_prepare: it is this thread, so it unlocks them
     * (re-initialising a held mutex would be undefined, and confuses TSan). The child has no
     * keeper: a session it starts makes one. */
    loupe__rec_tail_lock(0);
    loupe__registry_lock_give();
    loupe__keeper_forget_in_child();
    loupe__keeper_resume();
    pthread_mutex_unlock(&session_lock);
}

/* At exit, a session nobody stopped is lost: say so (jax.profiler is silent). */
static void warn_unstopped(void) {
    if (__atomic_load_n(&active, __ATOMIC_RELAXED) && !capturing) {
        fprintf(stderr,
                "loupe: the process exits while a trace is active (log_dir %s): nothing was "
                "written; call loupe_stop_trace() before exit\n",
                opt_log_dir ? opt_log_dir : "?");
    }
}

static void install_fork_handlers(void) {
    (void)pthread_atfork(fork_prepare, fork_parent, fork_child);
    (void)atexit(warn_unstopped);
}

int loupe_is_tracing(void) {
    return __atomic_load_n(&active, __ATOMIC_RELAXED);
}

static void drop_kept(void) {
    loupe_model_free(kept);
    kept = NULL;
}

static int valid_run_name(const char *n) {
    if (n == NULL || n[0] == 0) {
        return 1;
    }
    if (strchr(n, '/') != NULL || strcmp(n, ".") == 0 || strcmp(n, "..") == 0 || strlen(n) > 100) {
        return 0; /* one path component of at most 100 bytes */
    }
    return 1;
}

/* The start half shared by loupe_start_trace() and a capture: opens the gate. Called with
 * session_lock held and the session IDLE. */
static void open_session(int level, int function_tracing) {
    assert(!active && !loupe__gate_is_open()); /* IDLE: the last stop closed the gate */
    loupe__clock_init();
    loupe__clock_pair(&start_ticks, &start_mono_ns);
    start_real_ns = loupe__realtime_at(start_mono_ns);
    loupe__region_hdr *h = LOUPE__HDR; /* what a recovery after a death needs (recover.c) */
    h->start_ticks = start_ticks;
    h->start_mono = start_mono_ns;
    h->origin_unix_ns = start_real_ns;
    h->use_tsc = loupe__use_tsc;
    h->rate_ticks = start_ticks;
    h->rate_mono = start_mono_ns;
    __atomic_store_n(&h->stopped, 0, __ATOMIC_RELEASE);
    loupe__gpu_session_open();
    /* The gate opens at the session's start, and sampling comes up after it: its setup takes
     * 1 ms and, when no event with call chains is open on the machine, 14-16 ms more (the
     * kernel allocates its per-CPU call-chain buffers at the first such perf_event_open), which
     * 0.4 spent with the gate shut: a capture with sampling lost its first 5-16 ms of zones,
     * uncounted, with profile_start_time before them. Now zones are recorded from the start,
     * and the instant sampling began is the metadata loupe_sampling_began_ns (sample.c). The
     * kernel's clock for samples is the session's (CLOCK_MONOTONIC). */
    session_state = loupe__gate_open(level, function_tracing);
    __atomic_store_n(&active, 1, __ATOMIC_RELEASE); /* after start_*: loupe__trace_unix_ns */
    (void)loupe__sample_start(opt_sampling_hz, opt_sampling_stacks, start_mono_ns,
                              opt_run_dir != NULL && opt_run_dir[0] ? opt_run_dir : opt_log_dir);
    loupe__keeper_kick();
}

/* The recorder's parameters for a session: its capacity and each thread's limit, in slots. */
static int prepare_recorder(uint64_t session_events, uint32_t buffer_events, int ring,
                            uint32_t func_depth, uint64_t func_min_ns, int spool) {
    loupe__session_params p = {
        .session_slots = session_events ? session_events : LOUPE_DEFAULT_SESSION_EVENTS,
        /* keep-first: no per-thread limit unless one is asked for (0.4 dropped a busy thread's
         * events at 1 Mi while the session had room: 79% of an MPI benchmark's); keep-last:
         * each thread's ring */
        .thread_slots = buffer_events ? buffer_events
                        : ring        ? LOUPE_DEFAULT_BUFFER_EVENTS
                                      : UINT64_MAX,
        .ring = ring,
        .func_depth = func_depth,
        .func_min_ns = func_min_ns,
        .spool = spool,
    };
    return loupe__rec_prepare(&p);
}

/* Opens the session's spool (spool.h) in spool_dir ("" = the session's log_dir ld), with the
 * keeper held (it reads the spool's state in its passes). */
static int open_spool(const char *spool_dir, const char *ld, int spill, uint64_t budget) {
    loupe__keeper_pause();
    int r = loupe__spool_open(spool_dir == NULL ? NULL
                              : spool_dir[0]    ? spool_dir
                                                : ld,
                              spill, budget);
    loupe__keeper_resume();
    return r;
}

int loupe_start_trace(const loupe_trace_options *o) {
    (void)pthread_once(&fork_once, install_fork_handlers);
    if (o == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_start_trace: options is NULL");
    }
    if (o->log_dir == NULL || o->log_dir[0] == 0) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_trace: log_dir is required (the directory to write the "
                          "trace into)");
    }
    int level =
        o->host_tracer_level == LOUPE_LEVEL_DEFAULT ? LOUPE_LEVEL_INFO : o->host_tracer_level;
    if (level == LOUPE_LEVEL_NONE) {
        level = 0;
    } else if (level < 1 || level > 3) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_trace: host_tracer_level %d is out of range (use 1..3, "
                          "or LOUPE_LEVEL_NONE to record nothing)",
                          o->host_tracer_level);
    }
    if ((unsigned)o->overflow > LOUPE_OVERFLOW_KEEP_LAST) {
        return loupe__err(LOUPE_EINVALID, "loupe_start_trace: overflow policy %d is unknown",
                          (int)o->overflow);
    }
    if (o->buffer_events != 0 && o->buffer_events < 64) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_trace: buffer_events %u is below the minimum of 64",
                          o->buffer_events);
    }
    if (o->spool_dir != NULL && o->overflow == LOUPE_OVERFLOW_KEEP_LAST) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_trace: spool_dir needs the keep-first overflow policy (a "
                          "keep-last session reuses its oldest chunks instead of spooling them)");
    }
    if (!valid_run_name(o->run_name)) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_trace: run_name \"%s\" must be one path component of at "
                          "most 100 bytes",
                          o->run_name);
    }
    if (o->file_prefix != NULL && o->file_prefix[0] != 0 && !valid_run_name(o->file_prefix)) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_trace: file_prefix \"%s\" must be one path component of "
                          "at most 100 bytes",
                          o->file_prefix);
    }
    if (o->device_tracer_level < 0 || o->device_tracer_level > 1) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_trace: device_tracer_level %d is out of range (0 off, 1 on)",
                          o->device_tracer_level);
    }
    if (o->sampling_hz > 100000u) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_trace: sampling_hz %u is above the maximum of 100000",
                          o->sampling_hz);
    }
    if (o->sampling_stacks < LOUPE_SAMPLING_STACKS_DWARF ||
        o->sampling_stacks > LOUPE_SAMPLING_STACKS_NONE) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_start_trace: sampling_stacks %d is unknown (use "
                          "LOUPE_SAMPLING_STACKS_DWARF, _FP or _NONE)",
                          o->sampling_stacks);
    }
    unsigned unknown = o->formats & ~loupe__formats_available();
    if (unknown != 0) {
        return loupe__err(LOUPE_EUNSUPPORTED,
                          "loupe_start_trace: formats 0x%x are not available in this build "
                          "(available: 0x%x, see LOUPE_FORMAT_* in loupe/trace.h)",
                          unknown, loupe__formats_available());
    }
    pthread_mutex_lock(&session_lock);
    if (active && capturing) {
        pthread_mutex_unlock(&session_lock);
        return loupe__err(LOUPE_EALREADY_STARTED,
                          "loupe_start_trace: the session is CAPTURING (a profiler server capture "
                          "runs); start again once it ends");
    }
    if (active) {
        /* the detail is formatted under the lock: opt_log_dir belongs to the session */
        int e = loupe__err(LOUPE_EALREADY_STARTED,
                           "loupe_start_trace: the session is TRACING (started with log_dir %s); "
                           "call loupe_stop_trace() first",
                           opt_log_dir);
        pthread_mutex_unlock(&session_lock);
        return e;
    }
    int r = loupe__mkdirs(o->log_dir);
    if (r != 0) {
        pthread_mutex_unlock(&session_lock);
        return loupe__err_prefix(r, "loupe_start_trace: log_dir"); /* the path and errno */
    }
    /* Absolute now: a chdir() during the session must not move the trace. */
    char *ld = realpath(o->log_dir, NULL);
    char *rn = o->run_name ? strdup(o->run_name) : NULL;
    char *rd = NULL, *fp = NULL;
    if (o->run_dir != NULL && o->run_dir[0] != 0) {
        r = loupe__mkdirs(o->run_dir);
        rd = r == 0 ? realpath(o->run_dir, NULL) : NULL;
        if (r != 0) {
            free(ld);
            free(rn);
            pthread_mutex_unlock(&session_lock);
            return loupe__err_prefix(r, "loupe_start_trace: run_dir");
        }
    }
    if (o->file_prefix != NULL && o->file_prefix[0] != 0) {
        fp = strdup(o->file_prefix);
    }
    if (ld == NULL || (o->run_name != NULL && rn == NULL) ||
        (o->run_dir != NULL && o->run_dir[0] != 0 && rd == NULL) ||
        (o->file_prefix != NULL && o->file_prefix[0] != 0 && fp == NULL)) {
        free(ld);
        free(rn);
        free(rd);
        free(fp);
        pthread_mutex_unlock(&session_lock);
        return loupe__err(LOUPE_ENOMEM, "loupe_start_trace: out of memory");
    }
    char **fi = NULL, **fe = NULL;
    if (globs_dup(o->function_filter, &fi) != 0 || globs_dup(o->function_exclude, &fe) != 0) {
        globs_free(fi);
        free(ld);
        free(rn);
        pthread_mutex_unlock(&session_lock);
        return loupe__err(LOUPE_ENOMEM, "loupe_start_trace: out of memory");
    }
    r = prepare_recorder(o->session_events, o->buffer_events,
                         o->overflow == LOUPE_OVERFLOW_KEEP_LAST, o->function_depth,
                         o->function_min_duration_ns,
                         /* a spill spool keeps a per-thread limit that was asked for */
                         o->spool_dir != NULL && (!o->spool_spill || o->buffer_events == 0));
    if (r == 0) {
        r = open_spool(o->spool_dir, ld, o->spool_spill, o->spool_budget_bytes);
    }
    if (r != 0) {
        globs_free(fi);
        globs_free(fe);
        free(ld);
        free(rn);
        free(rd);
        free(fp);
        pthread_mutex_unlock(&session_lock);
        return loupe__err_prefix(r, "loupe_start_trace");
    }
    globs_free(opt_func_include);
    globs_free(opt_func_exclude);
    opt_func_include = fi;
    opt_func_exclude = fe;
    opt_func_min_ns = o->function_min_duration_ns;
    opt_func_filtering =
        fi != NULL || fe != NULL || o->function_depth != 0 || o->function_min_duration_ns != 0;
    ftab_prepare(o->function_tracing ? fi : NULL, o->function_tracing ? fe : NULL);
    drop_kept();
    free(opt_log_dir);
    free(opt_run_name);
    free(opt_run_dir);
    free(opt_file_prefix);
    opt_log_dir = ld;
    opt_run_name = rn;
    opt_run_dir = rd;
    opt_file_prefix = fp;
    opt_perfetto = o->create_perfetto_trace != 0 || o->create_perfetto_link != 0;
    opt_link = o->create_perfetto_link != 0;
    opt_link_ms = o->perfetto_link_timeout_ms;
    opt_formats = o->formats;
    opt_sampling_hz = o->sampling_hz;
    opt_sampling_stacks = o->sampling_stacks;
    open_session(level, o->function_tracing != 0);
    loupe__crash_arm(opt_log_dir, o->crash_dump != LOUPE_CRASH_DUMP_OFF);
    loupe__cupti_start(o->device_tracer_level); /* never fails the start: see its note */
    pthread_mutex_unlock(&session_lock);
    return 0;
}

/* The per-thread figures of m, in a new array the result owns (trace.h): a later session on
 * any thread does not touch it. -1 when out of memory (then none). */
static int make_stats(loupe_trace_result *res, const loupe_model *m) {
    size_t n = m->thread_count;
    res->threads = n ? calloc(n, sizeof(*res->threads)) : NULL;
    if (n != 0 && res->threads == NULL) {
        return -1;
    }
    res->thread_count = n;
    for (size_t i = 0; i < n; i++) {
        const loupe_model_thread *th = &m->threads[i];
        loupe_thread_stats *st = &res->threads[i];
        st->tid = th->tid;
        snprintf(st->name, sizeof st->name, "%s", th->name);
        st->events_recorded = th->events_recorded;
        st->events_dropped = th->events_dropped;
        st->capacity_needed = th->capacity_needed;
    }
    return 0;
}

int loupe__result_fill(loupe_trace_result *res, const loupe_model *m) {
    if (res == NULL || m == NULL) {
        return 0;
    }
    res->events_recorded = loupe_model_events_recorded(m);
    res->events_dropped = loupe_model_events_dropped(m);
    res->unmatched_ends = m->unmatched_ends;
    res->truncated_zones = m->truncated_zones;
    return make_stats(res, m);
}

const loupe_model *loupe__kept_model(void) {
    return kept;
}

/* Fills res's counts and per-thread figures from the kept trace. -1 when out of memory. */
static int fill_result(loupe_trace_result *res) {
    return loupe__result_fill(res, kept);
}

int loupe__kept_counts(loupe_trace_result *res) {
    pthread_mutex_lock(&session_lock);
    int r = kept == NULL ? LOUPE_ENO_TRACE : (fill_result(res) == 0 ? 0 : LOUPE_ENOMEM);
    pthread_mutex_unlock(&session_lock);
    return r;
}

/* The program's name: the basename of /proc/self/exe (comm is cut at 15 characters). */
const char *loupe__process_name(char *buf, size_t size) {
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    buf[0] = 0;
    if (n > 0) {
        exe[n] = 0;
        const char *slash = strrchr(exe, '/');
        const char *b = slash ? slash + 1 : exe;
        size_t len = strlen(b) < size - 1 ? strlen(b) : size - 1;
        memcpy(buf, b, len);
        buf[len] = 0;
    }
    return buf;
}

/* An MPI rank's process (libloupe_mpi.so wrote loupe_mpi_rank and loupe_mpi_host into the
 * metadata, docs/mpi.md): its rank and the label "rank N (host)" on the model's process. */
static void label_mpi_process(loupe__mb *mb, const loupe__collect_params *p) {
    const char *rank = NULL, *host = "";
    for (size_t i = 0; i < p->metadata_count; i++) {
        if (strcmp(p->metadata[i].key, "loupe_mpi_rank") == 0) {
            rank = p->metadata[i].value;
        } else if (strcmp(p->metadata[i].key, "loupe_mpi_host") == 0) {
            host = p->metadata[i].value;
        }
    }
    size_t pi = rank != NULL ? loupe__mb_process(mb, p->pid) : SIZE_MAX;
    if (pi == SIZE_MAX) {
        return;
    }
    char label[320];
    snprintf(label, sizeof label, host[0] ? "rank %s (%.256s)" : "rank %s", rank, host);
    const char *l = loupe__mb_str(mb, label);
    loupe_model_process *pr = loupe__mb_process_at(mb, pi);
    pr->rank = strtoll(rank, NULL, 10);
    if (l != NULL) {
        pr->label = l;
    }
}

/* /proc/self/cmdline, its NUL separators made spaces (the model's cmdline); "" when unreadable. */
static void read_cmdline(char *buf, size_t size) {
    buf[0] = 0;
    FILE *f = fopen("/proc/self/cmdline", "r");
    if (f == NULL) {
        return;
    }
    size_t n = fread(buf, 1, size - 1, f);
    fclose(f);
    while (n > 0 && buf[n - 1] == 0) {
        n--; /* the last argument's terminator */
    }
    for (size_t i = 0; i < n; i++) {
        buf[i] = buf[i] == 0 ? ' ' : buf[i];
    }
    buf[n] = 0;
}

int loupe__session_process_meta(loupe__mb *mb, uint64_t parent_pid, const char *cmdline) {
    char line[4096], ppid[32];
    if (cmdline == NULL) {
        read_cmdline(line, sizeof line);
        cmdline = line;
    }
    snprintf(ppid, sizeof ppid, "%llu", (unsigned long long)parent_pid);
    int r = 0;
    if (cmdline[0] != 0) {
        r = loupe__mb_metadata(mb, "loupe_cmdline", cmdline);
    }
    if (r == 0 && parent_pid != 0) {
        r = loupe__mb_metadata(mb, "loupe_parent_pid", ppid);
    }
    /* The run's timeline base, which loupe record puts in the tree's environment (its own start:
     * every file of the tree counts its XPlane times from it, model/merge.h); a key of the
     * session's own (libloupe_mpi.so's base for the ranks) replaces it in the collect. */
    const char *base = getenv("LOUPE_RECORD_CLOCK_BASE_NS");
    size_t nb = base != NULL ? strspn(base, "0123456789") : 0;
    if (r == 0 && nb > 0 && nb < 20 && base[nb] == 0) {
        r = loupe__mb_metadata(mb, "loupe_clock_base_unix_ns", base);
    }
    return r;
}

/* Ends the active session (the gate closes first: the session is over whatever happens next) and
 * collects every thread's events. Called with session_lock held. NULL when out of memory. */
static loupe_model *collect_session(void) {
    assert(active && loupe__gate_is_open()); /* TRACING or CAPTURING: the start opened it */
    loupe__crash_disarm();
    uint64_t stop_ticks, stop_mono;
    loupe__clock_pair(&stop_ticks, &stop_mono);     /* events after this are not the session's */
    loupe__gate_close();                            /* and waits for the slow paths under way */
    __atomic_store_n(&active, 0, __ATOMIC_RELAXED); /* ended, whatever happens below */
    loupe__gpu_session_close(); /* a later loupe_gpu_session_add fails: nothing is left behind */
    loupe__cupti_stop();        /* flushes its records: they join at loupe__gpu_collect() */
    loupe__sample_stop();       /* a last drain of the rings; collected below */
    loupe__keeper_end();        /* loupe's threads end with the session (keeper.c says why) */
    double tpn = loupe__ticks_per_ns();
    char host[256], pname[256];
    loupe__hostname(host, sizeof host);
    pthread_mutex_lock(&meta_lock);
    /* The process's keys, then a capture's own (capture.h), which replace a key of the same
     * name (a process that also wrote MPI clock keys: the capture's are this file's). */
    static loupe_kv all_meta[sizeof meta / sizeof meta[0] + LOUPE__CAPTURE_META_MAX];
    size_t all_count = 0;
    for (size_t i = 0; i < meta_count; i++) {
        int replaced = 0;
        for (size_t k = 0; k < cap_meta_count; k++) {
            replaced |= strcmp(meta[i].key, cap_meta[k].key) == 0;
        }
        if (!replaced) {
            all_meta[all_count++] = meta[i];
        }
    }
    for (size_t k = 0; k < cap_meta_count; k++) {
        all_meta[all_count++] = cap_meta[k];
    }
    loupe__collect_params p = {
        .state = session_state,
        .start_ticks = start_ticks,
        .stop_ns = (uint64_t)((double)(stop_ticks - start_ticks) / tpn + 0.5),
        .stop_ticks = stop_ticks,
        .ticks_per_ns = tpn,
        .use_tsc = loupe__use_tsc,
        .origin_unix_ns = start_real_ns,
        .pid = (uint64_t)getpid(),
        .process_name = loupe__process_name(pname, sizeof pname),
        .host = host,
        .metadata = all_meta,
        .metadata_count = all_count,
        .func_include = (const char *const *)opt_func_include,
        .func_exclude = (const char *const *)opt_func_exclude,
        .func_min_ns = opt_func_filtering ? opt_func_min_ns : 0,
        .func_filtering = opt_func_filtering,
    };
    loupe__mb *mb = loupe__mb_new();
    int failed = mb == NULL;
    if (!failed) {
        failed = loupe__session_process_meta(mb, (uint64_t)getppid(), NULL) != 0;
    }
    loupe__keeper_pause(); /* the chains change under recycling */
    loupe__registry_lock_take();
    if (!failed) {
        failed = loupe__collect(mb, &p) != 0;
    }
    if (!failed) {
        label_mpi_process(mb, &p);
    }
    loupe__rec_recycle();
    loupe__spool_close(); /* read back by the collector: nothing of this session is left in it */
    /* collected: nothing for a recovery to do, and exiting threads let go of everything */
    __atomic_store_n(&LOUPE__HDR->stopped, 1, __ATOMIC_RELEASE);
    loupe__registry_lock_give();
    loupe__keeper_resume();
    pthread_mutex_unlock(&meta_lock);
    /* The session's GPU tracks: decoded launches and CUPTI records (taken even when the host
     * part failed, so that nothing of this session is left for the next). */
    if (loupe__gpu_collect(mb, p.origin_unix_ns, p.stop_ns) != 0) {
        failed = 1;
    }
    /* The CPU samples join the collector's threads by tid (taken even when the host part
     * failed, as the GPU's). */
    if (failed) {
        loupe__sample_discard();
    } else if (loupe__sample_collect(mb, p.stop_ns) != 0) {
        failed = 1;
    }
    if (failed) {
        loupe__mb_abort(mb);
        return NULL;
    }
    loupe_model *m = loupe__mb_finish(mb);
    loupe__model_lift_process_meta(m);
    return m;
}

int loupe_stop_trace(loupe_trace_result *res) {
    /* A result of a bad size is not touched, but the session still ends (trace.h). */
    loupe_trace_result *bad = loupe__result_check(res, "loupe_stop_trace") != 0 ? res : NULL;
    if (bad != NULL) {
        res = NULL;
    }
    loupe__result_reset(res);
    pthread_mutex_lock(&session_lock);
    if (!active) {
        pthread_mutex_unlock(&session_lock);
        return loupe__err(LOUPE_ENOT_STARTED,
                          "loupe_stop_trace: the session is IDLE (no loupe_start_trace() is "
                          "active)");
    }
    if (capturing) {
        pthread_mutex_unlock(&session_lock);
        return loupe__err(LOUPE_ENOT_STARTED,
                          "loupe_stop_trace: the session is CAPTURING (a profiler server "
                          "capture, which ends by itself), not a loupe_start_trace() session");
    }
    kept = collect_session();
    if (kept == NULL) {
        drop_kept();
        pthread_mutex_unlock(&session_lock);
        return loupe__err_nomem(
            loupe__err(LOUPE_ENOMEM, "loupe_stop_trace: out of memory while collecting"));
    }
    kept_perfetto = opt_perfetto;
    kept_formats = opt_formats;
    loupe_trace_result *lr = res; /* the link needs the path even when the caller passed NULL */
    if (opt_link && lr == NULL) {
        lr = calloc(1, sizeof *lr);
    }
    int stats_failed = fill_result(lr) != 0;
    int r = opt_run_dir != NULL
                ? loupe__write_run_into(kept, opt_run_dir, opt_file_prefix,
                                        loupe__formats(kept_formats, kept_perfetto), lr)
                : loupe__write_run(kept, opt_log_dir, opt_run_name,
                                   loupe__formats(kept_formats, kept_perfetto), lr);
    if (r != 0) {
        loupe__err_append("the trace is kept: call loupe_write_last_trace() with another "
                          "directory");
    } else if (stats_failed) {
        r = loupe__err(LOUPE_ENOMEM,
                       "loupe_stop_trace: the files of %s were written, but the "
                       "per-thread figures could not be copied (out of memory)",
                       lr->run_dir);
    }
    const char *lpath = lr != NULL ? loupe_trace_result_path(lr, LOUPE_FORMAT_PERFETTO_JSON) : NULL;
    char *link = opt_link && r == 0 && lpath != NULL ? strdup(lpath) : NULL;
    uint32_t link_ms = opt_link_ms;
    pthread_mutex_unlock(&session_lock);
    if (lr != res) {
        loupe_trace_result_free(lr);
        free(lr);
    }
    if (link != NULL) { /* served without the session lock: it may take minutes */
        r = loupe__session_serve_link(link, link_ms);
        if (r != 0) {
            loupe__err_append("the trace was written: %s", link);
        }
        free(link);
    }
    if (r == 0 && bad != NULL) {
        r = loupe__result_check(bad, "loupe_stop_trace");
    }
    return r;
}

static void cap_meta_clear(void) {
    for (size_t i = 0; i < cap_meta_count; i++) {
        free_meta_str(cap_meta[i].key);
        free_meta_str(cap_meta[i].value);
    }
    cap_meta_count = 0;
}

static int cap_meta_set(const loupe_kv *kv, size_t n) {
    cap_meta_clear();
    for (size_t i = 0; i < n; i++) {
        char *k = strdup(kv[i].key), *v = strdup(kv[i].value);
        if (k == NULL || v == NULL) {
            free(k);
            free(v);
            cap_meta_clear();
            return loupe__err(LOUPE_ENOMEM, "out of memory starting the capture");
        }
        cap_meta[cap_meta_count++] = (loupe_kv){k, v};
    }
    return 0;
}

int loupe__capture_start(const loupe__capture_opts *o) {
    (void)pthread_once(&fork_once, install_fork_handlers);
    int level = o->level, device_level = o->device_level;
    if (level < 0 || level > 3) {
        return loupe__err(LOUPE_EINVALID, "host_tracer_level %d is out of range (0..3)", level);
    }
    if (device_level < 0 || device_level > 2) {
        return loupe__err(LOUPE_EINVALID, "device_tracer_level %d is out of range (0..2)",
                          device_level);
    }
    if (o->sampling_hz > 100000u) {
        return loupe__err(LOUPE_EINVALID, "sample_hz %u is above the maximum of 100000",
                          o->sampling_hz);
    }
    if (o->metadata_count > LOUPE__CAPTURE_META_MAX) {
        return loupe__err(LOUPE_EINVALID, "%zu capture metadata keys, over the limit of %d",
                          o->metadata_count, LOUPE__CAPTURE_META_MAX);
    }
    for (size_t i = 0; i < o->metadata_count; i++) {
        const loupe_kv *kv = &o->metadata[i];
        if (kv->key == NULL || kv->value == NULL || strncmp(kv->key, "loupe_clock_", 12) != 0) {
            return loupe__err(LOUPE_EINVALID, "capture metadata key %zu is not a loupe_clock_ key",
                              i);
        }
    }
    pthread_mutex_lock(&session_lock);
    if (active) {
        int e = capturing ? loupe__err(LOUPE_EALREADY_STARTED,
                                       "another capture is running in this process; try again "
                                       "when it ends")
                          : loupe__err(LOUPE_EALREADY_STARTED,
                                       "a local trace is running in this process "
                                       "(loupe_start_trace() with log_dir %s); it was not "
                                       "disturbed",
                                       opt_log_dir); /* formatted under the lock */
        pthread_mutex_unlock(&session_lock);
        return e;
    }
    /* The kept trace stays: it belongs to the last local session. Captures use the default
     * capacities, keeping the first events. */
    int r = cap_meta_set(o->metadata, o->metadata_count);
    if (r == 0) {
        r = prepare_recorder(0, 0, 0, 0, 0, 0);
    }
    if (r == 0) {
        r = open_spool(NULL, NULL, 0, 0); /* no spool in a capture */
    }
    if (r != 0) {
        cap_meta_clear();
        pthread_mutex_unlock(&session_lock);
        return r;
    }
    capturing = 1;
    opt_func_filtering = 0; /* no function tracing in a capture: no filters either */
    /* Sampling as `loupe record` does it (default stacks); level 0 records nothing at all. */
    opt_sampling_hz = level == 0 ? 0 : o->sampling_hz;
    opt_sampling_stacks = 0;
    open_session(level, 0);
    loupe__cupti_start(device_level != 0); /* never fails the capture: see its note */
    pthread_mutex_unlock(&session_lock);
    return 0;
}

int loupe__capture_stop(loupe_model **out) {
    *out = NULL;
    pthread_mutex_lock(&session_lock);
    if (!active || !capturing) {
        pthread_mutex_unlock(&session_lock);
        return loupe__err(LOUPE_ENOT_STARTED, "no capture is running");
    }
    capturing = 0;
    loupe_model *m = collect_session();
    cap_meta_clear();
    opt_sampling_hz = 0; /* the capture's rate is not the next local session's */
    pthread_mutex_unlock(&session_lock);
    if (m == NULL) {
        return loupe__err(LOUPE_ENOMEM, "out of memory while collecting the capture");
    }
    *out = m;
    return 0;
}

int loupe__session_state(void) {
    pthread_mutex_lock(&session_lock);
    int s = !active ? LOUPE__IDLE : capturing ? LOUPE__CAPTURING : LOUPE__TRACING;
    pthread_mutex_unlock(&session_lock);
    return s;
}

int loupe_stop_trace_if_active(loupe_trace_result *res) {
    if (!loupe_is_tracing()) {
        if (loupe__result_check(res, "loupe_stop_trace_if_active") != 0) {
            return LOUPE_EINVALID;
        }
        loupe__result_reset(res);
        return 0;
    }
    int r = loupe_stop_trace(res);
    return r == LOUPE_ENOT_STARTED ? 0 : r; /* another thread stopped it meanwhile */
}

int loupe_write_last_trace(const char *log_dir, loupe_trace_result *res) {
    if (loupe__result_check(res, "loupe_write_last_trace") != 0) {
        return LOUPE_EINVALID;
    }
    loupe__result_reset(res);
    if (log_dir == NULL || log_dir[0] == 0) {
        return loupe__err(LOUPE_EINVALID, "loupe_write_last_trace: log_dir is required");
    }
    pthread_mutex_lock(&session_lock);
    if (active && !capturing) {
        pthread_mutex_unlock(&session_lock);
        return loupe__err(LOUPE_EALREADY_STARTED,
                          "loupe_write_last_trace: a session is TRACING; its start dropped the "
                          "previous trace");
    }
    if (kept == NULL) {
        pthread_mutex_unlock(&session_lock);
        return loupe__err(LOUPE_ENO_TRACE,
                          "loupe_write_last_trace: no trace is kept (none was recorded since "
                          "the process started, or a start dropped it)");
    }
    int stats_failed = fill_result(res) != 0;
    int r = loupe__write_run(kept, log_dir, opt_run_name,
                             loupe__formats(kept_formats, kept_perfetto), res);
    if (r == 0 && stats_failed) {
        r = loupe__err(LOUPE_ENOMEM,
                       "loupe_write_last_trace: the files of %s were written, but "
                       "the per-thread figures could not be copied (out of memory)",
                       res->run_dir);
    }
    pthread_mutex_unlock(&session_lock);
    return r;
}

int loupe_stop_and_get_fdo_profile(const loupe_fdo_options *o, char **out, size_t *len,
                                   loupe_trace_result *res) {
    if (out == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_stop_and_get_fdo_profile: out is NULL");
    }
    *out = NULL;
    if (len != NULL) {
        *len = 0;
    }
    int r = loupe_stop_trace(res);
    if (r != 0) {
        return r;
    }
    pthread_mutex_lock(&session_lock);
    if (kept == NULL) { /* another thread's start dropped it since the stop */
        r = loupe__err(LOUPE_ENO_TRACE, "loupe_stop_and_get_fdo_profile: the stopped trace was "
                                        "dropped by a loupe_start_trace() on another thread");
    } else {
        r = loupe_fdo_profile(kept, o, out, len, NULL);
    }
    pthread_mutex_unlock(&session_lock);
    return r;
}

/* Keys loupe writes itself into the trace's metadata (chrome_json.c). */
static int reserved_key(const char *k) {
    static const char *const reserved[] = {
        "loupe_version",  "clock", "tsc_ghz",         "origin_unix_ns", "duration_ns",
        "host",           "pid",   "events_recorded", "events_dropped", "unmatched_ends",
        "truncated_zones"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        if (strcmp(k, reserved[i]) == 0) {
            return 1;
        }
    }
    return strncmp(k, "loupe_", 6) == 0;
}

/* The metadata table holds strdup()'d strings behind loupe_kv's const pointers. */
static void free_meta_str(const char *s) {
    free((void *)(uintptr_t)s);
}

static int set_meta(const char *key, const char *value);

int loupe_set_metadata(const char *key, const char *value) {
    if (key == NULL || value == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_set_metadata: key and value are required");
    }
    if (reserved_key(key)) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_set_metadata: \"%s\" is a key loupe writes itself (loupe_*, "
                          "clock, tsc_ghz, origin_unix_ns, duration_ns, host, pid, "
                          "events_recorded, events_dropped, unmatched_ends, truncated_zones)",
                          key);
    }
    return set_meta(key, value);
}

/* For libloupe_mpi.so: now on the trace's own clock, as unix-epoch ns (the session's origin plus
 * CLOCK_MONOTONIC since its start: what the events' times are), so that a clock offset measured
 * with it corrects the origin's own error too; CLOCK_REALTIME when no session is active. */
int64_t loupe__trace_unix_ns(void) {
    if (!__atomic_load_n(&active, __ATOMIC_ACQUIRE)) {
        return (int64_t)loupe__realtime_ns();
    }
    return (int64_t)start_real_ns + (int64_t)(loupe__mono_ns() - start_mono_ns);
}

/* For libloupe_mpi.so: the active session's origin (unix-epoch ns, what its events' times count
 * from); 0 when no session is active. */
int64_t loupe__trace_origin_unix_ns(void) {
    return __atomic_load_n(&active, __ATOMIC_ACQUIRE) ? (int64_t)start_real_ns : 0;
}

/* For libloupe_mpi.so (src/mpi/pmpi.c), which writes loupe's own MPI and clock-offset keys:
 * only those two families, so that no other key loupe writes can be set twice. */
int loupe__set_metadata_mpi(const char *key, const char *value) {
    if (key == NULL || value == NULL ||
        (strncmp(key, "loupe_mpi_", 10) != 0 && strncmp(key, "loupe_clock_", 12) != 0)) {
        return loupe__err(LOUPE_EINVALID, "loupe__set_metadata_mpi: not an MPI or clock key");
    }
    return set_meta(key, value);
}

static int set_meta(const char *key, const char *value) {
    pthread_mutex_lock(&meta_lock);
    for (size_t i = 0; i < meta_count; i++) {
        if (strcmp(meta[i].key, key) == 0) {
            char *v = strdup(value);
            if (v == NULL) {
                pthread_mutex_unlock(&meta_lock);
                return loupe__err(LOUPE_ENOMEM, "loupe_set_metadata: out of memory");
            }
            free_meta_str(meta[i].value);
            meta[i].value = v;
            pthread_mutex_unlock(&meta_lock);
            return 0;
        }
    }
    if (meta_count == sizeof(meta) / sizeof(meta[0])) {
        pthread_mutex_unlock(&meta_lock);
        return loupe__err(LOUPE_ETOO_MANY_KEYS,
                          "loupe_set_metadata: more than 256 keys; \"%s\" is not added (replace "
                          "an existing key, or loupe_clear_metadata())",
                          key);
    }
    char *k = strdup(key), *v = strdup(value);
    if (k == NULL || v == NULL) {
        free(k);
        free(v);
        pthread_mutex_unlock(&meta_lock);
        return loupe__err(LOUPE_ENOMEM, "loupe_set_metadata: out of memory");
    }
    meta[meta_count++] = (loupe_kv){k, v};
    pthread_mutex_unlock(&meta_lock);
    return 0;
}

void loupe_clear_metadata(void) {
    pthread_mutex_lock(&meta_lock);
    for (size_t i = 0; i < meta_count; i++) {
        free_meta_str(meta[i].key);
        free_meta_str(meta[i].value);
    }
    meta_count = 0;
    pthread_mutex_unlock(&meta_lock);
}

int loupe__scope_start(const loupe_trace_options *o, int *rc_out) {
    int r = loupe_start_trace(o);
    if (rc_out != NULL) {
        *rc_out = r;
    }
    return r == 0;
}

int loupe__scope_stop(loupe_trace_result *res, int *rc_out) {
    int r = loupe_stop_trace_if_active(res);
    if (rc_out != NULL) {
        *rc_out = r;
    }
    return 0;
}
