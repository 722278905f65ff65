/* trace_write.c: loupe_trace_write() (loupe/writer.h): one model into one file of a chosen
 * format, through the writers of writers.h and a file sink; the file appears only when complete
 * (<path>.tmp, then rename), like the run directory's files (rundir.c). */
#include "export/writers.h"

#include "base/error.h"

#include <errno.h>
#include <loupe/writer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

loupe_file_format loupe_file_format_from_name(const char *path) {
    if (path == NULL) {
        return LOUPE_FILE_UNKNOWN;
    }
    if (ends_with(path, ".json") || ends_with(path, ".json.gz")) {
        return LOUPE_FILE_CHROME_JSON;
    }
    if (ends_with(path, ".xplane.pb") || ends_with(path, ".xspace.pb")) {
        return LOUPE_FILE_XPLANE;
    }
    if (ends_with(path, ".pftrace") || ends_with(path, ".perfetto-trace") ||
        ends_with(path, ".perfetto") || ends_with(path, ".pb")) {
        return LOUPE_FILE_PERFETTO_PROTO;
    }
    if (ends_with(path, ".folded") || ends_with(path, ".collapsed") || ends_with(path, ".txt")) {
        return LOUPE_FILE_FOLDED;
    }
    return LOUPE_FILE_UNKNOWN;
}

loupe_file_format loupe_file_format_parse(const char *name) {
    static const struct {
        const char *name;
        loupe_file_format f;
    } names[] = {{"json", LOUPE_FILE_CHROME_JSON},       {"chrome", LOUPE_FILE_CHROME_JSON},
                 {"xplane", LOUPE_FILE_XPLANE},          {"perfetto", LOUPE_FILE_PERFETTO_PROTO},
                 {"pftrace", LOUPE_FILE_PERFETTO_PROTO}, {"folded", LOUPE_FILE_FOLDED},
                 {"collapsed", LOUPE_FILE_FOLDED}};
    for (size_t i = 0; name != NULL && i < sizeof names / sizeof names[0]; i++) {
        if (strcmp(name, names[i].name) == 0) {
            return names[i].f;
        }
    }
    return LOUPE_FILE_UNKNOWN;
}

static int chrome_json(const loupe_model *m, loupe__sink *s) {
    return loupe__write_chrome_json(m, s, 0);
}

int loupe_trace_write(const loupe_model *m, const char *path, loupe_file_format format) {
    if (m == NULL || path == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_trace_write: %s is NULL",
                          m == NULL ? "the model" : "path");
    }
    int gz = 0;
    int (*write)(const loupe_model *, loupe__sink *) = NULL;
    switch (format) {
    case LOUPE_FILE_CHROME_JSON:
        gz = ends_with(path, ".gz");
        break;
    case LOUPE_FILE_XPLANE:
        write = loupe__write_xplane;
        break;
    case LOUPE_FILE_PERFETTO_PROTO:
        write = loupe__write_perfetto_proto;
        break;
    case LOUPE_FILE_FOLDED:
        write = loupe__write_folded;
        break;
    case LOUPE_FILE_UNKNOWN:
    default:
        return loupe__err(LOUPE_EINVALID, "loupe_trace_write: unknown format %d", (int)format);
    }
    return loupe__write_file(m, path, gz, write != NULL ? write : chrome_json);
}

int loupe__write_file(const loupe_model *m, const char *path, int gz,
                      int (*write)(const loupe_model *, loupe__sink *)) {
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    if (tmp == NULL) {
        return loupe__err(LOUPE_ENOMEM, "cannot write %s: out of memory", path);
    }
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp", 5);
    loupe__sink s;
    int r = loupe__sink_open_file(&s, tmp, gz); /* detail: "cannot create <tmp>: ..." */
    if (r != 0) {
        free(tmp);
        return r;
    }
    r = write(m, &s);
    if (r == 0) {
        r = loupe__sink_close(&s); /* detail: "cannot write <tmp>: ... (errno N)" */
    } else {
        loupe__sink_discard(&s); /* keeps the writer's detail */
    }
    if (r == 0 && rename(tmp, path) != 0) {
        int e = errno;
        r = loupe__err(LOUPE_EIO, "cannot write %s: rename from %s: %s (errno %d)", path, tmp,
                       strerror(e), e);
    }
    if (r != 0) {
        unlink(tmp);
        free(tmp);
        return r;
    }
    free(tmp);
    return 0;
}
