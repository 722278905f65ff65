/* rundir.c: the jax.profiler run directory (../shared/reference/jax_profiler.md §2):
 *   <log_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/<host>.trace.json.gz
 *                                                   perfetto_trace.json.gz (when asked)
 * The run directory is claimed with mkdir(2), which is atomic: a second session in the same
 * second (or another process sharing log_dir) gets <name>_1, _2, ... and never another's files.
 * Each file is written as <file>.tmp and renamed when complete, so a failed write (disk full,
 * EIO) leaves no truncated file that looks finished; the error names the path and errno.
 */
#include "export/writers.h"

#include "core/internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int write_file(const loupe_model *m, const char *path, int perfetto_variant) {
    char tmp[LOUPE_PATH_MAX + 320];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    loupe__sink s;
    int r = loupe__sink_open_file(&s, tmp, 1);
    if (r != 0) {
        return loupe__err(LOUPE_EIO, "cannot create %s: %s (errno %d)", tmp, strerror(-r), -r);
    }
    r = loupe__write_chrome_json(m, &s, perfetto_variant);
    int c = loupe__sink_close(&s);
    if (r == 0) {
        r = c;
    }
    if (r == 0 && rename(tmp, path) != 0) {
        r = -errno;
    }
    if (r != 0) {
        unlink(tmp);
        return loupe__err(r == -12 ? LOUPE_ENOMEM : LOUPE_EIO, "cannot write %s: %s (errno %d)",
                          path, strerror(-r), -r);
    }
    return 0;
}

/* Paths were checked to fit LOUPE_PATH_MAX when the run directory was made. */
static void copy_path(char dst[LOUPE_PATH_MAX], const char *src) {
    size_t n = strlen(src);
    if (n >= LOUPE_PATH_MAX) {
        n = LOUPE_PATH_MAX - 1;
    }
    memcpy(dst, src, n);
    dst[n] = 0;
}

int loupe__write_run(const loupe_model *m, const char *log_dir, const char *run_name,
                     unsigned formats, int perfetto, loupe_trace_result *res) {
    (void)formats; /* Chrome JSON is the one format so far; the default set */
    char dir[LOUPE_PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/plugins/profile", log_dir) >= (int)sizeof dir) {
        return loupe__err(LOUPE_EINVALID, "log_dir is too long (%zu bytes)", strlen(log_dir));
    }
    int r = loupe__mkdirs(dir);
    if (r != 0) {
        return loupe__err(LOUPE_EIO, "cannot create %s: %s (errno %d)", dir, strerror(-r), -r);
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
    char path[LOUPE_PATH_MAX + 300];
    snprintf(path, sizeof path, "%s/%.200s.trace.json.gz", run, host);
    r = write_file(m, path, 0);
    if (r == 0 && perfetto) {
        char ppath[LOUPE_PATH_MAX + 300];
        snprintf(ppath, sizeof ppath, "%s/perfetto_trace.json.gz", run);
        r = write_file(m, ppath, 1);
        if (r == 0 && res != NULL) {
            copy_path(res->perfetto_json, ppath);
        }
    }
    if (r != 0) {
        /* Leave nothing half-done: remove what this call wrote. */
        unlink(path);
        rmdir(run);
        if (res != NULL) {
            res->perfetto_json[0] = 0;
        }
        return r;
    }
    if (res != NULL) {
        copy_path(res->run_dir, run);
        copy_path(res->trace_json, path);
    }
    return 0;
}
