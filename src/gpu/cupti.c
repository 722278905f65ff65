/* cupti.c: the CUPTI device tracer (trace.h: device_tracer_level). libcupti.so is loaded at run
 * time with dlopen, so loupe builds and runs without CUDA; tests swap in a fake function table
 * (cupti_api.h). Flow (CUPTI's activity API, cupti_activity.h and cupti_callbacks.h): Subscribe
 * (detects another subscriber: error 39) → RegisterTimestampCallback (CLOCK_REALTIME ns, before any
 * Enable, so records are on the axis of the trace's origin_unix_ns) → RegisterCallbacks → Enable
 * CONCURRENT_KERNEL, MEMCPY, MEMSET, RUNTIME; at stop FlushAll(FORCED) → Disable → Unsubscribe →
 * Finalize (Mosaic's order). Records are read at fixed offsets of the CUDA 13.0 structs (checked
 * with offsetof against cupti_activity.h of CUDA 13.0):
 *   CUpti_ActivityKernel10: kind@0 u32, start@16 u64, end@24 u64, deviceId@40 u32,
 *                           streamId@48 u32, gridX/Y/Z@52/56/60 i32, blockX/Y/Z@64/68/72 i32,
 *                           correlationId@92 u32, name@104 const char *
 *   CUpti_ActivityMemcpy6:  kind@0, copyKind@4 u8, bytes@8 u64, start@16, end@24, deviceId@32,
 *                           streamId@40, correlationId@44
 *   CUpti_ActivityMemset4:  kind@0, value@4, bytes@8, start@16, end@24, deviceId@32,
 *                           streamId@40, correlationId@44
 *   CUpti_ActivityAPI:      kind@0, cbid@4, start@8, end@16, processId@24, threadId@28,
 *                           correlationId@32
 * so an older CUPTI (API version < 13.0) is refused with a note. A record with a zero
 * timestamp, end < start, or a start outside the session is dropped and counted (XLA's
 * cupti_collector does the same).
 *
 * loupe_gpu_measure() (Mosaic's measure()) subscribes the same way with CONCURRENT_KERNEL only,
 * or, while the session's tracer holds CUPTI, reads the tracer's records of its window; its
 * kernels go to the session's records as well, so a session sees them on its timeline. A
 * measurement holds the tracer it reads: a session that stops meanwhile (on another thread, or
 * inside the measured function) takes the records up to its stop and leaves the subscription to
 * the measurement, which ends it (`held`, `detached`).
 * LOUPE_CUPTI_LIBRARY names the CUPTI library to load (no search, no driver check): a CUPTI
 * outside the usual places, or the tests' fake (tests/probes/fake_cupti.c).
 */
#include "base/array.h"
#include "base/clock.h"
#include "base/error.h"
#include "gpu/cupti_api.h"
#include "gpu/gpu_internal.h"
#include "model/builder.h"

#include <loupe/gpu.h>
#include <loupe/trace.h>

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { REC_KERNEL = 1, REC_MEMCPY = 2, REC_MEMSET = 3 };

typedef struct rec {
    int what;
    uint64_t start, end, bytes;
    uint32_t device, stream, corr, copy_kind;
    uint32_t grid[3], block[3];
    char *name;
} rec;

typedef struct api_rec {
    uint32_t corr, thread;
    uint64_t start;
} api_rec;

static pthread_mutex_t cupti_lock = PTHREAD_MUTEX_INITIALIZER;
static const loupe__cupti_api *fake;
static loupe__cupti_api loaded;
static void *dl;
static int active;
static void *subscriber;
static rec *recs;
static size_t nrecs, caprecs;
static api_rec *apis;
static size_t napis, capapis;
static uint64_t dropped, invalid;
static char note[768];
static char why[512];         /* load()'s reason when CUPTI cannot be used */
static int (*ctx_sync)(void); /* cuCtxSynchronize, when the driver (or the fake) has it */
static void *drv;             /* libcuda.so.1, kept open for cuCtxSynchronize */
/* A loupe_gpu_measure() running (under cupti_lock): its kernels, and the records CUPTI dropped
 * meanwhile. */
static int measuring;
static int held;     /* the measurement reads the session tracer's subscription */
static int detached; /* that session stopped: the subscription is the measurement's to end */
static loupe_gpu_kernel_timing *mk;
static size_t nmk, capmk;
static uint64_t mdropped;
static pthread_mutex_t measure_lock = PTHREAD_MUTEX_INITIALIZER;
/* Orders who subscribes: a session's start and stop and a measurement's window edges, each a
 * check and its CUPTI calls under it (taken before cupti_lock; never held while fn runs, and
 * on_complete does not take it). */
static pthread_mutex_t tracer_lock = PTHREAD_MUTEX_INITIALIZER;

#define CUPTI_BUFFER_BYTES (2u << 20) /* 1..10 MB recommended (cupti_activity.h) */

void loupe__cupti_set_api(const loupe__cupti_api *api) {
    fake = api;
}

static uint64_t ts_realtime(void) {
    return loupe__realtime_ns();
}

static void on_request(uint8_t **buffer, size_t *size, size_t *max_records) {
    void *p = NULL;
    if (posix_memalign(&p, 8, CUPTI_BUFFER_BYTES) != 0) {
        p = NULL;
    }
    *buffer = p;
    *size = p != NULL ? CUPTI_BUFFER_BYTES : 0;
    *max_records = 0; /* fill the buffer */
}

static uint32_t rd32(const uint8_t *r, size_t off) {
    uint32_t v;
    memcpy(&v, r + off, sizeof v);
    return v;
}

static uint64_t rd64(const uint8_t *r, size_t off) {
    uint64_t v;
    memcpy(&v, r + off, sizeof v);
    return v;
}

static void keep(const rec *r) {
    if (r->start == 0 || r->end < r->start) {
        invalid++;
        return;
    }
    if (loupe__grow((void **)&recs, &caprecs, nrecs + 1, sizeof(*recs)) != 0) {
        dropped++;
        return;
    }
    recs[nrecs] = *r;
    if (r->name != NULL) {
        recs[nrecs].name = strdup(r->name);
    }
    nrecs++;
}

/* A measured kernel (under cupti_lock); one that cannot be kept counts as dropped. */
static void keep_measured(const rec *r) {
    if (loupe__grow((void **)&mk, &capmk, nmk + 1, sizeof(*mk)) != 0) {
        mdropped++;
        return;
    }
    loupe_gpu_kernel_timing *k = &mk[nmk];
    memset(k, 0, sizeof *k);
    k->name = strdup(r->name);
    if (k->name == NULL) {
        mdropped++;
        return;
    }
    k->start_unix_ns = r->start;
    k->dur_ns = r->end > r->start && r->start != 0 ? r->end - r->start : 0;
    k->device = r->device;
    k->stream = r->stream;
    k->correlation_id = r->corr;
    memcpy(k->grid, r->grid, sizeof k->grid);
    memcpy(k->block, r->block, sizeof k->block);
    nmk++;
}

static void free_measured(void) {
    for (size_t i = 0; i < nmk; i++) {
        free((char *)(uintptr_t)mk[i].name);
    }
    free(mk);
    mk = NULL;
    nmk = capmk = 0;
    mdropped = 0;
}

static const loupe__cupti_api *api_now(void) {
    return fake != NULL ? fake : &loaded;
}

static void on_complete(void *context, uint32_t stream, uint8_t *buffer, size_t size,
                        size_t valid) {
    (void)context;
    (void)size;
    const loupe__cupti_api *a = api_now();
    pthread_mutex_lock(&cupti_lock);
    void *rp = NULL;
    while (buffer != NULL && a->get_next_record(buffer, valid, &rp) == LOUPE__CUPTI_SUCCESS) {
        const uint8_t *r = rp;
        uint32_t kind = rd32(r, 0);
        rec x;
        memset(&x, 0, sizeof x);
        if (kind == LOUPE__CUPTI_KIND_CONCURRENT_KERNEL) {
            x.what = REC_KERNEL;
            x.start = rd64(r, 16);
            x.end = rd64(r, 24);
            x.device = rd32(r, 40);
            x.stream = rd32(r, 48);
            for (int d = 0; d < 3; d++) {
                x.grid[d] = rd32(r, 52 + 4 * (size_t)d);
                x.block[d] = rd32(r, 64 + 4 * (size_t)d);
            }
            x.corr = rd32(r, 92);
            const char *nm;
            memcpy(&nm, r + 104, sizeof nm);
            /* keep() copies it: the record only lends the name */
            x.name = (char *)(uintptr_t)(nm != NULL ? nm : "kernel");
            if (!detached) {
                keep(&x); /* after a detached stop, the session has taken its records */
            }
            if (measuring) {
                keep_measured(&x);
            }
        } else if (kind == LOUPE__CUPTI_KIND_MEMCPY || kind == LOUPE__CUPTI_KIND_MEMSET) {
            x.what = kind == LOUPE__CUPTI_KIND_MEMCPY ? REC_MEMCPY : REC_MEMSET;
            x.copy_kind = kind == LOUPE__CUPTI_KIND_MEMCPY ? r[4] : 0;
            x.bytes = rd64(r, 8);
            x.start = rd64(r, 16);
            x.end = rd64(r, 24);
            x.device = rd32(r, 32);
            x.stream = rd32(r, 40);
            x.corr = rd32(r, 44);
            if (!detached) {
                keep(&x);
            }
        } else if (kind == LOUPE__CUPTI_KIND_RUNTIME && !detached) {
            if (loupe__grow((void **)&apis, &capapis, napis + 1, sizeof(*apis)) != 0) {
                continue;
            }
            apis[napis].start = rd64(r, 8);
            apis[napis].thread = rd32(r, 28);
            apis[napis].corr = rd32(r, 32);
            napis++;
        }
    }
    size_t d = 0;
    if (a->get_num_dropped_records != NULL &&
        a->get_num_dropped_records(NULL, stream, &d) == LOUPE__CUPTI_SUCCESS) {
        dropped += detached ? 0 : d;
        mdropped += measuring ? d : 0;
    }
    pthread_mutex_unlock(&cupti_lock);
    free(buffer);
}

static int load_unlocked(void) {
    if (fake != NULL) {
        return 0;
    }
    if (dl != NULL) {
        return 0;
    }
    const char *named = getenv("LOUPE_CUPTI_LIBRARY");
    if (named != NULL && named[0] != 0) {
        dl = dlopen(named, RTLD_NOW | RTLD_LOCAL);
        if (dl == NULL) {
            const char *e = dlerror();
            snprintf(why, sizeof why, "CUPTI not found (LOUPE_CUPTI_LIBRARY=%s: %s)", named,
                     e != NULL ? e : "not found");
            return -1;
        }
    } else {
        /* No driver, no GPU: say so (CUPTI itself only answers CUPTI_ERROR_UNKNOWN then). */
        if (drv == NULL) {
            drv = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
        }
        if (drv == NULL) {
            snprintf(why, sizeof why,
                     "no CUDA driver (libcuda.so.1 not found): no GPU activity is recorded");
            return -1;
        }
        static const char *const libs[] = {"libcupti.so", "libcupti.so.13",
                                           "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so",
                                           "/usr/local/cuda/lib64/libcupti.so"};
        for (size_t i = 0; i < sizeof libs / sizeof libs[0] && dl == NULL; i++) {
            dl = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL);
        }
        if (dl == NULL) {
            const char *e = dlerror();
            snprintf(why, sizeof why, "CUPTI not found (libcupti.so: %s)",
                     e != NULL ? e : "not found");
            return -1;
        }
    }
    /* POSIX: a function pointer converts from dlsym's void * through memcpy. */
#define SYM(field, name)                                                                           \
    do {                                                                                           \
        void *s = dlsym(dl, name);                                                                 \
        memcpy(&loaded.field, &s, sizeof s);                                                       \
        if (s == NULL) {                                                                           \
            snprintf(why, sizeof why, "libcupti.so lacks %s", name);                               \
            dlclose(dl);                                                                           \
            dl = NULL;                                                                             \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)
    SYM(get_version, "cuptiGetVersion");
    SYM(subscribe, "cuptiSubscribe");
    SYM(unsubscribe, "cuptiUnsubscribe");
    SYM(register_timestamp_callback, "cuptiActivityRegisterTimestampCallback");
    SYM(register_callbacks, "cuptiActivityRegisterCallbacks");
    SYM(enable, "cuptiActivityEnable");
    SYM(disable, "cuptiActivityDisable");
    SYM(flush_all, "cuptiActivityFlushAll");
    SYM(get_next_record, "cuptiActivityGetNextRecord");
    SYM(get_num_dropped_records, "cuptiActivityGetNumDroppedRecords");
    SYM(get_result_string, "cuptiGetResultString");
    SYM(finalize, "cuptiFinalize");
#undef SYM
    /* cuCtxSynchronize: the fake has its own; the driver's otherwise. */
    void *cs = dlsym(dl, "cuCtxSynchronize");
    if (cs == NULL && drv != NULL) {
        cs = dlsym(drv, "cuCtxSynchronize");
    }
    memcpy(&ctx_sync, &cs, sizeof cs);
    return 0;
}

/* Loads CUPTI once (a session's start and a measurement may race to it). 0, or -1 with why set. */
static int load(void) {
    static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&load_lock);
    int r = load_unlocked();
    pthread_mutex_unlock(&load_lock);
    return r;
}

/* The CUPTI API version, or 0 (with why set) when it is older than the records loupe reads. */
static int version_ok(const loupe__cupti_api *a) {
    uint32_t v = 0;
    if (a->get_version(&v) != 0 || v < LOUPE__CUPTI_MIN_VERSION) {
        snprintf(why, sizeof why,
                 "CUPTI API version %u is older than %u (CUDA 13.0), whose record layout loupe "
                 "reads",
                 v, LOUPE__CUPTI_MIN_VERSION);
        return 0;
    }
    return 1;
}

static const char *result_str(const loupe__cupti_api *a, int r) {
    const char *s = NULL;
    if (a->get_result_string == NULL || a->get_result_string(r, &s) != 0 || s == NULL) {
        s = "CUPTI error";
    }
    return s;
}

static void clear_records(void) {
    for (size_t i = 0; i < nrecs; i++) {
        free(recs[i].name);
    }
    free(recs);
    free(apis);
    recs = NULL;
    apis = NULL;
    nrecs = caprecs = napis = capapis = 0;
    dropped = invalid = 0;
}

static const int kinds[] = {LOUPE__CUPTI_KIND_CONCURRENT_KERNEL, LOUPE__CUPTI_KIND_MEMCPY,
                            LOUPE__CUPTI_KIND_MEMSET, LOUPE__CUPTI_KIND_RUNTIME};

static void start_locked(const loupe__cupti_api *a);

void loupe__cupti_start(int level) {
    pthread_mutex_lock(&cupti_lock);
    clear_records();
    note[0] = 0;
    pthread_mutex_unlock(&cupti_lock);
    if (level <= 0) {
        return; /* silently off */
    }
    if (load() != 0 || !version_ok(api_now())) {
        snprintf(note, sizeof note, "device tracer: %s; the session goes on host-only", why);
        return;
    }
    const loupe__cupti_api *a = api_now();
    pthread_mutex_lock(&tracer_lock);
    start_locked(a);
    pthread_mutex_unlock(&tracer_lock);
}

/* loupe__cupti_start()'s subscription, under tracer_lock. */
static void start_locked(const loupe__cupti_api *a) {
    pthread_mutex_lock(&cupti_lock);
    int busy = measuring || held;
    pthread_mutex_unlock(&cupti_lock);
    if (busy) {
        snprintf(note, sizeof note,
                 "device tracer: CUPTI is held by a loupe_gpu_measure() under way; the session "
                 "goes on host-only");
        return;
    }
    int r = a->subscribe(&subscriber, NULL, NULL);
    if (r == LOUPE__CUPTI_ERROR_MULTIPLE_SUBSCRIBERS) {
        const char *inj = getenv("CUDA_INJECTION64_PATH");
        snprintf(note, sizeof note,
                 "device tracer: another CUPTI subscriber is active (%s%s%s), such as Nsight "
                 "Systems, Nsight Compute or another profiler (CUPTI error 39, "
                 "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED); the session goes on host-only",
                 inj != NULL ? "CUDA_INJECTION64_PATH=" : "unnamed", inj != NULL ? inj : "", "");
        fprintf(stderr, "loupe: %s\n", note);
        return;
    }
    if (r != 0) {
        snprintf(note, sizeof note,
                 "device tracer: cuptiSubscribe failed: %s (CUPTI error %d); the session goes on "
                 "host-only",
                 result_str(a, r), r);
        return;
    }
    (void)a->register_timestamp_callback(ts_realtime); /* Linux's default is REALTIME anyway */
    r = a->register_callbacks(on_request, on_complete);
    for (size_t i = 0; r == 0 && i < sizeof kinds / sizeof kinds[0]; i++) {
        r = a->enable(kinds[i]);
    }
    if (r != 0) {
        snprintf(note, sizeof note,
                 "device tracer: no GPU activity can be recorded (%s, CUPTI error %d); the "
                 "session goes on host-only",
                 result_str(a, r), r);
        for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
            (void)a->disable(kinds[i]);
        }
        (void)a->unsubscribe(subscriber);
        return;
    }
    pthread_mutex_lock(&cupti_lock);
    active = 1;
    pthread_mutex_unlock(&cupti_lock);
}

/* Ends the device tracer's subscription: every kind off, unsubscribed, CUPTI finalized. */
static void unsubscribe_all(const loupe__cupti_api *a) {
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        (void)a->disable(kinds[i]);
    }
    (void)a->unsubscribe(subscriber);
    (void)a->finalize();
}

void loupe__cupti_stop(void) {
    pthread_mutex_lock(&tracer_lock);
    if (active) {
        const loupe__cupti_api *a = api_now();
        (void)a->flush_all(1); /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */
        pthread_mutex_lock(&cupti_lock);
        int measured = held;
        /* with a measurement reading it, the records so far are the session's and the rest the
         * measurement's, which ends the subscription */
        detached = measured;
        active = 0;
        pthread_mutex_unlock(&cupti_lock);
        if (!measured) {
            unsubscribe_all(a);
        }
    }
    pthread_mutex_unlock(&tracer_lock);
}

uint64_t loupe__cupti_kernel_start_unix(uint32_t corr) {
    uint64_t s = 0;
    pthread_mutex_lock(&cupti_lock);
    for (size_t i = 0; i < nrecs; i++) {
        if (recs[i].what == REC_KERNEL && recs[i].corr == corr) {
            s = recs[i].start;
            break;
        }
    }
    pthread_mutex_unlock(&cupti_lock);
    return s;
}

static int by_corr(const void *a, const void *b) {
    uint32_t x = ((const api_rec *)a)->corr, y = ((const api_rec *)b)->corr;
    return (x > y) - (x < y);
}

/* The launch of a correlation id (apis sorted by by_corr), or NULL. */
static const api_rec *launch_of(uint32_t corr) {
    api_rec key = {.corr = corr};
    return napis > 0 ? bsearch(&key, apis, napis, sizeof *apis, by_corr) : NULL;
}

static const char *copy_kind(uint32_t k) {
    /* CUpti_ActivityMemcpyKind (cupti_activity.h): 1 HtoD, 2 DtoH, 3 HtoA, 4 AtoH, 5 AtoA,
     * 6 AtoD, 7 DtoA, 8 DtoD, 9 HtoH, 10 PtoP. */
    static const char *const n[] = {"Memcpy",      "Memcpy HtoD", "Memcpy DtoH", "Memcpy HtoA",
                                    "Memcpy AtoH", "Memcpy AtoA", "Memcpy AtoD", "Memcpy DtoA",
                                    "Memcpy DtoD", "Memcpy HtoH", "Memcpy PtoP"};
    return k < sizeof n / sizeof n[0] ? n[k] : "Memcpy";
}

int loupe__cupti_collect(loupe__mb *mb, uint64_t origin, uint64_t stop_ns) {
    pthread_mutex_lock(&cupti_lock);
    int failed = 0;
    size_t first = SIZE_MAX;
    size_t nk = 0, nm = 0, ns = 0;
    if (napis > 1) {
        qsort(apis, napis, sizeof *apis, by_corr);
    }
    for (size_t i = 0; i < nrecs && !failed; i++) {
        const rec *r = &recs[i];
        if (r->device > 255 || r->start < origin || r->start - origin > stop_ns) {
            invalid++; /* outside the session (XLA's collector drops these too) */
            continue;
        }
        size_t ti = loupe__mb_thread(mb, LOUPE__GPU_TID(r->device, 0x80000000u | r->stream));
        if (ti == SIZE_MAX) {
            failed = 1;
            break;
        }
        loupe_model_thread *th = loupe__mb_thread_at(mb, ti);
        if (th->kind != LOUPE_TRACK_GPU) {
            char name[64];
            snprintf(name, sizeof name, "stream %u", r->stream);
            th->kind = LOUPE_TRACK_GPU;
            th->device = r->device;
            loupe__mb_thread_name(mb, ti, name);
        }
        if (first == SIZE_MAX) {
            first = ti;
        }
        size_t si = loupe__mb_slice(mb, ti);
        if (si == SIZE_MAX) {
            failed = 1;
            break;
        }
        loupe_slice *s = loupe__mb_slice_at(mb, ti, si);
        s->start_ns = r->start > origin ? r->start - origin : 0;
        s->dur_ns = r->end - r->start;
        s->name = loupe__mb_str(mb, r->what == REC_KERNEL   ? r->name
                                    : r->what == REC_MEMCPY ? copy_kind(r->copy_kind)
                                                            : "Memset");
        loupe__mb_slice_category(mb, ti, si,
                                 r->what == REC_KERNEL   ? "kernel"
                                 : r->what == REC_MEMCPY ? "memcpy"
                                                         : "memset");
        loupe_arg args[4];
        uint32_t na = 0;
        args[na++] = (loupe_arg){.key = "correlation_id", .type = LOUPE_ARG_UINT64, .v.u = r->corr};
        const api_rec *la = launch_of(r->corr);
        if (la != NULL && la->thread != 0) {
            args[na++] =
                (loupe_arg){.key = "launch_tid", .type = LOUPE_ARG_UINT64, .v.u = la->thread};
        }
        if (la != NULL && la->start >= origin) {
            /* the launching call's start on the trace's clock: loupe gpu-measure splits the
             * kernels by the steps they were launched in */
            args[na++] = (loupe_arg){
                .key = "launch_ns", .type = LOUPE_ARG_UINT64, .v.u = la->start - origin};
        }
        if (r->what != REC_KERNEL) {
            args[na++] = (loupe_arg){.key = "bytes", .type = LOUPE_ARG_UINT64, .v.u = r->bytes};
        }
        failed = loupe__mb_slice_args(mb, ti, si, args, na) != 0;
        th = loupe__mb_thread_at(mb, ti);
        th->events_recorded++;
        nk += r->what == REC_KERNEL;
        nm += r->what == REC_MEMCPY;
        ns += r->what == REC_MEMSET;
    }
    uint64_t lost = dropped + invalid;
    if (!failed && lost > 0) {
        if (first == SIZE_MAX) {
            first = loupe__mb_thread(mb, LOUPE__GPU_TID(0, 0x7FFFFFFFu));
            if (first != SIZE_MAX) {
                loupe_model_thread *th = loupe__mb_thread_at(mb, first);
                th->kind = LOUPE_TRACK_GPU;
                loupe__mb_thread_name(mb, first, "CUPTI");
            }
        }
        if (first == SIZE_MAX) {
            failed = 1;
        } else {
            loupe__mb_thread_at(mb, first)->events_dropped += lost;
        }
    }
    if (!failed && (nrecs > 0 || lost > 0 || note[0])) {
        char val[1024];
        if (note[0]) {
            snprintf(val, sizeof val, "%s", note);
        } else {
            snprintf(val, sizeof val,
                     "CUPTI: %zu kernels, %zu memcpys, %zu memsets, %llu records dropped by "
                     "CUPTI, %llu without timestamps or outside the session",
                     nk, nm, ns, (unsigned long long)dropped, (unsigned long long)invalid);
        }
        failed = loupe__mb_metadata(mb, "device_tracer", val) != 0;
    }
    clear_records();
    pthread_mutex_unlock(&cupti_lock);
    return failed ? loupe__err(LOUPE_ENOMEM, "out of memory while adding the CUPTI records") : 0;
}

const char *loupe_gpu_device_tracer_note(void) {
    return note;
}

/* ---- loupe_gpu_measure() ---- */

/* Ends the measurement's window: takes its kernels out of the shared state (the caller frees
 * them), and forgets the session's records too when no session will collect them. */
static void end_window(loupe_gpu_kernel_timing **k, size_t *n, uint64_t *lost, int tracer) {
    pthread_mutex_lock(&cupti_lock);
    measuring = 0;
    *k = mk;
    *n = nmk;
    *lost = mdropped;
    mk = NULL;
    nmk = capmk = 0;
    mdropped = 0;
    if (!tracer && !active && !loupe_is_tracing()) {
        clear_records();
    }
    pthread_mutex_unlock(&cupti_lock);
}

static void free_kernels(loupe_gpu_kernel_timing *k, size_t n) {
    for (size_t i = 0; i < n; i++) {
        free((char *)(uintptr_t)k[i].name);
    }
    free(k);
}

/* The measurement's own subscription (no session tracer holds CUPTI), its window open. */
static void *own_sub;

/* Opens the window, under tracer_lock: reads the session tracer's records (and holds it
 * subscribed) when it is on, else subscribes for CONCURRENT_KERNEL. 0, or an error (said). */
static int open_window(const loupe__cupti_api *a, int *tracer) {
    pthread_mutex_lock(&tracer_lock);
    pthread_mutex_lock(&cupti_lock);
    *tracer = active; /* the session's device tracer holds CUPTI: read its records */
    held = *tracer;   /* and keep it subscribed until the window ends */
    pthread_mutex_unlock(&cupti_lock);
    if (*tracer) {
        (void)a->flush_all(1); /* what ran before the window stays out of it */
    }
    pthread_mutex_lock(&cupti_lock);
    free_measured();
    measuring = 1;
    pthread_mutex_unlock(&cupti_lock);
    int r = 0;
    const char *step = "cuptiSubscribe";
    own_sub = NULL;
    if (!*tracer) {
        r = a->subscribe(&own_sub, NULL, NULL);
        if (r == 0) {
            (void)a->register_timestamp_callback(ts_realtime);
            step = "cuptiActivityRegisterCallbacks";
            r = a->register_callbacks(on_request, on_complete);
        }
        if (r == 0) {
            step = "cuptiActivityEnable(CONCURRENT_KERNEL)";
            r = a->enable(LOUPE__CUPTI_KIND_CONCURRENT_KERNEL);
        }
        if (r != 0 && r != LOUPE__CUPTI_ERROR_MULTIPLE_SUBSCRIBERS) {
            (void)a->disable(LOUPE__CUPTI_KIND_CONCURRENT_KERNEL);
            if (own_sub != NULL) {
                (void)a->unsubscribe(own_sub);
            }
        }
    }
    if (r != 0) {
        loupe_gpu_kernel_timing *k;
        size_t n;
        uint64_t lost;
        end_window(&k, &n, &lost, 0);
        free_kernels(k, n);
    }
    pthread_mutex_unlock(&tracer_lock);
    if (r == LOUPE__CUPTI_ERROR_MULTIPLE_SUBSCRIBERS) {
        const char *inj = getenv("CUDA_INJECTION64_PATH");
        return loupe__err(LOUPE_EUNSUPPORTED,
                          "Attempted to subscribe to CUPTI while another subscriber, such as "
                          "Nsight Systems or Nsight Compute, is active (%s%s): CUPTI does not "
                          "support multiple subscribers (CUPTI error 39)",
                          inj != NULL ? "CUDA_INJECTION64_PATH=" : "unnamed",
                          inj != NULL ? inj : "");
    }
    if (r != 0) {
        return loupe__err(LOUPE_EUNSUPPORTED, "loupe_gpu_measure: %s failed: %s (CUPTI error %d)",
                          step, result_str(a, r), r);
    }
    return 0;
}

/* Closes the window, under tracer_lock: the last records flushed, the measurement's own
 * subscription ended, or the session's when that session stopped meanwhile; its kernels out. */
static void close_window(const loupe__cupti_api *a, int tracer, loupe_gpu_kernel_timing **k,
                         size_t *n, uint64_t *lost) {
    pthread_mutex_lock(&tracer_lock);
    (void)a->flush_all(1); /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */
    if (!tracer) {
        (void)a->disable(LOUPE__CUPTI_KIND_CONCURRENT_KERNEL);
        (void)a->unsubscribe(own_sub);
        (void)a->finalize();
        own_sub = NULL;
    }
    end_window(k, n, lost, tracer);
    pthread_mutex_lock(&cupti_lock);
    int ends = detached; /* the session stopped during the window: its subscription ends here */
    pthread_mutex_unlock(&cupti_lock);
    if (ends) {
        unsubscribe_all(a);
    }
    pthread_mutex_lock(&cupti_lock);
    held = detached = 0; /* a session may start with the device tracer again */
    pthread_mutex_unlock(&cupti_lock);
    pthread_mutex_unlock(&tracer_lock);
}

static int measure_locked(void (*fn)(void *), void *arg, const loupe_gpu_measure_options *opts,
                          int32_t iterations, int32_t warmup, loupe_gpu_measure_result **out) {
    if (load() != 0 || !version_ok(api_now())) {
        return loupe__err(LOUPE_EUNSUPPORTED,
                          "CUPTI profiling is not supported on this platform (%s)", why);
    }
    const loupe__cupti_api *a = api_now();
    for (int32_t i = 0; i < warmup; i++) {
        fn(arg);
    }
    if (ctx_sync != NULL) {
        (void)ctx_sync();
    }
    int tracer = 0;
    int rc = open_window(a, &tracer);
    if (rc != 0) {
        return rc;
    }
    for (int32_t i = 0; i < iterations; i++) {
        fn(arg);
    }
    if (ctx_sync != NULL) {
        (void)ctx_sync(); /* the kernels' records are complete only once they ran */
    }
    loupe_gpu_kernel_timing *k;
    size_t n;
    uint64_t lost;
    close_window(a, tracer, &k, &n, &lost);
    if (lost > 0) {
        rc = loupe__err(LOUPE_EGPU_OVERFLOW,
                        "loupe_gpu_measure: CUPTI dropped %llu activity records: the timings "
                        "would be incomplete",
                        (unsigned long long)lost);
    } else {
        loupe_gpu_measure_options o = opts != NULL ? *opts : (loupe_gpu_measure_options){0};
        o.iterations = iterations;
        o.split = LOUPE_GPU_SPLIT_EVEN;
        rc = loupe_gpu_measure_kernels(k, n, &o, out);
    }
    free_kernels(k, n);
    return rc;
}

int loupe_gpu_measure(void (*fn)(void *arg), void *arg, const loupe_gpu_measure_options *opts,
                      loupe_gpu_measure_result **out) {
    if (fn == NULL || out == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_gpu_measure: fn and out must not be NULL");
    }
    *out = NULL;
    int32_t iterations, warmup;
    int rc = loupe__gpu_measure_check(opts, &iterations, &warmup);
    if (rc != 0) {
        return rc;
    }
    if (pthread_mutex_trylock(&measure_lock) != 0) {
        return loupe__err(LOUPE_EALREADY_STARTED,
                          "loupe_gpu_measure: another measurement is running in this process "
                          "(CUPTI has one subscriber)");
    }
    rc = measure_locked(fn, arg, opts, iterations, warmup, out);
    pthread_mutex_unlock(&measure_lock);
    return rc;
}
