/* test_base.c: the src/base helpers every floor above shares: the growable array (base/array.h),
 * the FNV-1a string hash (base/hash.h, the test vectors of the FNV reference,
 * http://www.isthe.com/chongo/tech/comp/fnv/), UTF-8 sanitising (base/utf8.h: exact output bytes
 * for each kind of invalid sequence), mkdir -p (base/fs.h) and the protobuf decoder's error codes
 * and offsets (base/pb.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/error.h>

#include "base/array.h"
#include "base/fs.h"
#include "base/hash.h"
#include "base/ownfd.h"
#include "base/pb.h"
#include "base/utf8.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static void test_grow(void **state) {
    (void)state;
    int *a = NULL;
    size_t cap = 0;
    assert_int_equal(loupe__grow((void **)&a, &cap, 1, sizeof(int)), 0);
    assert_non_null(a);
    assert_int_equal(cap, 8); /* the first capacity */
    for (size_t i = 0; i < cap; i++) {
        assert_int_equal(a[i], 0); /* new items are zeroed */
    }
    a[7] = 42;
    int *before = a;
    assert_int_equal(loupe__grow((void **)&a, &cap, 8, sizeof(int)), 0); /* fits: nothing done */
    assert_ptr_equal(a, before);
    assert_int_equal(cap, 8);
    assert_int_equal(loupe__grow((void **)&a, &cap, 9, sizeof(int)), 0);
    assert_int_equal(cap, 16);
    assert_int_equal(a[7], 42);
    for (size_t i = 8; i < 16; i++) {
        assert_int_equal(a[i], 0);
    }
    assert_int_equal(loupe__grow((void **)&a, &cap, 100, sizeof(int)), 0);
    assert_int_equal(cap, 128);
    assert_int_equal(a[7], 42);

    /* need * elem would wrap a size_t: -1, and neither the pointer nor the capacity moves */
    before = a;
    assert_int_equal(loupe__grow((void **)&a, &cap, SIZE_MAX / sizeof(int) + 1, sizeof(int)), -1);
    assert_ptr_equal(a, before);
    assert_int_equal(cap, 128);
    assert_int_equal(loupe__grow((void **)&a, &cap, SIZE_MAX, 2), -1);
    assert_ptr_equal(a, before);
    assert_int_equal(cap, 128);
    assert_int_equal(a[7], 42);
    free(a);
}

static void test_hash(void **state) {
    (void)state;
    assert_true(loupe__hash_bytes("", 0) == 0xcbf29ce484222325ull);
    assert_true(loupe__hash_bytes(NULL, 0) == 0xcbf29ce484222325ull);
    assert_true(loupe__hash_bytes("a", 1) == 0xaf63dc4c8601ec8cull);
    assert_true(loupe__hash_bytes("foobar", 6) == 0x85944171f73967e8ull);
    assert_true(loupe__hash_str("") == 0xcbf29ce484222325ull);
    assert_true(loupe__hash_str("a") == 0xaf63dc4c8601ec8cull);
    assert_true(loupe__hash_str("foobar") == 0x85944171f73967e8ull);
    /* bytes, not a C string: the NUL counts */
    assert_true(loupe__hash_bytes("a\0", 2) != loupe__hash_bytes("a", 1));
}

typedef struct buf {
    char b[256];
    size_t n;
    int pieces;
} buf;

static void buf_put(void *ctx, const char *p, size_t n) {
    buf *b = ctx;
    assert_true(n > 0); /* no empty pieces */
    assert_true(b->n + n <= sizeof b->b);
    memcpy(b->b + b->n, p, n);
    b->n += n;
    b->pieces++;
}

/* Sanitises in (n bytes) and checks the exact output and that the counted length matches. */
static void expect_clean(const char *in, size_t n, const char *want, size_t want_n) {
    buf b = {{0}, 0, 0};
    size_t len = loupe__utf8_sanitize(in, n, buf_put, &b);
    assert_int_equal(len, want_n);
    assert_int_equal(b.n, want_n);
    assert_memory_equal(b.b, want, want_n);
    assert_int_equal(loupe__utf8_sanitize(in, n, NULL, NULL), want_n);
}

#define CLEAN(in, want) expect_clean(in, sizeof(in) - 1, want, sizeof(want) - 1)
#define FFFD "\xEF\xBF\xBD"

static void test_utf8(void **state) {
    (void)state;
    /* valid: unchanged, one piece */
    CLEAN("plain", "plain");
    CLEAN("\xC2\xA9 \xE2\x82\xAC \xF0\x9F\x94\xA5 \xF4\x8F\xBF\xBF",
          "\xC2\xA9 \xE2\x82\xAC \xF0\x9F\x94\xA5 \xF4\x8F\xBF\xBF");
    CLEAN("", "");
    /* a stray continuation byte, and bytes that never start a sequence */
    CLEAN("a\x80z", "a" FFFD "z");
    CLEAN("\xFF\xFE", FFFD FFFD);
    CLEAN("\xF5\x80\x80\x80", FFFD FFFD FFFD FFFD);
    /* overlong forms: C0/C1 leads, E0 80..9F, F0 80..8F; each byte becomes one U+FFFD */
    CLEAN("\xC0\xAF", FFFD FFFD);
    CLEAN("\xC1\xBF", FFFD FFFD);
    CLEAN("\xE0\x80\xAF", FFFD FFFD FFFD);
    CLEAN("\xF0\x8F\xBF\xBF", FFFD FFFD FFFD FFFD);
    /* a UTF-16 surrogate (U+D800) and above U+10FFFF (U+110000) */
    CLEAN("\xED\xA0\x80", FFFD FFFD FFFD);
    CLEAN("\xF4\x90\x80\x80", FFFD FFFD FFFD FFFD);
    /* cut short: by the end of the input, and by a byte that is not a continuation */
    CLEAN("x\xE2\x82", "x" FFFD FFFD);
    CLEAN("\xE2\x82y", FFFD FFFD "y");
    CLEAN("\xF0\x9F\x94", FFFD FFFD FFFD);
    /* the valid sequence right after a bad byte survives */
    CLEAN("\xC3\xC3\xA9", FFFD "\xC3\xA9");

    /* the length of the input is the bound, not a NUL: a sequence cut by n is invalid */
    expect_clean("\xC3\xA9", 1, FFFD, 3);

    /* pieces: valid runs are passed whole, not byte by byte */
    buf b = {{0}, 0, 0};
    loupe__utf8_sanitize("ab\xFF"
                         "cd",
                         5, buf_put, &b);
    assert_int_equal(b.pieces, 3); /* "ab", U+FFFD, "cd" */

    /* seq_len on a NUL-terminated string with avail 4 stops at the NUL */
    const unsigned char cut[] = {0xE2, 0x82, 0x00};
    assert_int_equal(loupe__utf8_seq_len(cut, 4), 0);
    const unsigned char euro[] = {0xE2, 0x82, 0xAC, 0x00};
    assert_int_equal(loupe__utf8_seq_len(euro, 4), 3);
    assert_int_equal(loupe__utf8_seq_len(euro, 2), 0);
    assert_int_equal(loupe__utf8_seq_len((const unsigned char *)"A", 1), 1);
}

static void test_mkdirs(void **state) {
    (void)state;
    char path[4200];
    snprintf(path, sizeof path, "%s/a/b/c", tu_dir);
    assert_int_equal(loupe__mkdirs(path), 0);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(loupe__mkdirs(path), 0); /* already there: fine */
    snprintf(path, sizeof path, "%s/a/b/c/", tu_dir);
    assert_int_equal(loupe__mkdirs(path), 0); /* a trailing slash */

    /* through a file: LOUPE_EIO with ENOTDIR in the detail, and nothing made below it */
    char file[4200];
    snprintf(file, sizeof file, "%s/a/file", tu_dir);
    tu_write_file(file, "x");
    snprintf(path, sizeof path, "%s/a/file/d/e", tu_dir);
    assert_int_equal(loupe__mkdirs(path), LOUPE_EIO);
    assert_non_null(strstr(loupe_last_error(), "Not a directory (errno 20)"));
    snprintf(path, sizeof path, "%s/a/file/d", tu_dir);
    assert_int_not_equal(stat(path, &st), 0);
    /* the file itself as the directory asked for */
    assert_int_equal(loupe__mkdirs(file), LOUPE_EIO);
    assert_non_null(strstr(loupe_last_error(), "Not a directory (errno 20)"));
}

/* One field of bytes in: the code, the offset, what was read. */
static int field_of(const uint8_t *p, size_t n, loupe__pbf *f, loupe__pbe *e) {
    loupe__pbr r = {p, p + n, p};
    memset(f, 0, sizeof *f);
    return loupe__pbr_field(&r, f, e);
}

static void test_pb_decode(void **state) {
    (void)state;
    loupe__pbf f;
    loupe__pbe e;
    /* field 2 varint 300; field 3 fixed64; field 4 "hi" */
    static const uint8_t ok[] = {0x10, 0xAC, 0x02, 0x19, 1,    0,    0,   0,
                                 0,    0,    0,    0x80, 0x22, 0x02, 'h', 'i'};
    loupe__pbr r = {ok, ok + sizeof ok, ok};
    assert_int_equal(loupe__pbr_field(&r, &f, &e), 1);
    assert_int_equal(f.field, 2);
    assert_int_equal(f.wire, PB_VARINT);
    assert_int_equal(f.v, 300);
    assert_int_equal(loupe__pbr_field(&r, &f, &e), 1);
    assert_int_equal(f.wire, PB_I64);
    assert_true(f.v == 0x8000000000000001ull);
    assert_int_equal(f.offset, 3);
    assert_int_equal(loupe__pbr_field(&r, &f, &e), 1);
    assert_int_equal(f.field, 4);
    assert_int_equal(f.len, 2);
    assert_memory_equal(f.data, "hi", 2);
    assert_int_equal(loupe__pbr_field(&r, &f, &e), 0);

    /* the largest 10-byte varint is 2^64 - 1; a 10th byte above 1 is more than 64 bits */
    static const uint8_t max[] = {0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x01};
    assert_int_equal(field_of(max, sizeof max, &f, &e), 1);
    assert_true(f.v == UINT64_MAX);
    static const uint8_t big[] = {0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x02};
    assert_int_equal(field_of(big, sizeof big, &f, &e), -1);
    assert_int_equal(e.code, LOUPE__PB_E64);
    assert_int_equal(e.at, 1);
    assert_int_equal(e.in_tag, 0);
    /* cut: the offset is the first missing byte */
    static const uint8_t cut[] = {0x08, 0x80, 0x80};
    assert_int_equal(field_of(cut, sizeof cut, &f, &e), -1);
    assert_int_equal(e.code, LOUPE__PB_ECUT);
    assert_int_equal(e.at, 3);
    static const uint8_t cut_tag[] = {0x80};
    assert_int_equal(field_of(cut_tag, sizeof cut_tag, &f, &e), -1);
    assert_int_equal(e.code, LOUPE__PB_ECUT);
    assert_int_equal(e.in_tag, 1);
    assert_int_equal(e.at, 1);
    static const uint8_t cut_fixed[] = {0x09, 1, 2, 3};
    assert_int_equal(field_of(cut_fixed, sizeof cut_fixed, &f, &e), -1);
    assert_int_equal(e.code, LOUPE__PB_ECUT);
    assert_int_equal(e.at, 1);
    /* field numbers */
    static const uint8_t field0[] = {0x00, 0x01};
    assert_int_equal(field_of(field0, sizeof field0, &f, &e), -1);
    assert_int_equal(e.code, LOUPE__PB_EFIELD0);
    assert_int_equal(e.at, 0);
    static const uint8_t range[] = {0x80, 0x80, 0x80, 0x80, 0x10, 0x01}; /* tag 2^32 */
    assert_int_equal(field_of(range, sizeof range, &f, &e), -1);
    assert_int_equal(e.code, LOUPE__PB_ERANGE);
    /* wire types 3 and 7 */
    static const uint8_t group[] = {0x0B};
    assert_int_equal(field_of(group, sizeof group, &f, &e), -1);
    assert_int_equal(e.code, LOUPE__PB_EWIRE);
    assert_int_equal(f.wire, 3);
    assert_int_equal(f.field, 1);
    static const uint8_t w7[] = {0x17};
    assert_int_equal(field_of(w7, sizeof w7, &f, &e), -1);
    assert_int_equal(e.code, LOUPE__PB_EWIRE);
    /* a 1 GiB length with 2 bytes left: at is the tag */
    static const uint8_t gig[] = {0x0A, 0x80, 0x80, 0x80, 0x80, 0x04, 'x', 'y'};
    assert_int_equal(field_of(gig, sizeof gig, &f, &e), -1);
    assert_int_equal(e.code, LOUPE__PB_ELEN);
    assert_int_equal(e.at, 0);
    assert_int_equal(e.value, 1);
    assert_true(e.len == 1073741824u);
    assert_int_equal(e.left, 2);

    /* loupe__pbr_next words the same errors as the Perfetto reader always has */
    size_t off = 0;
    const char *what = NULL;
    r = (loupe__pbr){gig, gig + sizeof gig, gig};
    assert_int_equal(loupe__pbr_next(&r, &f, &off, &what), -1);
    assert_int_equal(off, 1);
    assert_string_equal(what, "length runs past the end of its message");
    r = (loupe__pbr){field0, field0 + sizeof field0, field0};
    assert_int_equal(loupe__pbr_next(&r, &f, &off, &what), -1);
    assert_int_equal(off, 0);
    assert_string_equal(what, "field number 0");
    r = (loupe__pbr){range, range + sizeof range, range};
    assert_int_equal(loupe__pbr_next(&r, &f, &off, &what), -1);
    assert_string_equal(what, "bad field tag varint");
    r = (loupe__pbr){big, big + sizeof big, big};
    assert_int_equal(loupe__pbr_next(&r, &f, &off, &what), -1);
    assert_int_equal(off, 1);
    assert_string_equal(what, "truncated or overlong varint");
}

static void test_pb_sizes(void **state) {
    (void)state;
    /* each size helper against the bytes the buffer encoder writes */
    static const uint64_t vals[] = {0, 1, 127, 128, 16383, 16384, UINT64_MAX};
    static const uint32_t fields[] = {1, 15, 16, 2047, 2048, 536870911};
    for (size_t i = 0; i < sizeof fields / sizeof *fields; i++) {
        for (size_t j = 0; j < sizeof vals / sizeof *vals; j++) {
            loupe__pb b = {0};
            loupe__pb_uint(&b, fields[i], vals[j]);
            assert_int_equal(b.len, loupe__pb_uint_size(fields[i], vals[j]));
            b.len = 0;
            loupe__pb_fixed64(&b, fields[i], vals[j]);
            assert_int_equal(b.len, loupe__pb_fixed64_size(fields[i]));
            b.len = 0;
            loupe__pb_bytes(&b, fields[i], "hello", 5);
            assert_int_equal(b.len, loupe__pb_len_size(fields[i], 5));
            loupe__pb_free(&b);
        }
    }
    uint8_t d[8];
    loupe__pb_put_fixed64_at(d, 0x0807060504030201ull);
    static const uint8_t le[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    assert_memory_equal(d, le, 8);
    assert_int_equal(loupe__pb_len_size(1, 300), 1 + 2 + 300);
}

/* loupe's own fds (base/ownfd.h): adopted at or above the floor, close-on-exec, never 0-2; a
 * number the program replaced (dup2 of its own file, linked use: no preload to tell) is given
 * up at the next check, counted with its cause, and never closed by loupe; a closed one too. */
static void test_ownfd(void **state) {
    (void)state;
    int floor = loupe__fd_floor();
    assert_true(floor >= 3);
    int fd = loupe__fd_adopt(open("/dev/null", O_RDONLY), "a test's fd");
    assert_true(fd >= floor);
    assert_true(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(loupe__fd_is_own(fd), 1);
    assert_int_equal(loupe__fd_ok(fd), 1);
    uint64_t lost0 = loupe__fd_lost(NULL, 0);
    /* the program dup2s a pipe of its own onto the number */
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(dup2(p[1], fd), fd);
    assert_int_equal(loupe__fd_ok(fd), 0);
    assert_int_equal(loupe__fd_is_own(fd), 0);
    char cause[160];
    assert_int_equal(loupe__fd_lost(cause, sizeof cause), lost0 + 1);
    if (lost0 == 0) {
        char want[160];
        snprintf(want, sizeof want, "the program replaced fd %d (a test's fd)", fd);
        assert_string_equal(cause, want);
    }
    loupe__fd_close(fd); /* forgets: the number is the program's pipe, still open */
    assert_true(fcntl(fd, F_GETFD) >= 0);
    assert_int_equal(write(fd, "x", 1), 1);
    char b;
    assert_int_equal(read(p[0], &b, 1), 1);
    /* the same number can be loupe's again once forgotten */
    close(fd);
    int fd2 = loupe__fd_adopt(open("/dev/null", O_RDONLY), "a test's fd");
    assert_true(fd2 >= floor);
    /* closed behind loupe's back: given up as "closed" */
    close(fd2);
    assert_int_equal(loupe__fd_ok(fd2), 0);
    assert_int_equal(loupe__fd_lost(NULL, 0), lost0 + 2);
    loupe__fd_close(fd2);
    close(p[0]);
    close(p[1]);
    /* a small soft RLIMIT_NOFILE under a larger hard one: loupe's numbers lie at or above the
     * soft limit (raised for the moment of the move, then put back), none of the program's */
    struct rlimit was, rl, now;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
    if (was.rlim_max != RLIM_INFINITY && was.rlim_max < 16 + 64) {
        skip(); /* no room above 16 to test with */
    }
    rl = was;
    rl.rlim_cur = 16;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
    int held[8], n = 0;
    for (; n < 8; n++) {
        held[n] = loupe__fd_adopt(open("/dev/null", O_RDONLY), "a test's fd");
        assert_true(held[n] >= 16 && held[n] < 16 + 64);
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &now), 0);
        assert_int_equal(now.rlim_cur, 16); /* put back */
    }
    int opened = loupe__fd_open("/dev/null", O_RDONLY, 0, "a test's fd");
    assert_true(opened >= 16);
    loupe__fd_close(opened);
    for (int i = 0; i < n; i++) {
        loupe__fd_close(held[i]);
    }
    /* the hard limit as low as the soft one: no room to raise into; the top quarter is loupe's,
     * and none left there is EMFILE with the fd closed (in a child: a lowered hard limit cannot
     * be raised again without privilege) */
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit both = {16, 16};
        int ok = setrlimit(RLIMIT_NOFILE, &both) == 0 && loupe__fd_floor() == 12;
        int h[4], k = 0;
        for (; ok && k < 4; k++) {
            h[k] = loupe__fd_adopt(open("/dev/null", O_RDONLY), "a test's fd");
            ok = h[k] >= 12 && h[k] < 16;
        }
        int low = open("/dev/null", O_RDONLY);
        ok = ok && low >= 0 && low < 12;
        errno = 0;
        ok = ok && loupe__fd_adopt(low, "a test's fd") == -1 && errno == EMFILE &&
             fcntl(low, F_GETFD) < 0;
        _exit(ok ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
}

static int find_tid(uint64_t tid, void *arg) {
    return tid == *(uint64_t *)arg ? (*(uint64_t *)arg = 0, 1) : 0;
}

/* /proc/self/task through one fd of loupe's, read again each time: the calling thread is there,
 * twice. */
static void test_each_task(void **state) {
    (void)state;
    int dir = -1;
    for (int k = 0; k < 2; k++) {
        uint64_t me = (uint64_t)syscall(SYS_gettid);
        assert_int_equal(loupe__each_task(&dir, find_tid, &me), 0);
        assert_int_equal(me, 0);
        assert_true(dir >= loupe__fd_floor());
    }
    loupe__fd_close(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_grow),
        cmocka_unit_test(test_ownfd),
        cmocka_unit_test(test_each_task),
        cmocka_unit_test(test_hash),
        cmocka_unit_test(test_utf8),
        cmocka_unit_test_setup_teardown(test_mkdirs, tu_setup, tu_teardown),
        cmocka_unit_test(test_pb_decode),
        cmocka_unit_test(test_pb_sizes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
