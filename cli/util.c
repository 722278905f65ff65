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
