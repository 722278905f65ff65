/* writers.h: the format writers (one file each) and the run directory (rundir.c). */
#ifndef LOUPE_EXPORT_WRITERS_H
#define LOUPE_EXPORT_WRITERS_H

#include "base/error.h"
#include "export/sink.h"

#include <loupe/export.h>
#include <loupe/model.h>
#include <loupe/trace.h>

/* Chrome Trace Event JSON. perfetto_variant: loupe's keys go in "otherData" instead of
 * "metadata". Returns 0 or LOUPE_ENOMEM (the sink's own errors surface at its close). */
int loupe__write_chrome_json(const loupe_model *m, loupe__sink *s, int perfetto_variant);
/* The model's CPU samples as the format's "stackFrames" and "samples" (and loupe's
 * "loupeSamples") top-level members, each after a ','; nothing when it has none
 * (chrome_json_samples.c). */
/* wt: the tids the tracks are written with (loupe__model_written_tids; NULL: their own). */
void loupe__write_chrome_samples(const loupe_model *m, loupe__sink *s, const uint64_t *wt);

/* XPlane: one XSpace (<host>.xplane.pb) for XProf / TensorBoard (xplane.c). An XSpace over
 * loupe__xplane_limit bytes (protobuf's 2 GiB message limit: INT32_MAX; tests lower it, or set
 * LOUPE_TEST_XPLANE_PART_BYTES) written to a file sink is split by time into parts: part 1 in
 * s, part k in <x>.part<k>.xplane.pb beside it. Into any other sink (memory), or when no split
 * fits, it fails with LOUPE_EUNSUPPORTED before writing a byte. */
LOUPE_API int loupe__write_xplane(const loupe_model *m, loupe__sink *s);
extern uint64_t loupe__xplane_limit;

/* Folded stacks ("root;child;leaf <self ns>", one line per distinct stack; folded.c). */
int loupe__write_folded(const loupe_model *m, loupe__sink *s);

/* An SVG flame graph of the same call tree (svg.c). */
int loupe__write_svg(const loupe_model *m, loupe__sink *s);
/* The same two with a loupe_flame_weight (LOUPE_FLAME_WEIGHT_*; the two above take AUTO). */
int loupe__write_folded_weighted(const loupe_model *m, loupe__sink *s, int weight);
int loupe__write_svg_weighted(const loupe_model *m, loupe__sink *s, int weight);

/* pprof's profile.proto of the CPU samples and off-CPU time (pprof.c; gzip is the caller's: the
 * sink's). LOUPE_EUNSUPPORTED for a model with neither, before writing a byte. */
int loupe__write_pprof(const loupe_model *m, loupe__sink *s);

/* LLVM's text sample profile of the program's samples (fdo.c: loupe_fdo_profile's defaults). */
int loupe__write_llvm_prof(const loupe_model *m, loupe__sink *s);

/* Perfetto native protobuf (.pftrace; perfetto_proto.c): a sequence per track, interned names,
 * delta timestamps on an incremental clock, streamed packet by packet, deflated into
 * compressed_packets chunks unless LOUPE_PERFETTO_COMPRESS=0. */
int loupe__write_perfetto_proto(const loupe_model *m, loupe__sink *s);
/* The model's CPU samples, frames, stacks and off-CPU intervals as Perfetto profiler packets on
 * sequence 2 (perfetto_samples.c), timestamps base + ts (the trace clock); nothing when the
 * model has none. Called by loupe__write_perfetto_proto() after the track events. */
int loupe__write_perfetto_samples(const loupe_model *m, loupe__sink *s, uint64_t base);

/* Writer contract: int loupe__write_<format>(const loupe_model *m, loupe__sink *s) streams the
 * model into the sink and returns 0, or a negative LOUPE_E* code after setting the detail with
 * loupe__err(): LOUPE_ENOMEM for its own allocations, LOUPE_EUNSUPPORTED for a format limit.
 * The sink's errors (a full disk) are not the writer's: they stick in the sink and
 * loupe__sink_close() returns them, so a caller returns the writer's code, else the close's. */

/* Writes one file atomically: streams m through write into <path>.tmp (gzipped when gz), then
 * renames it to path; on any failure removes the .tmp. Returns 0 or a LOUPE_E* code with the
 * detail set (the path and errno, or the writer's own detail). */
LOUPE_API int loupe__write_file(const loupe_model *m, const char *path, int gz,
                                int (*write)(const loupe_model *m, loupe__sink *s));

/* The formats a session writes: options.formats (0 = the default set) plus
 * LOUPE_FORMAT_PERFETTO_JSON when create_perfetto_trace is set. */
#define LOUPE__FORMATS_DEFAULT (LOUPE_FORMAT_CHROME_JSON | LOUPE_FORMAT_XPLANE)
unsigned loupe__formats(unsigned formats, int create_perfetto_trace);
/* Copies the last run directory any stop or write wrote in this process ("" when none) into buf.
 * Exported for the preload library (loupe record). */
LOUPE_API const char *loupe__last_run_dir(char *buf, size_t size);
/* LOUPE_EINVALID (detail naming fn) when r is not NULL and r->size is neither 0 nor at least
 * sizeof(loupe_trace_result); else 0. */
int loupe__result_check(const loupe_trace_result *r, const char *fn);
/* Zeroes r but its size (r may be NULL). */
void loupe__result_reset(loupe_trace_result *r);

/* The LOUPE_FORMAT_* bits this build can write. */
unsigned loupe__formats_available(void);

/* Writes a run directory for m under log_dir (see trace.h) with the given LOUPE_FORMAT_* files
 * (in the registry's order) and fills result's run_dir and files (allocated; result may be NULL).
 * Returns 0 or a LOUPE_E* code with the detail set (path, errno); on an error result's paths are
 * left untouched. */
int loupe__write_run(const loupe_model *m, const char *log_dir, const char *run_name,
                     unsigned formats, loupe_trace_result *result);
/* The same into an existing (or made) directory run_dir, the files named <file_prefix><suffix>
 * (NULL or "": the host name; see loupe_trace_options.file_prefix): loupe record's run directory,
 * which every process of the traced tree writes into. A failure removes only this call's files. */
int loupe__write_run_into(const loupe_model *m, const char *run_dir, const char *file_prefix,
                          unsigned formats, loupe_trace_result *result);

#endif
