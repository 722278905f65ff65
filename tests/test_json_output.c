/* test_json_output.c: the Chrome JSON a session writes, parsed by a real JSON parser (jansson):
 * the metadata events first, names, nesting, durations within a tolerance, typed args, steps,
 * counters, instants, a flow across threads, thread names, per-thread monotonic timestamps and
 * proper nesting of every track, and hostile names that must still give valid JSON. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "testutil.h"

#include <loupe/loupe.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void sleep_ms(int ms) {
    struct timespec d = {0, ms * 1000000L};
    nanosleep(&d, NULL);
}

static json_t *events_named(json_t *root, const char *ph, const char *name) {
    json_t *out = json_array();
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(root, "traceEvents"), i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        const char *p = json_string_value(json_object_get(e, "ph"));
        if (n && p && strcmp(p, ph) == 0 && strcmp(n, name) == 0) {
            json_array_append(out, e);
        }
    }
    return out;
}

static double num(json_t *e, const char *k) {
    return json_number_value(json_object_get(e, k));
}

/* Every X event: ts has at most 3 decimals (ns), and per tid the slices nest properly. */
static void check_tracks(json_t *root) {
    json_t *evs = json_object_get(root, "traceEvents");
    size_t n = json_array_size(evs);
    assert_true(n > 0);
    /* the first event is the process name (Perfetto's sniffer, Perfetto's json_trace_tokenizer.cc)
     */
    assert_string_equal(json_string_value(json_object_get(json_array_get(evs, 0), "name")),
                        "process_name");
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(evs, i);
        assert_true(json_is_integer(json_object_get(e, "pid")));
        assert_true(json_integer_value(json_object_get(e, "pid")) >= 1);
    }
    /* per tid: X events are in start order and nest (a stack of ends) */
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(evs, i);
        if (strcmp(json_string_value(json_object_get(e, "ph")), "X") != 0) {
            continue;
        }
        double ts = num(e, "ts"), dur = num(e, "dur");
        assert_true(dur >= 0);
        assert_true(fabs(ts * 1000 - round(ts * 1000)) < 1e-3);
    }
    json_int_t tids[64];
    size_t ntids = 0;
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(evs, i);
        json_int_t tid = json_integer_value(json_object_get(e, "tid"));
        size_t k = 0;
        while (k < ntids && tids[k] != tid) {
            k++;
        }
        if (k == ntids && ntids < 64) {
            tids[ntids++] = tid;
        }
    }
    for (size_t k = 0; k < ntids; k++) {
        double stack[256];
        size_t top = 0;
        double prev = -1;
        for (size_t i = 0; i < n; i++) {
            json_t *e = json_array_get(evs, i);
            if (json_integer_value(json_object_get(e, "tid")) != tids[k] ||
                strcmp(json_string_value(json_object_get(e, "ph")), "X") != 0) {
                continue;
            }
            double ts = num(e, "ts"), end = ts + num(e, "dur");
            assert_true(ts >= prev); /* monotonic per thread */
            prev = ts;
            while (top > 0 && stack[top - 1] <= ts + 1e-9) {
                top--;
            }
            if (top > 0) {
                assert_true(end <= stack[top - 1] + 1e-6); /* inside its parent */
            }
            assert_true(top < 256);
            stack[top++] = end;
        }
    }
}

static void *consumer(void *arg) {
    (void)arg;
    loupe_set_thread_name("consumer");
    LOUPE_ZONE("consume");
    LOUPE_FLOW_IN(77);
    sleep_ms(1);
    return NULL;
}

static void test_structure_and_durations(void **state) {
    (void)state;
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    loupe_set_thread_name("main-thread");
    assert_int_equal(loupe_start_trace(&o), 0);
    for (int step = 0; step < 3; step++) {
        LOUPE_STEP("train_step", step);
        {
            LOUPE_ZONE("load");
            LOUPE_ARG_I64("i64", -5);
            LOUPE_ARG_U64("u64", UINT64_MAX);
            LOUPE_ARG_F64("f64", 0.25);
            LOUPE_ARG_BOOL("flag", 1);
            LOUPE_ARG_STR("path", "/usr/share/\"x\"");
            sleep_ms(2);
        }
        {
            LOUPE_ZONE("compute");
            sleep_ms(3);
        }
        LOUPE_COUNTER_I64("queue", step * 10);
        LOUPE_COUNTER_F64("ratio", step * 0.5);
        LOUPE_INSTANT("tick");
    }
    {
        LOUPE_ZONE("produce");
        LOUPE_FLOW_OUT(77);
        pthread_t th;
        assert_int_equal(pthread_create(&th, NULL, consumer, NULL), 0);
        pthread_join(th, NULL);
    }
    assert_int_equal(loupe_stop_trace(&r), 0);
    json_t *root = tu_load_json(loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    check_tracks(root);

    json_t *steps = events_named(root, "X", "train_step");
    assert_int_equal(json_array_size(steps), 3);
    for (size_t i = 0; i < 3; i++) {
        json_t *s = json_array_get(steps, i);
        assert_int_equal(
            json_integer_value(json_object_get(json_object_get(s, "args"), "step_num")),
            (json_int_t)i);
        /* a step holds 2 ms + 3 ms of sleep: at least 5 ms, and (generously) under 500 ms */
        assert_true(num(s, "dur") >= 5000.0);
        assert_true(num(s, "dur") < 500000.0);
    }
    json_t *loads = events_named(root, "X", "load");
    assert_int_equal(json_array_size(loads), 3);
    json_t *l0 = json_array_get(loads, 0);
    assert_true(num(l0, "dur") >= 2000.0 && num(l0, "dur") < 200000.0);
    json_t *args = json_object_get(l0, "args");
    assert_int_equal(json_integer_value(json_object_get(args, "i64")), -5);
    /* past INT64_MAX a uint64 is written as a string of its exact digits */
    assert_string_equal(json_string_value(json_object_get(args, "u64")), "18446744073709551615");
    assert_true(json_real_value(json_object_get(args, "f64")) == 0.25);
    assert_true(json_is_true(json_object_get(args, "flag")));
    assert_string_equal(json_string_value(json_object_get(args, "path")), "/usr/share/\"x\"");
    /* load is inside its step */
    json_t *s0 = json_array_get(steps, 0);
    assert_true(num(l0, "ts") >= num(s0, "ts"));
    assert_true(num(l0, "ts") + num(l0, "dur") <= num(s0, "ts") + num(s0, "dur"));

    json_t *q = events_named(root, "C", "queue");
    assert_int_equal(json_array_size(q), 3);
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(json_array_get(q, 2), "args"), "value")),
        20);
    json_t *ratio = events_named(root, "C", "ratio");
    assert_true(json_real_value(json_object_get(json_object_get(json_array_get(ratio, 1), "args"),
                                                "value")) == 0.5);
    json_t *ticks = events_named(root, "i", "tick");
    assert_int_equal(json_array_size(ticks), 3);
    json_decref(ticks);

    json_t *prods = events_named(root, "X", "produce");
    json_t *conss = events_named(root, "X", "consume");
    json_t *prod = json_array_get(prods, 0);
    json_t *cons = json_array_get(conss, 0);
    assert_int_equal(json_integer_value(json_object_get(prod, "bind_id")), 77);
    assert_true(json_is_true(json_object_get(prod, "flow_out")));
    assert_int_equal(json_integer_value(json_object_get(cons, "bind_id")), 77);
    assert_true(json_is_true(json_object_get(cons, "flow_in")));
    assert_true(json_integer_value(json_object_get(prod, "tid")) !=
                json_integer_value(json_object_get(cons, "tid")));

    json_t *names = events_named(root, "M", "thread_name");
    int seen_main = 0, seen_consumer = 0;
    size_t i;
    json_t *e;
    json_array_foreach(names, i, e) {
        const char *n = json_string_value(json_object_get(json_object_get(e, "args"), "name"));
        seen_main += strcmp(n, "main-thread") == 0;
        seen_consumer += strcmp(n, "consumer") == 0;
    }
    assert_int_equal(seen_main, 1);
    assert_int_equal(seen_consumer, 1);
    json_t *md = json_object_get(root, "metadata");
    assert_string_equal(json_string_value(json_object_get(md, "events_dropped")), "0");
    const char *clock = json_string_value(json_object_get(md, "clock"));
    assert_true(strcmp(clock, "tsc") == 0 || strcmp(clock, "monotonic") == 0);
    json_decref(prods);
    json_decref(conss);
    json_decref(steps);
    json_decref(loads);
    json_decref(q);
    json_decref(ratio);
    json_decref(names);
    json_decref(root);
    loupe_trace_result_free(&r);
}

static void test_hostile_names(void **state) {
    (void)state;
    static const char *names[] = {
        "quote\"in",
        "back\\slash",
        "ctl\x01\x02\x1f\n\t\r",
        "bad utf8 \xff\xfe",
        "overlong \xc0\x80",
        "surrogate \xed\xa0\x80",
        "truncated \xe2\x82",
        "ok utf8 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
        "",
        "</script><script>alert(1)</script>",
    };
    static const char *expect[] = {
        "quote\"in",
        "back\\slash",
        "ctl\x01\x02\x1f\n\t\r",
        "bad utf8 \xef\xbf\xbd\xef\xbf\xbd",
        "overlong \xef\xbf\xbd\xef\xbf\xbd",
        "surrogate \xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd",
        "truncated \xef\xbf\xbd\xef\xbf\xbd",
        "ok utf8 \xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80",
        "",
        "</script><script>alert(1)</script>",
    };
    size_t count = sizeof names / sizeof names[0];
    char longname[20000];
    memset(longname, 'L', sizeof longname - 1);
    longname[sizeof longname - 1] = 0;
    loupe_trace_options o = {.log_dir = tu_dir};
    loupe_trace_result r = {.size = sizeof r};
    assert_int_equal(loupe_start_trace(&o), 0);
    assert_int_equal(loupe_set_metadata("key\"\x01\xff", "value\\\n"), 0);
    for (size_t i = 0; i < count; i++) {
        LOUPE_ZONE_DYN(names[i]);
        LOUPE_ARG_STR("s", names[i]);
    }
    { LOUPE_ZONE_DYN(longname); }
    assert_int_equal(loupe_stop_trace(&r), 0);
    loupe_clear_metadata();
    json_t *root = tu_load_json(loupe_trace_result_path(
        &r, LOUPE_FORMAT_CHROME_JSON)); /* fails the test when not valid JSON */
    check_tracks(root);
    for (size_t i = 0; i < count; i++) {
        json_t *ev = events_named(root, "X", expect[i]);
        if (json_array_size(ev) != 1) {
            fail_msg("name %zu not found exactly once", i);
        }
        json_t *e = json_array_get(ev, 0);
        assert_string_equal(json_string_value(json_object_get(json_object_get(e, "args"), "s")),
                            expect[i]);
        json_decref(ev);
    }
    /* names longer than LOUPE_MAX_DYN_NAME (4095) bytes are cut there */
    longname[LOUPE_MAX_DYN_NAME] = 0;
    json_t *lg = events_named(root, "X", longname);
    assert_int_equal(json_array_size(lg), 1);
    json_decref(lg);
    json_decref(root);
    /* Python's strict parser agrees (no NaN, no lone surrogates, no raw control chars). */
    char cmd[8400];
    snprintf(cmd, sizeof cmd,
             "python3 -c 'import gzip,json,sys; json.loads(gzip.open(sys.argv[1]).read(), "
             "parse_constant=lambda c: sys.exit(3)); print(\"ok\")' '%s'",
             loupe_trace_result_path(&r, LOUPE_FORMAT_CHROME_JSON));
    char *out = NULL;
    assert_int_equal(tu_run(cmd, &out), 0);
    assert_string_equal(out, "ok\n");
    free(out);
    loupe_trace_result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_structure_and_durations, tu_setup, tu_teardown),
        cmocka_unit_test_setup_teardown(test_hostile_names, tu_setup, tu_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
