/* writers.h: the format writers (one file each) and the run directory (rundir.c). */
#ifndef LOUPE_EXPORT_WRITERS_H
#define LOUPE_EXPORT_WRITERS_H

#include "export/sink.h"

#include <loupe/model.h>
#include <loupe/trace.h>

/* Chrome Trace Event JSON. perfetto_variant: loupe's keys go in "otherData" instead of
 * "metadata". Returns 0 or -errno (the sink's errors are in s->err_no). */
int loupe__write_chrome_json(const loupe_model *m, loupe__sink *s, int perfetto_variant);

/* Writes a run directory for m under log_dir (see trace.h) and fills result's paths.
 * Returns 0 or a LOUPE_E* code with the detail set (path and errno). */
int loupe__write_run(const loupe_model *m, const char *log_dir, const char *run_name,
                     unsigned formats, int perfetto, loupe_trace_result *result);

#endif
