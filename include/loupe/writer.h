/* loupe/writer.h: writing a trace model (loupe/model.h) to a file in any format loupe writes,
 * for `loupe convert` and for programs that build or read a model and want it elsewhere.
 *
 * Formats (LOUPE_FILE_*):
 *   CHROME_JSON     Chrome Trace Event JSON, gzipped when the path ends in ".gz"
 *                   (docs/formats.md; the <host>.trace.json.gz of a run directory)
 *   XPLANE          an XSpace (<host>.xplane.pb) for XProf / TensorBoard; at most 2 GiB - 1 bytes
 *                   (protobuf's message limit), else LOUPE_EUNSUPPORTED and no file
 *   PERFETTO_PROTO  Perfetto's native protobuf trace (.pftrace)
 *   FOLDED          collapsed stacks "a;b;c <self ns>" for flame graphs (speedscope, flamegraph.pl)
 */
#ifndef LOUPE_WRITER_H
#define LOUPE_WRITER_H

#include <loupe/export.h>
#include <loupe/model.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loupe_file_format {
    LOUPE_FILE_UNKNOWN = 0,
    LOUPE_FILE_CHROME_JSON = 1,
    LOUPE_FILE_XPLANE = 2,
    LOUPE_FILE_PERFETTO_PROTO = 3,
    LOUPE_FILE_FOLDED = 4
} loupe_file_format;

/** The format a file name asks for, from its extension: *.json, *.json.gz -> CHROME_JSON;
 * *.xplane.pb, *.xspace.pb -> XPLANE; *.pftrace, *.perfetto-trace, *.perfetto, *.pb ->
 * PERFETTO_PROTO; *.folded, *.collapsed, *.collapsedstack.txt, *.txt -> FOLDED; else UNKNOWN.
 * Thread-safety: any thread. */
LOUPE_API loupe_file_format loupe_file_format_from_name(const char *path);

/** Parses a format name: "json", "xplane", "perfetto", "folded" (also "chrome", "pftrace",
 * "collapsed"). UNKNOWN for anything else or NULL. Thread-safety: any thread. */
LOUPE_API loupe_file_format loupe_file_format_parse(const char *name);

/** Writes m to path in the given format. The file is written as <path>.tmp and renamed when
 * complete: a failure leaves no file at path that looks finished (an existing file there is
 * kept). Errors: LOUPE_EINVALID (NULL, unknown format), LOUPE_EIO (cannot create or write:
 * the detail names the path and errno), LOUPE_EUNSUPPORTED (a format limit, e.g. an XSpace over
 * 2 GiB: the detail says which), LOUPE_ENOMEM. Memory: the writers stream; XPLANE and FOLDED
 * keep their name tables (distinct names / stacks), not the events.
 * Thread-safety: any thread; m is only read. */
LOUPE_API int loupe_trace_write(const loupe_model *m, const char *path, loupe_file_format format);

#ifdef __cplusplus
}
#endif
#endif
