/* loupe/loupe.h: the umbrella header. Include this one.
 *
 *   loupe/version.h   LOUPE_VERSION_*, loupe_version() (the ABI policy: docs/ABI.md)
 *   loupe/error.h     error codes, loupe_strerror(), loupe_last_error()
 *   loupe/trace.h     sessions: loupe_start_trace(), loupe_stop_trace(), metadata, thread names
 *   loupe/annotate.h  zones, steps, arguments, instants, counters, flows (the hot path)
 *   loupe/model.h     the trace model a stop produces and the readers return
 *   loupe/reader.h    reading trace files back into the model
 *   loupe/writer.h    writing a model to a file in any format (JSON, XPlane, Perfetto, folded)
 *   loupe/fdo.h       sample profiles for -fprofile-sample-use (loupe_stop_and_get_fdo_profile)
 *   loupe/gpu.h       decoding in-kernel GPU timelines; joining them to the session
 *   loupe/server.h    the profiler server (remote capture) and the Perfetto link
 *
 * The device-side CUDA recorder (loupe/cuda/) is not included here.
 */
#ifndef LOUPE_H
#define LOUPE_H

#include <loupe/version.h>

#include <loupe/annotate.h>
#include <loupe/error.h>
#include <loupe/fdo.h>
#include <loupe/gpu.h>
#include <loupe/model.h>
#include <loupe/outside.h>
#include <loupe/reader.h>
#include <loupe/server.h>
#include <loupe/trace.h>
#include <loupe/writer.h>

#endif
