/* gpu_none.c: the GPU side in a build without it (-DLOUPE_WITH_GPU=OFF: src/gpu/ and
 * src/export/mosaic_json.c are not built).
 *
 * Every public function of loupe/gpu.h is still exported, so the library's ABI is the same in
 * every build shape: the ones that can fail return LOUPE_EUNSUPPORTED with a detail that names
 * the build option; the others give the empty answer (no table, size 0, no name). The session's
 * calls into the GPU floor (gpu/gpu_internal.h) are no-ops here, except that a session started
 * with device_tracer_level 1 gets the same note in its "device_tracer" metadata that a build
 * without CUPTI gives, saying why there is no device trace. */
#include "base/error.h"
#include "gpu/gpu_internal.h"
#include "model/builder.h"

#include <loupe/error.h>
#include <loupe/gpu.h>

#include <stddef.h>

#define NO_GPU "this build of loupe has no GPU support (LOUPE_WITH_GPU=OFF)"

/* Written by loupe__cupti_start(), read at collection and by loupe_gpu_device_tracer_note(): the
 * same single-session discipline as the real device tracer's note. */
static const char *note = "";

loupe_gpu_names *loupe_gpu_names_new(uint32_t max_names) {
    (void)max_names;
    (void)loupe__err(LOUPE_EUNSUPPORTED, NO_GPU);
    return NULL;
}

void loupe_gpu_names_free(loupe_gpu_names *t) {
    (void)t;
}

int loupe_gpu_names_add(loupe_gpu_names *t, const char *name, uint32_t *id) {
    (void)t;
    (void)name;
    (void)id;
    return loupe__err(LOUPE_EUNSUPPORTED, NO_GPU);
}

int loupe_gpu_names_add_many(loupe_gpu_names *t, const char *const *names, size_t n,
                             uint32_t *ids) {
    (void)t;
    (void)names;
    (void)n;
    (void)ids;
    return loupe__err(LOUPE_EUNSUPPORTED, NO_GPU);
}

const char *loupe_gpu_names_get(const loupe_gpu_names *t, uint32_t id) {
    (void)t;
    (void)id;
    return NULL;
}

uint32_t loupe_gpu_names_count(const loupe_gpu_names *t) {
    (void)t;
    return 0;
}

int loupe_gpu_names_load(loupe_gpu_names *t, const char *path) {
    (void)t;
    (void)path;
    return loupe__err(LOUPE_EUNSUPPORTED, NO_GPU);
}

size_t loupe_gpu_buffer_bytes(const loupe_gpu_spec *spec, const uint32_t grid[3],
                              const uint32_t block[3]) {
    (void)spec;
    (void)grid;
    (void)block;
    return 0;
}

int loupe_gpu_decode(const uint32_t *buffer, size_t n_words, const loupe_gpu_spec *spec,
                     const uint32_t grid[3], const uint32_t block[3], const loupe_gpu_names *names,
                     const loupe_gpu_decode_options *opts, loupe_gpu_decoded **out) {
    (void)buffer;
    (void)n_words;
    (void)spec;
    (void)grid;
    (void)block;
    (void)names;
    (void)opts;
    if (out != NULL) {
        *out = NULL;
    }
    return loupe__err(LOUPE_EUNSUPPORTED, NO_GPU);
}

void loupe_gpu_decoded_free(loupe_gpu_decoded *d) {
    (void)d;
}

int loupe_gpu_write_chrome_json(const loupe_gpu_decoded *d, const char *path) {
    (void)d;
    (void)path;
    return loupe__err(LOUPE_EUNSUPPORTED, NO_GPU);
}

int loupe_gpu_session_add(const loupe_gpu_decoded *d, const loupe_gpu_add_options *opts) {
    (void)d;
    (void)opts;
    return loupe__err(LOUPE_EUNSUPPORTED, NO_GPU);
}

int loupe_gpu_measure(void (*fn)(void *arg), void *arg, const loupe_gpu_measure_options *opts,
                      loupe_gpu_measure_result **out) {
    (void)fn;
    (void)arg;
    (void)opts;
    if (out != NULL) {
        *out = NULL;
    }
    return loupe__err(LOUPE_EUNSUPPORTED, "CUPTI profiling is not supported on this platform (%s)",
                      NO_GPU);
}

int loupe_gpu_measure_kernels(const loupe_gpu_kernel_timing *kernels, size_t n,
                              const loupe_gpu_measure_options *opts,
                              loupe_gpu_measure_result **out) {
    (void)kernels;
    (void)n;
    (void)opts;
    if (out != NULL) {
        *out = NULL;
    }
    return loupe__err(LOUPE_EUNSUPPORTED, NO_GPU);
}

void loupe_gpu_measure_result_free(loupe_gpu_measure_result *r) {
    (void)r;
}

const char *loupe_gpu_device_tracer_note(void) {
    return note;
}

void loupe__gpu_session_open(void) {}

void loupe__gpu_session_close(void) {}

void loupe__cupti_start(int level) {
    note = level > 0 ? "device tracer: " NO_GPU "; the session goes on host-only" : "";
}

void loupe__cupti_stop(void) {}

int loupe__gpu_collect(struct loupe__mb *mb, uint64_t origin_unix_ns, uint64_t stop_ns) {
    (void)origin_unix_ns;
    (void)stop_ns;
    if (mb == NULL || note[0] == 0) {
        return 0;
    }
    return loupe__mb_metadata(mb, "device_tracer", note) != 0 ? -1 : 0;
}
