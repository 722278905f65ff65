/* headers_use.c: every annotation macro used once, compiled by tests/public_headers.sh as C11 with
 * the strictest warnings a user may have. */
#include <loupe/loupe.h>

int headers_use(long steps, double d, unsigned long u);
int headers_use(long steps, double d, unsigned long u) {
    loupe_trace_options o = {.log_dir = "/tmp/loupe-headers"};
    loupe_trace_result r;
    int rc = 0;
    LOUPE_TRACE_SCOPE(&o, &r, &rc) {
        for (long i = 0; i < steps; i++) {
            LOUPE_STEP("train", i);
            LOUPE_ZONE("zone");
            LOUPE_ARG_I64("i", i);
            LOUPE_ARG_U64("u", u);
            LOUPE_ARG_F64("d", d);
            LOUPE_ARG_BOOL("b", i & 1);
            LOUPE_ARG_STR("s", "text");
            LOUPE_ZONE_ARGS("args1", "i", i);
            LOUPE_ZONE_ARGS("args4", "i", i, "u", u, "d", d, "b", (_Bool)(i > 0));
            LOUPE_ZONE_ARGS("args2", "s", (short)i, "f", 1.5f);
            LOUPE_COUNTER_I64("ci", i);
            LOUPE_COUNTER_F64("cf", d);
            LOUPE_FLOW_OUT(u);
            LOUPE_FLOW_IN(u);
            LOUPE_INSTANT("instant");
            LOUPE_ZONE_DYN("dynamic");
        }
    }
    return rc;
}
