// cpp_zones.cpp: the C++ path of the public API: loupe::Trace (an RAII session) and LOUPE_ZONE
// (an RAII zone, loupe::Zone). Usage: cpp_zones LOG_DIR
//
// loupe::Trace stops its session in its destructor but cannot hand back the result, so this
// program stops explicitly with loupe_stop_trace() to learn the run directory; the destructor's
// second stop then returns LOUPE_ENOT_STARTED, which it ignores.
#include <loupe/loupe.h>

#include <cinttypes>
#include <cstdio>
#include <vector>

namespace {

std::uint64_t leaf(std::uint64_t x) {
    LOUPE_ZONE("leaf");
    LOUPE_ARG_U64("x", x);
    return x * 2654435761u;
}

std::uint64_t middle(int i) {
    LOUPE_ZONE("middle");
    std::uint64_t sum = 0;
    for (int j = 0; j < 4; j++) {
        sum += leaf(static_cast<std::uint64_t>(i * 4 + j));
    }
    return sum;
}

} // namespace

int main(int argc, char **argv) {
    if (argc != 2) {
        std::fprintf(stderr, "usage: %s LOG_DIR\n", argv[0]);
        return 2;
    }
    loupe_set_thread_name("main");
    loupe_set_metadata("example", "cpp_zones");

    loupe_trace_options opts{}; // C++17 has no designated initialisers: zero, then set
    opts.log_dir = argv[1];
    std::uint64_t total = 0;
    loupe_trace_result result{};
    result.size = sizeof result; // 0 would do too: this release's layout
    int stop_rc = 0;
    {
        loupe::Trace trace(opts);
        if (!trace.ok()) {
            std::fprintf(stderr, "cpp_zones: loupe_start_trace: %s (%s)\n",
                         loupe_strerror(trace.start_code()), loupe_last_error());
            return 1;
        }
        {
            LOUPE_ZONE("outer");
            for (int i = 0; i < 3; i++) {
                LOUPE_STEP("step", i);
                total += middle(i);
            }
            std::vector<char> name(32);
            std::snprintf(name.data(), name.size(), "dynamic-%d", 42);
            LOUPE_ZONE_DYN(name.data());
            LOUPE_INSTANT("instant");
        }
        stop_rc = loupe_stop_trace(&result);
    }
    if (stop_rc != 0) {
        std::fprintf(stderr, "cpp_zones: loupe_stop_trace: %s (%s)\n", loupe_strerror(stop_rc),
                     loupe_last_error());
        loupe_trace_result_free(&result);
        return 1;
    }
    std::printf("cpp_zones: total %" PRIu64 ", %" PRIu64 " events, run dir %s\n", total,
                result.events_recorded, result.run_dir);
    loupe_trace_result_free(&result);
    return 0;
}
