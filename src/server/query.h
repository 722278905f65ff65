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
    /* sample_hz=: CPU sampling during the capture, 0 (off) .. 100000; default
     * LOUPE__CAPTURE_SAMPLING_HZ (session/capture.h) */
    uint32_t sample_hz;
    /* clock_offset_ns= (int64, may be negative), clock_offset_uncertainty_ns= and
     * clock_offset_at_ns= (uint64): the client's measurement of this server's trace clock
     * (GET /v1/clock), written into the trace as the loupe_clock_offset_* metadata keys.
     * have_clock: 1 when clock_offset_ns was given (the other two need it). */
    int have_clock;
    int64_t clock_offset_ns;
    int have_uncertainty, have_at;
    uint64_t clock_uncertainty_ns, clock_at_ns;
    /* clock_base_ns= (uint64): the run's timeline base on the client's clock (loupe capture: the
     * moment before its first request), written into the trace as loupe_clock_base_unix_ns, so
     * that the hosts' .xplane.pb files are on one timeline in XProf (model/merge.h). */
    int have_base;
    uint64_t clock_base_ns;
} loupe__query;

/* Non-zero when the registry's format i is one the server sends. */
int loupe__query_servable(size_t i);

/* The longest query string accepted, in bytes, and the most parameters. */
#define LOUPE__QUERY_MAX 2048
#define LOUPE__QUERY_MAX_PARAMS 16
#define LOUPE__QUERY_SAMPLE_HZ_MAX 100000u

/* Parses q[0..len) (the part after '?', not NUL-terminated; percent-encoding and '+' decoded).
 * Every parameter may appear once; unknown ones are an error. Returns 0, or LOUPE_EINVALID with
 * err (size bytes, always NUL-terminated; the detail gets the same text) naming the parameter and
 * what is wrong, e.g. "duration_ms: \"abc\" is not a whole number of milliseconds". */
int loupe__query_parse(const char *q, size_t len, loupe__query *out, char *err, size_t size);

#endif
