/* fuzz_perfetto_proto.c: libFuzzer target for the Perfetto protobuf reader. Any input must give a
 * model or LOUPE_EFORMAT / LOUPE_ENOMEM with a detail: never a crash, a sanitizer report, a leak
 * or an allocation sized by a length the input claims. A model read back is written again with
 * the Perfetto writer and must read back (the writer must accept whatever the reader builds).
 * Build: cmake -DLOUPE_FUZZ=ON -DCMAKE_C_COMPILER=clang (see fuzz/README.md). CTest replays
 * fuzz/corpus/perfetto_proto/ through the same function in every build. */
#include "export/sink.h"
#include "export/writers.h"
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
    loupe_model *m = NULL;
    int rc = loupe__perfetto_proto_read_mem("fuzz-input", buf, size, &m);
    if (rc != 0) {
        if (m != NULL || loupe_last_error()[0] == 0) {
            abort(); /* an error must come with no model and a detail */
        }
        return 0;
    }
    loupe__sink s;
    loupe__sink_open_mem(&s);
    if (loupe__write_perfetto_proto(m, &s) == 0 && loupe__sink_close(&s) == 0) {
        loupe_model *again = NULL;
        if (loupe__perfetto_proto_read_mem("fuzz-rewrite", s.mem, s.mem_len, &again) != 0) {
            abort(); /* loupe's own output must read back */
        }
        s.mem = NULL;
        loupe_model_free(again);
    } else {
        loupe__sink_close(&s);
    }
    free(s.mem);
    loupe_model_free(m);
    return 0;
}
