/* fuzz_query.c: libFuzzer target for the profiler server's query-string parser
 * (src/server/query.c, GET /v1/profile). The input is the raw bytes after '?', given without a
 * terminating NUL (as the parser gets them) in a buffer of exactly that size, so ASan sees any
 * read past the end. Any input must give a valid request or an error message that names what is
 * wrong: never a crash, an overread or an unterminated message. CTest replays fuzz/corpus/query/.
 */
#include "server/query.h"

#include <loupe/error.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    if (buf == NULL) {
        return 0;
    }
    memcpy(buf, data, size);
    loupe__query q;
    char err[160];
    memset(err, 'x', sizeof err);
    int rc = loupe__query_parse(buf, size, &q, err, sizeof err);
    if (memchr(err, 0, sizeof err) == NULL) {
        abort(); /* the message must always be terminated */
    }
    if (rc == 0) {
        if (q.duration_ms == 0 || q.level < 0 || q.level > 3 || !loupe__query_servable(q.format)) {
            abort();
        }
    } else if (rc != LOUPE_EINVALID || err[0] == 0) {
        abort();
    }
    free(buf);
    return 0;
}
