/* sink.c: see sink.h. */
#include "export/sink.h"

#include "base/error.h"
#include "base/utf8.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int write_gz(loupe__sink *s, const void *p, size_t n) {
    int e = loupe__pgz_write(s->pgz, p, n);
    if (e != 0) {
        s->err_no = e;
        return e == ENOMEM ? LOUPE_ENOMEM : LOUPE_EIO;
    }
    return 0;
}

static int write_file(loupe__sink *s, const void *p, size_t n) {
    if (fwrite(p, 1, n, s->f) != n) {
        s->err_no = errno ? errno : EIO;
        return LOUPE_EIO;
    }
    return 0;
}

static int write_mem(loupe__sink *s, const void *p, size_t n) {
    if (s->mem_cap - s->mem_len < n + 1) {
        size_t nc = s->mem_cap ? s->mem_cap : 65536;
        while (nc - s->mem_len < n + 1) {
            nc *= 2;
        }
        char *m = realloc(s->mem, nc);
        if (m == NULL) {
            s->err_no = ENOMEM;
            return LOUPE_ENOMEM;
        }
        s->mem = m;
        s->mem_cap = nc;
    }
    memcpy(s->mem + s->mem_len, p, n);
    s->mem_len += n;
    s->mem[s->mem_len] = 0;
    return 0;
}

int loupe__sink_open_file(loupe__sink *s, const char *path, int gz) {
    memset(s, 0, offsetof(loupe__sink, buf));
    s->path = path;
    s->f = fopen(path, "wb");
    if (s->f == NULL) {
        int e = errno;
        int r = loupe__err(e == ENOMEM ? LOUPE_ENOMEM : LOUPE_EIO,
                           "cannot create %s: %s (errno %d)", path, strerror(e), e);
        return e == ENOMEM ? loupe__err_nomem(r) : r;
    }
    if (gz) {
        if (loupe__pgz_open(&s->pgz, s->f) != 0) {
            fclose(s->f);
            s->f = NULL;
            return loupe__err_nomem(loupe__err(LOUPE_ENOMEM, "cannot create %s: %s (errno %d)",
                                               path, strerror(ENOMEM), ENOMEM));
        }
        s->write = write_gz;
    } else {
        s->write = write_file;
    }
    return 0;
}

void loupe__sink_open_mem(loupe__sink *s) {
    memset(s, 0, offsetof(loupe__sink, buf));
    s->path = "memory";
    s->write = write_mem;
}

void loupe__sink_flush(loupe__sink *s) {
    if (s->n > 0 && s->err == 0) {
        s->err = s->write(s, s->buf, s->n);
    }
    s->bytes += s->n;
    s->n = 0;
}

int loupe__sink_close(loupe__sink *s) {
    loupe__sink_flush(s);
    if (s->pgz != NULL) {
        errno = 0;
        int e = loupe__pgz_close(s->pgz); /* the last block and the gzip trailer */
        if (e != 0 && s->err == 0) {
            s->err = e == ENOMEM ? LOUPE_ENOMEM : LOUPE_EIO;
            s->err_no = e;
        }
        s->pgz = NULL;
    }
    if (s->f != NULL) {
        if (fflush(s->f) != 0 && s->err == 0) {
            s->err = LOUPE_EIO;
            s->err_no = errno ? errno : EIO;
        }
        if (fclose(s->f) != 0 && s->err == 0) {
            s->err = LOUPE_EIO;
            s->err_no = errno ? errno : EIO;
        }
        s->f = NULL;
    }
    if (s->err == 0) {
        return 0;
    }
    if (s->err_no == 0) {
        return loupe__err(s->err, "cannot write %s: %s", s->path, loupe_strerror(s->err));
    }
    return loupe__err(s->err, "cannot write %s: %s (errno %d)", s->path, strerror(s->err_no),
                      s->err_no);
}

void loupe__sink_discard(loupe__sink *s) {
    s->n = 0;
    if (s->pgz != NULL) {
        loupe__pgz_discard(s->pgz);
        s->pgz = NULL;
    }
    if (s->f != NULL) {
        fclose(s->f);
        s->f = NULL;
    }
    free(s->mem);
    s->mem = NULL;
    s->mem_len = s->mem_cap = 0;
}

void loupe__put_u64(loupe__sink *s, uint64_t v) {
    char tmp[24];
    int i = 24;
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    loupe__put(s, tmp + i, (size_t)(24 - i));
}

void loupe__put_i64(loupe__sink *s, int64_t v) {
    if (v < 0) {
        loupe__put(s, "-", 1);
        loupe__put_u64(s, (uint64_t)0 - (uint64_t)v);
    } else {
        loupe__put_u64(s, (uint64_t)v);
    }
}

void loupe__put_us(loupe__sink *s, uint64_t ns) {
    loupe__put_u64(s, ns / 1000);
    char frac[4] = {'.', (char)('0' + ns / 100 % 10), (char)('0' + ns / 10 % 10),
                    (char)('0' + ns % 10)};
    loupe__put(s, frac, 4);
}

void loupe__put_double(loupe__sink *s, double d) {
    if (!isfinite(d)) {
        loupe__puts(s, "null"); /* JSON has no NaN/Infinity; Perfetto aborts on them */
        return;
    }
    /* The shortest of %.15g..%.17g that reads back as the same double. */
    char tmp[40];
    int n = 0;
    for (int prec = 15; prec <= 17; prec++) {
        n = snprintf(tmp, sizeof tmp, "%.*g", prec, d);
        if (strtod(tmp, NULL) == d) {
            break;
        }
    }
    for (char *c = tmp; *c; c++) {
        if (*c == ',') {
            *c = '.'; /* a program's LC_NUMERIC must not break the JSON */
        }
    }
    loupe__put(s, tmp, (size_t)n);
    if (strpbrk(tmp, ".eEn") == NULL) {
        loupe__put(s, ".0", 2); /* stays a double when read back */
    }
}

void loupe__put_jstr(loupe__sink *s, const char *str) {
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)str;
    loupe__put(s, "\"", 1);
    const unsigned char *run = p;
    while (*p) {
        unsigned c = *p;
        if (c >= 0x20 && c != '"' && c != '\\' && c < 0x80) {
            p++;
            continue;
        }
        size_t ul = c >= 0x80 ? loupe__utf8_seq_len(p, 4) : 1; /* 4: stops at the NUL */
        if (c >= 0x80 && ul > 0) {
            p += ul;
            continue;
        }
        loupe__put(s, (const char *)run, (size_t)(p - run));
        if (c == '"') {
            loupe__put(s, "\\\"", 2);
        } else if (c == '\\') {
            loupe__put(s, "\\\\", 2);
        } else if (c == '\n') {
            loupe__put(s, "\\n", 2);
        } else if (c == '\t') {
            loupe__put(s, "\\t", 2);
        } else if (c < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            loupe__put(s, e, 6);
        } else {
            loupe__put(s, "\\ufffd", 6); /* an invalid UTF-8 byte */
        }
        p++;
        run = p;
    }
    loupe__put(s, (const char *)run, (size_t)(p - run));
    loupe__put(s, "\"", 1);
}
