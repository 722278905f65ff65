/* testutil.c: see testutil.h. */
#include "testutil.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdint.h>

#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

char *tu_tmpdir(const char *tag) {
    const char *base = getenv("TMPDIR");
    char tmpl[4096];
    snprintf(tmpl, sizeof tmpl, "%s/loupe-%s-XXXXXX", base && *base ? base : "/tmp", tag);
    char *d = mkdtemp(tmpl);
    assert_non_null(d);
    return strdup(d);
}

void tu_rmtree(const char *path) {
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) {
        fprintf(stderr, "warning: could not remove %s\n", path);
    }
}

char *tu_read_file(const char *path, size_t *len) {
    gzFile f = gzopen(path, "rb"); /* reads plain files too */
    assert_non_null(f);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (cap - n < 65536) {
            cap *= 2;
            buf = realloc(buf, cap + 1);
        }
        int r = gzread(f, buf + n, (unsigned)(cap - n));
        assert_true(r >= 0);
        if (r == 0) {
            break;
        }
        n += (size_t)r;
    }
    gzclose(f);
    buf[n] = 0;
    if (len) {
        *len = n;
    }
    return buf;
}

json_t *tu_load_json(const char *path) {
    size_t n;
    char *text = tu_read_file(path, &n);
    json_error_t err;
    json_t *j = json_loadb(text, n, JSON_ALLOW_NUL, &err);
    if (j == NULL) {
        fail_msg("%s: JSON error at line %d col %d: %s", path, err.line, err.column, err.text);
    }
    free(text);
    return j;
}

int tu_run(const char *cmd, char **out) {
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    size_t r;
    while ((r = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += r;
        if (cap - n < 2) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
    }
    buf[n] = 0;
    int st = pclose(p);
    if (out) {
        *out = buf;
    } else {
        free(buf);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

void tu_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, strlen(text), f), strlen(text));
    assert_int_equal(fclose(f), 0);
}

const char *tu_cli(void) {
    const char *c = getenv("LOUPE_CLI");
    return c ? c : LOUPE_BINARY_DIR "/loupe";
}
