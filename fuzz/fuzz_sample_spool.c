/* fuzz_sample_spool.c: libFuzzer target for the samples' spool reader (loupe__sspool_parse,
 * src/record/sample_spool.c), which a recovery runs on the file a dead program's sampler thread
 * left: any bytes must give a count of what was read and skipped, never a crash, a sanitizer
 * report or a leak. The input is the whole file (a 4096-byte header, then records). The module
 * map is parsed but not opened (a recovery hands it to libdwfl, which reads the files named).
 * Build: cmake -DLOUPE_FUZZ=ON -DCMAKE_C_COMPILER=clang (see fuzz/README.md). CTest replays
 * fuzz/corpus/sample_spool/ through the same function in every build. */
#include "record/sample.h"
#include "record/sample_spool.h"

#include <stdint.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    loupe__sspool_read r;
    (void)loupe__sspool_parse(data, size, &r);
    for (size_t i = 0; i < r.nmaps; i++) {
        /* every path kept is absolute and whole */
        if (r.maps[i].file[0] != '/' || strlen(r.maps[i].file) >= 4096) {
            __builtin_trap();
        }
    }
    if (r.skipped_bytes > size) {
        __builtin_trap();
    }
    loupe__sspool_read_free(&r);
    loupe__sample_discard();
    return 0;
}
