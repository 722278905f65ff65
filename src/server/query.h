/* query.h: the query string of GET /v1/profile (docs/server.md), parsed by hand so that it can be
 * fuzzed on its own (fuzz/fuzz_query.c). */
#ifndef LOUPE_SERVER_QUERY_H
#define LOUPE_SERVER_QUERY_H

#include <loupe/writer.h>
#include <stddef.h>
#include <stdint.h>

typedef struct loupe__query {
    uint32_t duration_ms; /* required, 1..UINT32_MAX (the server applies its own limit) */
    int level;            /* host_tracer_level 0..3 (jax's numbering: 0 records nothing);
                             default 2 */
    /* format=: an index into the format registry (loupe_format_info() in loupe/writer.h) of a
     * format the server sends (its mime_type is set), by name or alias; default json */
    size_t format;
} loupe__query;

/* Non-zero when the registry's format i is one the server sends. */
int loupe__query_servable(size_t i);

/* The longest query string accepted, in bytes, and the most parameters. */
#define LOUPE__QUERY_MAX 2048
#define LOUPE__QUERY_MAX_PARAMS 16

/* Parses q[0..len) (the part after '?', not NUL-terminated; percent-encoding and '+' decoded).
 * Every parameter may appear once; unknown ones are an error. Returns 0, or LOUPE_EINVALID with
 * err (size bytes, always NUL-terminated; the detail gets the same text) naming the parameter and
 * what is wrong, e.g. "duration_ms: \"abc\" is not a whole number of milliseconds". */
int loupe__query_parse(const char *q, size_t len, loupe__query *out, char *err, size_t size);

#endif
