/* loupe/trace.h: trace sessions, the jax.profiler contract (start_trace / stop_trace).
 *
 * Session state machine (one session per process):
 *
 *        loupe_start_trace()                      loupe_stop_trace()
 *   IDLE ─────────────────────► TRACING ──────────────────────────────► IDLE
 *     │  start while TRACING: LOUPE_EALREADY_STARTED     (always ends the session, even when
 *     │  stop while IDLE:     LOUPE_ENOT_STARTED          writing fails; the recorded trace is
 *     └─ loupe_stop_trace_if_active() while IDLE: 0       kept for loupe_write_last_trace())
 *
 * A stop collects every thread's events (threads that already exited included) into a trace
 * model, writes the run directory
 *     <log_dir>/plugins/profile/<YYYY_MM_DD_HH_MM_SS>[_N]/<host>.trace.json.gz
 *                                                          <host>.xplane.pb
 *     (the default set, as jax.profiler writes; options.formats selects others: <host>.pftrace,
 *      perfetto_trace.json.gz, also added by create_perfetto_trace)
 * and keeps the model until the next start, so that a failed write can be retried elsewhere.
 *
 * fork(): a child forked while the parent traces is not tracing (its gate is closed and its copy of
 * the buffers is discarded at its first loupe call); it may start a trace of its own. The parent's
 * trace is not affected.
 */
#ifndef LOUPE_TRACE_H
#define LOUPE_TRACE_H

#include <loupe/error.h>
#include <loupe/export.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Host tracer levels (jax.profiler / TraceMe): an annotation is recorded when its level is
 * <= the session's level. */
enum {
    LOUPE_LEVEL_DEFAULT = 0,  /* in loupe_trace_options: means LOUPE_LEVEL_INFO */
    LOUPE_LEVEL_CRITICAL = 1, /* user annotations that must always be seen */
    LOUPE_LEVEL_INFO = 2,     /* the default for annotations and sessions */
    LOUPE_LEVEL_VERBOSE = 3,  /* fine-grained annotations, function tracing */
    LOUPE_LEVEL_NONE = -1     /* in loupe_trace_options: record nothing (jax's level 0) */
};

/** What a full per-thread buffer does. Either way every dropped event is counted. */
typedef enum loupe_overflow {
    LOUPE_OVERFLOW_DEFAULT = 0,    /* = LOUPE_OVERFLOW_KEEP_FIRST */
    LOUPE_OVERFLOW_KEEP_FIRST = 1, /* new events are dropped; room is kept for the ends of the
                                      zones already open, so recorded zones stay whole */
    LOUPE_OVERFLOW_KEEP_LAST = 2   /* a ring: the oldest events are overwritten */
} loupe_overflow;

/** Which files the run directory gets. Bits; 0 = the default (jax.profiler's set). */
enum {
    LOUPE_FORMAT_DEFAULT = 0,
    LOUPE_FORMAT_CHROME_JSON = 1 << 0,    /* <host>.trace.json.gz */
    LOUPE_FORMAT_XPLANE = 1 << 1,         /* <host>.xplane.pb (XSpace, for XProf/TensorBoard) */
    LOUPE_FORMAT_PERFETTO_PROTO = 1 << 2, /* <host>.pftrace (Perfetto's native protobuf) */
    LOUPE_FORMAT_PERFETTO_JSON = 1 << 3   /* perfetto_trace.json.gz (= create_perfetto_trace) */
};

/** Default per-thread limit of a keep-last session: 1 Mi events (16 MiB of the session's memory,
 * 16 bytes an event); keep-first has none by default (0.4 applied this one to both). */
#define LOUPE_DEFAULT_BUFFER_EVENTS (1u << 20)
/** Default session capacity: 64 Mi events (1 GiB of address space, populated only as events
 * are recorded). */
#define LOUPE_DEFAULT_SESSION_EVENTS ((uint64_t)1 << 26)
/** Memory is handed to threads in chunks of this many events (64 KiB). */
#define LOUPE_CHUNK_EVENTS 4096u

/** Options of loupe_start_trace(). Zero-initialise, then set what you need. */
typedef struct loupe_trace_options {
    /** Required. The log directory; created (with parents) when missing. Copied. */
    const char *log_dir;
    /** LOUPE_LEVEL_DEFAULT (0) = INFO (2); LOUPE_LEVEL_NONE records nothing; 1..3 as above. */
    int host_tracer_level;
    /** Non-zero: also write perfetto_trace.json.gz (Chrome JSON without the top-level
     * "metadata" key, which makes Perfetto's UI show a blank trace: jax-ml/jax#10843). */
    int create_perfetto_trace;
    /** Per-thread limit in events (16 bytes each); 0 = none for keep-first (a thread may use the
     * session's whole capacity; 0.4 limited it to LOUPE_DEFAULT_BUFFER_EVENTS) and
     * LOUPE_DEFAULT_BUFFER_EVENTS for keep-last (each thread's ring). Minimum 64.
     * A zone is 2 events; an argument is 1 more; an instant, counter or flow is 2 more; a copied
     * name or string takes one more per 15 bytes. The events come from the session's capacity
     * (session_events), a chunk of LOUPE_CHUNK_EVENTS at a time. */
    uint32_t buffer_events;
    /** Overflow policy; 0 = keep the first events. */
    loupe_overflow overflow;
    /** Non-zero: record -finstrument-functions calls (one zone per call, at LOUPE_LEVEL_INFO).
     * A call whose exit never comes (a longjmp out of it; an exception through a clang build's
     * frames, whose exit hooks clang calls only before a return) is found gone at the next enter
     * whose frame took its place, or at the exit of a call below it: it gets an exit marked cut
     * (one event, in the slot its enter kept) and reads back truncated at its own depth, nothing
     * dropped (docs/api.md, "Function tracing"). The hooks find each call's frame from the
     * return address the compiler passes as their second argument (x86-64; elsewhere calls are
     * paired as they come, as in 0.4). A program that calls __cyg_profile_func_enter/exit itself
     * passes its own return address (__builtin_return_address(0)) or NULL there. */
    int function_tracing;
    /** Optional run directory name instead of the local time (like ProfileOptions.session_id).
     * Must be a single path component. Copied. */
    const char *run_name;
    /** LOUPE_FORMAT_* bits; 0 = the default set. */
    unsigned formats;
    /** Non-zero: the stop also writes perfetto_trace.json.gz, then serves it once on
     * 127.0.0.1:9001 for https://ui.perfetto.dev (link printed on stderr) and returns once it
     * was fetched or perfetto_link_timeout_ms passed: see loupe_serve_perfetto_link() in
     * loupe/server.h. The stop blocks meanwhile (without holding the session: a new start
     * works). Its errors (9001 busy, timeout) are the stop's, after the files were written. */
    int create_perfetto_link;
    /** How long the link waits, in ms; 0 = 5 minutes (LOUPE_PERFETTO_LINK_DEFAULT_TIMEOUT_MS). */
    uint32_t perfetto_link_timeout_ms;
    /** GPU device tracer (CUPTI, loaded at run time): 0 = off (the default), 1 = record the
     * kernels, memcpys and memsets the GPUs ran, on "/device:GPU:<n>" tracks. Without CUPTI or
     * a GPU, or with another CUPTI subscriber (Nsight), the session goes on host-only and
     * loupe_gpu_device_tracer_note() (loupe/gpu.h) says why. */
    int device_tracer_level;
    /** Ignored since 0.2 (kept for the ABI): memory is one pool for the session, handed to
     * threads a chunk at a time and populated ahead of demand by a background thread, so no
     * thread pays for a buffer it does not fill. */
    int lazy_buffers;
    /** The session's capacity in events, shared by every thread; 0 = LOUPE_DEFAULT_SESSION_EVENTS.
     * Counted in chunks of LOUPE_CHUNK_EVENTS (a smaller value is one chunk); a thread's own
     * events are further limited by buffer_events. Address space for it is reserved at the
     * start (without committing memory: MAP_NORESERVE); memory grows as events are recorded,
     * plus one chunk per thread that records and a 320-byte descriptor per thread. When the
     * capacity is used up, new events are dropped (keep-first) or the oldest chunks of the
     * thread are reused (keep-last), counted either way. Under a finite RLIMIT_AS (ulimit -v) the
     * reservation is at most an eighth of the soft limit (32 MiB at least): the capacity is
     * lowered to what that holds, said once on stderr, and the program keeps the rest of its
     * address space; under `loupe record` a program that lowers the limit itself gets back what
     * was never used. A start that cannot reserve even that fails with LOUPE_ENOMEM and says
     * how many events would fit. */
    uint64_t session_events;
    /** What a fatal signal leaves behind when no `loupe record` watches the program: 0 (the
     * default) = while the session runs, SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, and SIGINT
     * and SIGTERM while their action is the default, write what was recorded to
     * <log_dir>/loupe-crash-<pid>.region with async-signal-safe calls, then take their default
     * action (`loupe recover FILE` writes the run directory); handlers the program installed
     * itself are left alone. While they are installed (from loupe_start_trace() to the stop,
     * which puts SIG_DFL back where the handler is still loupe's), sigaction(sig, NULL, &old)
     * reports loupe's handler, not SIG_DFL: a program (or an embedded runtime: CPython installs
     * its KeyboardInterrupt handler only over SIG_DFL) that decides by the disposition it finds
     * should start its trace after setting its own handlers, or pass LOUPE_CRASH_DUMP_OFF. A
     * handler the program installs later replaces loupe's (and its dump). Under `loupe record`
     * nothing is installed whatever this field says: the recorder recovers every death from
     * outside. LOUPE_CRASH_DUMP_OFF (-1): no handlers. */
    int crash_dump;
    /** Function tracing filters (with function_tracing; uftrace's -F, -N, -D and -t). Globs are
     * fnmatch(3) patterns matched against the name loupe shows for the function ("main";
     * C++ names demangled: "ns::Box::get() const"), in NULL-terminated arrays, copied at the start;
     * NULL = none. function_filter: only calls to a matching function, and the calls made inside
     * one, are kept. function_exclude: calls to a matching function are not kept (the calls they
     * make are, unless filtered otherwise). Both are decided at the stop, once per address: the
     * calls take buffer space while the session runs. */
    const char *const *function_filter;
    const char *const *function_exclude;
    /** The deepest call kept per thread, counting every instrumented call open on it (main()
     * is 1); 0 = no limit. Applied before the events reach the buffer: deeper calls take no
     * space. */
    uint32_t function_depth;
    /** Calls that took less than this many nanoseconds are dropped; 0 = keep all. Decided at
     * each call's exit: a shorter call with nothing kept inside it is taken back out of the
     * thread's buffer, so short calls take no space (uftrace -t); one within 2% of the bound,
     * or whose enter is in an earlier chunk of the buffer, is decided at the stop. A call that
     * holds a kept call, an annotation zone or a flow end is kept. */
    uint64_t function_min_duration_ns;
    /* Every call that function_filter, function_exclude, function_depth or
     * function_min_duration_ns dropped is counted (not lost): the trace's metadata
     * loupe_functions_filtered, written whenever one of them is set. */
    /** CPU sampling, in samples per second of each thread's CPU time (perf_event_open(2)'s
     * task-clock event, one per thread, user stacks only); 0 = off (the default here;
     * `loupe record` samples at LOUPE_SAMPLING_RECORD_HZ). At most 100000; above the kernel's
     * kernel.perf_event_max_sample_rate it samples at that limit and says so in one line on
     * stderr (as `perf record -F` does). Every thread of the process is sampled, also threads
     * that never record a zone (found within 10 ms of their start), and the kernel's context
     * switches give each thread's off-CPU intervals
     * (loupe_model_thread.off_cpu). Where perf events are not allowed (perf_event_paranoid,
     * missing CAP_PERFMON, a container's seccomp profile) the start still succeeds: one line on
     * stderr says why and the trace's "loupe_sampling" metadata reads "unavailable: ...".
     * Samples the kernel could not hand over are counted (loupe_model.samples_lost). */
    uint32_t sampling_hz;
    /** How sampled call stacks are taken: LOUPE_SAMPLING_STACKS_DWARF (0, the default: 8 KiB of
     * the user stack copied per sample and unwound with DWARF CFI by libdw, so code built
     * without frame pointers still has whole stacks; frame pointers where loupe was built
     * without libdw), LOUPE_SAMPLING_STACKS_FP (the kernel's frame-pointer callchain: cheaper,
     * but one frame for code built with -fomit-frame-pointer) or LOUPE_SAMPLING_STACKS_NONE
     * (the sampled address only). */
    int sampling_stacks;
    /** Optional: write the files into this directory (made when missing) instead of a new
     * <log_dir>/plugins/profile/<run>: the run directory `loupe record` makes once
     * (loupe_run_dir_make()) and every process of the traced tree writes into. log_dir is still
     * required (it holds crash dumps). Copied; made absolute at the start. */
    const char *run_dir;
    /** Optional: the files' name prefix instead of the host name: "<file_prefix>.trace.json.gz",
     * "<file_prefix>.xplane.pb", ...; perfetto_trace.json.gz, which has no host prefix, becomes
     * "<file_prefix>.perfetto_trace.json.gz". One path component; NULL or "" = the host name.
     * `loupe record` gives each process "<host>.<pid>". Copied. */
    const char *file_prefix;
    /** The spool: NULL (the default) = none; "" = log_dir; else a directory, created (with
     * parents) when missing. With a spool, a background thread (the keeper) writes each chunk
     * a thread has filled and moved on from to <spool_dir>/loupe-spool-<pid>.bin (a 32-byte
     * header and the chunk's 64 KiB, in the order written) about every millisecond and gives
     * its memory back to the session: spooled chunks no longer count against session_events,
     * so a long session's memory stays bounded by session_events while every event is kept
     * (events are dropped only when the threads fill the capacity faster than the spool
     * drains it, counted as usual). buffer_events is ignored with a spool (no per-thread
     * limit: session_events bounds the memory). The stop reads the file back, in order, and
     * removes it. Keep-first only: with LOUPE_OVERFLOW_KEEP_LAST the start fails with
     * LOUPE_EINVALID. A spool_dir that cannot be created or a file that cannot be opened fails
     * the start with LOUPE_EIO (the detail names the path and errno). A write that fails
     * later (ENOSPC, EFBIG, EIO) never stops the program: the spool is off for the rest of the
     * session, the chunks stay in memory (counting against session_events again), and the
     * trace's metadata loupe_spool_error says "write to <file> failed after <n> chunks:
     * <strerror> (errno N)". A program that dies under `loupe record` (or leaves a crash dump)
     * is recovered from its region and this file, every event, and the file is removed then;
     * when the file is gone, the recovered trace's metadata loupe_spool_missing says "<n>
     * chunks were spooled to <file> and are not in this recovery". Copied. */
    const char *spool_dir;
    /** With spool_dir: non-zero spools only past memory (`loupe record`'s default): the chunks
     * stay in memory until the session's capacity is half used, and the keeper then writes the
     * finished ones, oldest first, until a quarter is left in memory. The file is made at the first
     * chunk written (a session that fits its capacity makes none and holds no fd for it). 0: every
     * finished chunk is written (memory stays at the threads' current chunks). */
    int spool_spill;
    /** With spool_dir: the bytes the spool file may take. 0 = half the space free on its file
     * system at the start (statvfs(3)); UINT64_MAX = no limit. The chunk that would pass it
     * turns the spool off for the session, as a failed write does: the events past the
     * capacity are dropped and counted, and loupe_spool_error says "the spool <file> reached
     * its budget of <size> (<how: "as given", or "half of the <size> free there at the
     * start">) after <n> chunks; later events past the session's capacity were dropped". The
     * default is per process: each one's spool takes at most half of what was free when it
     * started. */
    uint64_t spool_budget_bytes;
} loupe_trace_options;

/** The sampling rate `loupe record` uses unless told otherwise (999: not a divisor of common
 * timer periods, so samples do not lock step with a program's own periodic work). */
#define LOUPE_SAMPLING_RECORD_HZ 999u
/** loupe_trace_options.sampling_stacks values. */
#define LOUPE_SAMPLING_STACKS_DWARF 0
#define LOUPE_SAMPLING_STACKS_FP 1
#define LOUPE_SAMPLING_STACKS_NONE 2

/** loupe_trace_options.crash_dump: install no fatal-signal handlers. */
#define LOUPE_CRASH_DUMP_OFF (-1)

/** Events recorded and lost on one thread. */
typedef struct loupe_thread_stats {
    uint64_t tid;             /* OS thread id (gettid) */
    char name[64];            /* thread name, "" when none was set */
    uint64_t events_recorded; /* events kept in the trace */
    uint64_t events_dropped;  /* events lost to a full buffer (either policy) or string arena */
    uint64_t capacity_needed; /* buffer_events that would have held every event */
} loupe_thread_stats;

#define LOUPE_PATH_MAX 4096

/** One file a stop wrote. */
typedef struct loupe_trace_file {
    unsigned format; /* its LOUPE_FORMAT_* bit (loupe_format_by_bit() in loupe/writer.h) */
    char *path;      /* "<run_dir>/<host>.trace.json.gz", ...; owned by the result */
} loupe_trace_file;

/** What a stop wrote and recorded.
 *
 * The caller sets size before passing it, the rest zeroed:
 *     loupe_trace_result r = {.size = sizeof r};
 *     rc = loupe_stop_trace(&r);
 *     ... loupe_trace_result_path(&r, LOUPE_FORMAT_XPLANE), r.threads[i] ...
 *     loupe_trace_result_free(&r);
 * size tells the library which fields the caller's struct has, so that later releases can append
 * fields without breaking programs built against this header (docs/ABI.md). size 0 is accepted
 * and means this layout (the first one with a size field): a `= {0}` result works. A size that
 * is neither 0 nor at least this layout's is LOUPE_EINVALID.
 *
 * Ownership: a filled result owns run_dir, files (and their paths) and threads; they stay valid
 * whatever any thread does with sessions afterwards, until loupe_trace_result_free(). Every
 * result a call filled (also on error: the counts are filled) must be freed; passing a filled
 * result to another call without freeing it first leaks its contents. */
typedef struct loupe_trace_result {
    size_t size;                 /* set by the caller: sizeof(loupe_trace_result), or 0 */
    char *run_dir;               /* the run directory; NULL when nothing was written */
    size_t file_count;           /* the files written, in the order written */
    loupe_trace_file *files;     /* file_count entries; NULL when none */
    uint64_t events_recorded;    /* all threads */
    uint64_t events_dropped;     /* all threads */
    uint64_t unmatched_ends;     /* ends without a begin / out of order, ignored */
    uint64_t truncated_zones;    /* zones still open at the stop, closed there */
    size_t thread_count;         /* entries of threads */
    loupe_thread_stats *threads; /* per-thread figures; NULL when thread_count is 0 */
} loupe_trace_result;

/** Frees what a filled result owns and zeroes it (size is kept, so it can be passed again).
 * Safe on a zeroed result, on an already freed one, and on NULL. Thread-safety: one thread at a
 * time per result. */
LOUPE_API void loupe_trace_result_free(loupe_trace_result *r);

/** The path of the file of one LOUPE_FORMAT_* bit in r, or NULL when r is NULL or has no such
 * file. Lifetime: r's (until loupe_trace_result_free()). Thread-safety: any thread. */
LOUPE_API const char *loupe_trace_result_path(const loupe_trace_result *r, unsigned format_bit);

/** Starts a trace session.
 * Errors: LOUPE_EINVALID (NULL options, missing log_dir, level or policy out of range, a bad
 * run_name), LOUPE_EALREADY_STARTED, LOUPE_EIO (log_dir cannot be created: the detail names the
 * path and errno). On error nothing changes. A start drops the trace kept from the last session.
 * Thread-safety: any thread; concurrent start/stop calls are serialised. */
LOUPE_API int loupe_start_trace(const loupe_trace_options *options);

/** Stops the session, collects the trace and writes the run directory.
 * The session ends in every case: after any return, loupe_start_trace() works again.
 * result may be NULL; otherwise it is filled in (also on a write error: the counts are valid) and
 * must be freed with loupe_trace_result_free(). Errors: LOUPE_EINVALID (result->size is neither 0
 * nor at least sizeof(loupe_trace_result): the result is not touched, the session is stopped and
 * written all the same), LOUPE_ENOT_STARTED; LOUPE_EIO when a file cannot be written (the detail
 * names the path and errno; the trace is kept: call loupe_write_last_trace() with another
 * directory); LOUPE_ENOMEM. Threads: the stop runs on the calling thread and, while it writes,
 * on helper threads that it joins before returning (their signals blocked): one per file up to
 * the CPUs (at most 4; LOUPE_STOP_THREADS=1..4) and, for each gzipped file, up to one less than
 * the CPUs deflating its blocks (at most 3; LOUPE_GZIP_THREADS=1..4, 1: none). On 2 CPUs the
 * default set (JSON gz + XPlane) uses 2 extra threads during the stop; when a thread cannot be
 * made, the work is done on the threads there are. Thread-safety: any thread. */
LOUPE_API int loupe_stop_trace(loupe_trace_result *result);

/** Like loupe_stop_trace(), but returns 0 without doing anything when no trace is active (a
 * result is then zeroed, size kept): for cleanup paths (atexit handlers, error paths). */
LOUPE_API int loupe_stop_trace_if_active(loupe_trace_result *result);

/** Writes the trace kept from the last stopped session into a new run directory under log_dir,
 * with the formats of that session. result (may be NULL) is filled as by loupe_stop_trace() and
 * must be freed with loupe_trace_result_free(). Errors: LOUPE_ENO_TRACE (none kept),
 * LOUPE_EALREADY_STARTED (a session is running: its start dropped the old trace), LOUPE_EINVALID,
 * LOUPE_EIO, LOUPE_ENOMEM. Thread-safety: any thread. */
LOUPE_API int loupe_write_last_trace(const char *log_dir, loupe_trace_result *result);

/** Makes a new run directory <log_dir>/plugins/profile/<run_name or YYYY_MM_DD_HH_MM_SS>[_N]
 * (log_dir and plugins/profile made with parents; the name is claimed with mkdir(2), so two
 * callers in one second get two directories) and writes its path into buf (size bytes). For
 * a run that several processes write into (loupe_trace_options.run_dir: `loupe record` makes
 * one for the whole process tree). Errors: LOUPE_EINVALID (NULL or empty log_dir, no buf,
 * run_name not one path component, the path longer than buf: the directory is then removed),
 * LOUPE_EIO (a directory cannot be made: the detail names the path and errno).
 * Thread-safety: any thread. */
LOUPE_API int loupe_run_dir_make(const char *log_dir, const char *run_name, char *buf, size_t size);

/** Options of loupe_recover_trace(). Zero-initialise. */
typedef struct loupe_recover_options {
    /** Required: the log directory the run directory goes under (as loupe_start_trace's). */
    const char *log_dir;
    /** Optional run directory name instead of the local time; one path component. */
    const char *run_name;
    /** LOUPE_FORMAT_* bits; 0 = the default set. */
    unsigned formats;
    /** Optional: the program's name (the trace's process name). Copied. */
    const char *process_name;
    /** Optional: what happened, e.g. "killed by signal 9 (Killed)"; written into the trace's
     * metadata as "loupe_recovered". Copied. */
    const char *cause;
    /** Optional: the function-tracing filters the program's session was started with
     * (loupe_trace_options' fields of the same names): the recovered trace is filtered and
     * counted as that session's stop would have done. Read during the call only. */
    const char *const *function_filter;
    const char *const *function_exclude;
    uint32_t function_depth;
    uint64_t function_min_duration_ns;
    /** Optional: write into this directory instead of a new run directory under log_dir (as
     * loupe_trace_options.run_dir). Copied. */
    const char *run_dir;
    /** Optional: the files' name prefix instead of the host name (as
     * loupe_trace_options.file_prefix). */
    const char *file_prefix;
    /** Optional: the process's command line (arguments separated by spaces) and its parent's
     * pid, written into the trace's metadata as "loupe_cmdline" / "loupe_parent_pid" (a
     * process's own session writes them from /proc/self/cmdline and getppid()). */
    const char *cmdline;
    uint64_t parent_pid;
} loupe_recover_options;

/** Writes the trace a program was recording when it died (SIGKILL, a crash, _exit(), exec)
 * into a new run directory, from fd: the memfd `loupe record` gave the program
 * (LOUPE_RECORD_SHM_FD, docs/record.md), which holds every event written up to the death.
 * Zones still open end at their thread's last event and are marked truncated; names come from
 * the region's name table (a zone first recorded in the program's last millisecond may read
 * "(name lost 0x...)"). The program's CPU samples and off-CPU intervals come from the spool
 * its sampler thread wrote beside the region (the region's header names it; docs/record.md,
 * "Recovered at a death"), symbolised from the files on disk, and the file is removed once the
 * trace is written; the metadata "loupe_samples_spool" says what was read or skipped, and
 * "loupe_samples_spool_dropped" what the spool did not hold. A spool that cannot be read costs
 * the samples only (said on stderr and in that metadata), never the trace. The region and the
 * spool are read as untrusted input. A region file cut short (a copy that stopped early) is
 * read as far as it goes: the chunks of events wholly in the file (and the parts of the region
 * before them); the events of the chunks in use past the cut count as their threads'
 * events_dropped, and the metadata "loupe_recover_cut" says how many chunks and events were
 * lost. result (may be NULL) is filled
 * as by loupe_stop_trace() and must be freed with loupe_trace_result_free().
 * Errors: LOUPE_EINVALID (NULL options or log_dir, a bad fd or result size), LOUPE_ENO_TRACE
 * (the program never started a session, or stopped it and wrote its trace itself: the detail
 * says which), LOUPE_EFORMAT (not a loupe region, too short, or its header is damaged: the
 * detail says which), LOUPE_EIO,
 * LOUPE_ENOMEM. Thread-safety: any thread (two recoveries at once take turns for the samples);
 * does not touch this process's own session, but reads no samples while this process samples
 * itself (the metadata says so). */
LOUPE_API int loupe_recover_trace(int fd, const loupe_recover_options *options,
                                  loupe_trace_result *result);

/** Non-zero while a session is active. Thread-safety: any thread (a relaxed read). */
LOUPE_API int loupe_is_tracing(void);

/** Adds key=value to the process metadata written into the trace ("metadata" object of the JSON;
 * a later set of the same key replaces it). Both strings are copied. Up to 256 keys.
 * Errors: LOUPE_EINVALID (NULL, or a key loupe writes itself), LOUPE_ETOO_MANY_KEYS (256 keys are
 * set and key is not one of them: nothing changes), LOUPE_ENOMEM. Thread-safety: any thread. */
LOUPE_API int loupe_set_metadata(const char *key, const char *value);

/** Removes every metadata pair. Thread-safety: any thread. */
LOUPE_API void loupe_clear_metadata(void);

/** Names the calling thread in traces (copied, up to 63 bytes). Works before or during a
 * session and stays for later sessions. Thread-safety: any thread, names the caller. */
LOUPE_API void loupe_set_thread_name(const char *name);

/* Scoped session, like `with jax.profiler.trace(dir):`.
 *     int rc;
 *     LOUPE_TRACE_SCOPE(&opts, &result, &rc) { ... }   // starts, runs the block, stops
 * result and rc_ptr may be NULL.
 * The block runs only when the start succeeded. `break` leaves it (and stops); do not `return`
 * or `goto` out of it (the stop would be skipped; call loupe_stop_trace_if_active() then).
 * rc_ptr gets the start's code, then the stop's. */
LOUPE_API int loupe__scope_start(const loupe_trace_options *o, int *rc_out);
LOUPE_API int loupe__scope_stop(loupe_trace_result *r, int *rc_out);
#define LOUPE_TRACE_SCOPE(opts, result, rc_ptr)                                                    \
    for (int loupe__sc = loupe__scope_start((opts), (rc_ptr)); loupe__sc;                          \
         loupe__sc = loupe__scope_stop((result), (rc_ptr)))

#ifdef __cplusplus
}

namespace loupe {
/** RAII session: starts in the constructor, stops in the destructor unless stop() was called.
 * ok() tells whether the start succeeded; start_code() its code. */
class Trace {
  public:
    explicit Trace(const loupe_trace_options &o) : rc_(loupe_start_trace(&o)), open_(rc_ == 0) {}
    ~Trace() {
        if (open_) {
            loupe_stop_trace(nullptr);
        }
    }
    /** Stops now and fills result (may be nullptr); returns loupe_stop_trace()'s code, or
     * LOUPE_ENOT_STARTED when the start failed or stop() was called already. */
    int stop(loupe_trace_result *result) {
        if (!open_) {
            return LOUPE_ENOT_STARTED;
        }
        open_ = false;
        return loupe_stop_trace(result);
    }
    bool ok() const {
        return rc_ == 0;
    }
    int start_code() const {
        return rc_;
    }
    Trace(const Trace &) = delete;
    Trace &operator=(const Trace &) = delete;

  private:
    int rc_;
    bool open_;
};
} // namespace loupe
#endif

#endif
