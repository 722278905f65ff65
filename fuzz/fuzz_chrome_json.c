/* fuzz_chrome_json.c: libFuzzer target for the Chrome JSON reader. Any input must give a model
 * or a LOUPE_E* error: never a crash, a sanitizer report, a leak or an unbounded allocation.
 * Build: cmake -DLOUPE_FUZZ=ON -DCMAKE_C_COMPILER=clang (see fuzz/README.md). CTest replays
 * fuzz/corpus/chrome_json/ through the same function in every build. */
#include "import/readers.h"

#include <loupe/loupe.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size + 1);
    if (buf == NULL) {
        return 0;
    }
    memcpy(buf, data, size);
    buf[size] = 0;
    loupe_model *m = NULL;
    int rc = loupe__chrome_json_read_mem("fuzz-input", buf, size, &m);
    if (rc == 0) {
        /* walk the model: every pointer must be valid */
        size_t total = 0;
        for (size_t t = 0; t < m->thread_count; t++) {
            for (size_t i = 0; i < m->threads[t].slice_count; i++) {
                total += strlen(m->threads[t].slices[i].name);
            }
        }
        for (size_t i = 0; i < m->warning_count; i++) {
            total += strlen(m->warnings[i]);
        }
        (void)total;
        loupe_model_free(m);
    } else if (m != NULL || loupe_last_error()[0] == 0) {
        abort(); /* an error must come with no model and a detail */
    }
    return 0;
}
