/* registry.h: the format registry (registry.c), one row per format loupe writes or reads. Every
 * list of formats in loupe (the run directory, loupe_trace_write, the server's format=, the CLI's
 * --format/--to and help texts, LOUPE_RECORD_FORMATS) iterates it; adding a format is adding a row
 * there (and its writer's file). The public view of a row is loupe_format_desc (loupe/writer.h). */
#ifndef LOUPE_EXPORT_REGISTRY_H
#define LOUPE_EXPORT_REGISTRY_H

#include <loupe/export.h>

#include "export/sink.h"

#include <loupe/model.h>
#include <loupe/writer.h>
#include <stddef.h>

typedef struct loupe__format {
    loupe_format_desc d; /* first: a desc from loupe_format_info() points at its row */
    /* Streams the model into the sink (writers.h' contract); NULL when this build cannot write
     * the format (d.can_write is 0 then). */
    int (*write)(const loupe_model *m, loupe__sink *s);
} loupe__format;

/* The row of a public desc (a pointer loupe_format_*() returned, never NULL). */
static inline const loupe__format *loupe__format_row(const loupe_format_desc *d) {
    return (const loupe__format *)(const void *)d;
}

/* The row whose file format is f, or NULL. */
LOUPE_API const loupe__format *loupe__format_by_file(loupe_file_format f);

#endif
