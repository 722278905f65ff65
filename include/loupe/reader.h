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
 * XPlane first, then Perfetto, then JSON ('[' or '{'), from the first 64 KiB (gunzipped) before
 * the rest is read; a file that is none of them is refused then (src/import/read.c). A cut
 * .pftrace / .xplane.pb (whose first bytes the sniffs reject) goes to the reader its name says.
 *
 * Never misleading: what a reader drops, repairs or doubts goes into the model's warnings
 * (loupe_model.warning_count / warnings; `loupe summary` prints them on stderr and in --json):
 * a JSON array that is not closed or a cut last event (read up to the last complete event), a
 * gzip stream cut short, events with a negative timestamp or one beyond +-2^62 ns (excluded:
 * one such ts would stretch the trace over years), X events with a negative dur (skipped), a
 * second "traceEvents" key (its events are read too). Damage inside the events array (a syntax
 * error with events after it) is an error (LOUPE_EFORMAT, with the line and column).
 * Integers: JSON integers beyond 2^53 that loupe writes are strings (a JavaScript reader would
 * round the number) and come back with their type (docs/formats.md, "loupe_types").
 *
 * Limits: a file is read whole into memory, at most LOUPE_READ_MAX_BYTES bytes once
 * uncompressed (an environment variable, a decimal number of bytes; default 4 GiB). Without
 * it, a gzip file may also expand to at most 64 times its compressed size (at least 64 MiB):
 * beyond, LOUPE_EFORMAT says the limit and how to raise it (set LOUPE_READ_MAX_BYTES, which
 * then is the only limit).
 */
#ifndef LOUPE_READER_H
#define LOUPE_READER_H

#include <loupe/export.h>
#include <loupe/model.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Reads the trace file at path into a new model (*out; free with loupe_model_free()). What was
 * dropped or repaired on the way is in (*out)->warnings. A file's "loupe_cmdline" and
 * "loupe_parent_pid" metadata fill processes[0].cmdline / parent_pid.
 * path may also be a run directory that several processes wrote (`loupe record` following a
 * process tree: <host>.<pid>.xplane.pb / .pftrace / .trace.json.gz files): one file per
 * process is read (.xplane.pb, else .pftrace, else .trace.json.gz) and all are merged into one
 * model, a process per file (processes[0] the earliest), times moved onto the earliest file's
 * origin_unix_ns plus each file's loupe_clock_offset_* correction (docs/record.md); a reader's
 * warnings are prefixed with the file's name. A directory without such files is LOUPE_EIO.
 * Errors: LOUPE_EINVALID (NULL argument, LOUPE_READ_MAX_BYTES not a positive number), LOUPE_EIO
 * (cannot open or read: the detail names the path and errno), LOUPE_EFORMAT (not a trace,
 * malformed, beyond the size limit: the detail says what and where, e.g. the line and column of
 * a JSON error, the byte offset in a protobuf), LOUPE_ENOMEM ("out of memory reading <path>
 * (<n> bytes)"). On error *out is NULL.
 * Thread-safety: any thread; readers on different threads share no state. */
LOUPE_API int loupe_trace_read(const char *path, loupe_model **out);

/** Resolves what `loupe summary PATH` accepts into one trace file: a trace file as is; a run
 * directory (its fastest complete trace: *.xplane.pb, else *.pftrace, else *.trace.json.gz, else
 * one *.json / *.json.gz; never a *.tmp, which is a write that did not finish; the directory
 * itself when it holds the files of two or more processes, <host>.<pid><suffix>, which
 * loupe_trace_read() merges); a log_dir (the
 * newest run under plugins/profile, in natural order of names, that holds a complete trace; the
 * runs skipped on the way are named by loupe_trace_find_skipped()). Writes the file's path into
 * buf (size bytes).
 * Errors: LOUPE_EINVALID (NULL, size 0, a path longer than buf), LOUPE_EIO (no such path, two
 * traces of one kind in a directory, no complete trace inside: the detail says which).
 * Thread-safety: any thread. */
LOUPE_API int loupe_trace_find(const char *path, char *buf, size_t size);

/** The runs the last loupe_trace_find() on this thread skipped, and why ("2027_01_02_00_00_00
 * (only .tmp files: a write that did not finish), ..."); "" when it skipped none.
 * Lifetime: until the next loupe_trace_find() on this thread. Thread-safety: any thread (the
 * note is per thread). */
LOUPE_API const char *loupe_trace_find_skipped(void);

#ifdef __cplusplus
}
#endif
#endif
