/* rundir.c: the jax.profiler run directory (../shared/reference/jax_profiler.md §2):
 *   <log_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.trace.json.gz
 *                                                   perfetto_trace.json.gz (when asked)
 * The run directory is claimed with mkdir(2), which is atomic: a second session in the same
 * second (or another process sharing log_dir) gets <name>_1, _2, ... and never another's files.
 * Each file is written as <file>.tmp and renamed when complete, so a failed write (disk full,
 * EIO) leaves no truncated file that looks finished; the error names the path and errno.
 */
#include "export/writers.h"

#include "base/error.h"
#include "base/fs.h"

#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int chrome_json(const loupe_model *m, loupe__sink *s) {
    return loupe__write_chrome_json(m, s, 0);
}

static int perfetto_json(const loupe_model *m, loupe__sink *s) {
    return loupe__write_chrome_json(m, s, 1);
}

/* The files a run directory can get, in the order they are written. A format's writer lives in
 * its own file (writers.h); adding a format is adding a row here. */
typedef struct output {
    unsigned format;    /* LOUPE_FORMAT_* bit */
    const char *suffix; /* after "<host>" when host_prefixed, else the whole file name */
    int host_prefixed;
    int gz;
    int (*write)(const loupe_model *m, loupe__sink *s);
    size_t result_field; /* offsetof(loupe_trace_result, ...) of the path */
} output;

static const output outputs[] = {
    {LOUPE_FORMAT_CHROME_JSON, ".trace.json.gz", 1, 1, chrome_json,
     offsetof(loupe_trace_result, trace_json)},
    {LOUPE_FORMAT_PERFETTO_JSON, "perfetto_trace.json.gz", 0, 1, perfetto_json,
     offsetof(loupe_trace_result, perfetto_json)},
    {LOUPE_FORMAT_PERFETTO_PROTO, ".pftrace", 1, 0, loupe__write_perfetto_proto,
     offsetof(loupe_trace_result, perfetto_proto)},
    {LOUPE_FORMAT_XPLANE, ".xplane.pb", 1, 0, loupe__write_xplane,
     offsetof(loupe_trace_result, xplane)},
};

static int write_file(const loupe_model *m, const char *path, const output *o) {
    return loupe__write_file(m, path, o->gz, o->write);
}

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

unsigned loupe__formats_available(void) {
    unsigned f = 0;
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
        f |= outputs[i].format;
    }
    return f;
}

unsigned loupe__formats(unsigned formats, int create_perfetto_trace) {
    unsigned f = formats ? formats : LOUPE__FORMATS_DEFAULT;
    return create_perfetto_trace ? f | LOUPE_FORMAT_PERFETTO_JSON : f;
}

int loupe__write_run(const loupe_model *m, const char *log_dir, const char *run_name,
                     unsigned formats, loupe_trace_result *res) {
    if (formats == 0) {
        return loupe__err(LOUPE_EINVALID, "no output format selected");
    }
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
    char run[LOUPE_PATH_MAX];
    for (int i = 0;; i++) {
        int n = i == 0 ? snprintf(run, sizeof run, "%s/%s", dir, name)
                       : snprintf(run, sizeof run, "%s/%s_%d", dir, name, i);
        if (n >= (int)sizeof run - 300) {
            return loupe__err(LOUPE_EINVALID, "run directory path is too long: %s", run);
        }
        if (mkdir(run, 0777) == 0) {
            break;
        }
        if (errno != EEXIST || i >= 100000) {
            int e = errno;
            return loupe__err(LOUPE_EIO, "cannot create %s: %s (errno %d)", run, strerror(e), e);
        }
    }
    char host[256];
    loupe__hostname(host, sizeof host);
    char written[sizeof outputs / sizeof outputs[0]][LOUPE_PATH_MAX + 300];
    size_t nwritten = 0;
    int r = 0;
    /* A format's own limit (XPlane's 2 GiB protobuf ceiling: LOUPE_EUNSUPPORTED) skips that file
     * only: the other files are still written and kept, and the call returns the limit error.
     * Any other failure (I/O, memory) undoes the whole run directory. */
    int limit_err = 0;
    char limit_detail[1024] = "";
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0] && r == 0; i++) {
        const output *o = &outputs[i];
        if (!(formats & o->format)) {
            continue;
        }
        char *path = written[nwritten];
        if (o->host_prefixed) {
            snprintf(path, sizeof written[0], "%s/%.200s%s", run, host, o->suffix);
        } else {
            snprintf(path, sizeof written[0], "%s/%s", run, o->suffix);
        }
        r = write_file(m, path, o);
        if (r == LOUPE_EUNSUPPORTED) {
            limit_err = r;
            snprintf(limit_detail, sizeof limit_detail, "%s", loupe_last_error());
            r = 0;
            continue;
        }
        if (r == 0) {
            nwritten++;
            if (res != NULL) {
                copy_path((char *)res + o->result_field, path);
            }
        }
    }
    if (r == 0 && limit_err != 0 && nwritten == 0) {
        r = limit_err; /* nothing at all could be written */
    }
    if (r != 0) {
        /* Leave nothing half-done: remove what this call wrote. */
        for (size_t i = 0; i < nwritten; i++) {
            unlink(written[i]);
        }
        rmdir(run);
        if (res != NULL) {
            for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++) {
                ((char *)res + outputs[i].result_field)[0] = 0;
            }
        }
        return r;
    }
    if (res != NULL) {
        copy_path(res->run_dir, run);
    }
    pthread_mutex_lock(&last_lock);
    copy_path(last_run, run);
    pthread_mutex_unlock(&last_lock);
    if (limit_err != 0) {
        return loupe__err(limit_err, "%s; the other files of %s were written", limit_detail, run);
    }
    return 0;
}

const char *loupe__last_run_dir(char *buf, size_t size) {
    pthread_mutex_lock(&last_lock);
    snprintf(buf, size, "%s", last_run);
    pthread_mutex_unlock(&last_lock);
    return buf;
}
