/* writers.h: the format writers (one file each) and the run directory (rundir.c). */
#ifndef LOUPE_EXPORT_WRITERS_H
#define LOUPE_EXPORT_WRITERS_H

#include "export/sink.h"

#include <loupe/model.h>
#include <loupe/trace.h>

/* Chrome Trace Event JSON. perfetto_variant: loupe's keys go in "otherData" instead of
 * "metadata". Returns 0 or -errno (the sink's errors are in s->err_no). */
int loupe__write_chrome_json(const loupe_model *m, loupe__sink *s, int perfetto_variant);

/* Writer contract: int loupe__write_<format>(const loupe_model *m, loupe__sink *s) streams the
 * model into the sink and returns 0, or -errno (the sink's own errors surface at close), or a
 * positive -LOUPE_E* code (e.g. -LOUPE_EUNSUPPORTED for a format limit) after setting the detail
 * with loupe__err(). */

/* The formats a session writes: options.formats (0 = the default set) plus
 * LOUPE_FORMAT_PERFETTO_JSON when create_perfetto_trace is set. */
#define LOUPE__FORMATS_DEFAULT (LOUPE_FORMAT_CHROME_JSON)
unsigned loupe__formats(unsigned formats, int create_perfetto_trace);

/* Writes a run directory for m under log_dir (see trace.h) with the given LOUPE_FORMAT_* files
 * and fills result's paths. Returns 0 or a LOUPE_E* code with the detail set (path, errno). */
int loupe__write_run(const loupe_model *m, const char *log_dir, const char *run_name,
                     unsigned formats, loupe_trace_result *result);

#endif
