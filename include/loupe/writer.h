/* loupe/writer.h: writing a trace model (loupe/model.h) to a file in any format loupe writes,
 * for `loupe convert` and for programs that build or read a model and want it elsewhere.
 *
 * Formats (LOUPE_FILE_*):
 *   CHROME_JSON     Chrome Trace Event JSON, gzipped when the path ends in ".gz"
 *                   (docs/formats.md; the <host>.trace.json.gz of a run directory)
 *   XPLANE          an XSpace (<host>.xplane.pb) for XProf / TensorBoard; at most 2 GiB - 1 bytes
 *                   (protobuf's message limit), else LOUPE_EUNSUPPORTED and no file
 *   PERFETTO_PROTO  Perfetto's native protobuf trace (.pftrace)
 *   FOLDED          collapsed stacks "a;b;c <self ns>" for flame graphs (speedscope,
 * flamegraph.pl), or "thread;main;work <samples>" from the CPU samples (loupe_flame_weight)
 *   PERFETTO_JSON   Chrome JSON with loupe's keys under "otherData" instead of the top-level
 *                   "metadata", which makes Perfetto's UI show a blank trace (jax-ml/jax#10843);
 *                   the perfetto_trace.json.gz of a run directory
 *   SVG             an SVG flame graph (flamegraph.pl's layout): one root per track, a box per
 *                   distinct stack, its width the stack's total time; stacks are cut at 1024
 *                   zones (the rest of a deeper stack is one "[deeper zones]" box); or of the
 *                   CPU samples, widths in samples (loupe_flame_weight)
 *   PPROF           pprof's profile.proto of the CPU samples (github.com/google/pprof, for
 *                   `go tool pprof`, Pyroscope, Parca), gzipped when the path ends in ".gz"
 *                   (cpu.pb.gz); sample types samples/count, cpu/nanoseconds and
 *                   off_cpu/nanoseconds (docs/formats.md); LOUPE_EUNSUPPORTED and no file for a
 *                   model with no CPU samples and no off-CPU time
 *   LLVM_PROF       LLVM's text sample profile of the program's samples, for clang's
 *                   -fprofile-sample-use (loupe/fdo.h: loupe_fdo_profile() with its defaults)
 *
 * The format registry: every format loupe knows is one loupe_format_desc (its names, file names,
 * run-directory bit, ...), listed by loupe_format_count() / loupe_format_info() in a fixed order
 * (the order a run directory is written in). The descs are static: valid for the life of the
 * process, never to be freed; every lookup below is thread-safe (any thread).
 */
#ifndef LOUPE_WRITER_H
#define LOUPE_WRITER_H

#include <loupe/export.h>
#include <loupe/model.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loupe_file_format {
    LOUPE_FILE_UNKNOWN = 0,
    LOUPE_FILE_CHROME_JSON = 1,
    LOUPE_FILE_XPLANE = 2,
    LOUPE_FILE_PERFETTO_PROTO = 3,
    LOUPE_FILE_FOLDED = 4,
    LOUPE_FILE_PERFETTO_JSON = 5,
    LOUPE_FILE_SVG = 6,
    LOUPE_FILE_PPROF = 7,
    LOUPE_FILE_LLVM_PROF = 8
} loupe_file_format;

/** One format of the registry. Lifetime: static (all strings and arrays too). */
typedef struct loupe_format_desc {
    const char *name;           /* the canonical name: "json", "xplane", "perfetto", ... */
    const char *const *aliases; /* other names it is known by, NULL-terminated (never NULL) */
    const char *description;    /* one line, for help texts */
    loupe_file_format file_format;
    unsigned run_dir_bit;        /* its LOUPE_FORMAT_* bit (loupe/trace.h); 0 when a run
                                    directory never gets this format (folded) */
    const char *suffix;          /* the name written: "<host><suffix>" when host_prefixed,
                                    else the whole file name ("perfetto_trace.json.gz") */
    int host_prefixed;           /* 1: the run directory's file is "<host><suffix>" */
    const char *const *suffixes; /* the endings loupe_format_by_path() recognises,
                                    NULL-terminated (may be empty, never NULL) */
    int gzip;                    /* 1: the run directory's (and the server's) file is gzipped */
    const char *mime_type;       /* the Content-Type of the profiler server's GET /v1/profile
                                    response (docs/server.md); NULL: not served */
    int can_write;               /* 1: loupe_trace_write() writes it */
    int can_read;                /* 1: loupe_trace_read() (loupe/reader.h) reads it */
} loupe_format_desc;

/** The number of formats in the registry (>= 5). Thread-safety: any thread. */
LOUPE_API size_t loupe_format_count(void);

/** The i-th format, 0 <= i < loupe_format_count(); NULL past the end. Thread-safety: any thread. */
LOUPE_API const loupe_format_desc *loupe_format_info(size_t i);

/** The format whose name or one of whose aliases is exactly name (case-sensitive): "json" and
 * "chrome"; "xplane"; "perfetto" and "pftrace"; "perfetto-json"; "folded" and "collapsed";
 * "svg" and "flamegraph"; "pprof"; "llvm-prof" and "afdo".
 * NULL for anything else or NULL. Thread-safety: any thread. */
LOUPE_API const loupe_format_desc *loupe_format_by_name(const char *name);

/** The format a file name asks for, from its ending (the longest recognised suffix of any format
 * wins: "a.xplane.pb" is XPlane, "a.pb" Perfetto). NULL when none matches or path is NULL.
 * Thread-safety: any thread. */
LOUPE_API const loupe_format_desc *loupe_format_by_path(const char *path);

/** The format of a LOUPE_FILE_* value; NULL for LOUPE_FILE_UNKNOWN or an unknown value.
 * Thread-safety: any thread. */
LOUPE_API const loupe_format_desc *loupe_format_by_file_format(loupe_file_format f);

/** The format of one LOUPE_FORMAT_* run-directory bit; NULL for 0, several bits or an unknown
 * bit. Thread-safety: any thread. */
LOUPE_API const loupe_format_desc *loupe_format_by_bit(unsigned bit);

/** Parses a comma list of format names ("json,perfetto", as `loupe record --format` and
 * LOUPE_RECORD_FORMATS take) into LOUPE_FORMAT_* bits in *bits. Every entry must name a format a
 * run directory gets (by name or alias). Errors: LOUPE_EINVALID (NULL, an empty entry, an
 * unknown name or one without a run-directory bit; *bits is 0 and loupe_last_error() names the
 * entry and the known names, e.g. "'svg': unknown format (known: json, xplane, perfetto and
 * perfetto-json)"). Thread-safety: any thread. */
LOUPE_API int loupe_format_parse_list(const char *list, unsigned *bits);

/** The format a file name asks for, from its extension (loupe_format_by_path()): *.json,
 * *.json.gz -> CHROME_JSON; *.xplane.pb, *.xspace.pb -> XPLANE; *.pftrace, *.perfetto-trace,
 * *.perfetto, *.pb -> PERFETTO_PROTO; *.folded, *.collapsed, *.collapsedstack.txt, *.txt ->
 * FOLDED; *.svg -> SVG; *.pb.gz, *.pprof, *.pprof.gz -> PPROF; *.afdo, *.prof -> LLVM_PROF; else
 * UNKNOWN. Thread-safety: any
 * thread. */
LOUPE_API loupe_file_format loupe_file_format_from_name(const char *path);

/** Parses a format name (loupe_format_by_name()): "json", "xplane", "perfetto", "perfetto-json",
 * "folded", "svg", "pprof", "llvm-prof" (also "chrome", "pftrace", "collapsed", "flamegraph").
 * UNKNOWN for anything else or NULL. Thread-safety: any thread. */
LOUPE_API loupe_file_format loupe_file_format_parse(const char *name);

/** Writes m to path in the given format (CHROME_JSON, PERFETTO_JSON and PPROF gzipped when
 * path ends in ".gz"). The file is written as <path>.tmp and renamed when
 * complete: a failure leaves no file at path that looks finished (an existing file there is
 * kept). Errors: LOUPE_EINVALID (NULL, unknown format), LOUPE_EIO (cannot create or write:
 * the detail names the path and errno), LOUPE_EUNSUPPORTED (a format limit, e.g. an XSpace over
 * 2 GiB, or PPROF of a model without CPU samples: the detail says which), LOUPE_ENOMEM. Memory:
 * the writers stream; XPLANE, FOLDED, SVG and PPROF keep their name tables (distinct names /
 * stacks), not the events. A gzipped file is deflated
 * in 1 MiB blocks on up to 3 helper threads (one less than the CPUs; LOUPE_GZIP_THREADS=1..4
 * sets the threads in all, 1 = this thread alone), joined before the call returns; the file is
 * one gzip member whose bytes do not depend on the number of threads.
 * Thread-safety: any thread; m is only read. */
LOUPE_API int loupe_trace_write(const loupe_model *m, const char *path, loupe_file_format format);

/** What the flame-graph formats (FOLDED, SVG) are weighted by. */
typedef enum loupe_flame_weight {
    /* The default: TIME when the model has any zone (slice), SAMPLES when it has CPU samples
     * and no zones (a sampling-only recording), so that neither comes out empty. */
    LOUPE_FLAME_WEIGHT_AUTO = 0,
    /* The zones' call tree: "thread;outer;inner <self ns>"; the SVG's widths are total ns. */
    LOUPE_FLAME_WEIGHT_TIME = 1,
    /* The CPU samples' call tree (loupe_model.samples): one root per thread with samples,
     * frames outermost first, "thread;main;work;helper <samples>" (the samples whose innermost
     * frame that is); the SVG's widths are samples on the stack. A frame without a function is
     * "module+0xoffset" (or "[unknown]"), a sample without a stack "[no stack]", as in
     * `loupe summary`'s hot functions. A model without samples gives an empty graph. */
    LOUPE_FLAME_WEIGHT_SAMPLES = 2
} loupe_flame_weight;

/** Options of loupe_trace_write_opts(); zeroed fields mean the default. */
typedef struct loupe_write_options {
    loupe_flame_weight flame_weight; /* FOLDED and SVG only (others ignore it) */
} loupe_write_options;

/** loupe_trace_write() with options (o NULL: all defaults, which is loupe_trace_write()).
 * Errors: those of loupe_trace_write(), and LOUPE_EINVALID for a flame_weight that is none of
 * LOUPE_FLAME_WEIGHT_*. Lifetime: o is only read during the call. Thread-safety: any thread;
 * m and o are only read. */
LOUPE_API int loupe_trace_write_opts(const loupe_model *m, const char *path,
                                     loupe_file_format format, const loupe_write_options *o);

#ifdef __cplusplus
}
#endif
#endif
