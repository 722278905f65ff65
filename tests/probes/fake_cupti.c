/* fake_cupti.c: a libcupti.so for the tests (LOUPE_CUPTI_LIBRARY=<this>): CUPTI's activity API
 * as loupe calls it (src/gpu/cupti_api.h), with "kernels" that the test program launches by
 * calling loupe_fake_cupti_launch() (through dlopen of the same path, which gives the same copy).
 *
 * - One subscriber at a time: a second cuptiSubscribe gets error 39, as CUPTI's
 *   MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED; loupe_fake_cupti_set() makes every subscribe fail with a
 *   chosen result (another tool holding CUPTI) and CUPTI drop records.
 * - A launch while CONCURRENT_KERNEL is enabled queues a CUpti_ActivityKernel10 record (216 bytes:
 *   start@16, end@24, deviceId@40, streamId@48, grid@52, block@64, correlationId@92, name@104)
 *   and, while RUNTIME is enabled, a CUpti_ActivityAPI record (40 bytes: start@8, threadId@28,
 *   correlationId@32). The "GPU" runs one kernel at a time: a kernel starts at the later of its
 *   launch and the previous kernel's end, on a 32 ns tick (timestamps are multiples of 32 ns).
 * - cuptiActivityFlushAll hands every queued record back through the registered callbacks;
 *   cuptiFinalize forgets those not flushed.
 * - cuCtxSynchronize waits for the last kernel's end and counts its calls
 *   (loupe_fake_cupti_syncs()).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef void (*req_fn)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*done_fn)(void *context, uint32_t stream, uint8_t *buffer, size_t size,
                        size_t valid_size);

/* The exported functions (the test's controls, then CUPTI's and the driver's). */
EXPORT void loupe_fake_cupti_set(int subscribe_result, size_t dropped);
EXPORT uint32_t loupe_fake_cupti_launch(const char *name, uint64_t dur_ns, uint32_t stream,
                                        uint32_t gx, uint32_t bx);
EXPORT int loupe_fake_cupti_syncs(void);
EXPORT int loupe_fake_cupti_subscribed(void);
EXPORT int loupe_fake_cupti_finalizes(void);
EXPORT int cuptiGetVersion(uint32_t *version);
EXPORT int cuptiSubscribe(void **subscriber, void *callback, void *userdata);
EXPORT int cuptiUnsubscribe(void *subscriber);
EXPORT int cuptiActivityRegisterTimestampCallback(uint64_t (*fn)(void));
EXPORT int cuptiActivityRegisterCallbacks(req_fn req, done_fn done);
EXPORT int cuptiActivityEnable(int kind);
EXPORT int cuptiActivityDisable(int kind);
EXPORT int cuptiActivityFlushAll(uint32_t flag);
EXPORT int cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid_size, void **record);
EXPORT int cuptiActivityGetNumDroppedRecords(void *context, uint32_t stream, size_t *dropped);
EXPORT int cuptiGetResultString(int result, const char **str);
EXPORT int cuptiFinalize(void);
EXPORT int cuCtxSynchronize(void);

enum { KIND_RUNTIME = 5, KIND_KERNEL = 10, KERNEL_BYTES = 216, API_BYTES = 40, TICK = 32 };

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int subscribed, forced_result, syncs, finalizes;
static size_t drop_next;
static uint32_t enabled; /* bit per kind */
static uint64_t (*clock_fn)(void);
static req_fn on_req;
static done_fn on_done;
static uint8_t *queue;
static size_t queued, queue_cap;
static uint32_t next_corr = 1;
static uint64_t gpu_free_at;
static char *names[64];
static size_t nnames;

static void put32(uint8_t *r, size_t off, uint32_t v) {
    memcpy(r + off, &v, 4);
}
static void put64(uint8_t *r, size_t off, uint64_t v) {
    memcpy(r + off, &v, 8);
}

static uint8_t *room(size_t n) {
    if (queued + n > queue_cap) {
        size_t nc = queue_cap ? queue_cap * 2 : 4096;
        while (nc < queued + n) {
            nc *= 2;
        }
        uint8_t *nq = realloc(queue, nc);
        if (nq == NULL) {
            return NULL;
        }
        queue = nq;
        queue_cap = nc;
    }
    uint8_t *r = queue + queued;
    memset(r, 0, n);
    queued += n;
    return r;
}

static const char *intern(const char *name) {
    for (size_t i = 0; i < nnames; i++) {
        if (strcmp(names[i], name) == 0) {
            return names[i];
        }
    }
    if (nnames == sizeof names / sizeof names[0]) {
        return "too_many_names";
    }
    names[nnames] = strdup(name);
    return names[nnames++];
}

/* ---- the test's controls ---- */

/* Every later cuptiSubscribe answers result (0: the normal rules); the next flush reports
 * dropped records. */
EXPORT void loupe_fake_cupti_set(int subscribe_result, size_t dropped) {
    pthread_mutex_lock(&lock);
    forced_result = subscribe_result;
    drop_next = dropped;
    pthread_mutex_unlock(&lock);
}

/* Launches a kernel that runs dur_ns on stream, grid (gx,1,1) of blocks (bx,1,1). Returns its
 * correlation id, or 0 when nothing records kernels. */
EXPORT uint32_t loupe_fake_cupti_launch(const char *name, uint64_t dur_ns, uint32_t stream,
                                        uint32_t gx, uint32_t bx) {
    pthread_mutex_lock(&lock);
    uint32_t corr = next_corr++;
    uint64_t now = clock_fn != NULL ? clock_fn() : 1;
    if (enabled & (1u << KIND_RUNTIME)) {
        uint8_t *a = room(API_BYTES);
        if (a != NULL) {
            put32(a, 0, KIND_RUNTIME);
            put64(a, 8, now);
            put64(a, 16, now + 1000);
            put32(a, 24, (uint32_t)getpid());
            put32(a, 28, (uint32_t)syscall(SYS_gettid));
            put32(a, 32, corr);
        }
    }
    if (!(enabled & (1u << KIND_KERNEL))) {
        pthread_mutex_unlock(&lock);
        return 0;
    }
    uint64_t start = now > gpu_free_at ? now : gpu_free_at;
    start = (start + TICK - 1) / TICK * TICK;
    gpu_free_at = start + dur_ns;
    uint8_t *k = room(KERNEL_BYTES);
    if (k != NULL) {
        const char *nm = intern(name);
        put32(k, 0, KIND_KERNEL);
        put64(k, 16, start);
        put64(k, 24, start + dur_ns);
        put32(k, 40, 0);
        put32(k, 48, stream);
        put32(k, 52, gx);
        put32(k, 56, 1);
        put32(k, 60, 1);
        put32(k, 64, bx);
        put32(k, 68, 1);
        put32(k, 72, 1);
        put32(k, 92, corr);
        memcpy(k + 104, &nm, sizeof nm);
    }
    pthread_mutex_unlock(&lock);
    return corr;
}

EXPORT int loupe_fake_cupti_syncs(void) {
    return syncs;
}
EXPORT int loupe_fake_cupti_subscribed(void) {
    return subscribed;
}
EXPORT int loupe_fake_cupti_finalizes(void) {
    return finalizes;
}

/* ---- CUPTI ---- */

EXPORT int cuptiGetVersion(uint32_t *version) {
    *version = 130001;
    return 0;
}

EXPORT int cuptiSubscribe(void **subscriber, void *callback, void *userdata) {
    (void)callback;
    (void)userdata;
    pthread_mutex_lock(&lock);
    int r = forced_result != 0 ? forced_result : subscribed ? 39 : 0;
    if (r == 0) {
        subscribed = 1;
        *subscriber = &subscribed;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

EXPORT int cuptiUnsubscribe(void *subscriber) {
    pthread_mutex_lock(&lock);
    int r = subscriber == &subscribed && subscribed ? 0 : 1;
    subscribed = 0;
    enabled = 0;
    pthread_mutex_unlock(&lock);
    return r;
}

/* Under the lock: a session's start registers while a measurement's
 * cuCtxSynchronize reads the clock on another thread. */
EXPORT int cuptiActivityRegisterTimestampCallback(uint64_t (*fn)(void)) {
    pthread_mutex_lock(&lock);
    clock_fn = fn;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT int cuptiActivityRegisterCallbacks(req_fn req, done_fn done) {
    pthread_mutex_lock(&lock);
    on_req = req;
    on_done = done;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT int cuptiActivityEnable(int kind) {
    pthread_mutex_lock(&lock);
    enabled |= 1u << kind;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT int cuptiActivityDisable(int kind) {
    pthread_mutex_lock(&lock);
    enabled &= ~(1u << kind);
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT int cuptiActivityFlushAll(uint32_t flag) {
    (void)flag;
    pthread_mutex_lock(&lock);
    size_t n = queued;
    uint8_t *copy = n > 0 ? malloc(n) : NULL;
    if (copy != NULL) {
        memcpy(copy, queue, n);
    }
    queued = 0;
    size_t dropping = drop_next;
    req_fn req = on_req;
    done_fn done = on_done;
    pthread_mutex_unlock(&lock);
    size_t off = 0;
    while (off < n && copy != NULL) {
        uint8_t *buf;
        size_t size, maxr;
        req(&buf, &size, &maxr);
        if (buf == NULL) {
            break;
        }
        size_t valid = 0;
        while (off < n) {
            uint32_t kind;
            memcpy(&kind, copy + off, 4);
            size_t len = kind == KIND_KERNEL ? KERNEL_BYTES : API_BYTES;
            if (valid + len > size) {
                break;
            }
            memcpy(buf + valid, copy + off, len);
            valid += len;
            off += len;
        }
        done(NULL, 0, buf, size, valid);
    }
    free(copy);
    if (n == 0 && dropping > 0) { /* the drop is reported with a buffer, as CUPTI's */
        uint8_t *buf;
        size_t size, maxr;
        req(&buf, &size, &maxr);
        done(NULL, 0, buf, size, 0);
    }
    return 0;
}

EXPORT int cuptiActivityGetNextRecord(uint8_t *buffer, size_t valid_size, void **record) {
    uint8_t *r = *record;
    if (r == NULL) {
        r = buffer;
    } else {
        uint32_t kind;
        memcpy(&kind, r, 4);
        r += kind == KIND_KERNEL ? KERNEL_BYTES : API_BYTES;
    }
    if (r >= buffer + valid_size) {
        return 12; /* CUPTI_ERROR_MAX_LIMIT_REACHED */
    }
    *record = r;
    return 0;
}

EXPORT int cuptiActivityGetNumDroppedRecords(void *context, uint32_t stream, size_t *dropped) {
    (void)context;
    (void)stream;
    pthread_mutex_lock(&lock);
    *dropped = drop_next;
    drop_next = 0;
    pthread_mutex_unlock(&lock);
    return 0;
}

EXPORT int cuptiGetResultString(int result, const char **str) {
    *str = result == 39 ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" : "CUPTI_ERROR_UNKNOWN";
    return 0;
}

/* Ends CUPTI: records queued since the last flush (launched between it and the disable) are
 * gone, so a later subscriber never gets another's. */
EXPORT int cuptiFinalize(void) {
    pthread_mutex_lock(&lock);
    finalizes++;
    queued = 0;
    pthread_mutex_unlock(&lock);
    return 0;
}

/* Waits until the "GPU" ran every kernel launched so far, as the driver's does. */
EXPORT int cuCtxSynchronize(void) {
    pthread_mutex_lock(&lock);
    syncs++;
    uint64_t until = gpu_free_at;
    uint64_t (*now)(void) = clock_fn;
    pthread_mutex_unlock(&lock);
    while (now != NULL && now() < until) {
        struct timespec ts = {0, 1000};
        nanosleep(&ts, NULL);
    }
    return 0;
}
