/* detect.c: which reader a trace file goes to, chosen from its bytes (not its name), so that
 * loupe_trace_read() and `loupe summary` take any format loupe writes, gzipped or not (the bytes
 * arrive here gunzipped). One line per binary format; Chrome JSON is the fallback, whose errors
 * then say why the file is not JSON either. Each sniff is cheap and strict: a false match would
 * give a format error from the wrong reader.
 */
#include "import/readers.h"

int loupe__trace_read_mem(const char *name, char *buf, size_t n, loupe_model **out) {
    if (loupe__xplane_sniff(buf, n)) {
        return loupe__xplane_read_mem(name, buf, n, out);
    }
    if (loupe__perfetto_proto_sniff(buf, n)) {
        return loupe__perfetto_proto_read_mem(name, buf, n, out);
    }
    return loupe__chrome_json_read_mem(name, buf, n, out);
}
