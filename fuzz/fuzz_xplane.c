/* fuzz_xplane.c: libFuzzer target for the XPlane reader and the content detection in front of
 * it. Any input must give a model or a LOUPE_E* error with a detail: never a crash, a sanitizer
 * report, a leak or an allocation sized by a length claim. A model read back is written again as
 * XPlane and must read back (the writer takes whatever the reader gives).
 * Build: cmake -DLOUPE_FUZZ=ON -DCMAKE_C_COMPILER=clang (see fuzz/README.md). CTest replays
 * fuzz/corpus/xplane/ through the same function in every build. */
#include "export/writers.h"
#include "import/readers.h"

#include <loupe/loupe.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static loupe_model *read_copy(const void *data, size_t size, int *rc) {
    char *buf = malloc(size + 17);
    if (buf == NULL) {
        return NULL;
    }
    memcpy(buf, data, size);
    buf[size] = 0;
    loupe_model *m = NULL;
    *rc = loupe__xplane_read_mem("fuzz-input", buf, size, &m);
    return m;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)loupe__xplane_sniff((const char *)data, size);
    int rc = 0;
    loupe_model *m = read_copy(data, size, &rc);
    if (rc != 0) {
        if (m != NULL || loupe_last_error()[0] == 0) {
            abort(); /* an error must come with no model and a detail */
        }
        return 0;
    }
    if (m == NULL) {
        return 0; /* malloc failed */
    }
    loupe__sink s;
    loupe__sink_open_mem(&s);
    int w = loupe__write_xplane(m, &s);
    loupe__sink_close(&s);
    if (w == 0) {
        loupe_model *r = read_copy(s.mem, s.mem_len, &rc);
        if (rc != 0 || (r != NULL && r->thread_count != m->thread_count)) {
            abort(); /* loupe's own output must read back */
        }
        loupe_model_free(r);
    }
    free(s.mem);
    loupe_model_free(m);
    return 0;
}
