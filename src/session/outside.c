/* outside.c: loupe_outside_open() / loupe_outside_finish() (loupe/outside.h): CPU sampling of a
 * process from outside it, for the programs `loupe record`'s preload cannot enter (a statically
 * linked one has no loader to preload it; a set-user-ID one runs in secure-execution mode).
 *
 * Design: the events are perf record's own for a workload it forks (tools/perf/builtin-record.c
 * with evlist__prepare_workload(): the child waits on a pipe, the events are opened on its pid
 * with enable_on_exec, then the child execs): one task-clock event per CPU with pid = the child
 * and inherit = 1, so that every thread and forked child of it samples into the per-CPU ring of
 * the CPU it runs on (an inherited event cannot be mmap'd with cpu = -1: the kernel's perf_mmap
 * refuses it, which is why src/record/sample.c opens one event per thread instead). A per-task
 * event bound to a CPU needs no more than the default perf_event_paranoid 2 (exclude_kernel).
 * MMAP2 records (mmap = 1: executable mappings only) say which files were mapped where; COMM
 * records name the threads. A drainer thread copies the samples into src/record/sample.c's
 * sample store (loupe__sample_inject(), the same one a session's sampler thread fills), and the
 * finish symbolises them with sample.c's collector against a Dwfl of those files
 * (loupe__sample_collect_with()): the process is gone by then, the files are not.
 *
 * Stacks are frame-pointer callchains (PERF_SAMPLE_CALLCHAIN): a static binary built without
 * frame pointers gives leaf-only stacks. The DWARF unwinding sample.c does on the live process
 * needs its memory maps at unwind time, which a process that may exit before the next drain
 * cannot give.
 *
 * Limits: one address space is symbolised (the first executable's mappings, and those of every
 * process sharing its pid's files); a child that execs another program has its samples in the
 * trace, symbolised against the files it mapped only when they are the same. */
#include "base/error.h"
#include "base/fs.h"
#include "export/writers.h"
#include "model/builder.h"
#include "model/merge.h"
#include "record/sample.h"
#include "record/sample_spool.h"
#include "session/session.h"

#include <loupe/outside.h>

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#ifdef LOUPE_HAVE_LIBDW
#include <elfutils/libdwfl.h>
#include <gelf.h>
#endif

#define RING_PAGES 64u /* 256 KiB of data per CPU: 20 ms of 999 Hz samples on 64 threads */
#define MAX_DEPTH 128  /* as sample.c's */
#define MAX_MAPS 4096

typedef struct ring {
    int fd;
    void *base;
} ring;

typedef loupe__map omap; /* record/sample_spool.h: the spool's recovery reads the same maps */

typedef struct ocomm {
    uint64_t tid;
    char comm[16];
} ocomm;

struct loupe_outside {
    int pid;
    uint32_t hz;
    uint64_t origin_mono, origin_unix;
    ring *rings;
    size_t nrings;
    size_t ring_len;
    int wake;
    int quit;
    int thread_on;
    pthread_t thread;
    omap *maps;
    size_t nmaps, capmaps;
    ocomm *comms;
    size_t ncomms, capcomms;
    uint64_t samples, lost;
    int oom;
    unsigned char rec[65536]; /* a record that wraps around the ring's end */
};

static long sys_perf_event_open(struct perf_event_attr *a, pid_t pid, int cpu, int group,
                                unsigned long flags) {
    /* as sample.c's: tests simulate a kernel that denies perf events */
    const char *deny = getenv("LOUPE_TEST_PERF_DENY");
    if (deny != NULL && deny[0] == '1') {
        errno = EACCES;
        return -1;
    }
    return syscall(SYS_perf_event_open, a, pid, cpu, group, flags);
}

static uint64_t clock_ns(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int grow(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) {
        return 0;
    }
    size_t n = *cap ? *cap * 2 : 64;
    while (n < need) {
        n *= 2;
    }
    void *q = realloc(*p, n * elem);
    if (q == NULL) {
        return -1;
    }
    *p = q;
    *cap = n;
    return 0;
}

/* PERF_RECORD_SAMPLE with IP | TID | TIME | CPU | CALLCHAIN, in that order (perf_event_open(2),
 * "PERF_RECORD_SAMPLE"): ip, pid, tid, time, cpu, res, nr, ips[nr]. */
static void on_sample(loupe_outside *s, const unsigned char *p, const unsigned char *end) {
    if (end - p < 40) {
        return;
    }
    uint64_t ip, ts, nr;
    uint32_t pt[2], cpu[2];
    memcpy(&ip, p, 8);
    memcpy(pt, p + 8, 8);
    memcpy(&ts, p + 16, 8);
    memcpy(cpu, p + 24, 8);
    memcpy(&nr, p + 32, 8);
    p += 40;
    if (nr > (uint64_t)(end - p) / 8) {
        return;
    }
    uint64_t pcs[MAX_DEPTH];
    uint32_t n = 0;
    for (uint64_t i = 0; i < nr && n < MAX_DEPTH; i++) {
        uint64_t a;
        memcpy(&a, p + i * 8, 8);
        if (a >= (uint64_t)PERF_CONTEXT_MAX) {
            continue; /* PERF_CONTEXT_USER and the other markers */
        }
        pcs[n++] = a;
    }
    if (n == 0) {
        pcs[n++] = ip;
    }
    if (loupe__sample_inject(s->origin_mono, pt[1], ts, cpu[0], pcs, n) != 0) {
        s->oom = 1;
        s->lost++;
        return;
    }
    s->samples++;
}

static void on_comm(loupe_outside *s, const unsigned char *p, const unsigned char *end) {
    if (end - p < 9) {
        return;
    }
    uint32_t pt[2];
    memcpy(pt, p, 8);
    const unsigned char *name = p + 8;
    size_t len = 0;
    while (name + len < end && name[len] != 0 && len < 15) {
        len++;
    }
    for (size_t i = 0; i < s->ncomms; i++) {
        if (s->comms[i].tid == pt[1]) {
            memset(s->comms[i].comm, 0, sizeof s->comms[i].comm);
            memcpy(s->comms[i].comm, name, len);
            return;
        }
    }
    if (grow((void **)&s->comms, &s->capcomms, s->ncomms + 1, sizeof *s->comms) != 0) {
        s->oom = 1;
        return;
    }
    ocomm *c = &s->comms[s->ncomms++];
    memset(c, 0, sizeof *c);
    c->tid = pt[1];
    memcpy(c->comm, name, len);
}

/* PERF_RECORD_MMAP2: pid, tid, addr, len, pgoff, maj, min, ino, ino_generation, prot, flags,
 * filename (perf_event_open(2)); the build-id form (PERF_RECORD_MISC_MMAP_BUILD_ID) has the same
 * size in place of maj .. ino_generation, so the filename is at the same offset. */
static void on_mmap2(loupe_outside *s, const unsigned char *p, const unsigned char *end) {
    if (end - p < 64 + 1 || s->nmaps >= MAX_MAPS) {
        return;
    }
    uint64_t v[3];
    memcpy(v, p + 8, 24);
    const char *name = (const char *)p + 64;
    size_t len = strnlen(name, (size_t)(end - (const unsigned char *)name));
    if (len == 0 || name[0] != '/') {
        return; /* [vdso], [stack], anonymous JIT code: no file to read */
    }
    for (size_t i = 0; i < s->nmaps; i++) {
        if (s->maps[i].start == v[0] && s->maps[i].len == v[1] &&
            strncmp(s->maps[i].file, name, len) == 0 && s->maps[i].file[len] == 0) {
            return; /* the same mapping seen on another CPU's ring (a forked child's) */
        }
    }
    char *f = malloc(len + 1);
    if (f == NULL || grow((void **)&s->maps, &s->capmaps, s->nmaps + 1, sizeof *s->maps) != 0) {
        free(f);
        s->oom = 1;
        return;
    }
    memcpy(f, name, len);
    f[len] = 0;
    s->maps[s->nmaps++] = (omap){.start = v[0], .len = v[1], .pgoff = v[2], .file = f};
}

static void on_record(loupe_outside *s, const unsigned char *rec, size_t size) {
    struct perf_event_header h;
    memcpy(&h, rec, sizeof h);
    const unsigned char *body = rec + sizeof h, *end = rec + size;
    switch (h.type) {
    case PERF_RECORD_SAMPLE:
        on_sample(s, body, end);
        break;
    case PERF_RECORD_COMM:
        on_comm(s, body, end);
        break;
    case PERF_RECORD_MMAP2:
        on_mmap2(s, body, end);
        break;
    case PERF_RECORD_LOST:
        if (size >= sizeof h + 16) {
            uint64_t lost;
            memcpy(&lost, body + 8, 8);
            s->lost += lost;
        }
        break;
    default:
        break; /* FORK, EXIT, THROTTLE: the samples carry their tids */
    }
}

static void on_ring_record(void *ctx, const unsigned char *rec, size_t size) {
    on_record(ctx, rec, size);
}

static void drain(loupe_outside *s, ring *r) {
    loupe__perf_ring_drain(r->base, s->rec, on_ring_record, s);
}

static void *drainer(void *arg) {
    loupe_outside *s = arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* the signals are the command's, not this thread's */
    struct pollfd *pf = calloc(s->nrings + 1, sizeof *pf);
    for (;;) {
        if (pf != NULL) {
            for (size_t i = 0; i < s->nrings; i++) {
                pf[i] = (struct pollfd){.fd = s->rings[i].fd, .events = POLLIN};
            }
            pf[s->nrings] = (struct pollfd){.fd = s->wake, .events = POLLIN};
            (void)poll(pf, (nfds_t)(s->nrings + 1), 10);
        } else {
            usleep(10000);
        }
        for (size_t i = 0; i < s->nrings; i++) {
            drain(s, &s->rings[i]);
        }
        if (__atomic_load_n(&s->quit, __ATOMIC_ACQUIRE)) {
            break;
        }
    }
    free(pf);
    return NULL;
}

static void close_rings(loupe_outside *s) {
    for (size_t i = 0; i < s->nrings; i++) {
        munmap(s->rings[i].base, s->ring_len);
        close(s->rings[i].fd);
    }
    s->nrings = 0;
}

static void free_sampler(loupe_outside *s) {
    if (s->thread_on) {
        __atomic_store_n(&s->quit, 1, __ATOMIC_RELEASE);
        uint64_t one = 1;
        (void)!write(s->wake, &one, sizeof one);
        pthread_join(s->thread, NULL);
    }
    close_rings(s);
    if (s->wake >= 0) {
        close(s->wake);
    }
    for (size_t i = 0; i < s->nmaps; i++) {
        free(s->maps[i].file);
    }
    free(s->maps);
    free(s->comms);
    free(s->rings);
    free(s);
}

/* The executable mappings and the name of a process that exec'd before its events were opened
 * (LOUPE_OUTSIDE_NOW): what its MMAP2 and COMM records would have said, as perf record
 * synthesises them for a running process (tools/perf/util/synthetic-events.c reads
 * /proc/<pid>/maps too). */
static void read_proc(loupe_outside *s) {
    char path[64], line[4096 + 128];
    snprintf(path, sizeof path, "/proc/%d/maps", s->pid);
    FILE *f = fopen(path, "r");
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        unsigned long long lo, hi, off;
        char perms[8];
        int at = 0;
        /* proc_pid_maps(5): address perms offset dev inode pathname */
        if (sscanf(line, "%llx-%llx %7s %llx %*s %*s %n", &lo, &hi, perms, &off, &at) < 4 ||
            perms[2] != 'x' || at <= 0 || line[at] != '/') {
            continue;
        }
        line[strcspn(line, "\n")] = 0;
        unsigned char body[64 + 4096 + 1];
        memset(body, 0, sizeof body);
        uint64_t v[3] = {lo, hi - lo, off};
        memcpy(body + 8, v, 24);
        size_t len = strnlen(line + at, 4096);
        memcpy(body + 64, line + at, len);
        on_mmap2(s, body, body + 64 + len + 1);
    }
    if (f != NULL) {
        fclose(f);
    }
    snprintf(path, sizeof path, "/proc/%d/comm", s->pid);
    f = fopen(path, "r");
    unsigned char c[8 + 17];
    memset(c, 0, sizeof c);
    if (f != NULL && fgets((char *)c + 8, 17, f) != NULL) {
        c[8 + strcspn((char *)c + 8, "\n")] = 0;
        uint32_t pt[2] = {(uint32_t)s->pid, (uint32_t)s->pid};
        memcpy(c, pt, 8);
        on_comm(s, c, c + sizeof c);
    }
    if (f != NULL) {
        fclose(f);
    }
}

int loupe_outside_open(int pid, uint32_t hz, unsigned flags, loupe_outside **out) {
    if (out != NULL) {
        *out = NULL;
    }
    if (pid <= 0 || hz > 100000 || out == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_outside_open: %s",
                          out == NULL ? "out is NULL"
                                      : (pid <= 0 ? "pid must be > 0" : "hz is above 100000"));
    }
    loupe_outside *s = calloc(1, sizeof *s);
    long ncpu = sysconf(_SC_NPROCESSORS_CONF);
    if (ncpu < 1) {
        ncpu = 1;
    }
    if (s == NULL || (s->rings = calloc((size_t)ncpu, sizeof *s->rings)) == NULL) {
        free(s);
        return loupe__err(LOUPE_ENOMEM, "loupe_outside_open: out of memory");
    }
    s->pid = pid;
    s->hz = hz ? hz : LOUPE_SAMPLING_RECORD_HZ;
    s->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->ring_len = (RING_PAGES + 1) * (size_t)sysconf(_SC_PAGESIZE);
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.size = sizeof a;
    a.type = PERF_TYPE_SOFTWARE;
    a.config = PERF_COUNT_SW_TASK_CLOCK; /* counts while a thread runs: on-CPU samples */
    a.freq = 1;
    a.sample_freq = s->hz;
    a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU |
                    PERF_SAMPLE_CALLCHAIN;
    a.exclude_kernel = 1; /* user stacks only: works at perf_event_paranoid 2 */
    a.exclude_hv = 1;
    a.exclude_callchain_kernel = 1;
    a.disabled = (flags & LOUPE_OUTSIDE_NOW) ? 0 : 1;
    a.enable_on_exec = (flags & LOUPE_OUTSIDE_NOW) ? 0 : 1;
    a.inherit = 1;
    a.mmap = 1;
    a.mmap2 = 1;
    a.comm = 1;
    a.comm_exec = 1;
    a.task = 1;
    a.sample_id_all = 1;
    a.use_clockid = 1;
    a.clockid = CLOCK_MONOTONIC;
    a.watermark = 1;
    a.wakeup_watermark = (uint32_t)(RING_PAGES * (size_t)sysconf(_SC_PAGESIZE) / 2);
    int first_err = 0;
    for (long cpu = 0; cpu < ncpu; cpu++) {
        long fd = sys_perf_event_open(&a, pid, (int)cpu, -1, PERF_FLAG_FD_CLOEXEC);
        if (fd < 0) {
            if (first_err == 0) {
                first_err = errno;
            }
            continue; /* an offline CPU (ENODEV) */
        }
        void *base = mmap(NULL, s->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
        if (base == MAP_FAILED) {
            if (first_err == 0) {
                first_err = errno;
            }
            close((int)fd);
            continue;
        }
        s->rings[s->nrings++] = (ring){(int)fd, base};
    }
    if (s->nrings == 0) {
        int e = first_err ? first_err : ENODEV;
        char par[32] = "?";
        FILE *f = fopen("/proc/sys/kernel/perf_event_paranoid", "r");
        if (f != NULL) {
            if (fgets(par, sizeof par, f) == NULL) {
                snprintf(par, sizeof par, "?");
            }
            par[strcspn(par, "\n")] = 0;
            fclose(f);
        }
        free_sampler(s);
        return loupe__err(LOUPE_EUNSUPPORTED,
                          "perf_event_open on pid %d: %s (errno %d; kernel.perf_event_paranoid is "
                          "%s)",
                          pid, strerror(e), e, par);
    }
    s->origin_mono = clock_ns(CLOCK_MONOTONIC);
    s->origin_unix = clock_ns(CLOCK_REALTIME);
    if (flags & LOUPE_OUTSIDE_NOW) {
        read_proc(s);
    }
    if (pthread_create(&s->thread, NULL, drainer, s) != 0) {
        free_sampler(s);
        return loupe__err(LOUPE_ENOMEM, "loupe_outside_open: cannot start the drainer thread");
    }
    s->thread_on = 1;
    *out = s;
    return 0;
}

#ifdef LOUPE_HAVE_LIBDW
static char *o_debuginfo_path;
int loupe__find_debuginfo_local(Dwfl_Module *mod, void **userdata, const char *modname,
                                GElf_Addr base, const char *file_name, const char *debuglink_file,
                                GElf_Word debuglink_crc, char **debuginfo_file_name);

static const Dwfl_Callbacks o_callbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = loupe__find_debuginfo_local, /* never debuginfod: sample.c */
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &o_debuginfo_path,
};

/* One module per mapped file, at its load bias: an ET_EXEC's addresses are its own (dwfl ignores
 * the base given), an ET_DYN's are biased by where its file offset 0 was mapped (start - pgoff
 * of its lowest mapping: the linkers lay PT_LOAD segments out with p_vaddr - p_offset the same
 * for the first one, 0). */
void *loupe__maps_dwfl(const loupe__map *maps, size_t nmaps) {
    Dwfl *d = dwfl_begin(&o_callbacks);
    if (d == NULL) {
        return NULL;
    }
    dwfl_report_begin(d);
    for (size_t i = 0; i < nmaps; i++) {
        int seen = 0;
        uint64_t bias = maps[i].start - maps[i].pgoff;
        for (size_t j = 0; j < nmaps; j++) {
            if (strcmp(maps[j].file, maps[i].file) == 0) {
                seen |= j < i;
                uint64_t b = maps[j].start - maps[j].pgoff;
                bias = b < bias ? b : bias;
            }
        }
        if (!seen) {
            (void)dwfl_report_elf(d, maps[i].file, maps[i].file, -1, bias, true);
        }
    }
    if (dwfl_report_end(d, NULL, NULL) != 0) {
        dwfl_end(d);
        return NULL;
    }
    return d;
}
#else
void *loupe__maps_dwfl(const loupe__map *maps, size_t nmaps) {
    (void)maps;
    (void)nmaps;
    return NULL;
}
#endif

int loupe_outside_finish(loupe_outside *s, const loupe_outside_options *o,
                         loupe_trace_result *res) {
    if (s == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_outside_finish: the sampler is NULL");
    }
    if (res != NULL) {
        if (loupe__result_check(res, "loupe_outside_finish") != 0) {
            free_sampler(s);
            return LOUPE_EINVALID;
        }
        loupe__result_reset(res);
    }
    /* the last drain: the process has ended, every record it made is in the rings */
    __atomic_store_n(&s->quit, 1, __ATOMIC_RELEASE);
    uint64_t one = 1;
    (void)!write(s->wake, &one, sizeof one);
    if (s->thread_on) {
        pthread_join(s->thread, NULL);
        s->thread_on = 0;
    }
    for (size_t i = 0; i < s->nrings; i++) {
        drain(s, &s->rings[i]);
    }
    close_rings(s);
    uint64_t stop_ns = clock_ns(CLOCK_MONOTONIC) - s->origin_mono;
    if (o == NULL) {
        loupe__sample_discard();
        free_sampler(s);
        return 0;
    }
    if (o->run_dir == NULL || o->run_dir[0] == 0) {
        loupe__sample_discard();
        free_sampler(s);
        return loupe__err(LOUPE_EINVALID, "loupe_outside_finish: options->run_dir is required");
    }
    char host[256], note[128];
    loupe__hostname(host, sizeof host);
    snprintf(note, sizeof note, "%u Hz task-clock, fp stacks, from outside the process", s->hz);
    int rc = 0;
    loupe_model *m = NULL;
    loupe__mb *mb = loupe__mb_new();
    int failed = mb == NULL;
    if (!failed) {
        loupe_model *mm = loupe__mb_model(mb);
        mm->pid = (uint64_t)s->pid;
        mm->host = loupe__mb_str(mb, host);
        mm->process_name = loupe__mb_str(mb, o->process_name != NULL ? o->process_name : "");
        mm->origin_unix_ns = s->origin_unix;
        mm->duration_ns = stop_ns;
        mm->clock = loupe__mb_str(mb, "monotonic");
        /* the threads the kernel named, first: sample.c's collector finds them by tid */
        for (size_t i = 0; i < s->ncomms && !failed; i++) {
            size_t t = loupe__mb_thread_add(mb, s->comms[i].tid);
            failed = t == SIZE_MAX;
            if (!failed) {
                loupe__mb_thread_name(mb, t, s->comms[i].comm);
            }
        }
    }
    failed = failed || loupe__session_process_meta(mb, o->parent_pid,
                                                   o->cmdline != NULL ? o->cmdline : "") != 0;
    void *dwfl = NULL;
#ifdef LOUPE_HAVE_LIBDW
    dwfl = failed ? NULL : loupe__maps_dwfl(s->maps, s->nmaps);
#endif
    if (failed) {
        loupe__sample_discard();
    } else {
        failed = loupe__sample_collect_with(mb, stop_ns, dwfl) != 0 ||
                 loupe__mb_metadata(mb, "loupe_sampling", note) != 0;
    }
    if (!failed) {
        loupe_model *mm = loupe__mb_model(mb);
        mm->sample_period_ns = 1000000000u / s->hz;
        mm->samples_lost += s->lost;
    }
    if (failed) {
        loupe__mb_abort(mb);
        free_sampler(s);
        return loupe__err(LOUPE_ENOMEM, "loupe_outside_finish: out of memory while collecting");
    }
    free_sampler(s);
    m = loupe__mb_finish(mb);
    if (m == NULL) {
        return loupe__err(LOUPE_ENOMEM, "loupe_outside_finish: out of memory while collecting");
    }
    loupe__model_lift_process_meta(m);
    rc = loupe__write_run_into(m, o->run_dir, o->file_prefix, loupe__formats(o->formats, 0), res);
    if (rc == 0 && loupe__result_fill(res, m) != 0) {
        rc = loupe__err(LOUPE_ENOMEM, "loupe_outside_finish: out of memory (the trace was "
                                      "written)");
    }
    loupe_model_free(m);
    return rc;
}
