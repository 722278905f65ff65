/* query.c: see query.h. A small hand-written parser: split on '&', then on the first '=',
 * percent-decode both halves into fixed buffers, and check each known parameter strictly. */
#include "server/query.h"
#include "base/ascii.h"

#include "base/error.h"
#include "session/capture.h"

#include <stdio.h>
#include <string.h>

#define PART_MAX 64 /* decoded key or value, bytes (with the NUL) */

/* Decodes p[0..n) into out (PART_MAX bytes). 0, -1 when too long, -2 on a bad %XX or a NUL. */
static int decode(const char *p, size_t n, char out[PART_MAX]) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            if (i + 2 >= n) {
                return -2;
            }
            int h = loupe__hexval(p[i + 1]), l = loupe__hexval(p[i + 2]);
            if (h < 0 || l < 0) {
                return -2;
            }
            c = (char)(h * 16 + l);
            i += 2;
        }
        if (c == 0) {
            return -2;
        }
        if (o + 1 >= PART_MAX) {
            return -1;
        }
        out[o++] = c;
    }
    out[o] = 0;
    return 0;
}

/* Copies s for an error message: printable ASCII kept, anything else as '?', cut at 32 bytes. */
static void shown(const char *s, char out[40]) {
    size_t o = 0;
    for (; s[o] && o < 32; o++) {
        unsigned char c = (unsigned char)s[o];
        out[o] = c >= 0x20 && c < 0x7f && c != '"' && c != '\\' ? (char)c : '?';
    }
    if (s[o]) {
        out[o++] = '.';
        out[o++] = '.';
    }
    out[o] = 0;
}

/* A whole decimal number in [lo, hi]; no sign, no spaces, at most 10 digits. */
static int parse_uint(const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    uint64_t x = 0;
    size_t i = 0;
    for (; v[i]; i++) {
        if (v[i] < '0' || v[i] > '9' || i >= 10) {
            return -1;
        }
        x = x * 10 + (uint64_t)(v[i] - '0');
    }
    if (i == 0 || x < lo || x > hi) {
        return -1;
    }
    *out = x;
    return 0;
}

/* A whole decimal number of at most 19 digits, with a '-' when neg_ok: every int64 but the
 * most negative one. */
static int parse_i64(const char *v, int neg_ok, int64_t *out) {
    int neg = neg_ok && v[0] == '-';
    const char *d = v + neg;
    int64_t x = 0;
    size_t i = 0;
    for (; d[i]; i++) {
        if (d[i] < '0' || d[i] > '9' || i >= 19) {
            return -1;
        }
        x = x * 10 + (d[i] - '0');
    }
    if (i == 0) {
        return -1;
    }
    *out = neg ? -x : x;
    return 0;
}

/* A malformed query: err holds what is wrong; the detail gets the same text. */
static int bad(const char *err, size_t size) {
    return loupe__err(LOUPE_EINVALID, "%s", size > 0 ? err : "malformed query");
}

int loupe__query_servable(size_t i) {
    const loupe_format_desc *d = loupe_format_info(i);
    return d != NULL && d->mime_type != NULL;
}

/* The registry index of d (loupe_format_count() for NULL). */
static size_t index_of(const loupe_format_desc *d) {
    size_t i = 0;
    while (i < loupe_format_count() && loupe_format_info(i) != d) {
        i++;
    }
    return i;
}

/* "json, xplane or perfetto": the names the server sends, in the registry's order. */
static void servable_names(char *buf, size_t size) {
    size_t total = 0, count = 0, n = 0;
    for (size_t i = 0; i < loupe_format_count(); i++) {
        total += loupe__query_servable(i) != 0;
    }
    buf[0] = 0;
    for (size_t i = 0; i < loupe_format_count() && n < size; i++) {
        if (!loupe__query_servable(i)) {
            continue;
        }
        const char *sep = count == 0 ? "" : count + 1 == total ? " or " : ", ";
        int w = snprintf(buf + n, size - n, "%s%s", sep, loupe_format_info(i)->name);
        n += w > 0 ? (size_t)w : 0;
        count++;
    }
}

int loupe__query_parse(const char *q, size_t len, loupe__query *out, char *err, size_t size) {
    out->duration_ms = 0;
    out->level = 2;
    out->format = index_of(loupe_format_by_file_format(LOUPE_FILE_CHROME_JSON));
    if (size > 0) {
        err[0] = 0;
    }
    if (len > LOUPE__QUERY_MAX) {
        snprintf(err, size, "the query string is %zu bytes, over the limit of %d", len,
                 LOUPE__QUERY_MAX);
        return bad(err, size);
    }
    out->sample_hz = LOUPE__CAPTURE_SAMPLING_HZ;
    out->have_clock = out->have_uncertainty = out->have_at = out->have_base = 0;
    out->clock_offset_ns = 0;
    out->clock_uncertainty_ns = out->clock_at_ns = out->clock_base_ns = 0;
    int seen_duration = 0, seen_level = 0, seen_format = 0, seen_hz = 0, nparams = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && q[j] != '&') {
            j++;
        }
        if (j == i) { /* an empty part ("a=1&&b=2", a trailing '&'): skipped */
            i = j + 1;
            continue;
        }
        if (++nparams > LOUPE__QUERY_MAX_PARAMS) {
            snprintf(err, size, "more than %d parameters", LOUPE__QUERY_MAX_PARAMS);
            return bad(err, size);
        }
        size_t eq = i;
        while (eq < j && q[eq] != '=') {
            eq++;
        }
        char key[PART_MAX], val[PART_MAX], ks[40], vs[40];
        int rk = decode(q + i, eq - i, key);
        if (rk != 0) {
            snprintf(err, size, "a parameter name is %s",
                     rk == -1 ? "too long" : "badly percent-encoded");
            return bad(err, size);
        }
        shown(key, ks);
        int rv = eq < j ? decode(q + eq + 1, j - eq - 1, val) : 0;
        if (eq == j) {
            val[0] = 0;
        }
        if (rv != 0) {
            snprintf(err, size, "%s: the value is %s", ks,
                     rv == -1 ? "too long" : "badly percent-encoded");
            return bad(err, size);
        }
        shown(val, vs);
        uint64_t x;
        if (strcmp(key, "duration_ms") == 0) {
            if (seen_duration++) {
                snprintf(err, size, "duration_ms: given more than once");
                return bad(err, size);
            }
            if (parse_uint(val, 1, UINT32_MAX, &x) != 0) {
                snprintf(err, size,
                         "duration_ms: \"%s\" is not a whole number of milliseconds from 1 to "
                         "4294967295",
                         vs);
                return bad(err, size);
            }
            out->duration_ms = (uint32_t)x;
        } else if (strcmp(key, "host_tracer_level") == 0) {
            if (seen_level++) {
                snprintf(err, size, "host_tracer_level: given more than once");
                return bad(err, size);
            }
            if (parse_uint(val, 0, 3, &x) != 0) {
                snprintf(err, size,
                         "host_tracer_level: \"%s\" is not 0 (nothing), 1 (critical), 2 (info) "
                         "or 3 (verbose)",
                         vs);
                return bad(err, size);
            }
            out->level = (int)x;
        } else if (strcmp(key, "format") == 0) {
            if (seen_format++) {
                snprintf(err, size, "format: given more than once");
                return bad(err, size);
            }
            const loupe_format_desc *d = loupe_format_by_name(val);
            size_t fi = index_of(d);
            if (d == NULL || !loupe__query_servable(fi)) {
                char names[128];
                servable_names(names, sizeof names);
                snprintf(err, size, "format: \"%s\" is not %s", vs, names);
                return bad(err, size);
            }
            out->format = fi;
        } else if (strcmp(key, "sample_hz") == 0) {
            if (seen_hz++) {
                snprintf(err, size, "sample_hz: given more than once");
                return bad(err, size);
            }
            if (parse_uint(val, 0, LOUPE__QUERY_SAMPLE_HZ_MAX, &x) != 0) {
                snprintf(err, size,
                         "sample_hz: \"%s\" is not a whole number of Hz from 0 (off) to %u", vs,
                         LOUPE__QUERY_SAMPLE_HZ_MAX);
                return bad(err, size);
            }
            out->sample_hz = (uint32_t)x;
        } else if (strcmp(key, "clock_offset_ns") == 0 ||
                   strcmp(key, "clock_offset_uncertainty_ns") == 0 ||
                   strcmp(key, "clock_offset_at_ns") == 0 || strcmp(key, "clock_base_ns") == 0) {
            int which = strcmp(key, "clock_offset_ns") == 0 ? 0
                        : strcmp(key, "clock_base_ns") == 0 ? 3
                        : key[13] == 'u'                    ? 1
                                                            : 2;
            int *seen = which == 0   ? &out->have_clock
                        : which == 1 ? &out->have_uncertainty
                        : which == 2 ? &out->have_at
                                     : &out->have_base;
            if ((*seen)++) {
                snprintf(err, size, "%s: given more than once", ks);
                return bad(err, size);
            }
            int64_t y;
            if (parse_i64(val, which == 0, &y) != 0) {
                snprintf(err, size, "%s: \"%s\" is not a whole number of ns%s", ks, vs,
                         which == 0 ? "" : " (not negative)");
                return bad(err, size);
            }
            if (which == 0) {
                out->clock_offset_ns = y;
            } else if (which == 1) {
                out->clock_uncertainty_ns = (uint64_t)y;
            } else if (which == 2) {
                out->clock_at_ns = (uint64_t)y;
            } else {
                out->clock_base_ns = (uint64_t)y;
            }
        } else {
            snprintf(err, size,
                     "%s: unknown parameter (known: duration_ms, host_tracer_level, format, "
                     "sample_hz, clock_offset_ns, clock_offset_uncertainty_ns, "
                     "clock_offset_at_ns, clock_base_ns)",
                     ks);
            return bad(err, size);
        }
        i = j + 1;
    }
    if (!seen_duration) {
        snprintf(err, size, "duration_ms: missing (the capture length in milliseconds)");
        return bad(err, size);
    }
    if ((out->have_uncertainty || out->have_at) && !out->have_clock) {
        snprintf(err, size, "%s: needs clock_offset_ns",
                 out->have_uncertainty ? "clock_offset_uncertainty_ns" : "clock_offset_at_ns");
        return bad(err, size);
    }
    return 0;
}
