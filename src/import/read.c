/* read.c: the generic door in, loupe_trace_read() (loupe/reader.h): load a file (gzip or plain,
 * through zlib), choose the reader from its first bytes, hand the bytes over.
 *
 * Order of work, so that a hostile file costs little:
 * 1. The first 64 KiB (gunzipped) are read and sniffed: XPlane, then Perfetto protobuf, then
 *    JSON ('[' or '{' after blanks and a UTF-8 BOM). A file that is none of them is refused
 *    here, before anything else is read (a 1 GiB sparse file of zeros costs 64 KiB). A prefix
 *    that the binary sniffs reject (a truncated .pftrace / .xplane.pb) goes to the reader its
 *    name says, whose error names the format and the byte offset, never to the JSON parser.
 * 2. The rest is read under a size limit: LOUPE_READ_MAX_BYTES when set, else 4 GiB, and for a
 *    gzip stream also 64 times its compressed size (at least 64 MiB): DEFLATE expands at most
 *    ~1032:1 (RFC 1951's longest match, 258 bytes from 2 bits), which turns 1 MiB into 1 GiB;
 *    traces compress 5 to 30 times (loupe's own JSON about 12).
 * 3. Chrome JSON is streamed: the reader (chrome_json.c) asks for more as it goes, in a window
 *    of a few MiB, so memory holds the model, not the text. The binary formats are read whole.
 * 4. A gzip stream cut short is read up to the cut, and the model says so (a warning).
 */
#include "base/array.h"
#include "base/error.h"
#include "base/progress.h"
#include "import/readers.h"
#include "model/builder.h"
#include "model/merge.h"

#include <loupe/reader.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

#define SNIFF_BYTES ((size_t)64 << 10)
#define TEXT_PAD 16 /* the readers' contract: 16 spare bytes after the text (readers.h) */
#define DEFAULT_MAX ((uint64_t)4 << 30)
#define GZIP_RATIO 64
#define GZIP_FLOOR ((uint64_t)64 << 20)

typedef enum kind { K_NONE, K_JSON, K_XPLANE, K_PERFETTO } kind;

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static kind sniff(const char *path, const char *b, size_t n) {
    if (loupe__xplane_sniff(b, n)) {
        return K_XPLANE;
    }
    if (loupe__perfetto_proto_sniff(b, n)) {
        return K_PERFETTO;
    }
    size_t i = n >= 3 && memcmp(b, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
    while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r')) {
        i++;
    }
    if (i < n && (b[i] == '[' || b[i] == '{')) {
        return K_JSON;
    }
    /* The sniffs want whole fields: a cut file is recognised by its name. */
    if (ends_with(path, ".pftrace") || ends_with(path, ".pftrace.gz") ||
        ends_with(path, ".perfetto-trace")) {
        return K_PERFETTO;
    }
    if (ends_with(path, ".xplane.pb") || ends_with(path, ".xplane.pb.gz")) {
        return K_XPLANE;
    }
    return K_NONE;
}

static int read_limit(uint64_t *out, int *from_env) {
    const char *e = getenv("LOUPE_READ_MAX_BYTES");
    *out = DEFAULT_MAX;
    *from_env = 0;
    if (e == NULL || *e == 0) {
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(e, &end, 10);
    if (errno != 0 || *end != 0 || v == 0 || e[0] == '-') {
        return loupe__err(LOUPE_EINVALID, "LOUPE_READ_MAX_BYTES=%s: not a positive number of bytes",
                          e);
    }
    *out = v;
    *from_env = 1;
    return 0;
}

/* Reads from f into buf[n..] until cap - TEXT_PAD - 1 or the end; *eof once the stream ended.
 * Returns 0 or a LOUPE_E* code; *cut when a gzip stream ended early (n holds what was read). */
/* The size of the file read_one() reads now (its progress' total). */
static _Thread_local uint64_t t_file_bytes;

static int fill(gzFile f, const char *path, char *buf, size_t *n, size_t want, int *eof, int *cut) {
    while (*n < want) {
        size_t room = want - *n;
        if (room > (16u << 20)) {
            room = 16u << 20; /* 16 MiB a call: a progress report between two */
        }
        errno = 0;
        int r = gzread(f, buf + *n, (unsigned)room);
        if (r < 0) {
            int e = errno, zerr = 0;
            const char *msg = gzerror(f, &zerr);
            if (zerr == Z_ERRNO) {
                return loupe__err(LOUPE_EIO, "cannot read %s: %s (errno %d)", path, strerror(e), e);
            }
            if (zerr == Z_MEM_ERROR) {
                return loupe__err(LOUPE_ENOMEM, "out of memory reading %s (gzip)", path);
            }
            return loupe__err(LOUPE_EFORMAT, "%s: gzip: %s", path, msg);
        }
        if (r == 0) {
            int zerr = Z_OK;
            (void)gzerror(f, &zerr);
            *cut = zerr == Z_BUF_ERROR; /* zlib says a cut stream only here */
            *eof = 1;
            return 0;
        }
        *n += (size_t)r;
        z_off_t at = gzoffset(f);
        loupe__progress("reading", path, at > 0 ? (uint64_t)at : 0, t_file_bytes);
    }
    return 0;
}

/* The rest of a JSON file, for the streaming reader: gzread under the limit. */
typedef struct source {
    gzFile f;
    const char *path;
    uint64_t total, max;
    int gz, from_env, eof, cut;
} source;

static int limit_error(const source *s) {
    return loupe__err(LOUPE_EFORMAT,
                      "%s: more than %llu bytes%s; loupe stops there (a gzip bomb?). Set "
                      "LOUPE_READ_MAX_BYTES to a larger number of bytes to read it",
                      s->path, (unsigned long long)s->max,
                      s->gz && !s->from_env ? " once uncompressed (64 times the file, at least "
                                              "64 MiB, at most 4 GiB)"
                                            : "");
}

static int more_json(void *ctx, char *buf, size_t cap, size_t *got) {
    source *s = ctx;
    *got = 0;
    if (s->eof) {
        return 0;
    }
    if (s->total >= s->max) {
        char one;
        if (gzread(s->f, &one, 1) == 0) {
            s->eof = 1;
            return 0;
        }
        return limit_error(s);
    }
    if ((uint64_t)cap > s->max - s->total) {
        cap = (size_t)(s->max - s->total);
    }
    size_t n = 0;
    int rc = fill(s->f, s->path, buf, &n, cap, &s->eof, &s->cut);
    s->total += n;
    *got = n;
    return rc;
}

static int read_one(const char *path, loupe_model **out) {
    if (out != NULL) {
        *out = NULL;
    }
    if (path == NULL || out == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_trace_read: %s is NULL",
                          path == NULL ? "path" : "out");
    }
    uint64_t limit;
    int from_env, rc;
    if ((rc = read_limit(&limit, &from_env)) != 0) {
        return rc;
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        return loupe__err(LOUPE_EIO, "%s: %s", path, strerror(errno));
    }
    if (S_ISDIR(st.st_mode)) {
        /* a run directory several processes wrote: their merged view (run.c) */
        return loupe__read_run(path, out);
    }
    errno = 0;
    gzFile f = gzopen(path, "rb");
    if (f == NULL) {
        int e = errno;
        return loupe__err(e ? LOUPE_EIO : LOUPE_ENOMEM, "%s: %s", path,
                          e ? strerror(e) : "out of memory opening it");
    }
    gzbuffer(f, 1u << 18);
    t_file_bytes = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
    int gz = !gzdirect(f);
    uint64_t max = limit;
    if (!gz && S_ISREG(st.st_mode) && (uint64_t)st.st_size > max) {
        gzclose(f);
        return loupe__err(LOUPE_EFORMAT,
                          "%s: the file holds %llu bytes; loupe reads traces of at most %llu "
                          "bytes (4 GiB unless LOUPE_READ_MAX_BYTES says otherwise)",
                          path, (unsigned long long)st.st_size, (unsigned long long)max);
    }
    if (gz && !from_env && S_ISREG(st.st_mode)) {
        uint64_t r = (uint64_t)st.st_size * GZIP_RATIO;
        r = r < GZIP_FLOOR ? GZIP_FLOOR : r;
        max = r < max ? r : max;
    }
    size_t cap = SNIFF_BYTES + TEXT_PAD + 1;
    char *buf = malloc(cap);
    if (buf == NULL) {
        gzclose(f);
        return loupe__err(LOUPE_ENOMEM, "out of memory reading %s (%zu bytes)", path, cap);
    }
    size_t n = 0;
    int eof = 0, cut = 0;
    rc = fill(f, path, buf, &n, SNIFF_BYTES, &eof, &cut);
    kind k = rc == 0 ? sniff(path, buf, n) : K_NONE;
    if (rc == 0 && n == 0) {
        rc = loupe__err(LOUPE_EFORMAT, "%s: empty file (not a trace)", path);
    } else if (rc == 0 && k == K_NONE) {
        char hex[32] = "";
        for (size_t i = 0, o = 0; i < n && i < 4; i++) {
            o += (size_t)snprintf(hex + o, sizeof hex - o, "%s%02x", i ? " " : "",
                                  (unsigned char)buf[i]);
        }
        rc = loupe__err(LOUPE_EFORMAT,
                        "%s: not a trace: it starts with bytes %s (Chrome JSON starts with '[' "
                        "or '{', Perfetto protobuf and XPlane with 0a)",
                        path, hex);
    }
    if (rc == 0 && k == K_JSON) {
        /* Chrome JSON streams: the sniffed bytes first, then the rest in a window. */
        source src = {f, path, n, max, gz, from_env, eof, cut};
        rc = loupe__chrome_json_read_stream(path, buf, n, cap, more_json, &src, out);
        gzclose(f);
        if (rc == 0 && src.cut) {
            rc = loupe__model_warn(*out,
                                   "%s: the gzip stream is cut short after %llu bytes: read up "
                                   "to there (the rest of the file is lost)",
                                   path, (unsigned long long)src.total);
            if (rc != 0) {
                loupe_model_free(*out);
                *out = NULL;
            }
        }
        return rc;
    }
    /* The rest, doubling; a regular uncompressed file in one allocation. */
    if (rc == 0 && !eof && !gz && S_ISREG(st.st_mode)) {
        size_t want = (size_t)st.st_size + TEXT_PAD + 1;
        char *nb = want > cap ? realloc(buf, want) : buf;
        if (nb == NULL) {
            rc = loupe__err(LOUPE_ENOMEM, "out of memory reading %s (%zu bytes)", path, want);
        } else {
            buf = nb;
            cap = want > cap ? want : cap;
            loupe__advise_huge(buf, cap); /* the faults of a fresh process's read: array.h */
        }
    }
    while (rc == 0 && !eof) {
        if (n >= max) {
            char more;
            int r = gzread(f, &more, 1);
            if (r == 0) {
                break;
            }
            source lim = {f, path, n, max, gz, from_env, 0, 0};
            rc = limit_error(&lim);
            break;
        }
        if (cap - TEXT_PAD - 1 - n == 0) {
            uint64_t nc = (uint64_t)cap * 2;
            if (nc > max + TEXT_PAD + 1) {
                nc = max + TEXT_PAD + 1;
            }
            if (nc > SIZE_MAX) {
                rc = loupe__err(LOUPE_ENOMEM, "out of memory reading %s (%llu bytes)", path,
                                (unsigned long long)nc);
                break;
            }
            char *nb = realloc(buf, (size_t)nc);
            if (nb == NULL) {
                rc = loupe__err(LOUPE_ENOMEM, "out of memory reading %s (%llu bytes)", path,
                                (unsigned long long)nc);
                break;
            }
            buf = nb;
            cap = (size_t)nc;
        }
        size_t want = cap - TEXT_PAD - 1;
        if ((uint64_t)want > max) {
            want = (size_t)max;
        }
        rc = fill(f, path, buf, &n, want, &eof, &cut);
    }
    gzclose(f);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    buf[n] = 0;
    switch (k) {
    case K_XPLANE:
        rc = loupe__xplane_read_mem(path, buf, n, out);
        break;
    case K_PERFETTO:
        rc = loupe__perfetto_proto_read_mem(path, buf, n, out);
        break;
    default:
        rc = loupe__chrome_json_read_mem(path, buf, n, out);
        break;
    }
    if (rc == 0 && cut) {
        rc = loupe__model_warn(*out,
                               "%s: the gzip stream is cut short after %zu bytes: read up to "
                               "there (the rest of the file is lost)",
                               path, n);
        if (rc != 0) {
            loupe_model_free(*out);
            *out = NULL;
        }
    }
    return rc;
}

int loupe_trace_read(const char *path, loupe_model **out) {
    int rc = read_one(path, out);
    if (rc == 0) {
        loupe__model_lift_process_meta(*out); /* the command line and parent: metadata keys */
    }
    return rc;
}

int loupe__trace_read_mem(const char *name, char *buf, size_t n, loupe_model **out) {
    switch (sniff(name, buf, n)) {
    case K_XPLANE:
        return loupe__xplane_read_mem(name, buf, n, out);
    case K_PERFETTO:
        return loupe__perfetto_proto_read_mem(name, buf, n, out);
    default:
        return loupe__chrome_json_read_mem(name, buf, n, out);
    }
}
