/* syscall_probe.c: records every kind of event in a loop between two marker system calls
 * (getppid), for tests/hotpath_syscalls.sh, which runs it under strace and counts the system
 * calls between the markers: the record path must make none after a thread's first event. */
#include <loupe/loupe.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

static void burst(int n) {
    for (int i = 0; i < n; i++) {
        LOUPE_ZONE("probe");
        LOUPE_ARG_I64("i", i);
        LOUPE_ARG_STR("s", "a string value");
        char name[32];
        snprintf(name, sizeof name, "dyn-%d", i % 5);
        LOUPE_ZONE_DYN(name);
        LOUPE_COUNTER_I64("c", i);
        LOUPE_INSTANT("inst");
        LOUPE_FLOW_OUT((uint64_t)i);
        LOUPE_ZONE_ARGS("fused", "i", i, "d", 0.5);
    }
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: syscall_probe LOG_DIR\n");
        return 2;
    }
    loupe_trace_options o = {.log_dir = argv[1], .buffer_events = 1u << 22};
    if (loupe_start_trace(&o) != 0) {
        return 1;
    }
    burst(1); /* the thread's first event: registration and buffer mapping happen here */
    syscall(SYS_getppid);
    burst(100000);
    syscall(SYS_getppid);
    loupe_trace_result r = {.size = sizeof r};
    if (loupe_stop_trace(&r) != 0 || r.events_dropped != 0) {
        return 1;
    }
    printf("%llu\n", (unsigned long long)r.events_recorded);
    loupe_trace_result_free(&r);
    return 0;
}
