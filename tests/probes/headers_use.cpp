// headers_use.cpp: every annotation macro and the RAII session used once, compiled by
// tests/public_headers.sh as C++17 with the strictest warnings a C++ user may have.
#include <loupe/loupe.h>
#include <cstdint>
int64_t f(int64_t step, double d, uint64_t u);
int64_t f(int64_t step, double d, uint64_t u) {
    loupe_trace_options o{};
    o.log_dir = "/tmp/x";
    loupe::Trace t(o);
    for (int64_t i = 0; i < step; i++) {
        LOUPE_STEP("train", i);
        LOUPE_ZONE("z");
        LOUPE_ARG_I64("a", i);
        LOUPE_ARG_U64("u", u);
        LOUPE_ARG_F64("d", d);
        LOUPE_COUNTER_F64("c", d);
        LOUPE_COUNTER_I64("ci", i);
        LOUPE_FLOW_OUT(u);
        LOUPE_ZONE_DYN("dyn");
        LOUPE_INSTANT("i");
        LOUPE_ZONE_ARGS("args1", "i", i);
        LOUPE_ZONE_ARGS("args4", "i", i, "u", u, "d", d, "b", i > 0);
        LOUPE_ZONE_ARGS("args3", "s", static_cast<short>(i), "c", 'c', "f", 1.5f);
    }
    return step;
}
