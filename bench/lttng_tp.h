/* lttng_tp.h: the LTTng-UST tracepoint provider of the benchmark's peer case: a zone is a begin
 * and an end event without payload (LTTng names events statically, so the event id plays the
 * role of loupe's source-location pointer). */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER loupe_bench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./lttng_tp.h"

#if !defined(LOUPE_BENCH_LTTNG_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define LOUPE_BENCH_LTTNG_TP_H

#include <lttng/tracepoint.h>

LTTNG_UST_TRACEPOINT_EVENT(loupe_bench, zone_begin, LTTNG_UST_TP_ARGS(), LTTNG_UST_TP_FIELDS())
LTTNG_UST_TRACEPOINT_EVENT(loupe_bench, zone_end, LTTNG_UST_TP_ARGS(), LTTNG_UST_TP_FIELDS())

#endif

#include <lttng/tracepoint-event.h>
