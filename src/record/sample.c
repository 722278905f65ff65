/* sample.c: CPU sampling with call stacks, and on- vs. off-CPU time, from perf_event_open(2).
 *
 * Design: one task-clock event per thread (pid = tid, cpu = -1), each with its own ring buffer,
 * opened by a sampler thread that scans /proc/self/task every 50 ms. Why not the alternatives:
 * an inherited per-process event (inherit = 1, cpu = -1) cannot be mmap'd (the kernel's
 * perf_mmap refuses inherited per-task events), and one event per CPU with pid = the process
 * (perf record's default, Perfetto's traced_perf) needs perf_event_paranoid <= 0 or CAP_PERFMON
 * for per-CPU access, where a thread's own events work at the default paranoid level 2. Scanning
 * instead of opening at thread registration keeps the hot path untouched (registration is
 * allocation-free and may run in a signal handler) and also samples threads that never record a
 * zone (an uninstrumented program under `loupe record`); a thread is sampled from at most 50 ms
 * after it starts. A thread that records (registers) is sampled sooner: its registration writes
 * the sampler's eventfd (loupe__sample_thread_born(): one write(2), async-signal-safe, no lock
 * or allocation), which wakes the poll into a scan at once, so a thread that lives 3 ms is
 * sampled too.
 *
 * The sampler thread blocks every signal (as the keeper does), polls the rings (woken when one is
 * half full, or every 50 ms), copies each record into memory of its own and moves the ring's
 * tail: the kernel never waits for loupe, and what it could not write is counted from its
 * PERF_RECORD_LOST records (samples_lost in the model). context_switch = 1 adds a
 * PERF_RECORD_SWITCH at every switch out and in: the gaps are the thread's off-CPU intervals.
 * A switch-out with PERF_RECORD_MISC_SWITCH_OUT_PREEMPT (linux/perf_event.h, Linux 4.17: the
 * task was still runnable, what `perf sched timehist` reports as preemption) starts a preempted
 * interval, one without it a waiting one (blocked or sleeping); before 4.17 the bit is never
 * set, so the kind is unknown there rather than always "waiting". A thread's on-CPU time (its
 * span less these intervals) is made to equal its event's task-clock count at the stop
 * (correct_offs()): the records miss the kernel's own switch path.
 *
 * Stacks: frame-pointer callchains (PERF_SAMPLE_CALLCHAIN) always; with libdw, also 8 KiB of the
 * user stack and the user registers (PERF_SAMPLE_STACK_USER, PERF_SAMPLE_REGS_USER), unwound with
 * DWARF CFI by dwfl_getthread_frames() on the sampler thread as they are drained (only the
 * addresses are kept), which is what `perf record --call-graph dwarf` does at report time. The
 * longer of the two stacks wins: code built without frame pointers gives a one-frame FP chain.
 * Symbols are looked up at the stop with libdwfl over the live process's modules (main binary,
 * shared libraries, PIE; build-id aware through dwfl_build_id_find_debuginfo, never debuginfod):
 * function, inline frames from DW_TAG_inlined_subroutine, file:line when debug info exists.
 *
 * Clock: use_clockid with CLOCK_MONOTONIC, the session's own clock pair base.
 */

#include "record/sample.h"
#include "record/record.h"
#include "record/region.h"
#include "record/sample_spool.h"

#include "base/array.h"
#include "base/ownfd.h"
#include "model/builder.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#ifdef LOUPE_HAVE_LIBDW
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#endif

#define MAX_TASKS 4096
#define MAX_DEPTH 128
#define MAX_INLINE 32    /* inlined calls within one function at one address */
#define STACK_COPY 8192u /* bytes of user stack per sample (perf's default is 8 KiB too) */
/* The sampler's timed scan of /proc/self/task, and its poll's timeout. A scan and its wake-up
 * cost about 50 us of the sampler's CPU on the 2-vCPU VM of docs/performance.md ("CPU sampling
 * overhead": 25 ms of the sampler's CPU in a 4 s run at a 10 ms period, 10 ms at 100 ms), the
 * largest part of what the sampler thread spends at 999 Hz. The timed scan only finds threads
 * that never record: a thread that registers wakes a scan at once (loupe__sample_thread_born),
 * and one that exits is closed at its event's POLLHUP, so 50 ms costs nothing else. */
#define SCAN_NS 50000000u

typedef struct task {
    int fd;
    int seen; /* found by the last scan */
    uint64_t tid;
    void *base;
    size_t len;
    uint64_t out_since; /* switched out at (perf time), 0 when running */
    unsigned out_kind;  /* a loupe_off_cpu_kind: why it was switched out */
    /* Until its first switch record: the time its event was opened (perf time) and how the
     * thread was then (a loupe_off_cpu_kind). A thread opened while switched out has a
     * switch-in as its first record: it was off the CPU from the open on, and counting that
     * time as on-CPU made a thread that blocks (in a join, on a condition variable) look busy.
     * 0 once a switch record came. */
    uint64_t opened;
    unsigned open_kind;
    /* The on-CPU time its switch records show (switch-in, or the open, to switch-out) and since
     * when it runs (0 when switched out): checked against the event's own count at its close
     * (correct_offs()). */
    uint64_t on_seen, running_since;
} task;

/* A closed task's event count (task-clock: ns on the CPU since the open, what `perf stat -e
 * task-clock` reports) and the on-CPU time its switch records showed. */
typedef struct tclk {
    uint64_t tid, count, seen;
} tclk;

typedef struct raw_sample {
    uint64_t ts; /* perf time (CLOCK_MONOTONIC ns) */
    uint32_t tid, cpu;
    uint32_t first, n; /* pcs[first .. first + n), innermost first */
} raw_sample;

typedef struct raw_off {
    uint64_t tid, start, end;
    unsigned kind; /* a loupe_off_cpu_kind */
} raw_off;

typedef struct named {
    uint64_t tid;
    char comm[16];
    /* its CPU time (the scheduler's clock, ns) when its event opened, which no sample can show;
     * 0 when unknown (a spool's name, a thread gone by the read) */
    uint64_t cpu_at_open;
} named;

static pthread_mutex_t s_lock = PTHREAD_MUTEX_INITIALIZER; /* start / stop / collect */
static int s_running;
static pthread_t s_thread;
/* eventfd: the stop and thread registrations wake the poll. Made at the first start and never
 * closed (a registering thread may write it at any time: a closed and reused fd number would
 * take its 8 bytes), except in a fork child, which makes its own. Held at a number of loupe's
 * (base/ownfd.h) and checked before each write: a program that closed it (a daemon closing
 * every fd) gets its number, and the sampler thread makes another (wake_fd()). */
static int s_wake = -1;
static int s_born_on; /* registrations write s_wake (the sampler runs) */
static int s_quit;
static uint32_t s_hz;
static int s_stacks;
static uint64_t s_origin;
static uint64_t s_began; /* CLOCK_MONOTONIC ns of the sampler's first scan's end (0: none) */
static size_t s_pages;   /* ring data pages per thread (a power of two) */
static char s_note[448] = "off";
static uint64_t s_sampler_tid;
static int s_preempt_bit; /* the kernel sets PERF_RECORD_MISC_SWITCH_OUT_PREEMPT (>= 4.17) */
/* Samples count kernel-mode CPU time too (exclude_kernel = 0): allowed at perf_event_paranoid
 * <= 1 or with CAP_PERFMON / CAP_SYS_ADMIN. With exclude_kernel = 1 the kernel drops every
 * task-clock sample whose timer fires in kernel mode (kernel/events/core.c, perf_swevent_hrtimer()
 * and perf_exclude_event()), so a thread that spends its CPU in system calls (usleep, read,
 * futex) got almost no samples. Its user callchain (exclude_callchain_kernel) still says where
 * in the program it was. */
static int s_kernel;

static task s_tasks[MAX_TASKS];
static size_t s_ntasks;
/* Held by the sampler thread while it changes s_tasks (its scans, its last close) and across a
 * fork (loupe__sample_fork_prepare): the child then finds a table whose every fd is an event. */
static pthread_mutex_t s_table_lock = PTHREAD_MUTEX_INITIALIZER;
/* Held by the sampler thread from its start to its end (its scans, drains, DWARF unwinding and
 * spool writes: everything that mallocs), released only while it waits in poll(2); taken across a
 * fork (before s_table_lock), so that no fork happens while the sampler is inside malloc. glibc's
 * own fork() takes its arenas' locks, but a malloc that does not (the ASan runtime of gcc 12's
 * libasan, whose allocator takes no lock at fork) left a child whose copy of an allocator lock
 * was held by the parent's sampler: the child's first malloc of that size waited for ever (a
 * preloaded ASan runtime: 200 children of `sig_probe forks` ran past 200 s at 0% CPU). A fork
 * waits for at most one thread's drain (or one scan). Taken only by the sampler thread and the fork
 * handlers; under it the sampler takes s_table_lock and no other lock. */
static pthread_mutex_t s_work_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t s_skipped; /* threads not sampled: MAX_TASKS reached */
/* The sampler thread has an fd table of its own (base/ownfd.h): the tasks' fds and s_taskdir
 * are numbers of that table. Set by the sampler thread before its first scan. */
static int s_private;
static sem_t s_ready; /* posted by the sampler thread after its first scan */

static raw_sample *s_samples;
static size_t s_nsamples, s_capsamples;
static uint64_t *s_pcs;
static size_t s_npcs, s_cappcs;
static raw_off *s_offs;
static size_t s_noffs, s_capoffs;
static named *s_names;
static size_t s_nnames, s_capnames;
static uint64_t s_lost;
static int s_oom; /* a copy failed for memory: counted as lost */
/* What the sampler thread has handed to the spool (sample_spool.h) so far: indexes into
 * s_samples, s_offs and s_names. */
static size_t s_sp_samples, s_sp_offs, s_sp_names;
/* Threads of this process born while sampling (PERF_RECORD_FORK in their creator's ring) and
 * loupe's own threads the scan skipped: what loupe_sampling_threads_missed is counted from. */
static uint64_t *s_born, *s_own;
static size_t s_nborn, s_capborn, s_nown, s_capown;
static uint64_t s_pid;
static tclk *s_tclk;
static size_t s_ntclk, s_captclk;

/* s_wake, made (again) when there is none or the program took its number: the first start,
 * then the sampler thread. -1 when no number of loupe's is free (the timed scans still find
 * every thread). */
static int wake_fd(void) {
    int fd = __atomic_load_n(&s_wake, __ATOMIC_ACQUIRE);
    if (fd >= 0 && loupe__fd_is_own(fd)) {
        return fd;
    }
    if (fd >= 0) {
        loupe__fd_close(fd); /* forgets the number: the program's now */
    }
    fd = loupe__fd_adopt(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), "the sampler's wake-up");
    __atomic_store_n(&s_wake, fd, __ATOMIC_RELEASE);
    return fd;
}

static long sys_perf_event_open(struct perf_event_attr *a, pid_t pid, int cpu, int group,
                                unsigned long flags) {
    /* Tests simulate a kernel that denies perf events (a paranoid level of 3, seccomp in a
     * container): the path must say so and go on without samples. */
    const char *deny = getenv("LOUPE_TEST_PERF_DENY");
    if (deny != NULL && deny[0] == '1') {
        errno = EACCES;
        return -1;
    }
    return syscall(SYS_perf_event_open, a, pid, cpu, group, flags);
}

static void fill_attr(struct perf_event_attr *a) {
    memset(a, 0, sizeof *a);
    a->size = sizeof *a;
    a->type = PERF_TYPE_SOFTWARE;
    a->config = PERF_COUNT_SW_TASK_CLOCK; /* counts while the thread runs: on-CPU samples */
    a->freq = 1;
    a->sample_freq = s_hz;
    a->sample_type = PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
    if (s_stacks != LOUPE__STACKS_NONE) {
        a->sample_type |= PERF_SAMPLE_CALLCHAIN;
    } else {
        a->sample_type |= PERF_SAMPLE_IP;
    }
#ifdef LOUPE_HAVE_LIBDW
    if (s_stacks == LOUPE__STACKS_DWARF) {
        a->sample_type |= PERF_SAMPLE_REGS_USER | PERF_SAMPLE_STACK_USER;
        /* x86-64 perf regs (arch/x86/include/uapi/asm/perf_regs.h): AX..IP are bits 0..8,
         * R8..R15 bits 16..23 */
        a->sample_regs_user = 0x1ffu | (0xffu << 16);
        a->sample_stack_user = STACK_COPY;
    }
#endif
    /* user mode only works at perf_event_paranoid 2; kernel time too when allowed (s_kernel),
     * never in no-stacks mode, whose one IP would then be a kernel address */
    a->exclude_kernel = s_kernel && s_stacks != LOUPE__STACKS_NONE ? 0 : 1;
    a->exclude_hv = 1;
    a->exclude_callchain_kernel = 1;
    a->context_switch = 1;
    /* PERF_RECORD_FORK/EXIT (perf_event_open(2), "task"): the kernel writes a thread's FORK
     * record into the events of the thread that cloned it (perf_event_fork() runs in the
     * parent's context), so a thread that lives and dies between two scans, never recording,
     * is still known to have existed and is counted as missed. The alternative, one inherited
     * event, cannot be mmap'd per task (perf_mmap refuses inherit with cpu = -1), and one per
     * CPU would sample only the threads cloned after it by the thread it was opened on. */
    a->task = 1;
    a->sample_id_all = 1; /* switch and lost records carry tid and time */
    a->use_clockid = 1;
    a->clockid = CLOCK_MONOTONIC;
    a->watermark = 1;
    a->wakeup_watermark = (uint32_t)(s_pages * 4096u / 2);
    a->disabled = 0;
}

static int read_paranoid(void) {
    int fd = open("/proc/sys/kernel/perf_event_paranoid", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -100;
    }
    char b[16] = {0};
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    return n > 0 ? atoi(b) : -100;
}

/* kernel.perf_event_max_sample_rate: the kernel refuses a faster freq-mode event (EINVAL) and
 * lowers the value itself when its sampling interrupts take too long ("perf: interrupt took too
 * long ..., lowering kernel.perf_event_max_sample_rate" in dmesg). 0 when unreadable. Tests set
 * LOUPE_TEST_PERF_MAX_SAMPLE_RATE to play a kernel with a lower limit. */
static uint32_t read_max_sample_rate(void) {
    const char *t = getenv("LOUPE_TEST_PERF_MAX_SAMPLE_RATE");
    if (t != NULL && atol(t) > 0) {
        return (uint32_t)atol(t);
    }
    int fd = open("/proc/sys/kernel/perf_event_max_sample_rate", O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    char b[24] = {0};
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    long v = n > 0 ? atol(b) : 0;
    return v > 0 && v <= (long)UINT32_MAX ? (uint32_t)v : 0;
}

/* The one line that says why there are no samples (also the "loupe_sampling" metadata). */
static void set_unavailable(int err) {
    int par = read_paranoid();
    char why[400];
    if (err == EACCES || err == EPERM) {
        if (par != -100) {
            snprintf(why, sizeof why,
                     "perf_event_open: %s (kernel.perf_event_paranoid = %d; sampling a "
                     "program's own threads needs <= 2 or CAP_PERFMON: sysctl -w "
                     "kernel.perf_event_paranoid=2; in a container, a seccomp profile may "
                     "forbid perf_event_open)",
                     strerror(err), par);
        } else {
            snprintf(why, sizeof why,
                     "perf_event_open: %s (no /proc/sys/kernel/perf_event_paranoid; in a "
                     "container, a seccomp profile may forbid perf_event_open)",
                     strerror(err));
        }
    } else if (err == ENOSYS) {
        snprintf(why, sizeof why, "perf_event_open: %s (the kernel has no perf events)",
                 strerror(err));
    } else {
        snprintf(why, sizeof why, "perf_event_open: %s", strerror(err));
    }
    snprintf(s_note, sizeof s_note, "unavailable: %s", why);
    fprintf(stderr, "loupe: CPU sampling is unavailable: %s; the trace goes on without samples\n",
            why);
}

static int grow_fail(void **p, size_t *cap, size_t need, size_t elem) {
    if (loupe__grow(p, cap, need, elem) != 0) {
        s_oom = 1;
        return -1;
    }
    return 0;
}

static void add_off(uint64_t tid, uint64_t start, uint64_t end, unsigned kind) {
    if (end <= start || grow_fail((void **)&s_offs, &s_capoffs, s_noffs + 1, sizeof *s_offs)) {
        return;
    }
    s_offs[s_noffs++] = (raw_off){tid, start, end, kind};
}

/* Whether the running kernel marks preempting switch-outs: Linux 4.17 added
 * PERF_RECORD_MISC_SWITCH_OUT_PREEMPT (kernel commit "perf/core: Store context switch out type
 * in PERF_RECORD_SWITCH[_CPU_WIDE]"); an older one leaves the bit clear on every switch. */
static int kernel_marks_preempt(void) {
    struct utsname u;
    unsigned major = 0, minor = 0;
    if (uname(&u) != 0 || sscanf(u.release, "%u.%u", &major, &minor) != 2) {
        return 0;
    }
    return major > 4 || (major == 4 && minor >= 17);
}

/* The kind of the off-CPU interval a switch-out record starts. */
static unsigned switch_out_kind(uint16_t misc) {
    if (!s_preempt_bit) {
        return LOUPE_OFF_CPU_UNKNOWN;
    }
    return (misc & PERF_RECORD_MISC_SWITCH_OUT_PREEMPT) ? LOUPE_OFF_CPU_PREEMPTED
                                                        : LOUPE_OFF_CPU_WAITING;
}

#ifdef LOUPE_HAVE_LIBDW
/* ---- DWARF unwinding of a copied stack (the sampler thread only) ---- */
typedef struct unwind_ctx {
    uint64_t tid;
    const uint64_t *regs; /* perf order, see fill_attr */
    uint64_t sp;
    const unsigned char *stack;
    uint64_t stack_size;
    uint64_t pcs[MAX_DEPTH];
    uint32_t n;
} unwind_ctx;

static Dwfl *u_dwfl;
static unwind_ctx u_cur;
static uint64_t u_reported_at;

static pid_t u_next_thread(Dwfl *dwfl, void *arg, void **thread_argp) {
    (void)dwfl;
    (void)arg;
    if (*thread_argp != NULL) {
        return 0;
    }
    *thread_argp = &u_cur;
    return (pid_t)u_cur.tid;
}

static bool u_get_thread(Dwfl *dwfl, pid_t tid, void *arg, void **thread_argp) {
    (void)dwfl;
    (void)tid;
    (void)arg;
    *thread_argp = &u_cur;
    return true;
}

static bool u_memory_read(Dwfl *dwfl, Dwarf_Addr addr, Dwarf_Word *result, void *arg) {
    (void)dwfl;
    (void)arg;
    /* No "addr + 8" here: libdw asks for addresses up to UINT64_MAX (a garbage CFA), and the sum
     * wrapped past the check (a SIGSEGV seen in an MPI rank's sampler under load). */
    if (addr >= u_cur.sp && u_cur.stack_size >= 8 && addr - u_cur.sp <= u_cur.stack_size - 8) {
        memcpy(result, u_cur.stack + (addr - u_cur.sp), 8);
        return true;
    }
    /* Outside the copy: the live process (our own), read safely (a wild address fails). */
    struct iovec local = {result, 8}, remote = {(void *)(uintptr_t)addr, 8};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 8;
}

static bool u_set_initial_registers(Dwfl_Thread *thread, void *arg) {
    (void)arg;
    const uint64_t *r = u_cur.regs;
    /* DWARF x86-64 numbering (System V psABI, table 3.36): rax rdx rcx rbx rsi rdi rbp rsp
     * r8..r15 rip; perf order: AX BX CX DX SI DI BP SP IP (0..8), R8..R15 */
    Dwarf_Word d[17] = {r[0],  r[3],  r[2],  r[1],  r[4],  r[5],  r[6],  r[7], r[9],
                        r[10], r[11], r[12], r[13], r[14], r[15], r[16], r[8]};
    if (!dwfl_thread_state_registers(thread, 0, 17, d)) {
        return false;
    }
    dwfl_thread_state_register_pc(thread, r[8]);
    return true;
}

static const Dwfl_Thread_Callbacks u_callbacks = {
    .next_thread = u_next_thread,
    .get_thread = u_get_thread,
    .memory_read = u_memory_read,
    .set_initial_registers = u_set_initial_registers,
};

static char *u_debuginfo_path;
int loupe__find_debuginfo_local(Dwfl_Module *mod, void **userdata, const char *modname,
                                GElf_Addr base, const char *file_name, const char *debuglink_file,
                                GElf_Word debuglink_crc, char **debuginfo_file_name);
int loupe__find_debuginfo_local(Dwfl_Module *mod, void **userdata, const char *modname,
                                GElf_Addr base, const char *file_name, const char *debuglink_file,
                                GElf_Word debuglink_crc, char **debuginfo_file_name) {
    /* Local files only (/usr/lib/debug/.build-id/): dwfl_standard_find_debuginfo falls back to
     * debuginfod, whose client (libdebuginfod, dlopen'd by libdw) starts libcurl, libssh2 and
     * OpenSSL inside the traced program from the sampler thread; OpenSSL's atexit cleanup then
     * ran before the stop's symbolisation and the sampler crashed in OPENSSL_LH_insert. A
     * profiler must not load a network client into the program it watches. */
    return dwfl_build_id_find_debuginfo(mod, userdata, modname, base, file_name, debuglink_file,
                                        debuglink_crc, debuginfo_file_name);
}

static const Dwfl_Callbacks proc_callbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = loupe__find_debuginfo_local,
    .debuginfo_path = &u_debuginfo_path,
};

static Dwfl *proc_dwfl(void) {
    Dwfl *d = dwfl_begin(&proc_callbacks);
    if (d == NULL) {
        return NULL;
    }
    if (dwfl_linux_proc_report(d, getpid()) != 0 || dwfl_report_end(d, NULL, NULL) != 0) {
        dwfl_end(d);
        return NULL;
    }
    return d;
}

static uint64_t mono_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* A Dwfl over the modules mapped now, re-made when a pc falls outside every module (a dlopen
 * since), at most every 100 ms. */
static Dwfl *unwinder(uint64_t pc) {
    if (u_dwfl != NULL && dwfl_addrmodule(u_dwfl, pc) != NULL) {
        return u_dwfl;
    }
    uint64_t now = mono_now();
    if (u_dwfl != NULL && now - u_reported_at < 100000000u) {
        return u_dwfl;
    }
    if (u_dwfl != NULL) {
        dwfl_end(u_dwfl);
    }
    u_reported_at = now;
    u_dwfl = proc_dwfl();
    if (u_dwfl != NULL && !dwfl_attach_state(u_dwfl, NULL, getpid(), &u_callbacks, NULL)) {
        dwfl_end(u_dwfl);
        u_dwfl = NULL;
    }
    return u_dwfl;
}

static int u_frame(Dwfl_Frame *state, void *arg) {
    (void)arg;
    Dwarf_Addr pc;
    bool activation;
    if (!dwfl_frame_pc(state, &pc, &activation) || pc == 0) {
        return DWARF_CB_ABORT;
    }
    u_cur.pcs[u_cur.n++] = pc;
    return u_cur.n < MAX_DEPTH ? DWARF_CB_OK : DWARF_CB_ABORT;
}

/* Unwinds one sample's copied stack into u_cur.pcs; the count. */
static uint32_t unwind_dwarf(uint64_t tid, const uint64_t *regs, const unsigned char *stack,
                             uint64_t size) {
    u_cur.tid = tid;
    u_cur.regs = regs;
    u_cur.sp = regs[7];
    u_cur.stack = stack;
    u_cur.stack_size = size;
    u_cur.n = 0;
    Dwfl *d = unwinder(regs[8]);
    if (d == NULL) {
        return 0;
    }
    (void)dwfl_getthread_frames(d, (pid_t)tid, u_frame, NULL);
    return u_cur.n;
}
#endif

/* ---- the ring buffers ---- */
/* A record that wraps around the ring's end, copied whole (header.size is 16 bits). */
static unsigned char s_rec[65536];

static void on_sample(const unsigned char *p, const unsigned char *end) {
    uint64_t tid, ts, cpu;
    uint32_t pt[2];
    if (end - p < 24) {
        return;
    }
    if (s_stacks == LOUPE__STACKS_NONE) {
        uint64_t ip;
        memcpy(&ip, p, 8);
        p += 8;
        memcpy(pt, p, 8);
        memcpy(&ts, p + 8, 8);
        memcpy(&cpu, p + 16, 8);
        tid = pt[1];
        if (grow_fail((void **)&s_pcs, &s_cappcs, s_npcs + 1, 8) ||
            grow_fail((void **)&s_samples, &s_capsamples, s_nsamples + 1, sizeof *s_samples)) {
            s_lost++;
            return;
        }
        s_samples[s_nsamples++] =
            (raw_sample){ts, (uint32_t)tid, (uint32_t)cpu, (uint32_t)s_npcs, 1};
        s_pcs[s_npcs++] = ip;
        return;
    }
    memcpy(pt, p, 8);
    memcpy(&ts, p + 8, 8);
    memcpy(&cpu, p + 16, 8);
    tid = pt[1];
    p += 24;
    uint64_t nr;
    if (end - p < 8) {
        return;
    }
    memcpy(&nr, p, 8);
    p += 8;
    if (nr > (uint64_t)(end - p) / 8) {
        return;
    }
    const unsigned char *chain = p;
    p += nr * 8;
    uint64_t fp[MAX_DEPTH];
    uint32_t nfp = 0;
    for (uint64_t i = 0; i < nr && nfp < MAX_DEPTH; i++) {
        uint64_t ip;
        memcpy(&ip, chain + i * 8, 8);
        if (ip >= (uint64_t)PERF_CONTEXT_MAX) {
            continue; /* PERF_CONTEXT_USER and other markers */
        }
        fp[nfp++] = ip;
    }
    const uint64_t *pcs = fp;
    uint32_t npcs = nfp;
#ifdef LOUPE_HAVE_LIBDW
    if (s_stacks == LOUPE__STACKS_DWARF && end - p >= 8) {
        uint64_t abi, regs[17];
        memcpy(&abi, p, 8);
        p += 8;
        if (abi != PERF_SAMPLE_REGS_ABI_NONE && end - p >= (ptrdiff_t)sizeof regs) {
            memcpy(regs, p, sizeof regs);
            p += sizeof regs;
            uint64_t size = 0, dyn = 0;
            if (end - p >= 8) {
                memcpy(&size, p, 8);
                p += 8;
            }
            if (size > 0 && (uint64_t)(end - p) >= size + 8) {
                memcpy(&dyn, p + size, 8);
                uint32_t n = unwind_dwarf(tid, regs, p, dyn < size ? dyn : size);
                if (n > npcs) {
                    pcs = u_cur.pcs;
                    npcs = n;
                }
            }
        }
    }
#endif
    if (grow_fail((void **)&s_pcs, &s_cappcs, s_npcs + npcs, 8) ||
        grow_fail((void **)&s_samples, &s_capsamples, s_nsamples + 1, sizeof *s_samples)) {
        s_lost++;
        return;
    }
    s_samples[s_nsamples++] =
        (raw_sample){ts, (uint32_t)tid, (uint32_t)cpu, (uint32_t)s_npcs, npcs};
    memcpy(s_pcs + s_npcs, pcs, npcs * 8);
    s_npcs += npcs;
}

/* The sample_id trailer of a non-sample record (sample_id_all): TID, TIME, CPU in that order
 * (perf_event_open(2), "sample_id"). */
static int trailer(const unsigned char *rec, size_t size, uint64_t *tid, uint64_t *ts) {
    if (size < sizeof(struct perf_event_header) + 24) {
        return -1;
    }
    const unsigned char *t = rec + size - 24;
    uint32_t pt[2];
    memcpy(pt, t, 8);
    memcpy(ts, t + 8, 8);
    *tid = pt[1];
    return 0;
}

static void on_record(task *tk, const unsigned char *rec, size_t size) {
    struct perf_event_header h;
    memcpy(&h, rec, sizeof h);
    const unsigned char *body = rec + sizeof h, *end = rec + size;
    uint64_t tid, ts;
    switch (h.type) {
    case PERF_RECORD_SAMPLE:
        on_sample(body, end);
        break;
    case PERF_RECORD_LOST:
        if (size >= sizeof h + 16) {
            uint64_t lost;
            memcpy(&lost, body + 8, 8);
            s_lost += lost;
        }
        break;
    case PERF_RECORD_FORK:
        /* pid, ppid, tid, ptid (u32 each), time: a new process (pid != ours) is not a thread of
         * this one, and a thread's creation is known from its tid (pid is our tgid) */
        if (size >= sizeof h + 24) {
            uint32_t ids[4];
            memcpy(ids, body, sizeof ids);
            if (ids[0] == s_pid && ids[2] != ids[0] &&
                grow_fail((void **)&s_born, &s_capborn, s_nborn + 1, 8) == 0) {
                s_born[s_nborn++] = ids[2];
            }
        }
        break;
    case PERF_RECORD_EXIT:
        /* pid, ppid, tid, ptid (u32 each), time: the thread's own exit (perf_event_exit_task()
         * writes it before the event is detached, so no switch-out follows): it ran until then,
         * not until its close */
        if (size >= sizeof h + 24) {
            uint32_t ids[4];
            uint64_t t;
            memcpy(ids, body, sizeof ids);
            memcpy(&t, body + 16, 8);
            if (ids[2] == tk->tid && tk->running_since != 0) {
                tk->on_seen += t > tk->running_since ? t - tk->running_since : 0;
                tk->running_since = 0;
            }
        }
        break;
#ifdef PERF_RECORD_LOST_SAMPLES
    case PERF_RECORD_LOST_SAMPLES:
        if (size >= sizeof h + 8) {
            uint64_t lost;
            memcpy(&lost, body, 8);
            s_lost += lost;
        }
        break;
#endif
    case PERF_RECORD_SWITCH:
        if (trailer(rec, size, &tid, &ts) == 0 && tid == tk->tid) {
            if (h.misc & PERF_RECORD_MISC_SWITCH_OUT) {
                if (tk->running_since != 0 && ts > tk->running_since) {
                    tk->on_seen += ts - tk->running_since;
                }
                tk->running_since = 0;
                tk->out_since = ts;
                tk->out_kind = switch_out_kind(h.misc);
            } else if (tk->out_since != 0) {
                add_off(tid, tk->out_since, ts, tk->out_kind);
                tk->out_since = 0;
            } else if (tk->opened != 0 && tk->opened < ts) {
                add_off(tid, tk->opened, ts, tk->open_kind); /* switched out when opened */
            }
            tk->opened = 0;
            if (!(h.misc & PERF_RECORD_MISC_SWITCH_OUT)) {
                tk->running_since = ts;
            }
        }
        break;
    default:
        break;
    }
}

void loupe__perf_ring_drain(void *base, unsigned char *scratch,
                            void (*fn)(void *ctx, const unsigned char *rec, size_t size),
                            void *ctx) {
    struct perf_event_mmap_page *mp = base;
    unsigned char *data = (unsigned char *)base + mp->data_offset;
    uint64_t dsize = mp->data_size;
    uint64_t head = __atomic_load_n(&mp->data_head, __ATOMIC_ACQUIRE);
    uint64_t tail = mp->data_tail;
    while (tail + sizeof(struct perf_event_header) <= head) {
        struct perf_event_header h;
        uint64_t off = tail % dsize;
        for (size_t i = 0; i < sizeof h; i++) {
            ((unsigned char *)&h)[i] = data[(off + i) % dsize];
        }
        if (h.size < sizeof h || tail + h.size > head) {
            break;
        }
        const unsigned char *rec = data + off;
        if (off + h.size > dsize) {
            size_t first = (size_t)(dsize - off);
            memcpy(scratch, data + off, first);
            memcpy(scratch + first, data, h.size - first);
            rec = scratch;
        }
        fn(ctx, rec, h.size);
        tail += h.size;
    }
    __atomic_store_n(&mp->data_tail, tail, __ATOMIC_RELEASE);
}

static void on_task_record(void *ctx, const unsigned char *rec, size_t size) {
    on_record(ctx, rec, size);
}

static void drain(task *tk) {
    loupe__perf_ring_drain(tk->base, s_rec, on_task_record, tk);
}

static uint64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t); /* perf time: use_clockid */
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Its last records, and its event's count (read(2) of a task event whose task exited returns
 * the final count): a thread still running at the stop ran until now. */
static void close_task(task *tk) {
    drain(tk);
    uint64_t count = 0;
    /* A number the program closed or took over is not read (it may be the program's pipe now):
     * the thread's samples stand, only the task-clock correction is left out for it. */
    if (tk->fd >= 0 && loupe__fd_ok(tk->fd) &&
        read(tk->fd, &count, sizeof count) == (ssize_t)sizeof count &&
        grow_fail((void **)&s_tclk, &s_captclk, s_ntclk + 1, sizeof *s_tclk) == 0) {
        uint64_t now = mono_ns();
        if (tk->running_since != 0 && now > tk->running_since) {
            tk->on_seen += now - tk->running_since;
            tk->running_since = 0;
        }
        s_tclk[s_ntclk++] = (tclk){tk->tid, count, tk->on_seen};
    }
    munmap(tk->base, tk->len);
    loupe__fd_close(tk->fd);
}

static void read_comm(uint64_t tid, char comm[16]) {
    char path[64];
    snprintf(path, sizeof path, "/proc/self/task/%llu/comm", (unsigned long long)tid);
    memset(comm, 0, 16);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, comm, 15);
        close(fd);
        if (n > 0 && comm[n - 1] == '\n') {
            comm[n - 1] = 0;
        }
    }
}

/* How a thread is now, from /proc/self/task/<tid>/stat's state field (proc(5)): runnable ('R':
 * when it is not on a CPU, it was preempted) or waiting (sleeping, blocked). */
static unsigned task_state_kind(uint64_t tid) {
    char path[64], b[512];
    snprintf(path, sizeof path, "/proc/self/task/%llu/stat", (unsigned long long)tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return LOUPE_OFF_CPU_UNKNOWN;
    }
    ssize_t n = read(fd, b, sizeof b - 1);
    close(fd);
    b[n > 0 ? n : 0] = 0;
    const char *p = strrchr(b, ')'); /* comm may hold spaces and parentheses */
    if (p == NULL || p[1] != ' ' || p[2] == 0 || !s_preempt_bit) {
        return LOUPE_OFF_CPU_UNKNOWN;
    }
    return p[2] == 'R' ? LOUPE_OFF_CPU_PREEMPTED : LOUPE_OFF_CPU_WAITING;
}

/* Thread tid's CPU time so far (ns), from its CPU-time clock: Linux's clock id for a thread
 * (include/linux/posix-timers.h, MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED): ~tid << 3 | 4 | 2,
 * what glibc's pthread_getcpuclockid builds) read by clock_gettime(2), which reads any thread of
 * the caller's process. 0 when it is gone. One system call, no fd. */
static uint64_t thread_cpu_ns(uint64_t tid) {
    clockid_t id = (clockid_t)((~(unsigned)tid << 3) | 6u);
    struct timespec t;
    if (clock_gettime(id, &t) != 0) {
        return 0;
    }
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void open_task(uint64_t tid) {
    char comm[16];
    read_comm(tid, comm);
    if (strncmp(comm, "loupe-", 6) == 0) {
        /* loupe's own threads (the keeper): nothing of the program's, never missed */
        if (grow_fail((void **)&s_own, &s_capown, s_nown + 1, 8) == 0) {
            s_own[s_nown++] = tid;
        }
        return;
    }
    if (s_ntasks == MAX_TASKS) {
        s_skipped++;
        return;
    }
    /* Its CPU time so far, read before the open: a thread in its last moments is often gone by
     * the time the open and the mapping are done, and its clock then reads nothing (a helper's
     * 100 concurrent threads: 1-5 neither sampled nor counted, when it was read after). A
     * thread gone before this read has no event either, and is counted as one that never had. */
    uint64_t cpu = thread_cpu_ns(tid);
    struct perf_event_attr a;
    fill_attr(&a);
    int fd = (int)sys_perf_event_open(&a, (pid_t)tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0) {
        return; /* ESRCH: it exited meanwhile; the probe at the start said whether we may */
    }
    /* Loupe's share of the fd numbers (base/ownfd.h) is full: this thread is not sampled, and
     * counted so (loupe_sampling_threads_missed), rather than taking a number the program
     * would have had. */
    fd = loupe__fd_adopt(fd, "a thread's perf event");
    if (fd < 0) {
        s_skipped++;
        return;
    }
    size_t len = (s_pages + 1) * 4096u;
    void *base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (base == MAP_FAILED) {
        loupe__fd_close(fd);
        s_skipped++;
        return;
    }
    /* the state after the open: a thread switched out now has a switch-in as its first record */
    uint64_t opened = mono_ns();
    /* running from the open on, until a first switch-in says it was not */
    s_tasks[s_ntasks++] =
        (task){fd, 1, tid, base, len, 0, 0, opened, task_state_kind(tid), 0, opened};
    if (grow_fail((void **)&s_names, &s_capnames, s_nnames + 1, sizeof *s_names) == 0) {
        s_names[s_nnames].tid = tid;
        memcpy(s_names[s_nnames].comm, comm, 16);
        s_names[s_nnames].cpu_at_open = cpu;
        s_nnames++;
    }
}

/* /proc/self/task, kept open at a number of loupe's and read again at each scan (an opendir
 * every 50 ms took the program's lowest free number for a moment: base/ownfd.h). */
static int s_taskdir = -1;

static int scan_one(uint64_t tid, void *arg) {
    (void)arg;
    if (tid == s_sampler_tid || tid == loupe__keeper_tid()) {
        return 0; /* loupe's own threads: never sampled, no track in the program's trace */
    }
    size_t i = 0;
    while (i < s_ntasks && s_tasks[i].tid != tid) {
        i++;
    }
    if (i == s_ntasks) {
        open_task(tid);
        return 0;
    }
    s_tasks[i].seen = 1;
    if (s_tasks[i].fd >= 0 && !loupe__fd_ok(s_tasks[i].fd)) {
        /* the program closed or replaced it: its ring stays mapped (the mapping keeps the
         * event, perf_mmap()) and is still drained; the number is the program's */
        loupe__fd_close(s_tasks[i].fd);
        s_tasks[i].fd = -1;
    }
    return 0;
}

static void scan(void) {
    for (size_t i = 0; i < s_ntasks; i++) {
        s_tasks[i].seen = 0;
    }
    if (loupe__each_task(&s_taskdir, scan_one, NULL) != 0) {
        return; /* /proc unreadable: this scan closes nothing */
    }
    /* Threads that exited: their last records, then their slot goes (a tid the kernel reuses
     * later is another thread, opened anew). */
    for (size_t i = 0; i < s_ntasks;) {
        if (!s_tasks[i].seen) {
            close_task(&s_tasks[i]);
            s_tasks[i] = s_tasks[--s_ntasks];
        } else {
            i++;
        }
    }
}

/* At the stop: a thread still switched out (blocked across the stop) has no switch-in to end
 * its interval; it ends at the stop (the collector cuts it there). A thread that exited since
 * the last scan is left alone: its last switch-out was its death, not a wait. */
static void end_open_offs(void) {
    for (size_t i = 0; i < s_ntasks; i++) {
        task *tk = &s_tasks[i];
        char path[64];
        drain(tk);
        snprintf(path, sizeof path, "/proc/self/task/%llu", (unsigned long long)tk->tid);
        if (tk->out_since != 0 && access(path, F_OK) == 0) {
            add_off(tk->tid, tk->out_since, UINT64_MAX, tk->out_kind);
            tk->out_since = 0;
        }
    }
}

static int cmp_tclk(const void *a, const void *b) {
    uint64_t x = ((const tclk *)a)->tid, y = ((const tclk *)b)->tid;
    return x < y ? -1 : x > y;
}

/* A thread's on-CPU time between its switch records falls short of its task-clock count by the
 * kernel's own switch path: the switch-out record is written at the start of
 * perf_event_task_sched_out() and the switch-in one at the end of perf_event_task_sched_in()
 * (kernel/events/core.c), and the context's time (which task-clock counts) runs on around them
 * (the hrtimer of the sampling event is stopped and restarted there, a VM exit each on a VM).
 * That is a few microseconds a switch: nothing for a thread that runs in long slices, half the
 * CPU time of one that blocks 10,000 times a second (docs/record.md). The shortfall is given
 * back where it happened: each of the thread's off-CPU intervals loses an equal share of it, half
 * at each end, so that the thread's on-CPU time is its task-clock count. Called once, after the
 * last close; the intervals spooled meanwhile (a death's recovery) keep the raw figures. */
static void correct_offs(void) {
    if (s_ntclk == 0 || s_noffs == 0) {
        return;
    }
    qsort(s_tclk, s_ntclk, sizeof *s_tclk, cmp_tclk);
    uint64_t *n = calloc(s_ntclk, sizeof *n);
    if (n == NULL) {
        return; /* the raw intervals stay: on-CPU a little short */
    }
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < s_noffs; i++) {
            raw_off *o = &s_offs[i];
            tclk key = {o->tid, 0, 0};
            const tclk *t = bsearch(&key, s_tclk, s_ntclk, sizeof *s_tclk, cmp_tclk);
            if (t == NULL) {
                continue;
            }
            size_t k = (size_t)(t - s_tclk);
            if (pass == 0) {
                n[k]++;
                continue;
            }
            uint64_t d = t->count > t->seen ? (t->count - t->seen) / n[k] : 0;
            uint64_t len = o->end == UINT64_MAX ? UINT64_MAX : o->end - o->start;
            d = d < len ? d : len;
            if (o->end == UINT64_MAX) {
                o->start += d / 2; /* blocked across the stop: only its start is a switch */
            } else {
                o->start += d / 2;
                o->end -= d - d / 2;
            }
        }
    }
    free(n);
}

static void scan_locked(void) {
    pthread_mutex_lock(&s_table_lock);
    scan();
    pthread_mutex_unlock(&s_table_lock);
}

/* The samples, intervals and thread names drained since the last call, and the module map when
 * it changed, to the spool: one batch per wake of the sampler thread, so that a program that
 * dies loses at most what its rings held and one poll's worth. The sampler thread only. */
static void spool_new(void) {
    if (!loupe__sspool_on()) {
        return;
    }
    /* Under the table's lock, which fork()'s prepare handler takes: dl_iterate_phdr holds the
     * loader's lock while it lists the modules, and a fork at that moment left the child's copy
     * of that lock held by a thread the child does not have, so the child's own sampler (its
     * first module list) and its exit's stop waited for ever (a fork child under the preloaded
     * ASan runtime, slow enough to hit the window: 3 of 6 hung, gdb: the child's sampler in
     * ___pthread_mutex_lock of _rtld_global, its main thread joining it). */
    pthread_mutex_lock(&s_table_lock);
    loupe__sspool_modules();
    pthread_mutex_unlock(&s_table_lock);
    for (; s_sp_names < s_nnames; s_sp_names++) {
        loupe__sspool_name(s_names[s_sp_names].tid, s_names[s_sp_names].comm);
    }
    for (; s_sp_samples < s_nsamples; s_sp_samples++) {
        const raw_sample *rs = &s_samples[s_sp_samples];
        loupe__sspool_sample(rs->ts, rs->tid, rs->cpu, s_pcs + rs->first, rs->n);
    }
    for (; s_sp_offs < s_noffs; s_sp_offs++) {
        const raw_off *o = &s_offs[s_sp_offs];
        loupe__sspool_off(o->tid, o->start, o->end, o->kind);
    }
    loupe__sspool_lost(s_lost + (s_oom ? 1 : 0));
    loupe__sspool_flush();
}

static void *sampler_main(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    (void)pthread_setname_np(pthread_self(), "loupe-sampler");
    pthread_mutex_lock(&s_work_lock); /* given up only in poll(2) and at the end */
    /* An fd table of its own (base/ownfd.h), with the wake-up and the sample spool in it: the
     * threads' perf events, /proc and libdw's files take none of the program's numbers nor its
     * RLIMIT_NOFILE room, and the program's close of every fd cannot reach them. Where the
     * kernel has no CLOSE_RANGE_UNSHARE it stays on the shared table, every fd adopted. */
    if (!s_private) {
        loupe__fd_close(s_taskdir); /* a last sampler's, on the shared table */
    }
    s_taskdir = -1; /* a last sampler's own table went with it */
    int keep[2] = {__atomic_load_n(&s_wake, __ATOMIC_ACQUIRE), loupe__sspool_fd()};
    s_private = loupe__fd_private_table(keep, 2) == 0;
    loupe__fd_loupe_thread(1); /* what libdw opens on it is loupe's */
    int wake = keep[0];        /* the private table's copy: the program cannot close it */
    __atomic_store_n(&s_sampler_tid, (uint64_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    /* The threads running now are sampled from the start on (the start waits for this scan):
     * a thread that blocks right after the start has its switch-out seen. */
    scan_locked();
    struct timespec began;
    clock_gettime(CLOCK_MONOTONIC, &began);
    s_began = (uint64_t)began.tv_sec * 1000000000u + (uint64_t)began.tv_nsec;
    sem_post(&s_ready);
    struct pollfd *pf = calloc(MAX_TASKS + 1, sizeof *pf);
    uint64_t last_scan = 0;
    while (!__atomic_load_n(&s_quit, __ATOMIC_ACQUIRE)) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        uint64_t now = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
        if (now - last_scan >= SCAN_NS) {
            scan_locked();
            last_scan = now;
        }
        for (size_t i = 0; i < s_ntasks; i++) {
            drain(&s_tasks[i]);
            /* a fork waiting for the lock goes between two threads' drains, not after all */
            pthread_mutex_unlock(&s_work_lock);
            pthread_mutex_lock(&s_work_lock);
        }
        if (pf == NULL) {
            pthread_mutex_unlock(&s_work_lock);
            struct timespec d = {0, 2000000};
            nanosleep(&d, NULL);
            pthread_mutex_lock(&s_work_lock);
            continue;
        }
        pf[0] = (struct pollfd){.fd = s_private ? wake : (wake = wake_fd()), .events = POLLIN};
        for (size_t i = 0; i < s_ntasks; i++) {
            /* poll(2) skips a negative fd: on the shared table, one the program took over (a
             * table read here, the identity at each scan); a private table's are the sampler's
             * own (and in no table of loupe's numbers: a check there said "not loupe's", and
             * the rings were drained only every 50 ms, losing DWARF samples under load) */
            int fd = s_tasks[i].fd;
            pf[i + 1] = (struct pollfd){.fd = s_private || loupe__fd_is_own(fd) ? fd : -1,
                                        .events = POLLIN};
        }
        nfds_t npf = s_ntasks + 1;
        pthread_mutex_unlock(&s_work_lock);
        (void)poll(pf, npf, (int)(SCAN_NS / 1000000u));
        pthread_mutex_lock(&s_work_lock);
        if ((pf[0].revents & POLLIN) && loupe__fd_ok(pf[0].fd)) {
            uint64_t n;
            ssize_t r = read(pf[0].fd, &n, sizeof n); /* resets the count (EFD_NONBLOCK) */
            (void)r;
            last_scan = 0; /* a thread registered: find it now */
        }
        /* A thread that exited: its event's poll says EPOLLHUP (Linux kernel/events/core.c,
         * perf_poll() once the event is in PERF_EVENT_STATE_EXIT). Closed now, not at the next
         * timed scan: its fd would make every poll return at once until then. pf[i + 1] is
         * s_tasks[i] as the poll saw the table; a slot removed here takes the last one's place,
         * so the walk goes from the end. */
        pthread_mutex_lock(&s_table_lock);
        for (size_t i = s_ntasks; i-- > 0;) {
            if (pf[i + 1].fd >= 0 && (pf[i + 1].revents & (POLLHUP | POLLERR))) {
                close_task(&s_tasks[i]);
                s_tasks[i] = s_tasks[--s_ntasks];
                pf[i + 1] = pf[s_ntasks + 1];
            }
        }
        pthread_mutex_unlock(&s_table_lock);
        spool_new();
    }
    free(pf);
    end_open_offs();
    pthread_mutex_lock(&s_table_lock);
    for (size_t i = 0; i < s_ntasks; i++) {
        close_task(&s_tasks[i]);
    }
    s_ntasks = 0;
    correct_offs();
    pthread_mutex_unlock(&s_table_lock);
#ifdef LOUPE_HAVE_LIBDW
    if (u_dwfl != NULL) {
        dwfl_end(u_dwfl);
        u_dwfl = NULL;
    }
#endif
    pthread_mutex_unlock(&s_work_lock);
    return NULL;
}

static void free_raw(void) {
    free(s_samples);
    free(s_pcs);
    free(s_offs);
    free(s_names);
    free(s_born);
    free(s_tclk);
    s_tclk = NULL;
    s_ntclk = s_captclk = 0;
    free(s_own);
    s_samples = NULL;
    s_pcs = NULL;
    s_offs = NULL;
    s_names = NULL;
    s_born = s_own = NULL;
    s_nsamples = s_capsamples = s_npcs = s_cappcs = s_noffs = s_capoffs = 0;
    s_nnames = s_capnames = 0;
    s_nborn = s_capborn = s_nown = s_capown = 0;
    s_lost = s_skipped = 0;
    s_oom = 0;
    s_sp_samples = s_sp_offs = s_sp_names = 0;
}

/* The spool's file: beside the region file (`<region>.samples`) when the region is one (a
 * process of the tree under `loupe record`: /dev/shm/loupe-regions-XXXXXX/<pid>.<ppid>.<n>),
 * else (the tree's root, whose region is loupe record's memfd) dir/loupe-samples-<pid>.bin.
 * 0, or -1 when there is nowhere to put it. */
static int spool_path(const char *dir, char *out, size_t size) {
    FILE *f = fopen("/proc/self/maps", "re");
    char line[4400];
    int found = 0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        unsigned long long lo;
        int at = 0;
        if (sscanf(line, "%llx-%*x %*s %*x %*s %*u %n", &lo, &at) >= 1 && at > 0 &&
            lo == (unsigned long long)(uintptr_t)loupe__region) {
            char *path = line + at;
            path[strcspn(path, "\n")] = 0;
            found = path[0] == '/' && strncmp(path, "/memfd:", 7) != 0 &&
                    strstr(path, " (deleted)") == NULL &&
                    (size_t)snprintf(out, size, "%s.samples", path) < size;
            break;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    if (found) {
        return 0;
    }
    if (dir == NULL || dir[0] == 0) {
        return -1;
    }
    return (size_t)snprintf(out, size, "%s/loupe-samples-%ld.bin", dir, (long)getpid()) < size ? 0
                                                                                               : -1;
}

/* Opens the session's spool when a recorder can recover the region after a death (it is
 * shared with `loupe record`) and notes its path in the region's header (recover.c reads it). */
static void spool_open(const char *dir) {
    loupe__region_hdr *h = LOUPE__HDR;
    char path[sizeof h->samples_path];
    if (h == NULL || !loupe__region_shared() || spool_path(dir, path, sizeof path) != 0) {
        return;
    }
    if (loupe__sspool_open(path, (uint64_t)getpid(), s_origin, s_hz, s_stacks, s_note) != 0) {
        fprintf(stderr,
                "loupe: cannot spool CPU samples to %s: %s; samples are kept until the stop, "
                "and a death loses them\n",
                path, strerror(errno));
        return;
    }
    memcpy(h->samples_path, path, sizeof path);
}

/* A clean stop (or a discard): the samples are in memory, the spool has nothing to add. */
static void spool_remove(void) {
    if (loupe__sspool_on()) {
        if (LOUPE__HDR != NULL) {
            memset(LOUPE__HDR->samples_path, 0, sizeof LOUPE__HDR->samples_path);
        }
        loupe__sspool_remove();
    }
}

static const char *stacks_name(int stacks) {
#ifdef LOUPE_HAVE_LIBDW
    if (stacks == LOUPE__STACKS_DWARF) {
        return "dwarf stacks";
    }
#endif
    return stacks == LOUPE__STACKS_NONE ? "no stacks" : "frame-pointer stacks";
}

int loupe__sample_start(uint32_t hz, int stacks, uint64_t origin_mono_ns, const char *spool_dir) {
    pthread_mutex_lock(&s_lock);
    spool_remove(); /* a session that never stopped (a fork child's): not this one's */
    free_raw();
    s_began = 0;
    if (hz == 0) {
        snprintf(s_note, sizeof s_note, "off");
        pthread_mutex_unlock(&s_lock);
        return -1;
    }
    /* Above the kernel's limit: sample at the limit and say so once, as `perf record -F` does
     * ("Maximum frequency rate (N Hz) exceeded, throttling from H Hz to N Hz"), rather than
     * failing with EINVAL and no samples at all. */
    uint32_t max = read_max_sample_rate();
    if (max != 0 && hz > max) {
        fprintf(stderr,
                "loupe: sampling at %u Hz, not %u: that is kernel.perf_event_max_sample_rate "
                "(raise it with sysctl -w kernel.perf_event_max_sample_rate=%u)\n",
                max, hz, hz);
        hz = max;
    }
    s_hz = hz;
    s_stacks = stacks;
    s_origin = origin_mono_ns;
    s_pid = (uint64_t)getpid();
    s_preempt_bit = kernel_marks_preempt();
    s_pages = s_stacks == LOUPE__STACKS_DWARF ? 128 : 32;
    const char *pg = getenv("LOUPE_SAMPLE_RING_PAGES"); /* tests: a tiny ring loses samples */
    if (pg != NULL && atoi(pg) > 0) {
        size_t v = 1;
        while (v * 2 <= (size_t)atoi(pg)) {
            v *= 2;
        }
        s_pages = v;
    }
    /* A probe on the calling thread: says now, once, whether the kernel lets us. */
    struct perf_event_attr a;
    s_kernel = 1;
    fill_attr(&a);
    int fd = (int)sys_perf_event_open(&a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0 && (errno == EACCES || errno == EPERM) && !a.exclude_kernel) {
        s_kernel = 0; /* perf_event_paranoid 2 without CAP_PERFMON: user-mode samples only */
        fill_attr(&a);
        fd = (int)sys_perf_event_open(&a, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
    }
    if (fd < 0) {
        set_unavailable(errno);
        pthread_mutex_unlock(&s_lock);
        return -1;
    }
    close(fd);
    __atomic_store_n(&s_sampler_tid, 0, __ATOMIC_RELEASE);
    int wk = wake_fd();
    if (wk >= 0) {
        uint64_t n;
        ssize_t r = read(wk, &n, sizeof n); /* a count left from the last session */
        (void)r;
    }
    __atomic_store_n(&s_quit, 0, __ATOMIC_RELEASE);
    snprintf(s_note, sizeof s_note, "%u Hz task-clock, %s", hz, stacks_name(stacks));
    spool_open(spool_dir);
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 1024 * 1024); /* libdw's unwinder recurses a little */
    (void)sem_init(&s_ready, 0, 0);
    int rc = pthread_create(&s_thread, &at, sampler_main, NULL);
    pthread_attr_destroy(&at);
    while (rc == 0 && sem_wait(&s_ready) != 0) {
        /* EINTR: a signal of the program's */
    }
    if (rc == 0 && s_private) {
        loupe__sspool_shared_close(); /* the sampler's own table holds it now */
    }
    if (rc != 0) {
        spool_remove();
        snprintf(s_note, sizeof s_note, "unavailable: no sampler thread (%s)", strerror(rc));
        fprintf(stderr, "loupe: CPU sampling is unavailable: no sampler thread (%s)\n",
                strerror(rc));
        pthread_mutex_unlock(&s_lock);
        return -1;
    }
    s_running = 1;
    __atomic_store_n(&s_born_on, 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&s_lock);
    return 0;
}

void loupe__sample_stop(void) {
    pthread_mutex_lock(&s_lock);
    if (s_running) {
        __atomic_store_n(&s_born_on, 0, __ATOMIC_RELEASE);
        __atomic_store_n(&s_quit, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        int wk = __atomic_load_n(&s_wake, __ATOMIC_ACQUIRE);
        ssize_t w = loupe__fd_ok(wk) ? write(wk, &one, sizeof one) : 0;
        (void)w; /* without one, the poll's 50 ms timeout ends the wait */
        pthread_join(s_thread, NULL);
        s_running = 0;
    }
    pthread_mutex_unlock(&s_lock);
}

void loupe__sample_thread_born(void) {
    if (!__atomic_load_n(&s_born_on, __ATOMIC_ACQUIRE)) {
        return;
    }
    int fd = __atomic_load_n(&s_wake, __ATOMIC_ACQUIRE), saved = errno;
    uint64_t one = 1;
    /* never 8 bytes into a file of the program's at the number: the timed scan finds the
     * thread within 50 ms instead */
    ssize_t w = loupe__fd_ok(fd) ? write(fd, &one, sizeof one) : 0;
    (void)w;
    errno = saved; /* registration may run in a signal handler */
}

int loupe__sample_watching(uint64_t tid) {
    int found = 0;
    pthread_mutex_lock(&s_table_lock);
    for (size_t i = 0; i < s_ntasks && !found; i++) {
        found = s_tasks[i].tid == tid;
    }
    pthread_mutex_unlock(&s_table_lock);
    return found;
}

void loupe__sample_fork_prepare(void) {
    pthread_mutex_lock(&s_work_lock);
    pthread_mutex_lock(&s_table_lock);
}

void loupe__sample_fork_parent(void) {
    pthread_mutex_unlock(&s_table_lock);
    pthread_mutex_unlock(&s_work_lock);
}

void loupe__sample_forget_in_child(void) {
    /* The sampler thread is the parent's: nothing to join. Its events measure the parent's
     * threads, and an fd the child kept would keep each alive (and its ring) for as long as
     * the child lives, so they are closed; the table is whole (the prepare handler held its
     * lock). The rings are not unmapped: perf_mmap() marks them VM_DONTCOPY (Linux
     * kernel/events/core.c), so the child has no such mapping, and an munmap of that range
     * could only hit what the child maps there later. The samples copied so far are the
     * parent's (their memory is left, not freed: the sampler may have been growing it). */
    if (!s_private) {
        /* shared-table numbers, adopted: closed when still loupe's, never the child's own */
        for (size_t i = 0; i < s_ntasks; i++) {
            loupe__fd_close(s_tasks[i].fd);
        }
        loupe__fd_close(s_taskdir); /* the parent's /proc/self/task */
    } /* else they were numbers of the parent's sampler's own table, not of this one's */
    s_taskdir = -1;
    s_private = 0;
    s_ntasks = 0;
    __atomic_store_n(&s_born_on, 0, __ATOMIC_RELEASE);
    if (s_wake >= 0) {
        /* shared with the parent: its sampler's wakes are not the child's */
        loupe__fd_close(s_wake);
        __atomic_store_n(&s_wake, -1, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&s_table_lock); /* taken by this thread in the prepare handler */
    pthread_mutex_unlock(&s_work_lock);
    pthread_mutex_init(&s_lock, NULL);
    loupe__sspool_forget(); /* the parent's file (the region's header is the parent's too) */
    s_running = 0;
    s_ntasks = 0;
    s_samples = NULL;
    s_pcs = NULL;
    s_offs = NULL;
    s_names = NULL;
    s_born = s_own = NULL;
    s_tclk = NULL;
    free_raw();
    snprintf(s_note, sizeof s_note, "off");
}

void loupe__sample_discard(void) {
    pthread_mutex_lock(&s_lock);
    spool_remove();
    free_raw();
    pthread_mutex_unlock(&s_lock);
}

int loupe__sample_inject(uint64_t origin_mono_ns, uint64_t tid, uint64_t ts, uint32_t cpu,
                         const uint64_t *pcs, uint32_t n) {
    pthread_mutex_lock(&s_lock);
    int rc = 0;
    s_origin = origin_mono_ns;
    if (n > MAX_DEPTH || grow_fail((void **)&s_pcs, &s_cappcs, s_npcs + n, 8) ||
        grow_fail((void **)&s_samples, &s_capsamples, s_nsamples + 1, sizeof *s_samples)) {
        rc = -1;
    } else {
        s_samples[s_nsamples++] = (raw_sample){ts, (uint32_t)tid, cpu, (uint32_t)s_npcs, n};
        if (n != 0) { /* a sample without frames: s_pcs may still be NULL (C11 7.24.1p2) */
            memcpy(s_pcs + s_npcs, pcs, n * 8);
        }
        s_npcs += n;
    }
    pthread_mutex_unlock(&s_lock);
    return rc;
}

void loupe__sample_restore(uint32_t hz, uint64_t origin_mono_ns, const char *note) {
    pthread_mutex_lock(&s_lock);
    free_raw();
    s_hz = hz;
    s_origin = origin_mono_ns;
    snprintf(s_note, sizeof s_note, "%s", note);
    pthread_mutex_unlock(&s_lock);
}

int loupe__sample_inject_off(uint64_t tid, uint64_t start, uint64_t end, unsigned kind) {
    pthread_mutex_lock(&s_lock);
    size_t before = s_noffs;
    add_off(tid, start, end, kind);
    int rc = s_noffs > before ? 0 : -1;
    pthread_mutex_unlock(&s_lock);
    return rc;
}

int loupe__sample_inject_name(uint64_t tid, const char comm[16]) {
    pthread_mutex_lock(&s_lock);
    int rc = grow_fail((void **)&s_names, &s_capnames, s_nnames + 1, sizeof *s_names);
    if (rc == 0) {
        s_names[s_nnames].tid = tid;
        memcpy(s_names[s_nnames].comm, comm, 16);
        s_names[s_nnames].comm[15] = 0;
        s_names[s_nnames].cpu_at_open = 0;
        s_nnames++;
    }
    pthread_mutex_unlock(&s_lock);
    return rc;
}

void loupe__sample_inject_lost(uint64_t lost) {
    pthread_mutex_lock(&s_lock);
    s_lost += lost;
    pthread_mutex_unlock(&s_lock);
}

const char *loupe__sample_note(void) {
    return s_note;
}

/* ---- symbolisation at the stop ---- */
typedef struct pc_entry {
    uint64_t pc;       /* key (with bit 63 flipped for return addresses: looked up at pc - 1) */
    uint32_t first, n; /* frames in the frame list (innermost first) */
    int used;
} pc_entry;

typedef struct symtab {
    pc_entry *slots;
    size_t cap, count;
    uint32_t *frames;
    size_t nframes, capframes;
#ifdef LOUPE_HAVE_LIBDW
    Dwfl *dwfl;
    struct modsyms *mods; /* per module: its function symbols sorted by address */
    size_t nmods, capmods;
    struct cuindex *cus; /* per compile unit: its subprograms sorted by address */
    size_t ncus, capcus;
#endif
} symtab;

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static int push_frame(loupe__mb *mb, symtab *st, const loupe_frame *f) {
    uint32_t i = loupe__mb_frame(mb, f);
    if (i == UINT32_MAX ||
        loupe__grow((void **)&st->frames, &st->capframes, st->nframes + 1, 4) != 0) {
        return -1;
    }
    st->frames[st->nframes++] = i;
    return 0;
}

#ifdef LOUPE_HAVE_LIBDW
static const char *call_file(Dwarf_Die *cu, Dwarf_Die *die) {
    Dwarf_Attribute at;
    Dwarf_Word idx;
    Dwarf_Files *files;
    size_t nfiles;
    if (dwarf_formudata(dwarf_attr(die, DW_AT_call_file, &at), &idx) != 0 ||
        dwarf_getsrcfiles(cu, &files, &nfiles) != 0 || idx >= nfiles) {
        return "";
    }
    const char *f = dwarf_filesrc(files, idx, NULL, NULL);
    return f ? f : "";
}

static uint32_t call_line(Dwarf_Die *die) {
    Dwarf_Attribute at;
    Dwarf_Word v;
    return dwarf_formudata(dwarf_attr(die, DW_AT_call_line, &at), &v) == 0 ? (uint32_t)v : 0;
}

/* Function symbols of one module, sorted by address, looked up by binary search.
 * dwfl_module_addrinfo() walks the whole symbol table on every call (elfutils
 * libdwfl/dwfl_module_addrsym.c: one pass over every symbol, twice when the first finds only a
 * sizeless one): with 20000 distinct addresses that was 1.4 ms per address, 29 s for the
 * bench's 100 k samples. */
typedef struct msym {
    uint64_t lo, hi; /* [lo, hi); hi == lo: a sizeless symbol, up to the next one */
    const char *name;
    int rank; /* at one address: GLOBAL (0) before WEAK (1) before LOCAL (2), as addrsym */
} msym;

/* One address range of a compile unit (CU addresses), for modules without .debug_aranges. */
typedef struct curange {
    uint64_t lo, hi;
    Dwarf_Die cu;
} curange;

typedef struct modsyms {
    Dwfl_Module *mod;
    msym *syms;
    size_t n;
    curange *cur; /* every CU's ranges by lo, made at the first address libdw finds no CU for */
    size_t ncur, capcur;
    int cur_made;
} modsyms;

static int cmp_msym(const void *a, const void *b) {
    const msym *x = a, *y = b;
    if (x->lo != y->lo) {
        return x->lo < y->lo ? -1 : 1;
    }
    return x->rank - y->rank;
}

static modsyms *module_syms(symtab *st, Dwfl_Module *mod) {
    for (size_t i = 0; i < st->nmods; i++) {
        if (st->mods[i].mod == mod) {
            return &st->mods[i];
        }
    }
    if (loupe__grow((void **)&st->mods, &st->capmods, st->nmods + 1, sizeof *st->mods) != 0) {
        return NULL;
    }
    modsyms *ms = &st->mods[st->nmods++];
    *ms = (modsyms){mod, NULL, 0, NULL, 0, 0, 0};
    int count = dwfl_module_getsymtab(mod);
    if (count <= 0 || (ms->syms = calloc((size_t)count, sizeof *ms->syms)) == NULL) {
        return ms; /* no symbols (or no memory for them): unnamed, as addrinfo would say */
    }
    for (int i = 1; i < count; i++) {
        GElf_Sym sym;
        GElf_Addr addr;
        GElf_Word shndx;
        const char *name = dwfl_module_getsym_info(mod, i, &sym, &addr, &shndx, NULL, NULL);
        int type = GELF_ST_TYPE(sym.st_info), bind = GELF_ST_BIND(sym.st_info);
        if (name == NULL || name[0] == 0 || shndx == SHN_UNDEF ||
            (type != STT_FUNC && type != STT_GNU_IFUNC)) {
            continue;
        }
        ms->syms[ms->n++] = (msym){addr, addr + sym.st_size, name,
                                   bind == STB_GLOBAL ? 0 : (bind == STB_WEAK ? 1 : 2)};
    }
    qsort(ms->syms, ms->n, sizeof *ms->syms, cmp_msym);
    size_t w = 0; /* one symbol per address: the best ranked */
    for (size_t i = 0; i < ms->n; i++) {
        if (w == 0 || ms->syms[w - 1].lo != ms->syms[i].lo) {
            ms->syms[w++] = ms->syms[i];
        }
    }
    ms->n = w;
    return ms;
}

/* The function holding a (an address in mod's address space, bias applied), or NULL. */
static const char *function_at(symtab *st, Dwfl_Module *mod, uint64_t a) {
    modsyms *ms = module_syms(st, mod);
    if (ms == NULL || ms->n == 0 || a < ms->syms[0].lo) {
        return NULL;
    }
    size_t lo = 0, hi = ms->n; /* the last symbol starting at or before a */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (ms->syms[mid].lo <= a) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    const msym *s = &ms->syms[lo];
    return a < s->hi || s->hi == s->lo ? s->name : NULL;
}

static int cmp_curange(const void *a, const void *b) {
    const curange *x = a, *y = b;
    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* The CU holding a (an address in mod's address space) and *bias, or NULL. libdw finds the CU
 * through .debug_aranges, which clang does not write (elfutils 0.188, Debian 12, does not make
 * them up from the CUs): there every CU's own ranges are listed once per module instead, or
 * clang-built code would get no lines and no inlined frames. */
static Dwarf_Die *cu_at(symtab *st, Dwfl_Module *mod, uint64_t a, Dwarf_Addr *bias) {
    Dwarf_Die *cu = dwfl_module_addrdie(mod, a, bias);
    modsyms *ms = cu == NULL ? module_syms(st, mod) : NULL;
    if (ms == NULL) {
        return cu;
    }
    Dwarf *dw = dwfl_module_getdwarf(mod, bias);
    if (dw == NULL) {
        return NULL;
    }
    if (!ms->cur_made) {
        ms->cur_made = 1;
        Dwarf_CU *u = NULL;
        Dwarf_Die d;
        uint8_t type;
        while (dwarf_get_units(dw, u, &u, NULL, &type, &d, NULL) == 0) {
            Dwarf_Addr base, lo, hi;
            for (ptrdiff_t o = 0; (type == DW_UT_compile || type == DW_UT_partial) &&
                                  (o = dwarf_ranges(&d, o, &base, &lo, &hi)) > 0;) {
                if (hi > lo && loupe__grow((void **)&ms->cur, &ms->capcur, ms->ncur + 1,
                                           sizeof *ms->cur) == 0) {
                    ms->cur[ms->ncur++] = (curange){lo, hi, d};
                }
            }
        }
        qsort(ms->cur, ms->ncur, sizeof *ms->cur, cmp_curange);
    }
    uint64_t x = a - *bias;
    size_t lo = 0, hi = ms->ncur; /* past the last range starting at or before x */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (ms->cur[mid].lo <= x) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo > 0 && x < ms->cur[lo - 1].hi ? &ms->cur[lo - 1].cu : NULL;
}

/* The subprograms of one compile unit, sorted by address: dwarf_getscopes() walks the whole CU
 * for every address (elfutils libdw/dwarf_getscopes.c, __libdw_visit_scopes from the CU DIE),
 * which was 54% of the bench's symbolisation; this walks each CU's top level once. */
typedef struct fnrange {
    uint64_t lo, hi; /* CU addresses (the module's bias taken off) */
    Dwarf_Die die;
} fnrange;

typedef struct cuindex {
    const void *cu; /* the CU DIE's Dwarf_Die.addr: one per CU for the Dwfl's life */
    fnrange *r;
    size_t n, cap;
} cuindex;

static int cmp_fnrange(const void *a, const void *b) {
    const fnrange *x = a, *y = b;
    return x->lo < y->lo ? -1 : (x->lo > y->lo);
}

/* Adds the ranges of the subprograms among parent's children (and inside namespaces: C++). */
static void index_subprograms(cuindex *ci, Dwarf_Die *parent, int level) {
    Dwarf_Die c;
    if (level > 8 || dwarf_child(parent, &c) != 0) {
        return;
    }
    do {
        int tag = dwarf_tag(&c);
        if (tag == DW_TAG_namespace) {
            index_subprograms(ci, &c, level + 1);
        } else if (tag == DW_TAG_subprogram) {
            Dwarf_Addr base, lo, hi;
            ptrdiff_t off = 0;
            while ((off = dwarf_ranges(&c, off, &base, &lo, &hi)) > 0) {
                if (hi > lo &&
                    loupe__grow((void **)&ci->r, &ci->cap, ci->n + 1, sizeof *ci->r) == 0) {
                    ci->r[ci->n++] = (fnrange){lo, hi, c};
                }
            }
        }
    } while (dwarf_siblingof(&c, &c) == 0);
}

/* The subprogram DIE whose code holds a (a CU address); 1 when found. */
static int cu_function(symtab *st, Dwarf_Die *cu, uint64_t a, Dwarf_Die *out) {
    cuindex *ci = NULL;
    for (size_t i = 0; i < st->ncus; i++) {
        if (st->cus[i].cu == cu->addr) {
            ci = &st->cus[i];
            break;
        }
    }
    if (ci == NULL) {
        if (loupe__grow((void **)&st->cus, &st->capcus, st->ncus + 1, sizeof *st->cus) != 0) {
            return 0;
        }
        ci = &st->cus[st->ncus++];
        *ci = (cuindex){cu->addr, NULL, 0, 0};
        index_subprograms(ci, cu, 0);
        qsort(ci->r, ci->n, sizeof *ci->r, cmp_fnrange);
    }
    size_t lo = 0, hi = ci->n; /* the last range starting at or before a */
    if (hi == 0 || a < ci->r[0].lo) {
        return 0;
    }
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (ci->r[mid].lo <= a) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    if (a >= ci->r[lo].hi) {
        return 0;
    }
    *out = ci->r[lo].die;
    return 1;
}

/* The DW_TAG_inlined_subroutine scopes below parent that hold a, outermost first, from
 * out[n]; the new count. Lexical blocks are looked into; a block without addresses of its own
 * may still hold inlined calls that have some. */
static int inline_scopes(Dwarf_Die *parent, uint64_t a, Dwarf_Die *out, int n) {
    Dwarf_Die c;
    if (n >= MAX_INLINE || dwarf_child(parent, &c) != 0) {
        return n;
    }
    do {
        int tag = dwarf_tag(&c);
        if (tag != DW_TAG_inlined_subroutine && tag != DW_TAG_lexical_block) {
            continue;
        }
        int has = dwarf_haspc(&c, a);
        if (has > 0) {
            if (tag == DW_TAG_inlined_subroutine) {
                out[n++] = c;
            }
            return inline_scopes(&c, a, out, n);
        }
        if (has == 0 && tag == DW_TAG_lexical_block && !dwarf_hasattr(&c, DW_AT_low_pc) &&
            !dwarf_hasattr(&c, DW_AT_ranges)) {
            int m = inline_scopes(&c, a, out, n);
            if (m > n) {
                return m;
            }
        }
    } while (dwarf_siblingof(&c, &c) == 0);
    return n;
}

/* The frames of one address: the inlined calls innermost first, then the function. */
static int symbolize_pc(loupe__mb *mb, symtab *st, uint64_t pc, int ret) {
    uint64_t a = ret ? pc - 1 : pc; /* a return address belongs to the call before it */
    loupe_frame f = {"", "", 0, 0, "", 0};
    Dwfl_Module *mod = st->dwfl ? dwfl_addrmodule(st->dwfl, a) : NULL;
    if (mod == NULL) {
        f.module_offset = pc;
        return push_frame(mb, st, &f);
    }
    Dwarf_Addr low = 0;
    const char *mainfile = NULL;
    const char *mname = dwfl_module_info(mod, NULL, &low, NULL, NULL, NULL, &mainfile, NULL);
    f.module = loupe__mb_str(mb, mainfile ? mainfile : (mname ? mname : ""));
    f.module_offset = pc - low;
    const char *fn = function_at(st, mod, a);
    char unnamed[320];
    if (fn == NULL) {
        /* No symbol (a stripped library's static function: zlib's deflate internals in Debian's
         * libz): the unwind tables still say where the function starts, so every address in it
         * gets one name, <module>+0x<start>, instead of a row per address. */
        Dwarf_Addr cbias = 0;
        Dwarf_CFI *cfi = dwfl_module_eh_cfi(mod, &cbias);
        if (cfi == NULL) {
            cfi = dwfl_module_dwarf_cfi(mod, &cbias);
        }
        Dwarf_Frame *fr = NULL;
        Dwarf_Addr start = 0, end = 0;
        if (cfi != NULL && dwarf_cfi_addrframe(cfi, a - cbias, &fr) == 0 &&
            dwarf_frame_info(fr, &start, &end, NULL) >= 0 && start + cbias >= low) {
            /* dwarf_frame_info() gives the CFI row's range (where one rule set holds: it
             * changes at every push and pop), not the FDE's; the FDE's start comes from the
             * .eh_frame_hdr table, and lies at or before the row's. */
            uint64_t mstart = start + cbias, fde = 0;
            GElf_Addr ebias = 0;
            Elf *elf = dwfl_module_getelf(mod, &ebias);
            if (elf != NULL && loupe__eh_frame_start(elf, a - ebias, &fde) == 0 &&
                fde + ebias <= mstart && fde + ebias >= low) {
                mstart = fde + ebias;
            }
            const char *path = mainfile ? mainfile : (mname ? mname : "?");
            const char *base = strrchr(path, '/');
            snprintf(unnamed, sizeof unnamed, "%.256s+0x%llx", base ? base + 1 : path,
                     (unsigned long long)(mstart - low));
            fn = unnamed;
        }
        free(fr);
    }
    char *dm = fn != NULL ? loupe__demangle(fn) : NULL;
    f.function = loupe__mb_str(mb, dm ? dm : (fn ? fn : ""));
    free(dm);
    Dwarf_Addr bias = 0;
    Dwarf_Die *cu = cu_at(st, mod, a, &bias);
    Dwfl_Line *ln = dwfl_module_getsrc(mod, a);
    int lineno = 0;
    const char *src = ln ? dwfl_lineinfo(ln, NULL, &lineno, NULL, NULL, NULL) : NULL;
    Dwarf_Line *dl = ln == NULL && cu != NULL ? dwarf_getsrc_die(cu, a - bias) : NULL;
    if (dl != NULL) { /* a CU libdw's own lookup does not find (no .debug_aranges) */
        src = dwarf_linesrc(dl, NULL, NULL);
        if (dwarf_lineno(dl, &lineno) != 0) {
            lineno = 0;
        }
    }
    f.file = loupe__mb_str(mb, src ? src : "");
    f.line = lineno > 0 ? (uint32_t)lineno : 0;
    Dwarf_Die sub, scopes[MAX_INLINE];
    int ns = 0;
    if (cu != NULL && cu_function(st, cu, a - bias, &sub)) {
        ns = inline_scopes(&sub, a - bias, scopes, 0);
    }
    /* eu-addr2line -i's walk: each DW_TAG_inlined_subroutine, innermost first, is a frame whose
     * caller's position is its DW_AT_call_file / DW_AT_call_line. */
    for (int i = ns - 1; i >= 0; i--) {
        const char *in = dwarf_diename(&scopes[i]);
        loupe_frame g = f;
        g.function = loupe__mb_str(mb, in ? in : "");
        g.inlined = 1;
        if (push_frame(mb, st, &g) != 0) {
            return -1;
        }
        f.file = loupe__mb_str(mb, call_file(cu, &scopes[i]));
        f.line = call_line(&scopes[i]);
    }
    return push_frame(mb, st, &f);
}
#else
static int symbolize_pc(loupe__mb *mb, symtab *st, uint64_t pc, int ret) {
    (void)ret;
    loupe_frame f = {"", "", 0, 0, "", pc};
    return push_frame(mb, st, &f);
}
#endif

static pc_entry *lookup(loupe__mb *mb, symtab *st, uint64_t pc, int ret) {
    uint64_t key = ret ? pc ^ (1ull << 63) : pc;
    if ((st->count + 1) * 2 > st->cap) {
        size_t ncap = st->cap ? st->cap * 2 : 4096;
        pc_entry *n = calloc(ncap, sizeof *n);
        if (n == NULL) {
            return NULL;
        }
        for (size_t i = 0; i < st->cap; i++) {
            if (st->slots[i].used) {
                size_t j = mix(st->slots[i].pc) & (ncap - 1);
                while (n[j].used) {
                    j = (j + 1) & (ncap - 1);
                }
                n[j] = st->slots[i];
            }
        }
        free(st->slots);
        st->slots = n;
        st->cap = ncap;
    }
    size_t j = mix(key) & (st->cap - 1);
    while (st->slots[j].used) {
        if (st->slots[j].pc == key) {
            return &st->slots[j];
        }
        j = (j + 1) & (st->cap - 1);
    }
    uint32_t first = (uint32_t)st->nframes;
    if (symbolize_pc(mb, st, pc, ret) != 0) {
        return NULL;
    }
    st->slots[j] = (pc_entry){key, first, (uint32_t)(st->nframes - first), 1};
    st->count++;
    return &st->slots[j];
}

/* Callers' stacks seen before: a sample's pcs after the first (its callers, the same from one
 * sample to the next of a loop while the sampled address moves) -> their stack node. A repeated
 * context costs one hash and one compare instead of a builder lookup per frame (each a likely
 * cache miss: those were half of the bench's 1 M-sample collect). */
typedef struct ctx_slot {
    uint64_t hash;
    uint32_t sample; /* index + 1 of the sample whose callers these are; 0 = empty */
    uint32_t node;
} ctx_slot;

typedef struct callers {
    ctx_slot *slots;
    size_t cap, count;
} callers;

static uint64_t hash_pcs(const uint64_t *p, uint32_t n) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
    for (uint32_t i = 0; i < n; i++) {
        h = mix(h ^ p[i]) + i;
    }
    return h | 1;
}

/* The stack node of the callers of rs (its pcs after the first), made when not seen before. */
static int callers_node(loupe__mb *mb, symtab *st, callers *cx, const raw_sample *rs,
                        uint32_t *node) {
    const uint64_t *p = s_pcs + rs->first + 1;
    uint32_t n = rs->n - 1;
    uint64_t h = hash_pcs(p, n);
    if ((cx->count + 1) * 2 > cx->cap) {
        size_t ncap = cx->cap ? cx->cap * 2 : 4096;
        ctx_slot *ns = calloc(ncap, sizeof *ns);
        if (ns == NULL) {
            return -1;
        }
        for (size_t i = 0; i < cx->cap; i++) {
            if (cx->slots[i].sample != 0) {
                size_t j = cx->slots[i].hash & (ncap - 1);
                while (ns[j].sample != 0) {
                    j = (j + 1) & (ncap - 1);
                }
                ns[j] = cx->slots[i];
            }
        }
        free(cx->slots);
        cx->slots = ns;
        cx->cap = ncap;
    }
    size_t j = h & (cx->cap - 1);
    for (; cx->slots[j].sample != 0; j = (j + 1) & (cx->cap - 1)) {
        const raw_sample *o = &s_samples[cx->slots[j].sample - 1];
        if (cx->slots[j].hash == h && o->n == rs->n &&
            memcmp(s_pcs + o->first + 1, p, n * sizeof *p) == 0) {
            *node = cx->slots[j].node;
            return 0;
        }
    }
    uint32_t chain[4 * MAX_DEPTH];
    size_t c = 0;
    for (uint32_t k = 0; k < n; k++) {
        pc_entry *e = lookup(mb, st, p[k], 1);
        if (e == NULL) {
            return -1;
        }
        for (uint32_t q = 0; q < e->n && c < sizeof chain / sizeof chain[0]; q++) {
            chain[c++] = st->frames[e->first + q];
        }
    }
    *node = loupe__mb_stack_of(mb, chain, c);
    if (*node == UINT32_MAX) {
        return -1;
    }
    cx->slots[j] = (ctx_slot){h, (uint32_t)(rs - s_samples) + 1, *node};
    cx->count++;
    return 0;
}

/* The leaf stack node of one sample: its callers' node, then the sampled address's frames
 * (the inlined calls innermost last on the way down). */
static int sample_stack(loupe__mb *mb, symtab *st, callers *cx, const raw_sample *rs,
                        uint32_t *leaf) {
    uint32_t node = UINT32_MAX;
    if (rs->n > 1 && callers_node(mb, st, cx, rs, &node) != 0) {
        return -1;
    }
    pc_entry *e = lookup(mb, st, s_pcs[rs->first], 0);
    if (e == NULL) {
        return -1;
    }
    for (uint32_t q = e->n; q-- > 0;) {
        node = loupe__mb_stack(mb, node, st->frames[e->first + q]);
        if (node == UINT32_MAX) {
            return -1;
        }
    }
    *leaf = node;
    return 0;
}

static int cmp_tid(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* (tid, thread index) pairs of the collector's host threads, sorted by tid; a tid the kernel
 * reused keeps its last thread. */
typedef struct tid_map {
    uint64_t tid, index;
} tid_map;

static size_t thread_of(loupe__mb *mb, tid_map **map, size_t *n, size_t *cap, uint64_t tid) {
    tid_map key = {tid, 0};
    tid_map *hit = *n ? bsearch(&key, *map, *n, sizeof key, cmp_tid) : NULL;
    if (hit != NULL) {
        return (size_t)hit->index;
    }
    size_t t = loupe__mb_thread_add(mb, tid);
    if (t == SIZE_MAX) {
        return SIZE_MAX;
    }
    for (size_t i = 0; i < s_nnames; i++) {
        if (s_names[i].tid == tid) {
            loupe__mb_thread_name(mb, t, s_names[i].comm);
        }
    }
    if (loupe__grow((void **)map, cap, *n + 1, sizeof key) != 0) {
        return SIZE_MAX;
    }
    size_t i = *n;
    while (i > 0 && (*map)[i - 1].tid > tid) {
        (*map)[i] = (*map)[i - 1];
        i--;
    }
    (*map)[i] = (tid_map){tid, t};
    (*n)++;
    return t;
}

/* Whether tid is in the sorted list v[0 .. n). */
static int has_tid(const uint64_t *v, size_t n, uint64_t tid) {
    return n > 0 && bsearch(&tid, v, n, sizeof *v, cmp_tid) != NULL;
}

/* The part [*a, *b) of an off-CPU interval inside the session (s_origin to end_mono); 0 when
 * none is (correct_offs() may have shrunk an interval to nothing). One rule for the trace's
 * intervals and for the missed count, which must agree on which threads the trace shows. */
static int off_in_session(const raw_off *o, uint64_t end_mono, uint64_t *a, uint64_t *b) {
    *a = o->start < s_origin ? s_origin : o->start;
    *b = o->end > end_mono ? end_mono : o->end;
    return *b > *a;
}

/* The metadata "loupe_sampling_threads_missed": the threads whose CPU time in the session has no
 * samples and that the trace cannot show otherwise. Three kinds: a thread that recorded (the
 * collector's host threads of process 0, map) but never had a perf event (it ended before the
 * sampler found it, or MAX_TASKS was reached); a thread born while sampling (its
 * PERF_RECORD_FORK) that recorded nothing and is in the trace neither by a sample nor by an
 * off-CPU interval (it lived and died between two scans); and a thread born while sampling whose
 * event opened after at least one sampling period of its CPU time (the sampler woke late) and
 * that then caught no sample: its CPU time is in the trace nowhere (23 of 100 threads of 3 ms
 * under ASan in CI were this kind, counted by neither of the first two rules). A thread cloned
 * by a thread that itself had no event is not known to loupe at all. loupe's own threads (never
 * sampled) are not counted. */
/* The threads with a sample, the opened ones' CPU time at the open (both sorted by tid) and the
 * sampling period, for opened_late(). */
typedef struct late_ctx {
    const uint64_t *sampled;
    size_t nsampled;
    const named *names;
    size_t nnames;
    uint64_t period;
} late_ctx;

/* The entry of a thread that had an event, or NULL. */
static const named *find_named(const late_ctx *c, uint64_t tid) {
    named key = {.tid = tid};
    return c->nnames > 0 ? bsearch(&key, c->names, c->nnames, sizeof *c->names, cmp_tid) : NULL;
}

/* A thread born while sampling (s_born, sorted), with no sample, that had a period or more of
 * CPU time (before its event opened, and counted by the event after): none of it is in the
 * trace's samples. */
static int opened_late(const late_ctx *c, uint64_t tid) {
    if (has_tid(c->sampled, c->nsampled, tid) || !has_tid(s_born, s_nborn, tid)) {
        return 0;
    }
    const named *n = find_named(c, tid);
    if (n == NULL) {
        return 0;
    }
    /* and its CPU time after the open, its event's count at the close (s_tclk, sorted): a
     * thread run in slices shorter than the period among 100 others on 2 CPUs got none of its
     * 1.5 ms there sampled (1 of 100 in a helper's run) */
    tclk tk = {tid, 0, 0};
    const tclk *t = s_ntclk > 0 ? bsearch(&tk, s_tclk, s_ntclk, sizeof *s_tclk, cmp_tclk) : NULL;
    return n->cpu_at_open + (t != NULL ? t->count : 0) >= c->period;
}

static int put_missed(loupe__mb *mb, const tid_map *map, size_t nmap, uint64_t end_mono) {
    const loupe_model *m = loupe__mb_model(mb);
    size_t nseen = 0;
    uint64_t missed = 0, *seen = malloc((s_nsamples + s_noffs + 1) * sizeof *seen);
    if (seen == NULL) {
        return -1;
    }
    for (size_t k = 0; k < s_nsamples; k++) {
        if (s_samples[k].ts >= s_origin && s_samples[k].ts <= end_mono) {
            seen[nseen++] = s_samples[k].tid;
        }
    }
    /* seen[0, nsampled): the threads with a sample; then those with an off-CPU interval */
    size_t nsampled = nseen;
    qsort(seen, nsampled, sizeof *seen, cmp_tid);
    uint64_t *sampled = malloc((nsampled + 1) * sizeof *sampled);
    /* every tid that had an event, by tid (named starts with it) */
    named *names = malloc((s_nnames + 1) * sizeof *names);
    if (sampled == NULL || names == NULL) {
        free(seen);
        free(sampled);
        free(names);
        return -1;
    }
    memcpy(sampled, seen, nsampled * sizeof *seen);
    if (s_nnames > 0) {
        memcpy(names, s_names, s_nnames * sizeof *names);
        qsort(names, s_nnames, sizeof *names, cmp_tid);
    }
    if (s_ntclk > 1) {
        qsort(s_tclk, s_ntclk, sizeof *s_tclk, cmp_tclk);
    }
    late_ctx lc = {sampled, nsampled, names, s_nnames, s_hz != 0 ? 1000000000u / s_hz : UINT64_MAX};
    for (size_t k = 0; k < s_noffs; k++) {
        uint64_t a, b;
        if (off_in_session(&s_offs[k], end_mono, &a, &b)) {
            seen[nseen++] = s_offs[k].tid;
        }
    }
    qsort(seen, nseen, sizeof *seen, cmp_tid);
    if (s_nown > 1) {
        qsort(s_own, s_nown, sizeof *s_own, cmp_tid);
    }
    if (s_nborn > 1) { /* qsort's base may not be NULL (C11 7.1.4), even for 0 elements */
        qsort(s_born, s_nborn, sizeof *s_born, cmp_tid);
    }
    for (size_t i = 0; i < nmap; i++) {
        const loupe_model_thread *t = &m->threads[map[i].index];
        int mine = map[i].tid == s_sampler_tid || strncmp(t->name, "loupe-", 6) == 0;
        missed += !mine && (find_named(&lc, map[i].tid) == NULL || opened_late(&lc, map[i].tid));
    }
    for (size_t i = 0; i < s_nborn; i++) {
        uint64_t tid = s_born[i];
        tid_map key = {tid, 0};
        if ((i > 0 && s_born[i - 1] == tid) || tid == s_sampler_tid || tid == loupe__keeper_tid() ||
            has_tid(s_own, s_nown, tid) ||
            (nmap > 0 && bsearch(&key, map, nmap, sizeof key, cmp_tid) != NULL)) {
            continue; /* counted once; loupe's own; one that recorded is judged above */
        }
        missed += !has_tid(seen, nseen, tid) || opened_late(&lc, tid);
    }
    free(seen);
    free(sampled);
    free(names);
    char v[24];
    snprintf(v, sizeof v, "%llu", (unsigned long long)missed);
    return loupe__mb_metadata(mb, "loupe_sampling_threads_missed", v);
}

#ifdef LOUPE_HAVE_LIBDW
static int collect(loupe__mb *mb, uint64_t stop_ns, Dwfl *given, int use_given);

/* The symbolisation opens the modules' ELF and debug files through libdw: loupe's files, even on
 * the program's thread that stops (base/ownfd.h). */
static int collect_as_loupe(loupe__mb *mb, uint64_t stop_ns, Dwfl *given, int use_given) {
    int was = loupe__fd_is_loupe_thread();
    loupe__fd_loupe_thread(1);
    int rc = collect(mb, stop_ns, given, use_given);
    loupe__fd_loupe_thread(was);
    return rc;
}

int loupe__sample_collect(loupe__mb *mb, uint64_t stop_ns) {
    return collect_as_loupe(mb, stop_ns, NULL, 0);
}

#ifdef LOUPE_HAVE_LIBDW
typedef struct ids_buf {
    char *s;
    size_t n, cap;
    int oom;
} ids_buf;

static int add_build_id(Dwfl_Module *mod, void **ud, const char *name, Dwarf_Addr start,
                        void *arg) {
    (void)ud;
    (void)start;
    ids_buf *b = arg;
    const unsigned char *bits = NULL;
    GElf_Addr vaddr;
    Dwarf_Addr bias;
    const char *mainfile = NULL;
    (void)dwfl_module_info(mod, NULL, NULL, NULL, NULL, NULL, &mainfile, NULL);
    const char *path = mainfile != NULL ? mainfile : name;
    if (path == NULL || path[0] != '/' || strchr(path, '\n') != NULL) {
        return DWARF_CB_OK;
    }
    int len = dwfl_module_build_id(mod, &bits, &vaddr);
    if (len <= 0 && dwfl_module_getelf(mod, &bias) != NULL) {
        len = dwfl_module_build_id(mod, &bits, &vaddr);
    }
    if (len <= 0 || len > 64) {
        return DWARF_CB_OK;
    }
    size_t need = b->n + (size_t)len * 2 + strlen(path) + 3;
    if (loupe__grow((void **)&b->s, &b->cap, need, 1) != 0) {
        b->oom = 1;
        return DWARF_CB_ABORT;
    }
    for (int k = 0; k < len; k++) {
        b->n += (size_t)snprintf(b->s + b->n, b->cap - b->n, "%02x", bits[k]);
    }
    b->n += (size_t)snprintf(b->s + b->n, b->cap - b->n, " %s\n", path);
    return DWARF_CB_OK;
}

/* The metadata "loupe_module_build_ids": a line "<hex build-id> <path>" per module of the
 * process that has one, as the run saw it, so that a sample profile written later can tell a
 * module rebuilt since from the one that ran (src/export/fdo.c). 0 or -1 (out of memory). */
static int put_build_ids(loupe__mb *mb, Dwfl *dwfl) {
    ids_buf b = {0};
    (void)dwfl_getmodules(dwfl, add_build_id, &b, 0);
    int rc = b.oom ? -1 : 0;
    if (rc == 0 && b.n != 0) {
        b.s[b.n - 1] = 0; /* the last newline */
        rc = loupe__mb_metadata(mb, "loupe_module_build_ids", b.s) != 0 ? -1 : 0;
    }
    free(b.s);
    return rc;
}
#endif

int loupe__sample_collect_with(loupe__mb *mb, uint64_t stop_ns, void *dwfl) {
    return collect_as_loupe(mb, stop_ns, dwfl, 1);
}

static int collect(loupe__mb *mb, uint64_t stop_ns, Dwfl *given, int use_given) {
#else
int loupe__sample_collect(loupe__mb *mb, uint64_t stop_ns) {
    return loupe__sample_collect_with(mb, stop_ns, NULL);
}

int loupe__sample_collect_with(loupe__mb *mb, uint64_t stop_ns, void *dwfl) {
    (void)dwfl;
#endif
    pthread_mutex_lock(&s_lock);
    int rc = 0;
    const loupe_model *m = loupe__mb_model(mb);
    tid_map *map = NULL;
    size_t nmap = 0, capmap = 0;
    symtab st = {0};
    callers cx = {0};
    if (loupe__mb_metadata(mb, "loupe_sampling", s_note) != 0) {
        rc = -1;
        goto out;
    }
    if (s_began != 0) {
        /* when the sampler's first scan had every thread's event open, in ns from the
         * session's start: the zones before it have no samples (session.c's open_session) */
        char v[32];
        snprintf(v, sizeof v, "%llu",
                 (unsigned long long)(s_began > s_origin ? s_began - s_origin : 0));
        if (loupe__mb_metadata(mb, "loupe_sampling_began_ns", v) != 0) {
            rc = -1;
            goto out;
        }
    }
    for (size_t i = 0; i < m->thread_count; i++) {
        const loupe_model_thread *t = &m->threads[i];
        if (t->kind == LOUPE_TRACK_THREAD && t->process == 0) {
            if (loupe__grow((void **)&map, &capmap, nmap + 1, sizeof *map) != 0) {
                rc = -1;
                goto out;
            }
            map[nmap++] = (tid_map){t->tid, i};
        }
    }
    /* a stable sort keeps the later of two equal tids last: it wins below */
    for (size_t i = 1; i < nmap; i++) {
        tid_map v = map[i];
        size_t j = i;
        while (j > 0 && map[j - 1].tid > v.tid) {
            map[j] = map[j - 1];
            j--;
        }
        map[j] = v;
    }
    size_t w = 0;
    for (size_t i = 0; i < nmap; i++) {
        if (w > 0 && map[w - 1].tid == map[i].tid) {
            map[w - 1] = map[i];
        } else {
            map[w++] = map[i];
        }
    }
    nmap = w;
    if (s_hz != 0 && strncmp(s_note, "unavailable", 11) != 0 && strcmp(s_note, "off") != 0 &&
        put_missed(mb, map, nmap, s_origin + stop_ns) != 0) {
        rc = -1;
        goto out;
    }
#ifdef LOUPE_HAVE_LIBDW
    st.dwfl = use_given ? given : (s_nsamples ? proc_dwfl() : NULL);
#endif
    uint64_t end_mono = s_origin + stop_ns;
    for (size_t i = 0; i < s_nsamples; i++) {
        const raw_sample *rs = &s_samples[i];
        if (rs->ts < s_origin || rs->ts > end_mono) {
            continue; /* before the start or after the stop: not the session's */
        }
        uint32_t leaf = UINT32_MAX;
        if (rs->n > 0 && sample_stack(mb, &st, &cx, rs, &leaf) != 0) {
            rc = -1;
            goto out;
        }
        size_t t = thread_of(mb, &map, &nmap, &capmap, rs->tid);
        if (t == SIZE_MAX || loupe__mb_sample(mb, t, rs->ts - s_origin, leaf, rs->cpu) != 0) {
            rc = -1;
            goto out;
        }
    }
    for (size_t i = 0; i < s_noffs; i++) {
        uint64_t a, b;
        if (!off_in_session(&s_offs[i], end_mono, &a, &b)) {
            continue;
        }
        size_t t = thread_of(mb, &map, &nmap, &capmap, s_offs[i].tid);
        if (t == SIZE_MAX ||
            loupe__mb_off_cpu_kind(mb, t, a - s_origin, b - a, s_offs[i].kind) != 0) {
            rc = -1;
            goto out;
        }
    }
#ifdef LOUPE_HAVE_LIBDW
    if (st.dwfl != NULL && s_nsamples != 0 && put_build_ids(mb, st.dwfl) != 0) {
        rc = -1;
        goto out;
    }
#endif
    loupe_model *mm = loupe__mb_model(mb);
    mm->samples_lost += s_lost + (s_oom ? 1 : 0);
    if (s_hz != 0 && strncmp(s_note, "unavailable", 11) != 0 && strcmp(s_note, "off") != 0) {
        mm->sample_period_ns = 1000000000u / s_hz;
    }
out:
#ifdef LOUPE_HAVE_LIBDW
    if (st.dwfl != NULL) {
        dwfl_end(st.dwfl);
    }
#endif
    free(st.slots);
    free(st.frames);
    free(cx.slots);
#ifdef LOUPE_HAVE_LIBDW
    for (size_t i = 0; i < st.nmods; i++) {
        free(st.mods[i].syms);
        free(st.mods[i].cur);
    }
    free(st.mods);
    for (size_t i = 0; i < st.ncus; i++) {
        free(st.cus[i].r);
    }
    free(st.cus);
#endif
    free(map);
    free_raw();
    spool_remove();
    pthread_mutex_unlock(&s_lock);
    return rc;
}

uint64_t loupe__sample_tid(void) {
    return __atomic_load_n(&s_sampler_tid, __ATOMIC_ACQUIRE);
}
