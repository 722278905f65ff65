/* loupe/outside.h: CPU sampling of another process, from outside it: perf events opened on a
 * child before it execs, drained while it runs, symbolised from the files on disk when it has
 * ended, and written into a run directory. What `loupe record` does for a program its preload
 * cannot enter (a statically linked one; a set-user-ID one, run by root). No zones: only
 * samples, frames, stacks and threads. */
#ifndef LOUPE_OUTSIDE_H
#define LOUPE_OUTSIDE_H

#include <loupe/trace.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A sampler of one process tree (opaque). */
typedef struct loupe_outside loupe_outside;

/** loupe_outside_open() flags. */
enum {
    /** pid has exec'd its program already and is stopped (by ptrace(2) at its exec): its events
     * count from the open, and the mappings and name it has now are read from /proc/<pid>/maps
     * and /proc/<pid>/comm. For a set-user-ID or set-group-ID program: the kernel detaches a
     * process's perf events when it execs one (fs/exec.c, begin_new_exec(): a process that is
     * not dumpable after the exec loses them), so events opened before that exec never count. */
    LOUPE_OUTSIDE_NOW = 1,
    /** Samples without call stacks: the sampled address only (no PERF_SAMPLE_CALLCHAIN), what
     * `loupe record --sample-stacks none` asks for. */
    LOUPE_OUTSIDE_NO_STACKS = 2,
    /** Only pid's own threads are written: the processes it forks still run under the inherited
     * events (a perf event's inherit cannot tell a thread from a process), but their samples are
     * left out, and the trace's metadata "loupe_outside_children_not_followed" counts them
     * (`loupe record --no-follow`). */
    LOUPE_OUTSIDE_NO_CHILDREN = 4
};

/** Opens the perf events of process pid and its descendants: one task-clock event per CPU
 * (pid = pid, cpu = each CPU, inherit = 1: threads and forked children sample into the per-CPU
 * rings; enable_on_exec = 1: counting starts at pid's next execve(2)), with frame-pointer call
 * stacks (PERF_SAMPLE_CALLCHAIN: a program built without frame pointers gives one-frame stacks)
 * and the MMAP2 / COMM / FORK / EXIT records that symbolise and name them, on CLOCK_MONOTONIC.
 * hz: samples per second of each thread's CPU time, 1 to 100000 (0: LOUPE_SAMPLING_RECORD_HZ).
 * flags: LOUPE_OUTSIDE_NOW, LOUPE_OUTSIDE_NO_STACKS, LOUPE_OUTSIDE_NO_CHILDREN, or'ed (0: none).
 * Without LOUPE_OUTSIDE_NOW, pid should be a child of the caller waiting before
 * its execve (`loupe record` holds it on a pipe): what ran before the exec is not sampled.
 * Opening events on a process of another user needs CAP_PERFMON (or CAP_SYS_ADMIN). A thread of the
 * caller drains the rings until loupe_outside_finish(). *out is set on success (NULL on failure).
 * Errors: LOUPE_EINVALID (pid <= 0, hz > 100000, out NULL, an unknown flag), LOUPE_EUNSUPPORTED
 * (the kernel
 * refused every event: the detail names the errno and kernel.perf_event_paranoid), LOUPE_ENOMEM.
 * Thread-safety: any thread; one sampler at a time per process (the samples go through the
 * sampling collector this process's own session uses: not while a session of it samples). */
LOUPE_API int loupe_outside_open(int pid, uint32_t hz, unsigned flags, loupe_outside **out);

/** Options of loupe_outside_finish(). Zero-initialise. */
typedef struct loupe_outside_options {
    /** Required: the run directory the files go into (made when missing). Copied. */
    const char *run_dir;
    /** Optional: the files' name prefix (NULL: the host name), as loupe_trace_options'. */
    const char *file_prefix;
    /** LOUPE_FORMAT_* bits; 0 = the default set. */
    unsigned formats;
    /** Optional: the process's name, its command line (arguments separated by spaces) and its
     * parent's pid, as loupe_recover_options' fields of the same names. Copied. */
    const char *process_name;
    const char *cmdline;
    uint64_t parent_pid;
    /** Optional: the name prefix of each forked child's files, followed by its pid (NULL:
     * "<host>."): <child_prefix><pid><suffix>. Copied. */
    const char *child_prefix;
} loupe_outside_options;

/** Stops draining (a last drain first: call it after the process ended, once waitpid(2) saw it),
 * closes the events, symbolises every sample against the executable mappings the kernel
 * reported (MMAP2 records: the files on disk, build-id aware through debuginfo lookup), names
 * threads from their last COMM record, and writes the trace into options->run_dir as
 * <file_prefix><suffix> through the run directory's writers. Each process the program forked
 * (PERF_RECORD_FORK, or the pid of its samples) gets a trace of its own, with its samples and
 * threads, as <child_prefix><pid><suffix> (not with LOUPE_OUTSIDE_NO_CHILDREN); a child that did
 * not exec is symbolised against the mappings it inherited. A frame-pointer stack is cut at its
 * first return address that lies in no mapping or does not follow a call instruction: what the
 * kernel's walk read past the outermost frame of code without frame pointers. The trace's
 * metadata "loupe_sampling" says "<hz> Hz task-clock, fp stacks, from outside the process"
 * ("no stacks" with LOUPE_OUTSIDE_NO_STACKS). result (may be NULL) is filled as by
 * loupe_stop_trace() for the root process's trace and must be freed with
 * loupe_trace_result_free().
 * s is freed in every case; options NULL frees it without writing (returns 0).
 * A process too short to be sampled gives a trace with its process and no samples.
 * Errors: LOUPE_EINVALID (s NULL, no run_dir, a bad result size), LOUPE_EIO (writing: the
 * detail names the path), LOUPE_ENOMEM. Thread-safety: the thread that opened s, or any one thread
 * after it. */
LOUPE_API int loupe_outside_finish(loupe_outside *s, const loupe_outside_options *options,
                                   loupe_trace_result *result);

#ifdef __cplusplus
}
#endif

#endif
