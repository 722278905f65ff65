/* loupe/fdo.h: sample profiles for a compiler's feedback-directed optimisation, made from the
 * CPU samples of a trace: the native counterpart of jax.profiler's stop_and_get_fdo_profile().
 *
 *   loupe_start_trace(&opts);  ... the workload ...
 *   char *prof; size_t len;
 *   loupe_stop_and_get_fdo_profile(NULL, &prof, &len, NULL);   // stops as loupe_stop_trace()
 *   fwrite(prof, 1, len, f); free(prof);                        // clang -fprofile-sample-use=f
 *
 * or from any trace file with samples: `loupe convert RUN -o app.afdo`, and at the end of a run:
 * `loupe record --fdo-profile app.afdo -- ./app`.
 *
 * The format (LOUPE_FDO_LLVM_TEXT): LLVM's text sample profile (clang's user manual, "Using
 * Sampling Profilers"; llvm/ProfileData/SampleProf.h), which clang's -fprofile-sample-use reads
 * and `llvm-profdata merge --sample` turns into the binary formats (--extbinary) or GCC's
 * (--gcc). One profile covers one module (the program, or a shared library named in
 * loupe_fdo_options.module): functions by their linkage (mangled) names; per function its total
 * samples, head samples, and per line (offset from the function's DW_AT_decl_line, with the base
 * DWARF discriminator) its samples and call targets; inlined calls nested at their call lines.
 * The addresses are looked up in the module's DWARF (the file on disk when the profile is made,
 * its /usr/lib/debug/.build-id/ file when there is one): build with -g or -gline-tables-only
 * (and, for clang, -fdebug-info-for-profiling, which adds linkage names and discriminators).
 *
 * What plain IP samples with call stacks give, against branch records (LBR, what AutoFDO's
 * create_llvm_prof and llvm-profgen read from `perf record -b`): body samples per line and
 * call-target counts per call site (from the stacks' caller -> callee edges: samples in the
 * callee, not calls), but no branch edges and no call counts. Head samples are estimated as the
 * samples on the function's first line (at least 1). A timer-driven sample lands a few
 * instructions after the one that was running (skid), which can put it on the next line.
 * LBR is not read (docs/formats.md says so); this VM's PMU has none.
 */
#ifndef LOUPE_FDO_H
#define LOUPE_FDO_H

#include <loupe/export.h>
#include <loupe/model.h>
#include <loupe/trace.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum loupe_fdo_format {
    LOUPE_FDO_LLVM_TEXT = 0 /* LLVM's text sample profile (the default) */
} loupe_fdo_format;

/** Options for a sample profile; a zeroed struct (or NULL) asks for the defaults. */
typedef struct loupe_fdo_options {
    loupe_fdo_format format;
    /* The module (an ELF path; relative paths and links are resolved with realpath(), as the
     * trace's loupe_frame.module names are the kernel's) the profile covers; NULL: the program
     * of the process with the most samples (its executable). */
    const char *module;
} loupe_fdo_options;

/** What went into a profile (all counts in samples). */
typedef struct loupe_fdo_stats {
    uint64_t samples;               /* the trace's CPU samples */
    uint64_t samples_used;          /* placed on a line of the module */
    uint64_t samples_line0;         /* on line-0 instructions of the module: left out */
    uint64_t samples_no_debug_info; /* in the module at addresses with no DWARF: left out */
    uint64_t samples_elsewhere;     /* in other modules, or without a stack: not this profile's */
    uint64_t functions;             /* top-level function records written */
    char module[4096];              /* the module covered */
} loupe_fdo_stats;

/** Makes the sample profile of m's CPU samples in module o->module (see above) into *out, a
 * NUL-terminated buffer of *len bytes (len may be NULL) that the caller frees with free(); fills
 * *stats when stats is not NULL. Errors: LOUPE_EINVALID (m or out NULL, an unknown format; the
 * module's file is not the one the run sampled: its build-id differs from the one the trace's
 * metadata loupe_module_build_ids recorded for that path, a rebuilt binary, whose lines would be
 * another build's),
 * LOUPE_EUNSUPPORTED (no samples; no module to cover; none of the samples in the module: the
 * detail lists the modules they are in; none of them on a line of the module, e.g. built
 * without -g; a build without libdw), LOUPE_EIO (the module's file cannot be read), LOUPE_ENOMEM;
 * *out is then NULL. The detail names the module and the counts. Memory: O(distinct stacks +
 * lines), never O(samples). Thread-safety: any thread; m is only read. Not async-signal-safe. */
LOUPE_API int loupe_fdo_profile(const loupe_model *m, const loupe_fdo_options *o, char **out,
                                size_t *len, loupe_fdo_stats *stats);

/** Stops the session as loupe_stop_trace(result) does (the run directory is written) and returns
 * the sample profile of its CPU samples (loupe_fdo_profile() on the trace it kept) in *out (the
 * caller frees it). Errors: LOUPE_ENOT_STARTED ("No profile started", as jax.profiler's
 * stop_and_get_fdo_profile raises) when no session is active; the stop's errors (the session is
 * then stopped and *out NULL); then loupe_fdo_profile()'s. Thread-safety: as
 * loupe_stop_trace(). */
LOUPE_API int loupe_stop_and_get_fdo_profile(const loupe_fdo_options *o, char **out, size_t *len,
                                             loupe_trace_result *result);

#ifdef __cplusplus
}
#endif

#endif
