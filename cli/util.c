/* util.c: small helpers the verbs share (cli.h). */
#include "cli.h"
#include <errno.h>
#include <unistd.h>
#include <loupe/fdo.h>
#include <loupe/error.h>

#include <loupe/model.h>
#include <loupe/reader.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void loupe_cli_fmt_dur(char *buf, size_t size, uint64_t ns) {
    if (ns < 1000) {
        snprintf(buf, size, "%llu ns", (unsigned long long)ns);
    } else if (ns < 1000000) {
        snprintf(buf, size, "%.3f \xc2\xb5s", (double)ns / 1e3);
    } else if (ns < 1000000000) {
        snprintf(buf, size, "%.3f ms", (double)ns / 1e6);
    } else {
        snprintf(buf, size, "%.3f s", (double)ns / 1e9);
    }
}

json_t *loupe_cli_jstr(const char *s) {
    json_t *j = json_string(s);
    if (j != NULL) {
        return j;
    }
    char *c = strdup(s);
    if (c == NULL) {
        return NULL;
    }
    for (char *p = c; *p; p++) {
        *p = (unsigned char)*p >= 0x80 ? '?' : *p;
    }
    j = json_string(c);
    free(c);
    return j;
}

json_int_t loupe_cli_jint(uint64_t v) {
    return v > INT64_MAX ? INT64_MAX : (json_int_t)v;
}

void loupe_cli_format_names(char *buf, size_t size, int (*keep)(const loupe_format_desc *d),
                            const char *last) {
    size_t total = 0, count = 0, n = 0;
    for (size_t i = 0; i < loupe_format_count(); i++) {
        total += keep(loupe_format_info(i)) != 0;
    }
    if (size > 0) {
        buf[0] = 0;
    }
    for (size_t i = 0; i < loupe_format_count() && n < size; i++) {
        const loupe_format_desc *d = loupe_format_info(i);
        if (!keep(d)) {
            continue;
        }
        const char *sep = count == 0 ? "" : count + 1 == total ? last : ", ";
        int w = snprintf(buf + n, size - n, "%s%s", sep, d->name);
        n += w > 0 ? (size_t)w : 0;
        count++;
    }
}

const char *loupe_cli_meta(const struct loupe_model *m, const char *key) {
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, key) == 0) {
            return m->metadata[i].value;
        }
    }
    return NULL;
}

void loupe_cli_reader_warnings(const char *verb, const char *label, const struct loupe_model *m) {
    if (loupe_trace_find_skipped()[0] != 0) {
        fprintf(stderr, "loupe %s: warning: skipped runs without a complete trace: %s\n", verb,
                loupe_trace_find_skipped());
    }
    for (size_t i = 0; m != NULL && i < m->warning_count; i++) {
        fprintf(stderr, "loupe %s: warning: %s%s%s\n", verb, label != NULL ? label : "",
                label != NULL ? ": " : "", m->warnings[i]);
    }
}

const char *loupe_cli_group(uint64_t v, char *buf, size_t size) {
    char digits[32];
    int n = snprintf(digits, sizeof digits, "%llu", (unsigned long long)v);
    size_t o = 0;
    for (int k = 0; k < n && o + 2 < size; k++) {
        if (k > 0 && (n - k) % 3 == 0) {
            buf[o++] = ',';
        }
        buf[o++] = digits[k];
    }
    buf[o] = 0;
    return buf;
}

const char *loupe_cli_proc_stat(long pid, char *buf, size_t size) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (f == NULL || size == 0) {
        if (f != NULL) {
            fclose(f);
        }
        return NULL;
    }
    size_t n = fread(buf, 1, size - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *rp = strrchr(buf, ')');
    return rp != NULL && rp[1] == ' ' ? rp + 1 : NULL;
}

int loupe_cli_write_fdo(const char *verb, const struct loupe_model *m, const char *module,
                        const char *path, struct loupe_fdo_stats *st) {
    loupe_fdo_options o = {.format = LOUPE_FDO_LLVM_TEXT, .module = module};
    char *text = NULL;
    size_t len = 0;
    int rc = loupe_fdo_profile(m, &o, &text, &len, st);
    if (rc != 0) {
        fprintf(stderr, "loupe %s: %s: %s: %s\n", verb, path, loupe_strerror(rc),
                loupe_last_error());
        return rc;
    }
    size_t n = strlen(path);
    char *tmp = malloc(n + 5);
    FILE *f = tmp != NULL ? (snprintf(tmp, n + 5, "%s.tmp", path), fopen(tmp, "wb")) : NULL;
    int ok = f != NULL && fwrite(text, 1, len, f) == len;
    int e = errno;
    if (f != NULL && fclose(f) != 0 && ok) {
        ok = 0;
        e = errno;
    }
    if (ok && rename(tmp, path) != 0) {
        ok = 0;
        e = errno;
    }
    if (!ok) {
        if (tmp != NULL) {
            unlink(tmp);
        }
        rc = LOUPE_EIO;
        fprintf(stderr, "loupe %s: cannot write %s: %s (errno %d)\n", verb, path, strerror(e), e);
    }
    free(tmp);
    free(text);
    return rc;
}

void loupe_cli_fdo_report(const char *verb, const char *path, const struct loupe_fdo_stats *st) {
    fprintf(stderr,
            "loupe %s: %s: sample profile of %s (LLVM text, for clang -fprofile-sample-use): "
            "%llu functions, %llu of %llu samples on its lines",
            verb, path, st->module, (unsigned long long)st->functions,
            (unsigned long long)st->samples_used, (unsigned long long)st->samples);
    if (st->samples_line0 != 0 || st->samples_no_debug_info != 0) {
        fprintf(stderr, "; left out: %llu on line 0, %llu without line tables",
                (unsigned long long)st->samples_line0,
                (unsigned long long)st->samples_no_debug_info);
    }
    if (st->samples_elsewhere != 0) {
        fprintf(stderr, "; %llu in other modules", (unsigned long long)st->samples_elsewhere);
    }
    fputc('\n', stderr);
}

/* ---- the progress meter of long reads (libloupe's src/base/progress.h reports to it) ---- */

typedef void (*progress_fn)(const char *stage, const char *name, uint64_t done, uint64_t total);
void loupe__progress_set(progress_fn fn); /* libloupe (src/base/progress.h) */

static const char *m_verb, *m_stage;
static uint64_t m_start_ns, m_last_ns, m_after_ns;
static int m_shown;

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void meter(const char *stage, const char *name, uint64_t done, uint64_t total) {
    uint64_t now = mono_ns();
    if (now - m_start_ns < m_after_ns ||
        (m_shown && stage == m_stage && now - m_last_ns < 200000000u)) {
        return; /* a short read shows none; a long one a line redrawn 5 times a second, and at
                   once at each new stage */
    }
    m_last_ns = now;
    m_stage = stage;
    m_shown = 1;
    const char *base = strrchr(name, '/');
    base = base != NULL ? base + 1 : name;
    if (total > 0) {
        unsigned pct = done >= total ? 100u : (unsigned)(done * 100u / total);
        fprintf(stderr, "\rloupe %s: %s %s: %3u%% (%.1f of %.1f MiB)\033[K", m_verb, stage, base,
                pct, (double)done / 1048576.0, (double)total / 1048576.0);
    } else {
        fprintf(stderr, "\rloupe %s: %s %s: %.1f MiB\033[K", m_verb, stage, base,
                (double)done / 1048576.0);
    }
    fflush(stderr);
}

void loupe_cli_progress_begin(const char *verb) {
    if (!loupe_cli_tty()) {
        return;
    }
    const char *e = getenv("LOUPE_PROGRESS_AFTER_MS");
    char *end = NULL;
    unsigned long long after = e != NULL ? strtoull(e, &end, 10) : 1000u;
    if (e != NULL && (end == e || *end != 0 || after > 3600000u)) {
        after = 1000u;
    }
    m_verb = verb;
    m_after_ns = (uint64_t)after * 1000000u;
    m_start_ns = mono_ns();
    m_shown = 0;
    m_stage = NULL;
    loupe__progress_set(meter);
}

void loupe_cli_progress_end(void) {
    loupe__progress_set(NULL);
    if (m_shown) {
        fprintf(stderr, "\r\033[K"); /* the meter's line goes: what follows starts clean */
        m_shown = 0;
    }
}
