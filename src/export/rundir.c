/* rundir.c: the jax.profiler run directory (jax.profiler's trace() docs, and TensorBoard's
 * profile plugin, which lists plugins/profile/<run>/):
 *   <log_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host><suffix> for each format of the
 * registry (registry.c) the session asked for (perfetto_trace.json.gz is not host-prefixed).
 * The run directory is claimed with mkdir(2), which is atomic: a second session in the same
 * second (or another process sharing log_dir) gets <name>_1, _2, ... and never another's files.
 * Each file is written as <file>.tmp and renamed when complete, so a failed write (disk full,
 * EIO) leaves no truncated file that looks finished; the error names the path and errno.
 * The loupe_trace_result helpers (loupe/trace.h) live here too: this file fills its paths.
 * A run directory given by the session (loupe_trace_options.run_dir: the one `loupe record` made
 * for a process tree, or an MPI job's, docs/mpi.md) is used as it is, not claimed, and the files
 * are named by the process's prefix (<host>.<pid>.xplane.pb, rank0003.xplane.pb).
 */
#include "export/writers.h"

#include "base/error.h"
#include "base/fs.h"
#include "export/registry.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* The last run directory written (for `loupe record`, whose program may stop its own session). */
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;
static char last_run[LOUPE_PATH_MAX];

/* Paths were checked to fit LOUPE_PATH_MAX when the run directory was made. */
static void copy_path(char dst[LOUPE_PATH_MAX], const char *src) {
    size_t n = strlen(src);
    if (n >= LOUPE_PATH_MAX) {
        n = LOUPE_PATH_MAX - 1;
    }
    memcpy(dst, src, n);
    dst[n] = 0;
}

void loupe_trace_result_free(loupe_trace_result *r) {
    if (r == NULL) {
        return;
    }
    for (size_t i = 0; i < r->file_count && r->files != NULL; i++) {
        free(r->files[i].path);
    }
    free(r->files);
    free(r->run_dir);
    free(r->threads);
    size_t size = r->size;
    memset(r, 0, sizeof *r);
    r->size = size;
}

const char *loupe_trace_result_path(const loupe_trace_result *r, unsigned format_bit) {
    for (size_t i = 0; r != NULL && r->files != NULL && i < r->file_count; i++) {
        if (r->files[i].format == format_bit) {
            return r->files[i].path;
        }
    }
    return NULL;
}

int loupe__result_check(const loupe_trace_result *r, const char *fn) {
    if (r != NULL && r->size != 0 && r->size < sizeof *r) {
        return loupe__err(LOUPE_EINVALID,
                          "%s: result->size is %zu, neither 0 nor sizeof(loupe_trace_result) "
                          "(%zu): set it with loupe_trace_result r = {.size = sizeof r}",
                          fn, r->size, sizeof *r);
    }
    return 0;
}

void loupe__result_reset(loupe_trace_result *r) {
    if (r != NULL) {
        size_t size = r->size;
        memset(r, 0, sizeof *r);
        r->size = size;
    }
}

unsigned loupe__formats_available(void) {
    unsigned f = 0;
    for (size_t i = 0; i < loupe_format_count(); i++) {
        const loupe_format_desc *d = loupe_format_info(i);
        if (d->can_write) {
            f |= d->run_dir_bit;
        }
    }
    return f;
}

unsigned loupe__formats(unsigned formats, int create_perfetto_trace) {
    unsigned f = formats ? formats : LOUPE__FORMATS_DEFAULT;
    return create_perfetto_trace ? f | LOUPE_FORMAT_PERFETTO_JSON : f;
}

/* One file of a run directory, written by whichever worker takes it. */
typedef struct write_job {
    const loupe_model *m;
    const loupe__format *f;
    const char *path;
    int r;
    char *detail; /* the worker's error detail (details are per thread), malloc'd; NULL if none */
} write_job;

typedef struct write_pool {
    write_job *jobs;
    size_t n;
    size_t next; /* atomic: the next job to take */
} write_pool;

static void run_jobs(write_pool *p) {
    for (;;) {
        size_t i = __atomic_fetch_add(&p->next, 1, __ATOMIC_RELAXED);
        if (i >= p->n) {
            return;
        }
        write_job *j = &p->jobs[i];
        j->r = loupe__write_file(j->m, j->path, j->f->d.gzip, j->f->write);
        if (j->r != 0) {
            j->detail = strdup(loupe_last_error());
        }
    }
}

static void *write_worker(void *arg) {
    run_jobs(arg);
    return NULL;
}

/* Writes the files on up to as many threads as there are CPUs (at most 4): the model is read
 * only, the writers share nothing, and the stop's wall time becomes that of its slowest file
 * (the gzipped JSON) instead of their sum. LOUPE_STOP_THREADS=1..4 sets the number of threads. The
 * helpers block every signal (the traced program's handlers run on its own threads); when a thread
 * cannot be made, this thread writes alone. */
static void write_all(write_job *jobs, size_t n) {
    write_pool p = {jobs, n, 0};
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("LOUPE_STOP_THREADS"); /* 1 = the calling thread only */
    if (env != NULL && env[0] >= '1' && env[0] <= '4' && env[1] == 0) {
        cpus = env[0] - '0';
    }
    size_t helpers = n > 1 && cpus > 1 ? (size_t)(cpus < 4 ? cpus : 4) - 1 : 0;
    if (helpers > n - 1) {
        helpers = n > 0 ? n - 1 : 0;
    }
    pthread_t th[3];
    size_t started = 0;
    if (helpers > 0) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        for (; started < helpers; started++) {
            if (pthread_create(&th[started], NULL, write_worker, &p) != 0) {
                break;
            }
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    run_jobs(&p);
    for (size_t i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
    }
}

/* Claims a new run directory under <log_dir>/plugins/profile (made with parents) into run
 * (LOUPE_PATH_MAX bytes): mkdir(2) is atomic, so a name taken by another session or process
 * gets _1, _2, ... */
static int claim_run(const char *log_dir, const char *run_name, char run[LOUPE_PATH_MAX]) {
    char dir[LOUPE_PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/plugins/profile", log_dir) >= (int)sizeof dir) {
        return loupe__err(LOUPE_EINVALID, "log_dir is too long (%zu bytes)", strlen(log_dir));
    }
    int r0 = loupe__mkdirs(dir);
    if (r0 != 0) {
        return r0; /* the path and errno are in the detail */
    }
    char name[128];
    if (run_name != NULL && run_name[0]) {
        snprintf(name, sizeof name, "%s", run_name);
    } else {
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        strftime(name, sizeof name, "%Y_%m_%d_%H_%M_%S", &tm);
    }
    for (int i = 0;; i++) {
        int n = i == 0 ? snprintf(run, LOUPE_PATH_MAX, "%s/%s", dir, name)
                       : snprintf(run, LOUPE_PATH_MAX, "%s/%s_%d", dir, name, i);
        if (n >= LOUPE_PATH_MAX - 300) {
            return loupe__err(LOUPE_EINVALID, "run directory path is too long: %s", run);
        }
        if (mkdir(run, 0777) == 0) {
            return 0;
        }
        if (errno != EEXIST || i >= 100000) {
            int e = errno;
            return loupe__err(LOUPE_EIO, "cannot create %s: %s (errno %d)", run, strerror(e), e);
        }
    }
}

int loupe_run_dir_make(const char *log_dir, const char *run_name, char *buf, size_t size) {
    if (log_dir == NULL || log_dir[0] == 0 || buf == NULL || size == 0) {
        return loupe__err(LOUPE_EINVALID, "loupe_run_dir_make: %s",
                          buf == NULL || size == 0 ? "no buffer" : "log_dir is required");
    }
    if (run_name != NULL && (strchr(run_name, '/') != NULL || strcmp(run_name, ".") == 0 ||
                             strcmp(run_name, "..") == 0)) {
        return loupe__err(LOUPE_EINVALID,
                          "loupe_run_dir_make: run_name \"%s\" is not one path component",
                          run_name);
    }
    char run[LOUPE_PATH_MAX];
    int r = claim_run(log_dir, run_name, run);
    if (r != 0) {
        return r;
    }
    if (strlen(run) >= size) {
        rmdir(run);
        return loupe__err(LOUPE_EINVALID, "loupe_run_dir_make: %s needs %zu bytes, buf holds %zu",
                          run, strlen(run) + 1, size);
    }
    memcpy(buf, run, strlen(run) + 1);
    return 0;
}

/* A value on one line of the counts file: its newlines and carriage returns as spaces. */
static void put_line_value(FILE *f, const char *key, const char *v) {
    fprintf(f, "%s=", key);
    for (const char *c = v != NULL ? v : ""; *c; c++) {
        fputc(*c == '\n' || *c == '\r' ? ' ' : *c, f);
    }
    fputc('\n', f);
}

/* The counts file of a process's trace under `loupe record` ($LOUPE_RECORD_COUNTS_DIR, a
 * directory of its own: a file in the run directory would be a host to XProf, which takes every
 * file name there for one): <dir>/<prefix>.counts, the figures of its report
 * (loupe_model_counts_of(), its pid, name and spool error) as key=value lines, so that `loupe
 * record` says them without reading the traces back (2.3 GB for 100 M events in 0.4). Written
 * as .tmp and renamed; a failure only costs the reader the read back. */
static void write_counts(const loupe_model *m, const char *prefix) {
    const char *dir = getenv("LOUPE_RECORD_COUNTS_DIR");
    if (dir == NULL || dir[0] == 0 || strlen(dir) >= LOUPE_PATH_MAX) {
        return;
    }
    loupe_model_counts c;
    loupe_model_counts_of(m, &c);
    if (c.events_recorded == 0 && c.events_dropped == 0 && c.samples == 0) {
        return; /* an empty trace reads back in no time (and a fork child that only execs
                 * removes its files again: no counts file outlives them) */
    }
    char path[LOUPE_PATH_MAX + 300], tmp[LOUPE_PATH_MAX + 310];
    snprintf(path, sizeof path, "%s/%.200s.counts", dir, prefix);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "we");
    if (f == NULL) {
        return;
    }
    const char *spool_error = "";
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, "loupe_spool_error") == 0) {
            spool_error = m->metadata[i].value;
        }
    }
    fprintf(f, "loupe_counts=1\npid=%llu\n", (unsigned long long)m->pid);
    put_line_value(f, "name", m->process_name);
    fprintf(f,
            "events_recorded=%llu\nevents_dropped=%llu\nsamples=%llu\nsamples_lost=%llu\n"
            "events_reentered=%llu\nshm_lost=%llu\nfunctions_filtered=%llu\n"
            "capacity_needed=%llu\nsession_needed=%llu\nthreads=%zu\ngpu_lost=%llu\n",
            (unsigned long long)c.events_recorded, (unsigned long long)c.events_dropped,
            (unsigned long long)c.samples, (unsigned long long)c.samples_lost,
            (unsigned long long)c.events_reentered, (unsigned long long)c.shm_lost,
            (unsigned long long)c.functions_filtered, (unsigned long long)c.capacity_needed,
            (unsigned long long)c.session_needed, c.threads, (unsigned long long)c.gpu_lost);
    put_line_value(f, "spool_error", spool_error);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0) {
        (void)unlink(tmp);
    }
}

/* Writes m's files into the existing directory run, named <prefix><suffix> (prefix: the host
 * name when NULL or ""; the formats that are not host-prefixed get "<prefix>." in front when a
 * prefix is given, so that processes sharing run never write the same file). made: run was made
 * for this call and is removed on failure. */
static int write_files(const loupe_model *m, const char *run, const char *prefix, int made,
                       unsigned formats, loupe_trace_result *res) {
    char host[256];
    int own_prefix = prefix != NULL && prefix[0] != 0;
    if (own_prefix) {
        snprintf(host, sizeof host, "%s", prefix);
    } else {
        loupe__hostname(host, sizeof host);
    }
    size_t nformats = loupe_format_count();
    char(*written)[LOUPE_PATH_MAX + 300] = calloc(nformats, sizeof *written);
    loupe_trace_file *files = res != NULL ? calloc(nformats, sizeof *files) : NULL;
    char *run_copy = res != NULL ? strdup(run) : NULL;
    if (written == NULL || (res != NULL && (files == NULL || run_copy == NULL))) {
        free(written);
        free(files);
        free(run_copy);
        if (made) {
            rmdir(run);
        }
        return loupe__err(LOUPE_ENOMEM, "cannot write %s: out of memory", run);
    }
    /* The files to write, in the registry's order. */
    write_job *jobs = calloc(nformats, sizeof *jobs);
    if (jobs == NULL) {
        free(written);
        free(files);
        free(run_copy);
        if (made) {
            rmdir(run);
        }
        return loupe__err(LOUPE_ENOMEM, "cannot write %s: out of memory", run);
    }
    size_t njobs = 0;
    for (size_t i = 0; i < nformats; i++) {
        const loupe__format *o = loupe__format_row(loupe_format_info(i));
        if (o->d.run_dir_bit == 0 || !(formats & o->d.run_dir_bit) || o->write == NULL) {
            continue;
        }
        char *path = written[njobs];
        if (o->d.host_prefixed) {
            snprintf(path, sizeof written[0], "%s/%.200s%s", run, host, o->d.suffix);
        } else if (own_prefix) {
            snprintf(path, sizeof written[0], "%s/%.200s.%s", run, host, o->d.suffix);
        } else {
            snprintf(path, sizeof written[0], "%s/%s", run, o->d.suffix);
        }
        jobs[njobs++] = (write_job){m, o, path, 0, NULL};
    }
    write_all(jobs, njobs);
    /* A format's own limit (XPlane's 2 GiB protobuf ceiling: LOUPE_EUNSUPPORTED) skips that file
     * only: the other files are still written and kept, and the call returns the limit error.
     * Any other failure (I/O, memory) undoes the whole run directory; the first such failure in
     * the registry's order is the one returned. */
    int limit_err = 0;
    char limit_detail[1024] = "";
    size_t nwritten = 0;
    int r = 0;
    for (size_t i = 0; i < njobs; i++) {
        write_job *j = &jobs[i];
        if (j->r == LOUPE_EUNSUPPORTED) {
            if (limit_err == 0) {
                limit_err = j->r;
                snprintf(limit_detail, sizeof limit_detail, "%s", j->detail ? j->detail : "");
            }
        } else if (j->r != 0) {
            if (r == 0) {
                r = loupe__err(j->r, "%s", j->detail ? j->detail : "");
            }
        } else {
            if (i != nwritten) {
                memcpy(written[nwritten], written[i], sizeof written[0]);
            }
            if (files != NULL && r == 0) {
                files[nwritten].format = j->f->d.run_dir_bit;
                files[nwritten].path = strdup(written[nwritten]);
                if (files[nwritten].path == NULL) {
                    r = loupe__err(LOUPE_ENOMEM, "cannot write %s: out of memory", run);
                }
            }
            nwritten++;
        }
        free(j->detail);
    }
    free(jobs);
    if (r == 0 && limit_err != 0 && nwritten == 0) {
        r = limit_err; /* nothing at all could be written */
    }
    if (r != 0) {
        /* Leave nothing half-done: remove what this call wrote. */
        for (size_t i = 0; i < nwritten; i++) {
            unlink(written[i]);
            if (files != NULL) {
                free(files[i].path);
            }
        }
        if (made) {
            rmdir(run);
        }
        free(written);
        free(files);
        free(run_copy);
        return r;
    }
    free(written);
    if (own_prefix && nwritten != 0) {
        write_counts(m, host);
    }
    if (res != NULL) {
        res->run_dir = run_copy;
        res->files = files;
        res->file_count = nwritten;
        if (nwritten == 0) {
            free(files);
            res->files = NULL;
        }
    }
    pthread_mutex_lock(&last_lock);
    copy_path(last_run, run);
    pthread_mutex_unlock(&last_lock);
    if (limit_err != 0) {
        return loupe__err(limit_err, "%s; the other files of %s were written", limit_detail, run);
    }
    return 0;
}

int loupe__write_run(const loupe_model *m, const char *log_dir, const char *run_name,
                     unsigned formats, loupe_trace_result *res) {
    if (formats == 0) {
        return loupe__err(LOUPE_EINVALID, "no output format selected");
    }
    char run[LOUPE_PATH_MAX];
    int r = claim_run(log_dir, run_name, run);
    return r != 0 ? r : write_files(m, run, NULL, 1, formats, res);
}

int loupe__write_run_into(const loupe_model *m, const char *run_dir, const char *file_prefix,
                          unsigned formats, loupe_trace_result *res) {
    if (formats == 0) {
        return loupe__err(LOUPE_EINVALID, "no output format selected");
    }
    if (strlen(run_dir) >= LOUPE_PATH_MAX - 300) {
        return loupe__err(LOUPE_EINVALID, "run directory path is too long: %s", run_dir);
    }
    int r = loupe__mkdirs(run_dir);
    return r != 0 ? r : write_files(m, run_dir, file_prefix, 0, formats, res);
}

const char *loupe__last_run_dir(char *buf, size_t size) {
    pthread_mutex_lock(&last_lock);
    snprintf(buf, size, "%s", last_run);
    pthread_mutex_unlock(&last_lock);
    return buf;
}
