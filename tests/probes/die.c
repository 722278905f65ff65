/* die.c: a program that records a known number of events and then dies in the way argv[1]
 * names, for tests/record_death.sh: under `loupe record` its trace is recovered from the memfd
 * it recorded into; alone (argv[2] = a log_dir: it starts its own session), a fatal signal dumps
 * the recording region for `loupe recover`.
 *
 * Events: a worker thread records 5000 zones with an argument (3 events each: begin, the
 * argument's one slot, end), the main thread 10000 zones (2 each), then one zone is left open at
 * the death: 35,001 events. */
#include <loupe/loupe.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *worker(void *arg) {
    (void)arg;
    loupe_set_thread_name("die-worker");
    for (int i = 0; i < 5000; i++) {
        LOUPE_ZONE("worker_zone");
        LOUPE_ARG_I64("i", i);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        return 2;
    }
    if (argc > 2) {
        loupe_trace_options o = {.log_dir = argv[2]};
        if (loupe_start_trace(&o) != 0) {
            return 3;
        }
    }
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    for (int i = 0; i < 10000; i++) {
        LOUPE_ZONE("main_zone");
    }
    LOUPE_ZONE("open_at_death");
    usleep(20000); /* the keeper copies the names meanwhile (every millisecond) */
    const char *how = argv[1];
    if (strcmp(how, "kill") == 0) {
        raise(SIGKILL);
    } else if (strcmp(how, "segv") == 0) {
        volatile int *p = NULL;
        *p = 1;
    } else if (strcmp(how, "abort") == 0) {
        abort();
    } else if (strcmp(how, "_exit") == 0) {
        _exit(7);
    } else if (strcmp(how, "exec") == 0) {
        execl("/bin/true", "true", (char *)NULL);
    }
    return 0;
}
