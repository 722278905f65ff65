/* own_malloc.c: a program with its own malloc, free, calloc, realloc, aligned_alloc, memalign
 * and posix_memalign (forwarding to glibc's __libc_* entry points), each with a LOUPE_ZONE inside
 * while the calling thread's `counting` flag is set. The worker threads set it around their
 * loops, so a worker's very first recorded event comes from inside the program's allocator:
 * whatever loupe's registration of a new thread allocated would re-enter that allocator's zone
 * (Tracy's bug, wolfpld/tracy PR #197: unbounded recursion, then SIGSEGV).
 *
 * Built three ways by tests/CMakeLists.txt: own_malloc (linked with the static libloupe),
 * own_malloc_fi (the same, every function of this file built with -finstrument-functions, and
 * function_tracing on) and own_malloc_shared (linked with libloupe.so, for `loupe record`).
 *
 * Usage: own_malloc LOG_DIR [functrace]   starts and stops a session itself, prints the run
 *                                          directory on its last line
 *        own_malloc                       under `loupe record` (LOUPE_RECORD=1): no session of
 *                                          its own, the preloaded library records it
 * Exit 0 when every worker ran; the caller counts the zones in the trace
 * (OWN_MALLOC_WORKERS x OWN_MALLOC_ITERS each, per allocator; see the loop for the frees).
 */
#include <loupe/loupe.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OWN_MALLOC_WORKERS 4
#define OWN_MALLOC_ITERS 2000

/* glibc's own entry points (exported by libc.so.6 for exactly this use: malloc/malloc.c). */
extern void *__libc_malloc(size_t n);
extern void __libc_free(void *p);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);

static __thread int counting;

void *malloc(size_t n) {
    if (counting) {
        LOUPE_ZONE("own_malloc");
        return __libc_malloc(n);
    }
    return __libc_malloc(n);
}

void free(void *p) {
    if (counting) {
        LOUPE_ZONE("own_free");
        __libc_free(p);
        return;
    }
    __libc_free(p);
}

void *calloc(size_t n, size_t size) {
    if (counting) {
        LOUPE_ZONE("own_calloc");
        return __libc_calloc(n, size);
    }
    return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n) {
    if (counting) {
        LOUPE_ZONE("own_realloc");
        return __libc_realloc(p, n);
    }
    return __libc_realloc(p, n);
}

void *aligned_alloc(size_t align, size_t n) {
    if (counting) {
        LOUPE_ZONE("own_aligned_alloc");
        return __libc_memalign(align, n);
    }
    return __libc_memalign(align, n);
}

void *memalign(size_t align, size_t n) {
    if (counting) {
        LOUPE_ZONE("own_memalign");
        return __libc_memalign(align, n);
    }
    return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n) {
    void *p;
    if (counting) {
        LOUPE_ZONE("own_posix_memalign");
        p = __libc_memalign(align, n);
    } else {
        p = __libc_memalign(align, n);
    }
    if (p == NULL) {
        return 12; /* ENOMEM */
    }
    *out = p;
    return 0;
}

/* Where a thread's pointers escape to, so that the compiler keeps every call. */
static __thread void *volatile sink[6];

static void *worker(void *arg) {
    (void)arg;
    counting = 1;
    for (int i = 0; i < OWN_MALLOC_ITERS; i++) {
        void *p = malloc(32 + (size_t)(i % 7));
        sink[0] = p;
        sink[1] = calloc(4, 8);
        sink[0] = realloc(sink[0], 100);
        sink[2] = aligned_alloc(64, 128);
        sink[3] = memalign(64, 64);
        void *q = NULL;
        if (posix_memalign(&q, 64, 64) != 0) {
            counting = 0;
            return (void *)1;
        }
        sink[4] = q;
        for (int k = 0; k < 5; k++) {
            free(sink[k]); /* 5 frees an iteration */
        }
    }
    counting = 0;
    return NULL;
}

int main(int argc, char **argv) {
    const char *rec = getenv("LOUPE_RECORD");
    int own_session = !(rec != NULL && strcmp(rec, "1") == 0);
    if (own_session && argc < 2) {
        fprintf(stderr, "usage: own_malloc LOG_DIR [functrace]\n");
        return 2;
    }
    if (own_session) {
        loupe_trace_options o;
        memset(&o, 0, sizeof o);
        o.log_dir = argv[1];
        o.formats = LOUPE_FORMAT_CHROME_JSON;
        o.function_tracing = argc > 2 && strcmp(argv[2], "functrace") == 0;
        if (loupe_start_trace(&o) != 0) {
            fprintf(stderr, "own_malloc: start: %s\n", loupe_last_error());
            return 1;
        }
    }
    pthread_t th[OWN_MALLOC_WORKERS];
    for (int i = 0; i < OWN_MALLOC_WORKERS; i++) {
        if (pthread_create(&th[i], NULL, worker, NULL) != 0) {
            return 1;
        }
    }
    int bad = 0;
    for (int i = 0; i < OWN_MALLOC_WORKERS; i++) {
        void *ret = NULL;
        pthread_join(th[i], &ret);
        bad |= ret != NULL;
    }
    if (bad) {
        fprintf(stderr, "own_malloc: a worker's posix_memalign failed\n");
        return 1;
    }
    if (own_session) {
        loupe_trace_result r;
        memset(&r, 0, sizeof r);
        r.size = sizeof r;
        if (loupe_stop_trace(&r) != 0 || r.run_dir == NULL) {
            fprintf(stderr, "own_malloc: stop: %s\n", loupe_last_error());
            return 1;
        }
        printf("recorded %llu dropped %llu\n%s\n", (unsigned long long)r.events_recorded,
               (unsigned long long)r.events_dropped, r.run_dir);
        loupe_trace_result_free(&r);
    }
    return 0;
}
