/* test_gzip_blocks.c: the gzip sink's blocks deflated on helper threads (src/export/pgz.c):
 * the file is one gzip member (RFC 1952) that inflates to exactly the text the writer made, its
 * trailer holds that text's CRC-32 and length, and its bytes do not depend on the number of
 * threads (LOUPE_GZIP_THREADS=1, 2, 4); an empty stream and one of exactly one block are
 * exact too. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "export/sink.h"
#include "export/writers.h"
#include "model/builder.h"

#include <loupe/writer.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define BLOCK ((size_t)1 << 20) /* pgz.c's block */

static const unsigned char HEAD[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3};

/* Inflates a whole gzip file that must be ONE member with nothing after it; returns the text
 * (malloc'd) and its length. */
static unsigned char *gunzip_one_member(const unsigned char *gz, size_t n, size_t *out_n) {
    z_stream z;
    memset(&z, 0, sizeof z);
    assert_int_equal(inflateInit2(&z, 16 + 15), Z_OK); /* gzip only */
    size_t cap = 1 << 20, len = 0;
    unsigned char *out = malloc(cap);
    assert_non_null(out);
    z.next_in = (Bytef *)(uintptr_t)gz;
    z.avail_in = (uInt)n;
    int r;
    do {
        if (cap - len < 65536) {
            cap *= 2;
            out = realloc(out, cap);
            assert_non_null(out);
        }
        z.next_out = out + len;
        z.avail_out = (uInt)(cap - len);
        r = inflate(&z, Z_NO_FLUSH);
        len = cap - z.avail_out;
    } while (r == Z_OK);
    assert_int_equal(r, Z_STREAM_END);
    assert_int_equal(z.avail_in, 0); /* the member ends with the file: no second member */
    inflateEnd(&z);
    *out_n = len;
    return out;
}

/* The file's bytes as they are (tu_read_file would gunzip them). */
static unsigned char *raw_file(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    size_t cap = 1 << 16;
    unsigned char *b = malloc(cap);
    assert_non_null(b);
    *n = 0;
    size_t k;
    while ((k = fread(b + *n, 1, cap - *n, f)) > 0) {
        *n += k;
        if (*n == cap) {
            cap *= 2;
            b = realloc(b, cap);
            assert_non_null(b);
        }
    }
    fclose(f);
    return b;
}

static uint32_t le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* 200000 zones on 2 threads: about 16 MB of JSON, 16 blocks and a part. */
static loupe_model *big_model(void) {
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    loupe_model *m = loupe__mb_model(mb);
    m->pid = 11;
    for (uint32_t t = 0; t < 2; t++) {
        size_t th = loupe__mb_thread(mb, 100 + t);
        for (uint64_t i = 0; i < 100000; i++) {
            size_t k = loupe__mb_slice(mb, th);
            loupe_slice *s = loupe__mb_slice_at(mb, th, k);
            s->start_ns = 1000 + 1000 * i;
            s->dur_ns = 500 + i % 7;
            s->name = loupe__mb_str(mb, i % 3 ? "step" : "load");
        }
    }
    loupe_model *out = loupe__mb_finish(mb);
    assert_non_null(out);
    return out;
}

static void test_json_blocks(void **state) {
    (void)state;
    loupe_model *m = big_model();
    loupe__sink s;
    loupe__sink_open_mem(&s);
    assert_int_equal(loupe__write_chrome_json(m, &s, 0), 0);
    assert_int_equal(loupe__sink_close(&s), 0);
    const size_t text_n = s.mem_len;
    assert_true(text_n > 12 * BLOCK); /* several blocks, the last one partial */
    assert_true(text_n % BLOCK != 0);
    char path[4200];
    snprintf(path, sizeof path, "%s/t.json.gz", tu_dir);
    unsigned char *first = NULL;
    size_t first_n = 0;
    static const char *const threads[] = {"1", "2", "4"};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(setenv("LOUPE_GZIP_THREADS", threads[i], 1), 0);
        assert_int_equal(loupe_trace_write(m, path, LOUPE_FILE_CHROME_JSON), 0);
        size_t n;
        unsigned char *gz = raw_file(path, &n);
        assert_true(n > 18);
        assert_memory_equal(gz, HEAD, sizeof HEAD);
        size_t back_n;
        unsigned char *back = gunzip_one_member(gz, n, &back_n);
        assert_int_equal(back_n, text_n);
        assert_memory_equal(back, s.mem, text_n);
        assert_int_equal(le32(gz + n - 4), (uint32_t)text_n);
        assert_int_equal(le32(gz + n - 8), (uint32_t)crc32(0L, (const Bytef *)s.mem, (uInt)text_n));
        free(back);
        if (first == NULL) {
            first = gz;
            first_n = n;
        } else {
            /* the blocks are cut and deflated alike whatever thread deflates them */
            assert_int_equal(n, first_n);
            assert_memory_equal(gz, first, n);
            free(gz);
        }
    }
    assert_int_equal(unsetenv("LOUPE_GZIP_THREADS"), 0);
    free(first);
    free(s.mem);
    loupe_model_free(m);
}

/* pgz on its own: no text at all (a final empty fixed-Huffman block, 03 00), and exactly one
 * block of text (a full block, then the empty final one). */
static void test_edges(void **state) {
    (void)state;
    char path[4200];
    snprintf(path, sizeof path, "%s/e.gz", tu_dir);
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    loupe__pgz *g = NULL;
    assert_int_equal(loupe__pgz_open(&g, f), 0);
    assert_int_equal(loupe__pgz_close(g), 0);
    assert_int_equal(fclose(f), 0);
    size_t n;
    unsigned char *b = raw_file(path, &n);
    static const unsigned char empty[20] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3,
                                            0x03, 0,    0, 0, 0, 0, 0, 0, 0, 0};
    assert_int_equal(n, sizeof empty);
    assert_memory_equal(b, empty, n);
    free(b);

    unsigned char *text = malloc(BLOCK);
    assert_non_null(text);
    for (size_t i = 0; i < BLOCK; i++) {
        text[i] = (unsigned char)("0123456789abcdef,{}\n"[i * 7 % 20]);
    }
    f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(loupe__pgz_open(&g, f), 0);
    assert_int_equal(loupe__pgz_write(g, text, 1000), 0);
    assert_int_equal(loupe__pgz_write(g, text + 1000, BLOCK - 1000), 0);
    assert_int_equal(loupe__pgz_close(g), 0);
    assert_int_equal(fclose(f), 0);
    b = raw_file(path, &n);
    size_t back_n;
    unsigned char *back = gunzip_one_member(b, n, &back_n);
    assert_int_equal(back_n, BLOCK);
    assert_memory_equal(back, text, BLOCK);
    assert_int_equal(le32(b + n - 4), (uint32_t)BLOCK);
    free(back);
    free(b);
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_blocks),
        cmocka_unit_test(test_edges),
    };
    return cmocka_run_group_tests(tests, tu_setup, tu_teardown);
}
