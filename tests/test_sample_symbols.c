/* test_sample_symbols.c: the stop's symbolisation of samples (src/record/sample.c), on
 * addresses of this test's own code: a sampled address inside two nested always_inline
 * functions gives the whole inline chain innermost first (binutils `addr2line -i`'s answer),
 * each inlined frame's caller position is its call site, a return address is looked up at the
 * call before it, and samples with the same callers share those callers' stack nodes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include "model/builder.h"
#include "record/sample.h"

#include <loupe/loupe.h>
#include <string.h>

static uint64_t g_leaf, g_ret; /* written by outer_fn */

static inline __attribute__((always_inline)) uint64_t inner_fn(void) {
    uint64_t pc;
    __asm__ volatile("1: lea 1b(%%rip), %0" : "=r"(pc)); /* INNER_LINE */
    return pc;
}

static inline __attribute__((always_inline)) uint64_t middle_fn(void) {
    return inner_fn() + 1; /* MIDDLE_LINE */
}

__attribute__((noinline)) void outer_fn(void);
__attribute__((noinline)) void outer_fn(void) {
    g_leaf = middle_fn() - 1; /* OUTER_LINE */
    g_ret = (uint64_t)(uintptr_t)__builtin_return_address(0);
    __asm__ volatile("" ::: "memory");
}

__attribute__((noinline)) void caller_fn(void);
__attribute__((noinline)) void caller_fn(void) {
    outer_fn(); /* CALLER_LINE */
    __asm__ volatile("" ::: "memory");
}

/* The line of this file holding the marker comment. */
static uint32_t line_of(const char *marker) {
    char *text = tu_read_file(LOUPE_SOURCE_DIR "/tests/test_sample_symbols.c", NULL);
    assert_non_null(text);
    char want[64];
    snprintf(want, sizeof want, "/* %s */", marker);
    uint32_t line = 1;
    const char *hit = strstr(text, want);
    assert_non_null(hit);
    for (const char *p = text; p < hit; p++) {
        line += *p == '\n';
    }
    free(text);
    return line;
}

static const loupe_frame *frame_at(const loupe_model *m, uint32_t node) {
    assert_true(node < m->stack_node_count);
    return &m->frames[m->stack_nodes[node].frame];
}

static void test_inline_chain(void **state) {
    (void)state;
    caller_fn();
    uint64_t other = (uint64_t)(uintptr_t)&caller_fn + 1; /* another leaf, same callers */
    uint64_t a[2] = {g_leaf, g_ret}, b[2] = {other, g_ret}, c[1] = {g_leaf};
    assert_int_equal(loupe__sample_inject(1000, 7, 1001, 0, a, 2), 0);
    assert_int_equal(loupe__sample_inject(1000, 7, 1002, 1, b, 2), 0);
    assert_int_equal(loupe__sample_inject(1000, 7, 1003, 0, c, 1), 0);
    loupe__mb *mb = loupe__mb_new();
    assert_non_null(mb);
    assert_int_equal(loupe__sample_collect(mb, 10), 0);
    loupe_model *m = loupe__mb_finish(mb);
    assert_non_null(m);
    assert_int_equal(m->sample_count, 3);
    uint32_t n = m->samples[0].stack;
    const loupe_frame *f = frame_at(m, n);
    if (f->file[0] == 0) {
        loupe_model_free(m);
        skip(); /* built without debug info (-g): no lines, no inline frames to check */
    }
    const char *self = strrchr(__FILE__, '/') ? strrchr(__FILE__, '/') + 1 : __FILE__;
    struct {
        const char *function;
        uint32_t inlined;
        const char *marker;
    } want[] = {{"inner_fn", 1, "INNER_LINE"},
                {"middle_fn", 1, "MIDDLE_LINE"},
                {"outer_fn", 0, "OUTER_LINE"},
                {"caller_fn", 0, "CALLER_LINE"}};
    for (size_t i = 0; i < 4; i++) {
        f = frame_at(m, n);
        assert_string_equal(f->function, want[i].function);
        assert_int_equal(f->inlined, want[i].inlined);
        assert_non_null(strstr(f->file, self));
        assert_int_equal(f->line, line_of(want[i].marker));
        n = m->stack_nodes[n].parent;
    }
    assert_int_equal(n, UINT32_MAX);
    /* the second sample: caller_fn at its leaf, then the same callers' node (caller_fn at the
     * call of outer_fn) as the first sample's */
    uint32_t s2 = m->samples[1].stack;
    assert_string_equal(frame_at(m, s2)->function, "caller_fn");
    uint32_t p1 = m->samples[0].stack;
    for (int i = 0; i < 3; i++) {
        p1 = m->stack_nodes[p1].parent;
    }
    assert_int_equal(m->stack_nodes[s2].parent, p1);
    /* the third: the inline chain alone, its outermost frame outer_fn */
    n = m->samples[2].stack;
    for (int i = 0; i < 2; i++) {
        n = m->stack_nodes[n].parent;
    }
    assert_string_equal(frame_at(m, n)->function, "outer_fn");
    assert_int_equal(m->stack_nodes[n].parent, UINT32_MAX);
    loupe_model_free(m);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_inline_chain, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
