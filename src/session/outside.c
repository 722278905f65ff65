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
 * Processes: the samples are kept here until the finish, which writes one trace per process of
 * the tree (the sample's pid), each symbolised against its own mappings and, for a child that
 * did not exec, the ones it inherited from the process that forked it (PERF_RECORD_FORK's
 * ppid; COMM records with PERF_RECORD_MISC_COMM_EXEC say which exec'd).
 *
 * Limits: a process that execs twice has the mappings of both images in one Dwfl. */
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

typedef struct omap {
    uint64_t start, len, pgoff;
    char *file;
    uint32_t pid; /* the process that mapped it (its forked children share it) */
    int fd;       /* file, opened at the finish to check return addresses: -2 not yet, -1 failed */
} omap;

typedef struct ocomm {
    uint64_t tid;
    uint32_t pid;
    char comm[16];
} ocomm;

/* A sample as drained, kept here until the finish: its stack is checked against the mappings
 * (which all have arrived by then) and it goes to its own process's trace. */
typedef struct osample {
    uint64_t ts;
    uint32_t pid, tid, cpu;
    uint32_t first, n; /* pcs[first .. first + n), innermost first */
} osample;

/* A process of the tree: its parent (PERF_RECORD_FORK) and whether it exec'd since (a COMM
 * record with PERF_RECORD_MISC_COMM_EXEC): a forked child that did not exec runs its parent's
 * mappings, which the kernel does not report again for it. */
typedef struct oproc {
    uint32_t pid, ppid, ptid; /* ptid: the parent's thread that forked it */
    int execd;
} oproc;

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
    osample *smp;
    size_t nsmp, capsmp;
    uint64_t *pcs;
    size_t npcs, cappcs;
    oproc *procs;
    size_t nprocs, capprocs;
    unsigned flags;
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
 * "PERF_RECORD_SAMPLE"): ip, pid, tid, time, cpu, res, nr, ips[nr]; without CALLCHAIN
 * (LOUPE_OUTSIDE_NO_STACKS) it ends at cpu, res. */
static void on_sample(loupe_outside *s, const unsigned char *p, const unsigned char *end) {
    int chain = !(s->flags & LOUPE_OUTSIDE_NO_STACKS);
    if (end - p < (chain ? 40 : 32)) {
        return;
    }
    uint64_t ip, ts, nr = 0;
    uint32_t pt[2], cpu[2];
    memcpy(&ip, p, 8);
    memcpy(pt, p + 8, 8);
    memcpy(&ts, p + 16, 8);
    memcpy(cpu, p + 24, 8);
    if (chain) {
        memcpy(&nr, p + 32, 8);
    }
    p += chain ? 40 : 32;
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
    if (grow((void **)&s->pcs, &s->cappcs, s->npcs + n, sizeof *s->pcs) != 0 ||
        grow((void **)&s->smp, &s->capsmp, s->nsmp + 1, sizeof *s->smp) != 0) {
        s->oom = 1;
        s->lost++;
        return;
    }
    s->smp[s->nsmp++] = (osample){ts, pt[0], pt[1], cpu[0], (uint32_t)s->npcs, n};
    memcpy(s->pcs + s->npcs, pcs, n * sizeof *pcs);
    s->npcs += n;
    s->samples++;
}

static const oproc *proc_find(const loupe_outside *s, uint32_t pid) {
    for (size_t i = 0; i < s->nprocs; i++) {
        if (s->procs[i].pid == pid) {
            return &s->procs[i];
        }
    }
    return NULL;
}

static oproc *proc_of(loupe_outside *s, uint32_t pid, int make) {
    for (size_t i = 0; i < s->nprocs; i++) {
        if (s->procs[i].pid == pid) {
            return &s->procs[i];
        }
    }
    if (!make || grow((void **)&s->procs, &s->capprocs, s->nprocs + 1, sizeof *s->procs) != 0) {
        s->oom |= make;
        return NULL;
    }
    s->procs[s->nprocs] = (oproc){pid, 0, 0, 0};
    return &s->procs[s->nprocs++];
}

/* PERF_RECORD_FORK: pid, ppid, tid, ptid, time. A new process is one whose first thread it is
 * (tid == pid); a new thread of a process has pid == ppid. */
static void on_fork(loupe_outside *s, const unsigned char *p, const unsigned char *end) {
    uint32_t ids[4];
    if (end - p < 16) {
        return;
    }
    memcpy(ids, p, sizeof ids);
    if (ids[0] == ids[2] && ids[0] != ids[1]) {
        oproc *o = proc_of(s, ids[0], 1);
        if (o != NULL) {
            o->ppid = ids[1];
            o->ptid = ids[3];
            o->execd = 0; /* a reused pid is a new process */
        }
    }
}

static void on_comm(loupe_outside *s, const unsigned char *p, const unsigned char *end,
                    uint16_t misc) {
    if (end - p < 9) {
        return;
    }
    uint32_t pt[2];
    memcpy(pt, p, 8);
    if ((misc & PERF_RECORD_MISC_COMM_EXEC) && pt[0] != (uint32_t)s->pid) {
        oproc *o = proc_of(s, pt[0], 1); /* the root's own exec is the one sampled from */
        if (o != NULL) {
            o->execd = 1;
        }
    }
    const unsigned char *name = p + 8;
    size_t len = 0;
    while (name + len < end && name[len] != 0 && len < 15) {
        len++;
    }
    for (size_t i = 0; i < s->ncomms; i++) {
        if (s->comms[i].tid == pt[1] && s->comms[i].pid == pt[0]) {
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
    c->pid = pt[0];
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
    uint32_t pid;
    memcpy(&pid, p, 4);
    memcpy(v, p + 8, 24);
    const char *name = (const char *)p + 64;
    size_t len = strnlen(name, (size_t)(end - (const unsigned char *)name));
    if (len == 0 || name[0] != '/') {
        return; /* [vdso], [stack], anonymous JIT code: no file to read */
    }
    for (size_t i = 0; i < s->nmaps; i++) {
        if (s->maps[i].start == v[0] && s->maps[i].len == v[1] && s->maps[i].pid == pid &&
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
    s->maps[s->nmaps++] =
        (omap){.start = v[0], .len = v[1], .pgoff = v[2], .file = f, .pid = pid, .fd = -2};
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
        on_comm(s, body, end, h.misc);
        break;
    case PERF_RECORD_FORK:
        on_fork(s, body, end);
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
        break; /* EXIT, THROTTLE: the samples carry their tids */
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
        if (s->maps[i].fd >= 0) {
            close(s->maps[i].fd);
        }
    }
    free(s->maps);
    free(s->comms);
    free(s->smp);
    free(s->pcs);
    free(s->procs);
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
        uint32_t pid = (uint32_t)s->pid;
        memcpy(body, &pid, 4);
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
        on_comm(s, c, c + sizeof c, 0);
    }
    if (f != NULL) {
        fclose(f);
    }
}

int loupe_outside_open(int pid, uint32_t hz, unsigned flags, loupe_outside **out) {
    if (out != NULL) {
        *out = NULL;
    }
    if (pid <= 0 || hz > 100000 || out == NULL ||
        (flags &
         ~(unsigned)(LOUPE_OUTSIDE_NOW | LOUPE_OUTSIDE_NO_STACKS | LOUPE_OUTSIDE_NO_CHILDREN))) {
        return loupe__err(LOUPE_EINVALID, "loupe_outside_open: %s",
                          out == NULL   ? "out is NULL"
                          : pid <= 0    ? "pid must be > 0"
                          : hz > 100000 ? "hz is above 100000"
                                        : "unknown flags");
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
    s->flags = flags;
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
    a.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME | PERF_SAMPLE_CPU;
    if (!(flags & LOUPE_OUTSIDE_NO_STACKS)) {
        a.sample_type |= PERF_SAMPLE_CALLCHAIN;
    }
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

/* Whether the mappings process mpid reported are pid's: its own, or those of the ancestor it was
 * forked from without an exec in between (a fork copies the address space, and the kernel
 * reports no MMAP2 records for what the child inherited). */
static int maps_are_of(const loupe_outside *s, uint32_t pid, uint32_t mpid) {
    uint32_t cur = pid;
    for (int depth = 0; depth < 64 && cur != 0; depth++) {
        if (cur == mpid) {
            return 1;
        }
        const oproc *o = proc_find(s, cur);
        if (o == NULL || o->execd || cur == (uint32_t)s->pid) {
            return 0; /* the root, or an exec: nothing of the parent's is mapped any more */
        }
        cur = o->ppid;
    }
    return 0;
}

static omap *map_at(loupe_outside *s, uint32_t pid, uint64_t a) {
    for (size_t i = 0; i < s->nmaps; i++) {
        omap *m = &s->maps[i];
        if (a >= m->start && a - m->start < m->len && maps_are_of(s, pid, m->pid)) {
            return m;
        }
    }
    return NULL;
}

/* Whether the bytes of the file mapped at m that end at address a are a call instruction
 * (Intel SDM vol. 2, CALL: E8 cd, or FF /2 with its ModRM, SIB and displacement), which is
 * what the byte before every true return address is. */
static int follows_call(omap *m, uint64_t a) {
    unsigned char b[8];
    uint64_t off = a - m->start + m->pgoff;
    if (off < sizeof b) {
        return 0;
    }
    if (m->fd == -2) {
        m->fd = open(m->file, O_RDONLY | O_CLOEXEC);
    }
    if (m->fd < 0) {
        return 1; /* the file cannot be read: nothing says the frame is wrong */
    }
    if (pread(m->fd, b, sizeof b, (off_t)(off - sizeof b)) != (ssize_t)sizeof b) {
        return 0;
    }
    const unsigned char *end = b + sizeof b;
    if (end[-5] == 0xe8) {
        return 1;
    }
    for (int k = 2; k <= 7; k++) {
        const unsigned char *op = end - k;
        unsigned modrm = op[1], mod = modrm >> 6, rm = modrm & 7u;
        if (op[0] != 0xff || ((modrm >> 3) & 7u) != 2) {
            continue;
        }
        int len = 2; /* FF and the ModRM */
        if (mod != 3 && rm == 4) {
            len += 1 + (mod == 0 && (op[2] & 7u) == 5 ? 4 : 0); /* a SIB (base none: disp32) */
        }
        len += mod == 1 ? 1 : (mod == 2 || (mod == 0 && rm == 5)) ? 4 : 0;
        if (len == k) {
            return 1;
        }
    }
    return 0;
}

/* The kernel's frame-pointer walk (PERF_SAMPLE_CALLCHAIN) follows rbp into whatever code without
 * frame pointers left there (glibc's __libc_start_call_main keeps none): past the last true
 * frame it reads data as return addresses, which symbolised as "[unknown];register_tm_clones"
 * above every stack of a static program. The x86-64 psABI ends the chain at a zero rbp
 * (_start clears it), which such a frame hides; so a stack is cut at its first return address
 * that lies in no mapping of the process or does not follow a call instruction. The sampled
 * address itself (pcs[0]) always stays. */
static uint32_t true_frames(loupe_outside *s, const osample *o) {
    for (uint32_t i = 1; i < o->n; i++) {
        uint64_t a = s->pcs[o->first + i];
        omap *m = map_at(s, o->pid, a);
        if (m == NULL || !follows_call(m, a)) {
            return i;
        }
    }
    return o->n;
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

#ifdef LOUPE_HAVE_LIBDW
/* The Dwfl of the mappings process pid sees (its own, and those it inherited from the parent it
 * forked from: maps_are_of), through the spool's recovery's loupe__maps_dwfl. NULL when out of
 * memory or none. */
static Dwfl *maps_dwfl(const loupe_outside *s, uint32_t pid) {
    loupe__map *v = calloc(s->nmaps + 1, sizeof *v);
    if (v == NULL) {
        return NULL;
    }
    size_t n = 0;
    for (size_t i = 0; i < s->nmaps; i++) {
        if (maps_are_of(s, pid, s->maps[i].pid)) {
            v[n++] = (loupe__map){.start = s->maps[i].start,
                                  .len = s->maps[i].len,
                                  .pgoff = s->maps[i].pgoff,
                                  .file = s->maps[i].file};
        }
    }
    Dwfl *d = loupe__maps_dwfl(v, n);
    free(v);
    return d;
}
#endif

/* One process's trace: its samples, threads and mappings, into <prefix><suffix> (the root's
 * prefix is the caller's; a child's is <child_prefix or "<host>."><pid>). */
static int write_process(loupe_outside *s, const loupe_outside_options *o, const char *host,
                         uint32_t pid, uint64_t stop_ns, size_t unfollowed,
                         loupe_trace_result *res) {
    int root = pid == (uint32_t)s->pid;
    const oproc *op = proc_find(s, pid);
    char note[128], prefix[512], name[16] = "";
    snprintf(note, sizeof note, "%u Hz task-clock, %s stacks, from outside the process", s->hz,
             (s->flags & LOUPE_OUTSIDE_NO_STACKS) ? "no" : "fp");
    if (root) {
        snprintf(prefix, sizeof prefix, "%s", o->file_prefix != NULL ? o->file_prefix : host);
    } else {
        char dot[272];
        snprintf(dot, sizeof dot, "%s.", host);
        snprintf(prefix, sizeof prefix, "%s%u", o->child_prefix != NULL ? o->child_prefix : dot,
                 pid);
    }
    /* a forked child's first thread has its name from the thread that forked it (the kernel
     * copies comm at fork and reports no COMM record for it) until it execs or renames itself */
    uint32_t np = pid, nt = pid;
    for (int depth = 0; depth < 64 && name[0] == 0 && np != 0; depth++) {
        for (size_t i = 0; i < s->ncomms; i++) {
            if (s->comms[i].pid == np && s->comms[i].tid == nt) {
                memcpy(name, s->comms[i].comm, sizeof name);
            }
        }
        const oproc *up = proc_find(s, np);
        np = up != NULL && np != (uint32_t)s->pid ? up->ppid : 0;
        nt = up != NULL ? up->ptid : 0;
    }
    for (size_t i = 0; i < s->nsmp; i++) {
        const osample *x = &s->smp[i];
        if (x->pid == pid && loupe__sample_inject(s->origin_mono, x->tid, x->ts, x->cpu,
                                                  s->pcs + x->first, x->n) != 0) {
            s->oom = 1;
            s->lost++;
        }
    }
    loupe__mb *mb = loupe__mb_new();
    int failed = mb == NULL;
    if (!failed) {
        loupe_model *mm = loupe__mb_model(mb);
        mm->pid = pid;
        mm->host = loupe__mb_str(mb, host);
        /* a forked child that did not exec is the same program: the caller's name and command
         * line are its too */
        const char *pname = o->process_name != NULL ? o->process_name : "";
        mm->process_name = loupe__mb_str(mb, root || op == NULL || !op->execd ? pname : name);
        mm->origin_unix_ns = s->origin_unix;
        mm->duration_ns = stop_ns;
        mm->clock = loupe__mb_str(mb, "monotonic");
        /* the threads the kernel named, first: sample.c's collector finds them by tid */
        int named_first = 0;
        for (size_t i = 0; i < s->ncomms && !failed; i++) {
            if (s->comms[i].pid != pid) {
                continue;
            }
            named_first |= s->comms[i].tid == pid;
            size_t t = loupe__mb_thread_add(mb, s->comms[i].tid);
            failed = t == SIZE_MAX;
            if (!failed) {
                loupe__mb_thread_name(mb, t, s->comms[i].comm);
            }
        }
        if (!failed && !named_first && name[0] != 0) {
            size_t t = loupe__mb_thread_add(mb, pid);
            failed = t == SIZE_MAX;
            if (!failed) {
                loupe__mb_thread_name(mb, t, name);
            }
        }
    }
    const char *cmd = o->cmdline != NULL && (root || op == NULL || !op->execd) ? o->cmdline : "";
    failed = failed ||
             loupe__session_process_meta(mb, root ? o->parent_pid : (op ? op->ppid : 0), cmd) != 0;
    if (!failed && unfollowed != 0) {
        /* --no-follow: the children ran under the inherited events (a perf event's inherit
         * cannot tell threads from processes) and their samples were left out */
        char v[24];
        snprintf(v, sizeof v, "%zu", unfollowed);
        failed = loupe__mb_metadata(mb, "loupe_outside_children_not_followed", v) != 0;
    }
    void *dwfl = NULL;
#ifdef LOUPE_HAVE_LIBDW
    dwfl = failed ? NULL : maps_dwfl(s, pid);
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
        mm->samples_lost += root ? s->lost : 0;
    }
    if (failed) {
        loupe__mb_abort(mb);
        return loupe__err(LOUPE_ENOMEM, "loupe_outside_finish: out of memory while collecting");
    }
    loupe_model *m = loupe__mb_finish(mb);
    if (m == NULL) {
        return loupe__err(LOUPE_ENOMEM, "loupe_outside_finish: out of memory while collecting");
    }
    loupe__model_lift_process_meta(m);
    int rc = loupe__write_run_into(m, o->run_dir, prefix, loupe__formats(o->formats, 0), res);
    if (rc == 0 && res != NULL && loupe__result_fill(res, m) != 0) {
        rc = loupe__err(LOUPE_ENOMEM, "loupe_outside_finish: out of memory (the trace was "
                                      "written)");
    }
    loupe_model_free(m);
    return rc;
}

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
    char host[256];
    loupe__hostname(host, sizeof host);
    for (size_t i = 0; i < s->nsmp; i++) {
        s->smp[i].n = true_frames(s, &s->smp[i]);
    }
    /* The processes to write: the root first, then each child it forked (from FORK records, or
     * from its samples alone when the FORK came before the events were on) in order of birth;
     * with LOUPE_OUTSIDE_NO_CHILDREN the children are counted, not written. */
    uint32_t *pids = malloc((s->nprocs + s->nsmp + 1) * sizeof *pids);
    size_t npids = 0;
    if (pids == NULL) {
        loupe__sample_discard();
        free_sampler(s);
        return loupe__err(LOUPE_ENOMEM, "loupe_outside_finish: out of memory while collecting");
    }
    pids[npids++] = (uint32_t)s->pid;
    for (size_t i = 0; i < s->nprocs + s->nsmp; i++) {
        uint32_t p = i < s->nprocs ? s->procs[i].pid : s->smp[i - s->nprocs].pid;
        size_t k = 0;
        while (k < npids && pids[k] != p) {
            k++;
        }
        if (k == npids) {
            pids[npids++] = p;
        }
    }
    size_t unfollowed = (s->flags & LOUPE_OUTSIDE_NO_CHILDREN) ? npids - 1 : 0;
    if (unfollowed != 0) {
        npids = 1;
    }
    int rc = 0;
    for (size_t k = 0; k < npids && rc == 0; k++) {
        rc = write_process(s, o, host, pids[k], stop_ns, unfollowed, k == 0 ? res : NULL);
    }
    free(pids);
    loupe__sample_discard();
    free_sampler(s);
    return rc;
}
