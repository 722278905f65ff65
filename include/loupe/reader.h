/* loupe/reader.h: reading trace files back into the trace model (loupe/model.h).
 *
 * Formats read: Chrome Trace Event JSON (object form {"traceEvents":[...]} or array form, gzipped
 * or not, detected from the bytes: gzip magic 1f 8b), as written by loupe and by other tools
 * (the Trace Event Format spec and Perfetto's JSON importer: B/E and X slices, i instants, C
 * counters, M names, flow v2 bind_id). Files loupe wrote come back with their loss accounting
 * (metadata keys "loupe_*"); other tools' files get capacity_needed 0 and no drop counts. Perfetto
 * protobuf traces (.pftrace, first byte 0x0A, gzipped or not): loupe's own come back as the model
 * that was written (docs/formats.md); other TrackEvent traces give their thread tracks' slices and
 * instants and their counter tracks; other packet types are skipped. Errors name the byte offset.
 * XPlane (an XSpace, <host>.xplane.pb, from loupe or jax.profiler; gzipped or not; recognised by
 * its structure: planes/hostnames fields, XPlane's field numbers in the first plane): loupe's own
 * come back as the model that was written; others give the /host:CPU lines as threads and the
 * /device:GPU:<n> lines as GPU tracks, stats as args, times from the first event (field numbers:
 * proto/xplane.proto; docs/formats.md). Errors name the byte offset. Content decides the reader,
 * XPlane first, then Perfetto, else JSON (src/import/detect.c).
 */
#ifndef LOUPE_READER_H
#define LOUPE_READER_H

#include <loupe/export.h>
#include <loupe/model.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Reads the trace file at path into a new model (*out; free with loupe_model_free()).
 * Errors: LOUPE_EINVALID (NULL argument), LOUPE_EIO (cannot open or read: the detail names the
 * path and errno), LOUPE_EFORMAT (not a trace, truncated, malformed: the detail says what and
 * where, e.g. the line and column of a JSON error), LOUPE_ENOMEM. On error *out is NULL.
 * Thread-safety: any thread. */
LOUPE_API int loupe_trace_read(const char *path, loupe_model **out);

/** Resolves what `loupe summary PATH` accepts into one trace file: a trace file as is; a run
 * directory (the *.trace.json.gz in it); a log_dir (the newest run under plugins/profile, by
 * name). Writes the file's path into buf (size bytes).
 * Errors: LOUPE_EINVALID, LOUPE_EIO (no such path, no trace inside: the detail says which).
 * Thread-safety: any thread. */
LOUPE_API int loupe_trace_find(const char *path, char *buf, size_t size);

#ifdef __cplusplus
}
#endif
#endif
