/* preload.c: libloupe_preload.so, what `loupe record` preloads (LD_PRELOAD) into the traced
 * program. Its constructor starts a session from the environment that `loupe record` sets; an
 * atexit handler (after main returns or exit() is called) stops it and writes a small
 * result file that `loupe record` reads to report the run directory and the counts.
 *
 * Environment (set by loupe record; documented in docs/record.md):
 *   LOUPE_RECORD_DIR            log_dir (required: without it the library does nothing)
 *   LOUPE_RECORD_LEVEL          host tracer level 0..3
 *   LOUPE_RECORD_BUFFER_EVENTS  each thread's limit in events
 *   LOUPE_RECORD_SESSION_EVENTS the session's capacity in events
 *   LOUPE_RECORD_OVERFLOW       "first" or "last"
 *   LOUPE_RECORD_PERFETTO       "1": also perfetto_trace.json.gz
 *   LOUPE_RECORD_LAZY           "1": lazy_buffers (populate buffers as they fill)
 *   LOUPE_RECORD_FORMATS        the files to write: a comma list of format names
 *   LOUPE_RECORD_SAMPLE_HZ      CPU sampling rate (0 or unset: off)
 *   LOUPE_RECORD_SAMPLE_STACKS  "dwarf", "fp" or "none"
 *                               (loupe_format_parse_list()); unset = the default set
 *   LOUPE_RECORD_FILTER         function_filter globs, one a line
 *   LOUPE_RECORD_EXCLUDE        function_exclude globs, one a line
 *   LOUPE_RECORD_DEPTH          function_depth
 *   LOUPE_RECORD_MIN_DURATION_NS function_min_duration_ns
 *   LOUPE_RECORD_RESULT         path of the result file: "started=1" once the session started
 *                               (so loupe record can tell a program the preload never reached:
 *                               a static or setuid one), the counts at exit; written by the
 *                               root pid only (its last image), whatever copies a shell passes on
 *   LOUPE_RECORD_ROOT_PID       the pid loupe record started (the tree's root)
 *   LOUPE_RECORD_RUN_DIR        the run directory loupe record made: every process writes
 *                               <host>.<pid>[.<n>]<suffix> into it (file_prefix, run_dir)
 *   LOUPE_RECORD_FILE_PREFIX    the first process's file-name prefix instead of <host>.<pid>
 *                               (an MPI rank's rank0003: docs/mpi.md); removed at its start
 *   LOUPE_RECORD_FOLLOW         "1": follow the process tree (keep LD_PRELOAD and these
 *                               variables for exec'd programs; a fork()ed child starts a
 *                               session of its own in the atfork child handler)
 *   LOUPE_RECORD_REGIONS        under follow: the directory of the other processes' recording
 *                               regions (below), which loupe record recovers after a death
 * Interposed (exported, so the program's calls bind here): close, dup2, dup3, close_range and
 * closefrom (loupe's own fds are never the program's to lose or to be handed: base/ownfd.h), the
 * exec family (the image's trace is written before the exec), waitpid/wait/wait4 (a child's end
 * status, for the recovery's cause), fork and posix_spawn/posix_spawnp (the fork points, metadata
 * record.forks). It sets LOUPE_RECORD=1 for the program (so a program that starts its own trace can
 * tell it is being recorded). Without LOUPE_RECORD_FOLLOW it removes itself from LD_PRELOAD so that
 * programs the traced one execs are not traced. A program linked with libloupe.so shares the same
 * library (the loader matches the soname), so its annotations land in this session.
 */
#include <loupe/loupe.h>

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <unwind.h>

/* The environment through libc's own getenv/setenv/unsetenv, never the program's: bash exports
 * its own four (lib/sh/getenv.c: they read and write the shell's variable table), which bind
 * ahead of libc's for every library. Called from this library's constructor, before bash's main
 * has imported environ, bash's setenv made a table without the inherited variables, and its
 * getenv then found none of loupe's: the root bash never took the memfd loupe record passed
 * (it recorded into anonymous memory, was not recoverable, and wrote a crash dump when it
 * died of a signal) and made a region file it never used. RTLD_NEXT from this library, the
 * first preloaded, finds libc's (libloupe defines none). */
typedef char *(*getenv_fn)(const char *);
typedef int (*setenv_fn)(const char *, const char *, int);
typedef int (*unsetenv_fn)(const char *);
static getenv_fn libc_getenv;
static setenv_fn libc_setenv;
static unsetenv_fn libc_unsetenv;

static void resolve_env(void) {
    if (libc_getenv == NULL) {
        void *g = dlsym(RTLD_NEXT, "getenv"), *s = dlsym(RTLD_NEXT, "setenv");
        void *u = dlsym(RTLD_NEXT, "unsetenv");
        if (g != NULL && s != NULL && u != NULL) {
            /* function pointers through uintptr_t, as resolve_real() does (dlsym(3)) */
            libc_setenv = (setenv_fn)(uintptr_t)s;
            libc_unsetenv = (unsetenv_fn)(uintptr_t)u;
            libc_getenv = (getenv_fn)(uintptr_t)g;
        }
    }
}

static char *env_get(const char *name) {
    resolve_env();
    return libc_getenv != NULL ? libc_getenv(name) : getenv(name);
}

static int env_set(const char *name, const char *value, int overwrite) {
    resolve_env();
    return libc_setenv != NULL ? libc_setenv(name, value, overwrite)
                               : setenv(name, value, overwrite);
}

static int env_unset(const char *name) {
    resolve_env();
    return libc_unsetenv != NULL ? libc_unsetenv(name) : unsetenv(name);
}

#define getenv(name) env_get(name)
#define setenv(name, value, overwrite) env_set(name, value, overwrite)
#define unsetenv(name) env_unset(name)

static char result_path[4096];
static int started;
static pid_t started_pid;

static void strip_preload(void) {
    const char *lp = getenv("LD_PRELOAD");
    if (lp == NULL) {
        return;
    }
    char out[8192], entry[4096];
    size_t n = 0;
    for (const char *p = lp; *p;) {
        size_t len = strcspn(p, ": ");
        if (len > 0 && len < sizeof entry) {
            memcpy(entry, p, len);
            entry[len] = 0;
            if (strstr(entry, "libloupe_preload.so") == NULL &&
                strstr(entry, "libloupe.so") == NULL && strstr(entry, "libloupe_mpi.so") == NULL &&
                n + len + 2 < sizeof out) {
                if (n > 0) {
                    out[n++] = ':';
                }
                memcpy(out + n, entry, len);
                n += len;
            }
        }
        p += len;
        while (*p == ':' || *p == ' ') {
            p++;
        }
    }
    out[n] = 0;
    if (n == 0) {
        unsetenv("LD_PRELOAD");
    } else {
        setenv("LD_PRELOAD", out, 1);
    }
}

static void loupe_preload_stop(void);

/* The globs of LOUPE_RECORD_FILTER / _EXCLUDE, kept for the process's life (small; the session
 * copies them): reachable from here, so that a leak checker does not count them. */
static const char *const *filter_globs, *const *exclude_globs;

/* A NULL-terminated array of the lines of an environment variable (globs), or NULL when it is
 * unset or empty. */
static const char *const *env_lines(const char *name) {
    const char *v = getenv(name);
    if (v == NULL || v[0] == 0) {
        return NULL;
    }
    size_t n = 1;
    for (const char *p = v; *p; p++) {
        n += *p == '\n';
    }
    char *copy = strdup(v);
    const char **arr = calloc(n + 1, sizeof(*arr));
    if (copy == NULL || arr == NULL) {
        free(copy);
        free(arr);
        return NULL;
    }
    size_t k = 0;
    for (char *tok = strtok(copy, "\n"); tok != NULL; tok = strtok(NULL, "\n")) {
        arr[k++] = tok;
    }
    return arr;
}

/* The first line of the result file: the session started (truncates what a run left). */
static void mark_started(void) {
    FILE *f = result_path[0] ? fopen(result_path, "w") : NULL;
    if (f != NULL) {
        fputs("started=1\n", f);
        fclose(f);
    }
}

/* The options, kept for a fork()ed child's session (their strings are copies here: a child
 * must not depend on the environment the program may have changed). */
static loupe_trace_options opts;
static char opt_dir[4096], opt_run_dir[4096], opt_prefix[512];
static int following;

/* Whether a file of prefix is in the run directory already, in any host-prefixed format. */
static int prefix_taken(const char *prefix) {
    char path[4096 + 600];
    for (size_t k = 0; k < loupe_format_count(); k++) {
        const loupe_format_desc *d = loupe_format_info(k);
        if (d->run_dir_bit != 0 && d->host_prefixed) {
            snprintf(path, sizeof path, "%s/%s%s", opt_run_dir, prefix, d->suffix);
            if (access(path, F_OK) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

/* "<host>.<pid>" for this process, or "<host>.<pid>.<n>" (n = 1, 2, ...) when an image this
 * pid ran before an exec wrote that name already: one file set per image, in exec order. */
static void set_prefix(void) {
    char host[256] = "", base[400];
    (void)gethostname(host, sizeof host - 1);
    snprintf(base, sizeof base, "%s.%ld", host[0] ? host : "localhost", (long)getpid());
    snprintf(opt_prefix, sizeof opt_prefix, "%s", base);
    for (int n = 1; n < 1000 && opt_run_dir[0] && prefix_taken(opt_prefix); n++) {
        snprintf(opt_prefix, sizeof opt_prefix, "%s.%d", base, n);
    }
}

/* ---- recording regions that `loupe record` can recover (any process of the tree) ----
 * The tree's root records into the memfd loupe record made. Every other process (a forked
 * child, an exec'd image) records into a file of its own in LOUPE_RECORD_REGIONS, a directory
 * loupe record made on a tmpfs (/dev/shm: memory, as a memfd is), named <pid>.<ppid>.<n>: if
 * the process dies without writing its trace (SIGKILL, a crash, _exit()), the file is still
 * there and loupe record recovers it (loupe_recover_trace()). A process that writes its trace
 * removes its file. The parent's wait*() calls leave <pid>.status (the raw wait status) beside
 * it, so that loupe record can say how a child it did not wait for itself ended. */
static char regions_dir[4096], region_path[4200];
static char counts_dir[4096]; /* LOUPE_RECORD_COUNTS_DIR, following the tree only */
static pid_t root_pid;        /* LOUPE_RECORD_ROOT_PID: the process loupe record started */
static int no_follow_seen;    /* under loupe record --no-follow: exec'd programs get no loupe */
static int untraced_noted;    /* this image execs a program the preload cannot enter (below) */

/* The memfd loupe record passed, when it is this process's and still open. */
static int shm_fd_ours(void) {
    const char *v = getenv("LOUPE_RECORD_SHM_FD"), *pid = getenv("LOUPE_RECORD_SHM_PID");
    if (v == NULL || pid == NULL || atol(pid) != (long)getpid()) {
        return 0;
    }
    char link[64], target[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", atoi(v));
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) {
        return 0;
    }
    target[n] = 0;
    if (strncmp(target, "/memfd:loupe-record", 19) != 0) {
        return 0; /* not an fd the exec reused */
    }
    /* an earlier image handed its recording over in the memfd (an exec from a signal handler:
     * hand_over_at_exec()): it is loupe record's to read, and this image takes a region file */
    char marker[4200];
    snprintf(marker, sizeof marker, "%s/%ld.exec", regions_dir, (long)getpid());
    return regions_dir[0] == 0 || access(marker, F_OK) != 0;
}

/* <region file>.cmd: this process's command line (/proc/self/cmdline, NUL-separated), so that
 * a recovered trace names its process. */
static void write_cmdline(void) {
    char path[4300], buf[4096];
    int in = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
    ssize_t n = in >= 0 ? read(in, buf, sizeof buf) : -1;
    if (in >= 0) {
        close(in);
    }
    snprintf(path, sizeof path, "%s.cmd", region_path);
    int out = n > 0 ? open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600) : -1;
    if (out >= 0) {
        (void)!write(out, buf, (size_t)n);
        close(out);
    }
}

/* Makes this process's region file and hands it to libloupe (region.c takes
 * LOUPE_RECORD_SHM_FD at the session's start). Without one the process records into anonymous
 * memory, as before: it is only not recoverable. */
/* Whether this process may record into a region file. A page of a MAP_SHARED tmpfs file that
 * the file system cannot hold is a SIGBUS at the access that touches it (a container's /dev/shm
 * is 64 MiB by default), which tracing must never cause. Since Linux 5.14, libloupe backs each
 * page of a shared region before it touches it (MADV_POPULATE_WRITE fails where a touch would
 * SIGBUS: region.c), so the region grows with what the process records, and what finds no room
 * is recorded in the process's own memory and counted lost if it dies: any process may have a
 * file. Before 5.14 the old rule holds: the file system must have room for every recording
 * process's whole session (session_events x 16 bytes plus 128 MiB of tables), else the process
 * records into anonymous memory (not recoverable). */
static int regions_room(void) {
    static int populate = -1; /* MADV_POPULATE_WRITE works (the same in every process) */
    if (populate < 0) {
        void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        populate = p != MAP_FAILED && madvise(p, 4096, 23 /* MADV_POPULATE_WRITE */) == 0;
        if (p != MAP_FAILED) {
            munmap(p, 4096);
        }
    }
    if (populate) {
        return 1;
    }
    struct statvfs sv;
    if (statvfs(regions_dir, &sv) != 0) {
        return 0;
    }
    uint64_t events = opts.session_events ? opts.session_events : LOUPE_DEFAULT_SESSION_EVENTS;
    uint64_t need = events * 16 + ((uint64_t)128 << 20), files = 1;
    DIR *d = opendir(regions_dir);
    for (struct dirent *e = d != NULL ? readdir(d) : NULL; e != NULL; e = readdir(d)) {
        /* a region file: <pid>.<ppid>.<n>, digits and dots (not .cmd, .status) */
        files += e->d_name[0] != '.' && e->d_name[strspn(e->d_name, "0123456789.")] == 0;
    }
    if (d != NULL) {
        closedir(d);
    }
    return (uint64_t)sv.f_bavail * sv.f_frsize / files >= need;
}

static void make_region_file(void) {
    region_path[0] = 0;
    if (regions_dir[0] == 0 || shm_fd_ours()) {
        return;
    }
    unsetenv("LOUPE_RECORD_SHM_FD"); /* not this process's to record into (region.c's take) */
    if (!regions_room()) {
        return;
    }
    for (int n = 0; n < 1000; n++) {
        snprintf(region_path, sizeof region_path, "%s/%ld.%ld.%d", regions_dir, (long)getpid(),
                 (long)getppid(), n);
        int fd = open(region_path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            /* An OFD write lock says the process lives: the mapping keeps the open file, and so
             * the lock, after region.c closes the fd, until the process exits, execs or dies.
             * loupe record asks the lock, not a pid (which a pid namespace renames). */
            struct flock fl;
            memset(&fl, 0, sizeof fl);
            fl.l_type = F_WRLCK;
            fl.l_whence = SEEK_SET;
            (void)fcntl(fd, F_OFD_SETLK, &fl);
            write_cmdline();
            char num[32];
            snprintf(num, sizeof num, "%d", fd);
            setenv("LOUPE_RECORD_SHM_FD", num, 1);
            snprintf(num, sizeof num, "%ld", (long)getpid());
            setenv("LOUPE_RECORD_SHM_PID", num, 1);
            return;
        }
        if (errno != EEXIST) {
            break;
        }
    }
    region_path[0] = 0;
}

/* Whether loupe record is done with the tree: it holds an OFD lock on <regions>/recorder while it
 * runs (cli/record.c). A pid would not tell: inside a pid namespace of the tree's own, loupe
 * record's pid is no process here (kill() said ESRCH, and the directory went while loupe record
 * still recovered into it). */
static int recorder_gone(void) {
    char path[4200];
    snprintf(path, sizeof path, "%s/recorder", regions_dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errno == ENOENT; /* removed: loupe record ended */
    }
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    int r = fcntl(fd, F_OFD_GETLK, &fl);
    close(fd);
    return r == 0 && fl.l_type == F_UNLCK;
}

/* The region file is not needed once the trace is written (its memory goes with it). */
static void drop_region_file(void) {
    if (region_path[0] != 0) {
        char cmd[4300];
        snprintf(cmd, sizeof cmd, "%s.cmd", region_path);
        (void)unlink(cmd);
        (void)unlink(region_path);
        region_path[0] = 0;
        if (recorder_gone()) {
            /* loupe record is done with the tree (it reaped the root, then removed what it
             * could): the last process that outlived it removes the directory */
            (void)rmdir(regions_dir);
        }
    }
}

static long session_ppid; /* the parent at this process's session start (memlost_path) */

static void start_session(void) {
    session_ppid = (long)getppid(); /* as make_region_file names the region */
    make_region_file();
    int r = loupe_start_trace(&opts);
    if (r != 0) {
        fprintf(stderr, "loupe: could not start tracing (pid %ld): %s: %s\n", (long)getpid(),
                loupe_strerror(r), loupe_last_error());
        drop_region_file();
        return;
    }
    started = 1;
    started_pid = getpid();
    /* --gpu: say once, in the root process, why there is no device trace (no driver, no CUPTI,
     * another subscriber: the note is also in the trace's metadata) */
    const char *gn = loupe_gpu_device_tracer_note();
    if (opts.device_tracer_level > 0 && gn[0] != 0 && getpid() == root_pid &&
        getenv("LOUPE_RECORD_QUIET") == NULL && strstr(gn, "another CUPTI subscriber") == NULL) {
        char line[900];
        int n = snprintf(line, sizeof line, "loupe record: %s\n", gn);
        (void)!write(2, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
    }
}

/* A fork()ed child under follow: a session of its own, into its own region (libloupe's own
 * atfork child handler, registered before this one and so run first, forgot the parent's).
 * The rule (docs/record.md): this runs before fork() returns in the child, and calls malloc,
 * mmap and pthread_create; glibc makes those safe in the child of a multithreaded parent (its
 * fork resets malloc's arena locks and the stdio locks: glibc's posix/fork.c), and loupe uses
 * no lock of the program's. Nothing of the parent's recording is copied: the child's region
 * starts empty. */
static void forks_forget(void);

static void child_after_fork(void) {
    started = 0;
    forks_forget(); /* the parent's fork points are the parent's */
    if (!following) {
        return;
    }
    result_path[0] = 0; /* the result file is the root's */
    set_prefix();
    start_session();
}

static void resolve_real(void);

__attribute__((constructor)) static void loupe_preload_start(void) {
    resolve_real();
    const char *dir = getenv("LOUPE_RECORD_DIR");
    if (dir == NULL || dir[0] == 0) {
        return;
    }
    const char *fw = getenv("LOUPE_RECORD_FOLLOW");
    following = fw != NULL && strcmp(fw, "1") == 0;
    const char *rpid = getenv("LOUPE_RECORD_ROOT_PID");
    root_pid = rpid != NULL ? (pid_t)atol(rpid) : 0;
    int is_root = root_pid == 0 || root_pid == getpid();
    if (!following) {
        strip_preload();
        no_follow_seen = 1;
    }
    if (!following && !is_root) {
        /* A shell passes its own copy of the environment on (bash does: the variables this
         * library removed from the process's environment are still in it), so under
         * --no-follow a program the root starts still gets here: it is not traced. */
        unsetenv("LOUPE_RECORD_DIR");
        return;
    }
    const char *rg = getenv("LOUPE_RECORD_REGIONS");
    snprintf(regions_dir, sizeof regions_dir, "%s", rg != NULL && following ? rg : "");
    const char *cd = getenv("LOUPE_RECORD_COUNTS_DIR");
    snprintf(counts_dir, sizeof counts_dir, "%s", cd != NULL && following ? cd : "");
    /* The result file is the root pid's (its last image writes it at exit): the variable stays,
     * since a shell's copy of it would reach the other processes anyway. */
    const char *rp = getenv("LOUPE_RECORD_RESULT");
    snprintf(result_path, sizeof result_path, "%s", rp != NULL && is_root ? rp : "");
    loupe_trace_options o;
    memset(&o, 0, sizeof o);
    snprintf(opt_dir, sizeof opt_dir, "%s", dir);
    o.log_dir = opt_dir;
    const char *rd = getenv("LOUPE_RECORD_RUN_DIR");
    if (rd != NULL && rd[0]) {
        snprintf(opt_run_dir, sizeof opt_run_dir, "%s", rd);
        o.run_dir = opt_run_dir;
        const char *fp = getenv("LOUPE_RECORD_FILE_PREFIX");
        if (fp != NULL && fp[0]) {
            snprintf(opt_prefix, sizeof opt_prefix, "%s", fp); /* an MPI rank's rank0003 */
        } else {
            set_prefix();
        }
        o.file_prefix = opt_prefix;
    }
    unsetenv("LOUPE_RECORD_FILE_PREFIX"); /* the processes this one runs: <host>.<pid> */
    const char *lv = getenv("LOUPE_RECORD_LEVEL");
    if (lv != NULL && lv[0]) {
        int l = atoi(lv);
        o.host_tracer_level = l == 0 ? LOUPE_LEVEL_NONE : l;
    }
    const char *be = getenv("LOUPE_RECORD_BUFFER_EVENTS");
    if (be != NULL && be[0]) {
        o.buffer_events = (uint32_t)strtoul(be, NULL, 10);
    }
    const char *se = getenv("LOUPE_RECORD_SESSION_EVENTS");
    if (se != NULL && se[0]) {
        o.session_events = strtoull(se, NULL, 10);
    }
    const char *ov = getenv("LOUPE_RECORD_OVERFLOW");
    if (ov != NULL && strcmp(ov, "last") == 0) {
        o.overflow = LOUPE_OVERFLOW_KEEP_LAST;
    }
    const char *lz = getenv("LOUPE_RECORD_LAZY");
    o.lazy_buffers = lz != NULL && strcmp(lz, "1") == 0;
    const char *pf = getenv("LOUPE_RECORD_PERFETTO");
    o.create_perfetto_trace = pf != NULL && strcmp(pf, "1") == 0;
    const char *dt = getenv("LOUPE_RECORD_DEVICE_TRACER");
    o.device_tracer_level = dt != NULL && strcmp(dt, "1") == 0;
    const char *fm = getenv("LOUPE_RECORD_FORMATS");
    if (fm != NULL && fm[0] && loupe_format_parse_list(fm, &o.formats) != 0) {
        /* loupe record checked the list already: this is someone setting the variable by hand. */
        fprintf(stderr, "loupe: LOUPE_RECORD_FORMATS: %s: writing the default set\n",
                loupe_last_error());
    }
    const char *sh = getenv("LOUPE_RECORD_SAMPLE_HZ");
    if (sh != NULL) {
        o.sampling_hz = (uint32_t)strtoul(sh, NULL, 10);
    }
    const char *ss = getenv("LOUPE_RECORD_SAMPLE_STACKS");
    if (ss != NULL) {
        o.sampling_stacks = strcmp(ss, "fp") == 0     ? LOUPE_SAMPLING_STACKS_FP
                            : strcmp(ss, "none") == 0 ? LOUPE_SAMPLING_STACKS_NONE
                                                      : LOUPE_SAMPLING_STACKS_DWARF;
    }
    /* loupe record --spool[=DIR]: set (even empty: the log directory) means a spool; its
     * default is one that spills past memory only (LOUPE_RECORD_SPOOL_SPILL=1) */
    o.spool_dir = getenv("LOUPE_RECORD_SPOOL");
    const char *sm = getenv("LOUPE_RECORD_SPOOL_SPILL");
    o.spool_spill = sm != NULL && strcmp(sm, "1") == 0;
    const char *sb = getenv("LOUPE_RECORD_SPOOL_BUDGET");
    if (sb != NULL && sb[0]) {
        o.spool_budget_bytes = strtoull(sb, NULL, 10);
    }
    o.function_tracing = 1;
    filter_globs = env_lines("LOUPE_RECORD_FILTER");
    exclude_globs = env_lines("LOUPE_RECORD_EXCLUDE");
    o.function_filter = filter_globs;
    o.function_exclude = exclude_globs;
    const char *dp = getenv("LOUPE_RECORD_DEPTH");
    if (dp != NULL && dp[0]) {
        o.function_depth = (uint32_t)strtoul(dp, NULL, 10);
    }
    const char *md = getenv("LOUPE_RECORD_MIN_DURATION_NS");
    if (md != NULL && md[0]) {
        o.function_min_duration_ns = strtoull(md, NULL, 10);
    }
    if (!following) {
        unsetenv("LOUPE_RECORD_DIR"); /* children do not start sessions of their own */
    }
    setenv("LOUPE_RECORD", "1", 1);
    opts = o;
    start_session();
    if (!started) {
        return;
    }
    mark_started();
    (void)atexit(loupe_preload_stop); /* a forked child inherits it: it stops its own session */
    if (following) {
        (void)pthread_atfork(NULL, NULL, child_after_fork);
    }
    loupe_set_thread_name("main");
}

/* In libloupe (src/export/rundir.c): the last run directory written in this process. */
const char *loupe__last_run_dir(char *buf, size_t size);
/* In libloupe (src/session/session.c): the kept trace's counts. */
int loupe__kept_counts(loupe_trace_result *res);

/* Stops this process's session and writes its trace, and the result file when this is the
 * root. for_exec: before an exec replaces the image; a session that recorded nothing then
 * leaves no files (a shell's fork child that only execs). */
static void stop_and_write(int for_exec);

/* Registered with atexit() right after the start, and again when main() is entered (below). */
static void loupe_preload_stop(void) {
    /* A child the program forked inherits this handler: without follow it is not recorded (its
     * session is closed at fork); with follow it stops its own session here, and only the
     * root has a result file. */
    if (!started || getpid() != started_pid) {
        return;
    }
    stop_and_write(0);
}

/* ---- the exit stop before the loader's finalisation ----
 * The constructor's atexit() registration is older than glibc's registration of the loader's
 * _dl_fini (__libc_start_main makes it after the libraries' constructors ran), so at exit
 * _dl_fini ran first and the stop ran inside it, from the preload's __cxa_finalize, with the
 * loader's lock held: a loupe thread in dl_iterate_phdr at that moment (the sampler listing
 * modules, the keeper symbolising a name) waited for that lock while the stop waited for the
 * thread, for ever (a fork child that exits 200 ms in, under the preloaded ASan runtime: 5 of 5
 * hung, record_cli 5c's orphan; gdb: main in pthread_join, both threads in
 * ___pthread_mutex_lock of _rtld_global). So main() is entered through this wrapper, which
 * registers the stop again, after _dl_fini: it runs first (LIFO), with the loader unlocked; the
 * constructor's registration finds the session stopped. */
typedef int (*main_fn)(int, char **, char **);
typedef int (*start_main_fn)(main_fn, int, char **, void (*)(void), void (*)(void), void (*)(void),
                             void *);
static main_fn real_main;

static int main_wrapper(int argc, char **argv, char **envp) {
    if (started) {
        (void)atexit(loupe_preload_stop);
    }
    return real_main(argc, argv, envp);
}

__attribute__((visibility("default"))) int __libc_start_main(main_fn main, int argc, char **argv,
                                                             void (*init)(void), void (*fini)(void),
                                                             void (*rtld_fini)(void),
                                                             void *stack_end);
__attribute__((visibility("default"))) int __libc_start_main(main_fn main, int argc, char **argv,
                                                             void (*init)(void), void (*fini)(void),
                                                             void (*rtld_fini)(void),
                                                             void *stack_end) {
    start_main_fn real = (start_main_fn)(uintptr_t)dlsym(RTLD_NEXT, "__libc_start_main");
    if (real == NULL) {
        _exit(127); /* no libc to start the program with: nothing else can run it */
    }
    real_main = main;
    return real(main_wrapper, argc, argv, init, fini, rtld_fini, stack_end);
}

static void set_forks_meta(void);

static void stop_and_write_files(int for_exec);

/* At exit or exec the program's own fds may fill its RLIMIT_NOFILE (one that leaks them, one
 * that opens to the limit): the stop's files (the trace, the result file) get 16 numbers above
 * the soft limit, within the hard one, while they are written, and the limit is the program's
 * again before the exit or the exec goes on. */
/* The pid whose stop is writing its trace now (0: none): an exec from a signal handler that
 * interrupts that write loses the image's trace (hand_over_at_exec() says so). */
static volatile pid_t writing_pid;

static void stop_and_write(int for_exec) {
    struct rlimit was, more;
    int raised = getrlimit(RLIMIT_NOFILE, &was) == 0 && was.rlim_cur != RLIM_INFINITY &&
                 was.rlim_cur < was.rlim_max;
    if (raised) {
        more = was;
        more.rlim_cur = was.rlim_max - was.rlim_cur > 16 ? was.rlim_cur + 16 : was.rlim_max;
        raised = setrlimit(RLIMIT_NOFILE, &more) == 0;
    }
    writing_pid = getpid();
    stop_and_write_files(for_exec);
    writing_pid = 0;
    if (raised) {
        (void)setrlimit(RLIMIT_NOFILE, &was);
    }
}

static void stop_and_write_files(int for_exec) {
    started = 0;
    set_forks_meta();
    loupe_trace_result res = {.size = sizeof res};
    char run_dir[4096] = "";
    int r = loupe_stop_trace(&res);
    if (r == LOUPE_ENOT_STARTED) {
        /* The program stopped the session itself (loupe_stop_trace_if_active() in its cleanup):
         * its stop wrote the run directory. */
        loupe__last_run_dir(run_dir, sizeof run_dir);
        r = run_dir[0] ? 0 : r;
        if (r == 0) {
            (void)loupe__kept_counts(&res); /* that stop's figures, not zeros */
        }
    } else if (res.run_dir != NULL) {
        snprintf(run_dir, sizeof run_dir, "%s", res.run_dir);
    }
    if (r == 0) {
        drop_region_file();
    }
    if (r == 0 && for_exec && res.events_recorded == 0 && getpid() != root_pid && !untraced_noted) {
        /* a child that only execs (a shell's fork for a command): its files would be empty.
         * The root's are kept (the program loupe record ran, its process in the tree). */
        for (size_t i = 0; i < res.file_count; i++) {
            (void)unlink(res.files[i].path);
        }
    }
    FILE *f = result_path[0] ? fopen(result_path, "w") : NULL;
    char detail[1024] = "";
    if (r != 0) {
        /* The stop's advice ("the trace is kept: call loupe_write_last_trace() ...") is for a
         * program holding the session; here the process ends now and `loupe record` says what to
         * do. */
        snprintf(detail, sizeof detail, "%s", loupe_last_error());
        char *kept = strstr(detail, "; the trace is kept: call loupe_write_last_trace()");
        if (kept != NULL) {
            *kept = 0;
        }
        if (f == NULL) { /* else `loupe record` says it, from the result file */
            fprintf(stderr, "loupe: could not write the trace: %s: %s\n", loupe_strerror(r),
                    detail);
        }
    }
    if (f == NULL) {
        loupe_trace_result_free(&res);
        return;
    }
    fprintf(f, "status=%d\nerror=%s\nrun_dir=%s\n", r, detail, run_dir);
    for (size_t i = 0; i < res.file_count; i++) { /* file.<format name>=<path> */
        const loupe_format_desc *d = loupe_format_by_bit(res.files[i].format);
        fprintf(f, "file.%s=%s\n", d != NULL ? d->name : "?", res.files[i].path);
    }
    fprintf(f,
            "events_recorded=%llu\nevents_dropped=%llu\nunmatched_ends=%llu\n"
            "truncated_zones=%llu\nthreads=%zu\n",
            (unsigned long long)res.events_recorded, (unsigned long long)res.events_dropped,
            (unsigned long long)res.unmatched_ends, (unsigned long long)res.truncated_zones,
            res.thread_count);
    uint64_t need = 0, total = 0;
    for (size_t i = 0; i < res.thread_count; i++) {
        if (res.threads[i].capacity_needed > need) {
            need = res.threads[i].capacity_needed;
        }
        /* each thread holds whole chunks of the session's capacity */
        uint64_t c = res.threads[i].capacity_needed;
        total += (c + LOUPE_CHUNK_EVENTS - 1) / LOUPE_CHUNK_EVENTS * LOUPE_CHUNK_EVENTS;
    }
    fprintf(f, "capacity_needed=%llu\nsession_needed=%llu\n", (unsigned long long)need,
            (unsigned long long)total);
    fclose(f);
    loupe_trace_result_free(&res);
}

/* ---- exec: the image's trace is written before the exec replaces it ----
 * The program's calls to the exec family reach these (LD_PRELOAD interposes them; glibc's own
 * internal execs, posix_spawn's and system()'s, do not: those run in a child that never
 * recorded). Before the exec the session is stopped and written as <host>.<pid>[.<n>].*: the
 * exec'd image, traced from its start, writes the next name (set_prefix()). A session that
 * recorded no event writes nothing. If the exec fails, the image goes on tracing in a new
 * session. Under --no-follow the exec'd program gets an environment without loupe.
 * A vfork() child (it shares the parent's memory and ran no atfork handler: getpid() is not
 * the pid that started the session) is passed through untouched. */
extern char **environ;

/* What the program's calls bind to: exported from this library (built with hidden visibility;
 * LOUPE_API exports only while libloupe itself is built). */
#define INTERPOSE __attribute__((visibility("default")))

typedef int (*execve_fn)(const char *, char *const[], char *const[]);
typedef int (*execvpe_fn)(const char *, char *const[], char *const[]);
typedef int (*fexecve_fn)(int, char *const[], char *const[]);
typedef pid_t (*waitpid_fn)(pid_t, int *, int);
typedef pid_t (*wait4_fn)(pid_t, int *, int, struct rusage *);
typedef pid_t (*fork_fn)(void);
typedef int (*spawn_fn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
                        const posix_spawnattr_t *, char *const[], char *const[]);

/* libc's own functions, looked up once (dlsym is not async-signal-safe: a SIGCHLD handler's
 * waitpid must not be the first call). */
static execve_fn real_execve;
static execvpe_fn real_execvpe;
static fexecve_fn real_fexecve;
static waitpid_fn real_waitpid;
static wait4_fn real_wait4;
static fork_fn real_fork;
static spawn_fn real_spawn, real_spawnp;
typedef void (*exit_fn)(int);
static exit_fn real_exit_, real_Exit;
typedef int (*close_fn)(int);
typedef int (*open_fn)(const char *, int, ...);
typedef int (*openat_fn)(int, const char *, int, ...);
typedef int (*dup2_fn)(int, int);
typedef int (*dup3_fn)(int, int, int);
typedef int (*close_range_fn)(unsigned, unsigned, int);
typedef int (*fcntl_fn)(int, int, ...);
static close_fn real_close;
static fcntl_fn real_fcntl, real_fcntl64;
static dup2_fn real_dup2;
static dup3_fn real_dup3;
static close_range_fn real_close_range;
static open_fn real_open, real_open64;
static openat_fn real_openat, real_openat64;

static void resolve_real(void) {
    if (real_execve != NULL) {
        return;
    }
    /* POSIX dlsym returns void *; a function pointer converts through uintptr_t (POSIX
     * requires the two to convert losslessly, dlsym(3)). */
    real_execve = (execve_fn)(uintptr_t)dlsym(RTLD_NEXT, "execve");
    real_execvpe = (execvpe_fn)(uintptr_t)dlsym(RTLD_NEXT, "execvpe");
    real_fexecve = (fexecve_fn)(uintptr_t)dlsym(RTLD_NEXT, "fexecve");
    real_waitpid = (waitpid_fn)(uintptr_t)dlsym(RTLD_NEXT, "waitpid");
    real_wait4 = (wait4_fn)(uintptr_t)dlsym(RTLD_NEXT, "wait4");
    real_fork = (fork_fn)(uintptr_t)dlsym(RTLD_NEXT, "fork");
    real_spawn = (spawn_fn)(uintptr_t)dlsym(RTLD_NEXT, "posix_spawn");
    real_spawnp = (spawn_fn)(uintptr_t)dlsym(RTLD_NEXT, "posix_spawnp");
    real_exit_ = (exit_fn)(uintptr_t)dlsym(RTLD_NEXT, "_exit");
    real_Exit = (exit_fn)(uintptr_t)dlsym(RTLD_NEXT, "_Exit");
    real_close = (close_fn)(uintptr_t)dlsym(RTLD_NEXT, "close");
    real_dup2 = (dup2_fn)(uintptr_t)dlsym(RTLD_NEXT, "dup2");
    real_dup3 = (dup3_fn)(uintptr_t)dlsym(RTLD_NEXT, "dup3");
    real_close_range = (close_range_fn)(uintptr_t)dlsym(RTLD_NEXT, "close_range");
    real_fcntl = (fcntl_fn)(uintptr_t)dlsym(RTLD_NEXT, "fcntl");
    real_fcntl64 = (fcntl_fn)(uintptr_t)dlsym(RTLD_NEXT, "fcntl64");
    real_open = (open_fn)(uintptr_t)dlsym(RTLD_NEXT, "open");
    real_open64 = (open_fn)(uintptr_t)dlsym(RTLD_NEXT, "open64");
    real_openat = (openat_fn)(uintptr_t)dlsym(RTLD_NEXT, "openat");
    real_openat64 = (openat_fn)(uintptr_t)dlsym(RTLD_NEXT, "openat64");
}

/* Whether a loupe variable (or LD_PRELOAD) is one --no-follow keeps from exec'd programs. */
static int loupe_var(const char *kv) {
    return strncmp(kv, "LOUPE_RECORD_", 13) == 0 || strncmp(kv, "LD_PRELOAD=", 11) == 0;
}

/* envp without loupe's variables, LD_PRELOAD without loupe's libraries (freed with env_free()
 * by the caller when the exec failed), or NULL when out of memory. */
static char **no_follow_env(char *const envp[], int from_handler) {
    size_t n = 0;
    while (envp != NULL && envp[n] != NULL) {
        n++;
    }
    /* from a signal handler, no malloc (its lock may be the interrupted code's): a mapping of
     * its own, n + 2 pointers and its size in front (env_free()) */
    char **out;
    if (from_handler) {
        size_t bytes = (n + 3) * sizeof(*out);
        void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        out = m != MAP_FAILED ? (char **)m + 1 : NULL;
        if (out != NULL) {
            memcpy(m, &bytes, sizeof bytes);
        }
    } else {
        out = calloc(n + 2, sizeof(*out));
    }
    static char ldp[8200];
    if (out == NULL) {
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (!loupe_var(envp[i])) {
            out[k++] = envp[i];
        } else if (strncmp(envp[i], "LD_PRELOAD=", 11) == 0) {
            size_t m = 11;
            memcpy(ldp, "LD_PRELOAD=", 11);
            for (const char *p = envp[i] + 11; *p;) {
                size_t len = strcspn(p, ": ");
                int ours = 0;
                if (len > 0) {
                    char entry[4096];
                    snprintf(entry, sizeof entry, "%.*s", (int)len, p);
                    ours = strstr(entry, "libloupe_preload.so") != NULL ||
                           strstr(entry, "libloupe.so") != NULL ||
                           strstr(entry, "libloupe_mpi.so") != NULL;
                }
                if (len > 0 && !ours && m + len + 2 < sizeof ldp) {
                    if (m > 11) {
                        ldp[m++] = ':';
                    }
                    memcpy(ldp + m, p, len);
                    m += len;
                }
                p += len;
                p += strspn(p, ": ");
            }
            ldp[m] = 0;
            if (m > 11) {
                out[k++] = ldp;
            }
        }
    }
    out[k] = NULL;
    return out;
}

/* ---- an exec of a program the preload cannot enter ----
 * A statically linked program (no PT_INTERP: no dynamic loader reads LD_PRELOAD) or a set-ID one
 * of another owner (the loader's secure-execution mode, ld.so(8), ignores LD_PRELOAD) would run
 * untraced and unnoticed; `loupe record` of it samples it from outside, but inside a tree only
 * the exec'ing process sees it. So before the exec it says so once on stderr (not under
 * LOUPE_RECORD_QUIET, record -q), and its own trace keeps the metadata record.untraced_exec,
 * which keeps the trace of a process that recorded nothing else (a shell's fork child). */

static const char *untraceable(int fd) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        return NULL;
    }
    if ((st.st_mode & S_ISUID) && st.st_uid != geteuid()) {
        return "a set-user-ID program";
    }
    if ((st.st_mode & S_ISGID) && st.st_gid != getegid()) {
        return "a set-group-ID program";
    }
    Elf64_Ehdr eh;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr)) {
        return NULL; /* a script (its interpreter is what runs), or not 64-bit ELF */
    }
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != (ssize_t)sizeof ph) {
            return NULL;
        }
        if (ph.p_type == PT_INTERP) {
            return NULL;
        }
    }
    return "a static binary";
}

/* path (searched in PATH when search and it has no slash), or fd >= 0 for fexecve. */
static void note_untraced(const char *path, int fd, int search, int from_handler) {
    if (no_follow_seen || from_handler || getenv("LOUPE_RECORD_RUN_DIR") == NULL) {
        /* --no-follow: exec'd programs are not to be traced anyway; from a signal handler the
         * metadata would malloc (the recording is handed over: hand_over_at_exec()) */
        return;
    }
    char buf[4096];
    int own = fd < 0;
    if (own && path != NULL && search && strchr(path, '/') == NULL) {
        const char *dirs = getenv("PATH");
        for (const char *d = dirs ? dirs : "/bin:/usr/bin"; fd < 0 && *d;) {
            size_t len = strcspn(d, ":");
            snprintf(buf, sizeof buf, "%.*s%s%s", (int)len, d, len ? "/" : "", path);
            fd = access(buf, X_OK) == 0 ? open(buf, O_RDONLY | O_CLOEXEC) : -1;
            d += len + (d[len] == ':');
        }
    } else if (own && path != NULL) {
        fd = open(path, O_RDONLY | O_CLOEXEC);
    }
    const char *what = fd >= 0 ? untraceable(fd) : NULL;
    if (own && fd >= 0) {
        close(fd);
    }
    if (what == NULL) {
        return;
    }
    char v[4200];
    snprintf(v, sizeof v, "%s: %s", path != NULL ? path : "(fexecve)", what);
    (void)loupe_set_metadata("record.untraced_exec", v);
    untraced_noted = 1;
    if (getenv("LOUPE_RECORD_QUIET") == NULL) {
        char line[4400];
        int n = snprintf(line, sizeof line,
                         "loupe record: note: pid %ld execs %s, which is not traced (the preload "
                         "cannot enter it; `loupe record %s` samples it from outside)\n",
                         (long)getpid(), v, path != NULL ? path : "PROG");
        (void)!write(2, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
    }
}

/* ---- an exec from a signal handler: the recording is handed to `loupe record` ----
 * POSIX makes the exec family async-signal-safe, and a program may exec from a handler (a
 * watchdog's SIGALRM, a re-exec on SIGHUP). The stop that writes the trace mallocs, and a signal
 * that interrupted free() holds malloc's lock: the exec hung (2 of 6 runs). So an exec whose stack
 * has a signal frame (the kernel's return into the restorer, which libgcc's unwinder marks: the
 * frame below is a signal frame, _Unwind_GetIPInfo's ip_before_insn) writes nothing: the names
 * go into the region (loupe__crash_exit_names(), signal-safe), a marker file says "handed over at
 * exec", and the exec goes on. The region is recovered by `loupe record` after the exec unmapped
 * it, as a death's is (its recording and samples are all in it), under the next free name: a
 * region file as <region>.exec beside it, the root's memfd as <regions>/<pid>.exec (which also
 * keeps the next image off the memfd: it records into a region file of its own). Only open,
 * close and string copies here. */
void loupe__crash_exit_names(void); /* libloupe (src/session/crash.c) */
int loupe__region_collected(void);  /* libloupe (src/session/crash.c) */

typedef struct frame_scan {
    int signal_frame, depth;
} frame_scan;

static _Unwind_Reason_Code frame_one(struct _Unwind_Context *c, void *arg) {
    frame_scan *f = arg;
    int before = 0;
    (void)_Unwind_GetIPInfo(c, &before);
    if (before) {
        f->signal_frame = 1;
        return _URC_END_OF_STACK;
    }
    return ++f->depth < 1024 ? _URC_NO_REASON : _URC_END_OF_STACK;
}

static int in_signal_handler(void) {
    if ((!started || getpid() != started_pid) && writing_pid != getpid()) {
        return 0; /* nothing of loupe's runs at this exec */
    }
    frame_scan f = {0, 0};
    (void)_Unwind_Backtrace(frame_one, &f);
    return f.signal_frame;
}

static char handover_path[4300];

/* dst = a + b + c (each may be NULL), within size; async-signal-safe. */
static void cat3(char *dst, size_t size, const char *a, const char *b, const char *c) {
    size_t n = 0;
    const char *parts[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        for (const char *p = parts[i]; p != NULL && *p && n + 1 < size; p++) {
            dst[n++] = *p;
        }
    }
    dst[n] = 0;
}

static void hand_over_at_exec(int lost) {
    handover_path[0] = 0;
    if (regions_dir[0] == 0) {
        return; /* --no-follow: the root's memfd is recovered as an exec's without a marker */
    }
    if (!lost) {
        loupe__crash_exit_names();
    }
    char pid[24], *p = pid + sizeof pid - 1;
    *p = 0;
    for (unsigned long v = (unsigned long)getpid(); v != 0 || p == pid + sizeof pid - 1; v /= 10) {
        *--p = (char)('0' + v % 10);
    }
    /* lost: the handler interrupted this image's stop while it wrote the trace (the session
     * was collected out of the region already): nothing can be handed over, and the marker
     * <...>.lost has loupe record say so */
    const char *ext = lost ? ".lost" : ".exec";
    if (region_path[0] != 0) {
        cat3(handover_path, sizeof handover_path, region_path, ext, NULL);
    } else {
        cat3(handover_path, sizeof handover_path, regions_dir, "/", p);
        size_t l = strlen(handover_path);
        cat3(handover_path + l, sizeof handover_path - l, ext, NULL, NULL);
    }
    int fd = open(handover_path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    if (fd >= 0) {
        close(fd);
    }
}

/* Before an exec: 1 when this process's session was stopped (to be restarted if the exec
 * fails), 2 when it was handed over (from a signal handler: it goes on if the exec fails).
 * *env becomes the environment to pass (a no_follow_env() copy under --no-follow). */
static int before_exec(char *const **env, char ***copy, int from_handler) {
    *copy = NULL;
    int ours = started && getpid() == started_pid;
    if (from_handler && !ours && writing_pid == getpid()) {
        /* the exit's stop interrupted: before its collect the region still holds the session
         * (handed over), after it the events are only in the stop's memory (said as lost) */
        hand_over_at_exec(loupe__region_collected());
        ours = 2;
    } else if (ours && from_handler) {
        hand_over_at_exec(0);
        ours = 2;
    } else if (ours) {
        stop_and_write(1);
    }
    if (no_follow_seen) {
        *copy = no_follow_env(*env, from_handler);
        if (*copy != NULL) {
            *env = *copy;
        }
    }
    return ours;
}

static void env_free(char **copy, int from_handler) {
    if (copy != NULL && from_handler) {
        size_t bytes;
        memcpy(&bytes, copy - 1, sizeof bytes);
        munmap(copy - 1, bytes);
    } else {
        free(copy);
    }
}

/* The exec failed: this image goes on, and so does its trace (a new session, the next name; a
 * handed-over one goes on as it was). */
static void after_failed_exec(int stopped, char **copy, int from_handler) {
    int e = errno;
    env_free(copy, from_handler);
    if (stopped == 2 && handover_path[0] != 0) {
        (void)unlink(handover_path);
        handover_path[0] = 0;
    } else if (stopped == 1) {
        set_prefix();
        opts.file_prefix = opt_run_dir[0] ? opt_prefix : opts.file_prefix;
        start_session();
    }
    errno = e;
}

INTERPOSE int execve(const char *path, char *const argv[], char *const envp[]);
INTERPOSE int execve(const char *path, char *const argv[], char *const envp[]) {
    if (real_execve == NULL) {
        resolve_real();
    }
    execve_fn real = real_execve;
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    char **copy;
    int h = in_signal_handler();
    note_untraced(path, -1, 0, h);
    int stopped = before_exec(&envp, &copy, h);
    int r = real(path, argv, envp);
    after_failed_exec(stopped, copy, h);
    return r;
}

INTERPOSE int execv(const char *path, char *const argv[]);
INTERPOSE int execv(const char *path, char *const argv[]) {
    return execve(path, argv, environ);
}

INTERPOSE int execvpe(const char *file, char *const argv[], char *const envp[]);
INTERPOSE int execvpe(const char *file, char *const argv[], char *const envp[]) {
    if (real_execvpe == NULL) {
        resolve_real();
    }
    execvpe_fn real = real_execvpe;
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    char **copy;
    int h = in_signal_handler();
    note_untraced(file, -1, 1, h);
    int stopped = before_exec(&envp, &copy, h);
    int r = real(file, argv, envp);
    after_failed_exec(stopped, copy, h);
    return r;
}

INTERPOSE int execvp(const char *file, char *const argv[]);
INTERPOSE int execvp(const char *file, char *const argv[]) {
    return execvpe(file, argv, environ);
}

INTERPOSE int fexecve(int fd, char *const argv[], char *const envp[]);
INTERPOSE int fexecve(int fd, char *const argv[], char *const envp[]) {
    if (real_fexecve == NULL) {
        resolve_real();
    }
    fexecve_fn real = real_fexecve;
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    char **copy;
    int h = in_signal_handler();
    note_untraced(NULL, fd, 0, h);
    int stopped = before_exec(&envp, &copy, h);
    int r = real(fd, argv, envp);
    after_failed_exec(stopped, copy, h);
    return r;
}

/* execl, execlp, execle: the arguments into an array, on the stack up to 256 of them (these
 * are async-signal-safe in POSIX, as execve is), else malloc'd. */
#define STACK_ARGS 256

static char **list_args(const char *arg0, va_list ap, char **small, char ***envp) {
    va_list cp;
    va_copy(cp, ap);
    size_t n = 1;
    if (arg0 != NULL) {
        while (va_arg(cp, char *) != NULL) {
            n++;
        }
    }
    va_end(cp);
    char **argv = n + 1 <= STACK_ARGS ? small : malloc((n + 1) * sizeof(*argv));
    if (argv == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    argv[0] = (char *)(uintptr_t)arg0;
    for (size_t i = 1; i < n; i++) {
        argv[i] = va_arg(ap, char *);
    }
    argv[n] = NULL;
    if (arg0 != NULL) {
        (void)va_arg(ap, char *); /* the terminating NULL */
    }
    if (envp != NULL) {
        *envp = va_arg(ap, char **);
    }
    return argv;
}

INTERPOSE int execl(const char *path, const char *arg, ...);
INTERPOSE int execl(const char *path, const char *arg, ...) {
    char *small[STACK_ARGS];
    va_list ap;
    va_start(ap, arg);
    char **argv = list_args(arg, ap, small, NULL);
    va_end(ap);
    int r = argv != NULL ? execve(path, argv, environ) : -1;
    if (argv != small) {
        free(argv);
    }
    return r;
}

INTERPOSE int execlp(const char *file, const char *arg, ...);
INTERPOSE int execlp(const char *file, const char *arg, ...) {
    char *small[STACK_ARGS];
    va_list ap;
    va_start(ap, arg);
    char **argv = list_args(arg, ap, small, NULL);
    va_end(ap);
    int r = argv != NULL ? execvpe(file, argv, environ) : -1;
    if (argv != small) {
        free(argv);
    }
    return r;
}

INTERPOSE int execle(const char *path, const char *arg, ...);
INTERPOSE int execle(const char *path, const char *arg, ...) {
    char *small[STACK_ARGS];
    char **envp = NULL;
    va_list ap;
    va_start(ap, arg);
    char **argv = list_args(arg, ap, small, &envp);
    va_end(ap);
    int r = argv != NULL ? execve(path, argv, envp) : -1;
    if (argv != small) {
        free(argv);
    }
    return r;
}

/* ---- wait: how a child ended, for loupe record's recovery of its region ----
 * Only the status is written (open, write, close: async-signal-safe, as a SIGCHLD handler's
 * waitpid must stay), and only for a child that was being traced (its region file is there). */
static char *put_num(char *p, long v) {
    char tmp[24];
    int n = 0;
    unsigned long u = v < 0 ? (unsigned long)-v : (unsigned long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u != 0 && n < (int)sizeof tmp);
    if (v < 0) {
        *p++ = '-';
    }
    while (n > 0) {
        *p++ = tmp[--n];
    }
    return p;
}

/* Writes the n bytes of a wait status line to path (created or replaced): 0 when all were
 * written. Async-signal-safe. */
static int put_status(const char *path, const char *line, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) {
        return -1;
    }
    ssize_t w = write(fd, line, n);
    return close(fd) == 0 && w == (ssize_t)n ? 0 : -1;
}

static void note_status(pid_t pid, int status) {
    if (pid <= 0 || regions_dir[0] == 0 || !(WIFEXITED(status) || WIFSIGNALED(status))) {
        return;
    }
    char path[4200], num[32];
    size_t dl = strlen(regions_dir);
    if (dl + 80 > sizeof path) {
        return;
    }
    memcpy(path, regions_dir, dl);
    char *p = path + dl;
    *p++ = '/';
    p = put_num(p, pid);
    /* only for a child that left a region file (<pid>.<this pid>.<n>, the first images): the
     * others wrote their trace, or were never traced, and need no cause */
    int has_region = 0;
    for (int n = 0; n < 4 && !has_region; n++) {
        char *q = p;
        *q++ = '.';
        q = put_num(q, (long)getpid());
        *q++ = '.';
        q = put_num(q, n);
        *q = 0;
        has_region = access(path, F_OK) == 0;
    }
    if (!has_region) {
        return;
    }
    memcpy(p, ".status", 8);
    char *q = put_num(num, status);
    *q++ = '\n';
    if (put_status(path, num, (size_t)(q - num)) == 0 || counts_dir[0] == 0) {
        return;
    }
    /* The regions' file system is full (a region's pages took it: a new file gets its inode,
     * but its first byte no page, ENOSPC): the counts directory, in $TMPDIR, has it instead. A
     * helper saw "exited without writing its trace" for a child killed by SIGKILL, from an empty
     * status file on a full /dev/shm. */
    (void)unlink(path);
    cat3(path, sizeof path, counts_dir, "/", NULL);
    size_t cl = strlen(path);
    if (cl + 40 > sizeof path) {
        return;
    }
    p = put_num(path + cl, pid);
    memcpy(p, ".status", 8);
    (void)put_status(path, num, (size_t)(q - num));
}

INTERPOSE pid_t waitpid(pid_t pid, int *wstatus, int options);
INTERPOSE pid_t waitpid(pid_t pid, int *wstatus, int options) {
    if (real_waitpid == NULL) {
        resolve_real();
    }
    waitpid_fn real = real_waitpid;
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    int st = 0;
    pid_t r = real(pid, &st, options);
    if (r > 0) {
        int e = errno;
        note_status(r, st);
        errno = e;
        if (wstatus != NULL) {
            *wstatus = st;
        }
    }
    return r;
}

INTERPOSE pid_t wait(int *wstatus);
INTERPOSE pid_t wait(int *wstatus) {
    return waitpid(-1, wstatus, 0);
}

INTERPOSE pid_t wait4(pid_t pid, int *wstatus, int options, struct rusage *ru);
INTERPOSE pid_t wait4(pid_t pid, int *wstatus, int options, struct rusage *ru) {
    if (real_wait4 == NULL) {
        resolve_real();
    }
    wait4_fn real = real_wait4;
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    int st = 0;
    pid_t r = real(pid, &st, options, ru);
    if (r > 0) {
        int e = errno;
        note_status(r, st);
        errno = e;
        if (wstatus != NULL) {
            *wstatus = st;
        }
    }
    return r;
}

/* ---- fork: the fork points, as process-tree metadata ----
 * A forked child's files carry its parent's pid (loupe_parent_pid: the model's
 * processes[].parent_pid); the parent's carry where it forked each child: metadata
 * record.forks (not a loupe_ key: loupe_set_metadata() keeps those for the library) = "<child
 * pid>:<CLOCK_REALTIME ns at the fork>,..." (the trace's own time of a fork is that minus its
 * origin_unix_ns), set at the stop. This wrapper only appends to a static buffer (no lock, no
 * malloc: fork is called from signal handlers too); 16 KiB hold about 600 forks, the ones beyond
 * are counted ("+N"). */
static char forks_meta[16384];
static size_t forks_len;
static unsigned long forks_more;

static void note_fork(pid_t child, const struct timespec *ts) {
    char item[64], *q = item;
    q = put_num(q, (long)child);
    *q++ = ':';
    q = put_num(q, (long)ts->tv_sec);
    for (long div = 100000000L; div > 0; div /= 10) { /* tv_nsec, nine digits */
        *q++ = (char)('0' + (ts->tv_nsec / div) % 10);
    }
    *q++ = ',';
    size_t n = (size_t)(q - item);
    size_t at = __atomic_fetch_add(&forks_len, n, __ATOMIC_RELAXED);
    if (at + n < sizeof forks_meta) {
        memcpy(forks_meta + at, item, n);
    } else {
        __atomic_fetch_add(&forks_more, 1, __ATOMIC_RELAXED);
    }
}

/* At the stop: the fork points into the session's metadata. */
static void set_forks_meta(void) {
    size_t len = __atomic_load_n(&forks_len, __ATOMIC_RELAXED);
    if (len == 0) {
        return;
    }
    len = len < sizeof forks_meta ? len : sizeof forks_meta - 1;
    while (len > 0 && forks_meta[len - 1] != ',') {
        len--; /* an item cut at the end of the buffer */
    }
    char more[40] = "";
    if (forks_more != 0) {
        char *q = more;
        *q++ = '+';
        q = put_num(q, (long)forks_more);
        *q = 0;
    }
    char *v = malloc(len + sizeof more);
    if (v != NULL) {
        memcpy(v, forks_meta, len);
        snprintf(v + (len > 0 ? len - 1 : 0), sizeof more + 1, "%s%s", more[0] ? "," : "", more);
        (void)loupe_set_metadata("record.forks", v);
        free(v);
    }
}

static void forks_forget(void) {
    forks_len = 0;
    forks_more = 0;
}

INTERPOSE pid_t fork(void);
INTERPOSE pid_t fork(void) {
    if (real_fork == NULL) {
        resolve_real();
    }
    fork_fn real = real_fork;
    if (real == NULL) {
        errno = ENOSYS;
        return -1;
    }
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    int ours = started && getpid() == started_pid;
    pid_t p = real();
    if (p > 0 && ours) {
        note_fork(p, &ts);
    }
    return p;
}

/* ---- posix_spawn: a fork and an exec inside glibc ----
 * glibc's posix_spawn runs the child with clone(CLONE_VM | CLONE_VFORK) and execs it with its
 * internal __execve (glibc's sysdeps/unix/sysv/linux/spawni.c): neither the fork wrapper above
 * nor the exec family sees it, and the parent's session is untouched (nothing to write: the
 * parent does not exec). The spawned image is traced from its start when its environment has
 * loupe's variables (the caller's environ, under follow). What this wrapper adds: the spawn
 * point in record.forks, as fork()'s, and under --no-follow an environment without loupe, as
 * the exec family gives. system() spawns with glibc's internal __posix_spawn
 * (sysdeps/posix/system.c), which no wrapper sees: system() below does what glibc's does
 * through this wrapper instead, so its shell's spawn point is in record.forks too. */
static int spawn_common(spawn_fn real, pid_t *pid, const char *path,
                        const posix_spawn_file_actions_t *fa, const posix_spawnattr_t *attr,
                        char *const argv[], char *const envp[]) {
    if (real == NULL) {
        return ENOSYS;
    }
    char **copy = NULL;
    if (no_follow_seen) {
        copy = no_follow_env(envp, 0);
        envp = copy != NULL ? copy : envp;
    }
    struct timespec ts;
    (void)clock_gettime(CLOCK_REALTIME, &ts);
    int ours = started && getpid() == started_pid;
    pid_t child = 0;
    int r = real(&child, path, fa, attr, argv, envp);
    free(copy);
    if (r == 0 && ours && child > 0) {
        note_fork(child, &ts);
    }
    if (pid != NULL && r == 0) {
        *pid = child;
    }
    return r;
}

INTERPOSE int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                          const posix_spawnattr_t *attr, char *const argv[], char *const envp[]);
INTERPOSE int posix_spawn(pid_t *pid, const char *path, const posix_spawn_file_actions_t *fa,
                          const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    if (real_spawn == NULL) {
        resolve_real();
    }
    return spawn_common(real_spawn, pid, path, fa, attr, argv, envp);
}

INTERPOSE int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                           const posix_spawnattr_t *attr, char *const argv[], char *const envp[]);
INTERPOSE int posix_spawnp(pid_t *pid, const char *file, const posix_spawn_file_actions_t *fa,
                           const posix_spawnattr_t *attr, char *const argv[], char *const envp[]) {
    if (real_spawnp == NULL) {
        resolve_real();
    }
    return spawn_common(real_spawnp, pid, file, fa, attr, argv, envp);
}

/* ---- system(): glibc's, through the posix_spawn wrapper (its spawn point) ----
 * What glibc 2.36's sysdeps/posix/system.c does (POSIX.1-2017 system()): SIGINT and SIGQUIT
 * ignored in the caller while any thread's command runs (a count: the first call saves the
 * dispositions, the last restores them), SIGCHLD blocked in the calling thread, "/bin/sh -c
 * <command>" spawned with the caller's mask and SIGINT/SIGQUIT back to default in the child
 * (where the caller had not ignored them), waited for; a shell that could not be spawned reads
 * as _exit(127); system(NULL) tells whether a shell is there ("exit 0" runs). A cancelled
 * caller (waitpid is a cancellation point) kills and reaps the child and restores the
 * signals, as glibc's cancel_handler does. */
static pthread_mutex_t system_lock = PTHREAD_MUTEX_INITIALIZER;
static int system_refs;
static struct sigaction system_intr, system_quit;

typedef struct system_call {
    pid_t pid;
    sigset_t omask;
} system_call;

static void system_leave(const sigset_t *omask) {
    pthread_mutex_lock(&system_lock);
    if (--system_refs == 0) {
        (void)sigaction(SIGINT, &system_intr, NULL);
        (void)sigaction(SIGQUIT, &system_quit, NULL);
    }
    pthread_mutex_unlock(&system_lock);
    (void)pthread_sigmask(SIG_SETMASK, omask, NULL);
}

static void system_cancelled(void *arg) {
    system_call *c = arg;
    (void)kill(c->pid, SIGKILL);
    int st;
    while (real_waitpid(c->pid, &st, 0) < 0 && errno == EINTR) {
    }
    system_leave(&c->omask);
}

static int system_run(const char *line) {
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    pthread_mutex_lock(&system_lock);
    if (system_refs++ == 0) {
        (void)sigaction(SIGINT, &ign, &system_intr);
        (void)sigaction(SIGQUIT, &ign, &system_quit);
    }
    sigset_t reset;
    sigemptyset(&reset);
    if (system_intr.sa_handler != SIG_IGN) {
        sigaddset(&reset, SIGINT);
    }
    if (system_quit.sa_handler != SIG_IGN) {
        sigaddset(&reset, SIGQUIT);
    }
    pthread_mutex_unlock(&system_lock);
    system_call c = {0};
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    (void)pthread_sigmask(SIG_BLOCK, &chld, &c.omask);
    posix_spawnattr_t attr;
    int status = -1;
    int ret = posix_spawnattr_init(&attr);
    if (ret == 0) {
        (void)posix_spawnattr_setsigmask(&attr, &c.omask);
        (void)posix_spawnattr_setsigdefault(&attr, &reset);
        (void)posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
        char sh[] = "sh", dash_c[] = "-c";
        /* posix_spawn's argv is char *const[] but never written (POSIX) */
        char *argv[] = {sh, dash_c, (char *)(uintptr_t)line, NULL};
        ret = spawn_common(real_spawn, &c.pid, "/bin/sh", NULL, &attr, argv, environ);
        (void)posix_spawnattr_destroy(&attr);
    }
    if (ret == 0) {
        pthread_cleanup_push(system_cancelled, &c);
        pid_t r;
        while ((r = real_waitpid(c.pid, &status, 0)) < 0 && errno == EINTR) {
        }
        if (r != c.pid) {
            status = -1;
        } else {
            note_status(r, status);
        }
        pthread_cleanup_pop(0);
    } else {
        status = 127 << 8; /* W_EXITCODE(127, 0) */
    }
    system_leave(&c.omask);
    if (ret != 0) {
        errno = ret;
    }
    return status;
}

INTERPOSE int system(const char *command);
INTERPOSE int system(const char *command) {
    if (real_spawn == NULL || real_waitpid == NULL) {
        resolve_real();
    }
    if (real_spawn == NULL || real_waitpid == NULL) {
        errno = ENOSYS;
        return -1;
    }
    if (command == NULL) {
        return system_run("exit 0") == 0;
    }
    return system_run(command);
}

/* ---- _exit(), _Exit(): no atexit stop, so the names go into the region first ----
 * A process that ends with _exit() (a fork()ed child's usual end: no atexit handler of the
 * parent's, no stdio buffer flushed twice, the Linux man page exit(3) NOTES) runs no atexit stop:
 * `loupe record` recovers its region, whose name table the keeper fills every millisecond; names
 * first used in the last one would read "(name lost 0x...)". */

void loupe__crash_exit_memlost(const char *path); /* libloupe (src/session/crash.c) */

/* "<counts_dir>/<pid>.<ppid>.memlost": where a process recording into its own memory (no room
 * in the regions' file system) says what its death loses. Built at the exit, without stdio
 * (async-signal-safe), since a fork child has another pid. */
static void memlost_path(char *b, size_t size) {
    /* the parent at the start, as the region file's name has it: an orphan's getppid() at its
     * exit is another process (a helper saw an orphan counted and said "not counted" too) */
    char num[64], *p = put_num(num, (long)syscall(SYS_getpid));
    *p++ = '.';
    p = put_num(p, session_ppid);
    *p = 0;
    cat3(b, size, counts_dir, "/", num);
    size_t l = strlen(b);
    cat3(b + l, size - l, ".memlost", NULL, NULL);
}

static _Noreturn void exit_now(exit_fn real, int status) {
    loupe__crash_exit_names();
    if (counts_dir[0] != 0) {
        char path[4200];
        memlost_path(path, sizeof path);
        loupe__crash_exit_memlost(path);
    }
    if (real != NULL) {
        real(status);
    }
    for (;;) {
        (void)syscall(SYS_exit_group, status); /* glibc sysdeps/unix/sysv/linux/_exit.c */
    }
}

INTERPOSE _Noreturn void _exit(int status);
INTERPOSE _Noreturn void _exit(int status) {
    exit_now(real_exit_, status);
}

INTERPOSE _Noreturn void _Exit(int status);
INTERPOSE _Noreturn void _Exit(int status) {
    exit_now(real_Exit, status);
}

/* In libloupe (src/base/ownfd.h): the table of loupe's own fds. */
#define LOUPE__FD_MAX 65536 /* ownfd.h's */
int loupe__fd_is_own(int fd);
void loupe__fd_surrender(int fd, const char *how);
int loupe__fd_closing(int fd);
int loupe__fd_is_loupe_thread(void);
int loupe__fd_adopt(int fd, const char *what);

/* ---- close, dup2, dup3, close_range, closefrom: loupe's fds are not the program's to lose ----
 * loupe keeps a few fds open in the program (base/ownfd.h: the sampler's wake-up and perf events,
 * the spools), at high numbers. A program may close every fd (a daemon, closefrom(3), Python's
 * subprocess) or dup2 a file of its own onto a number, and then use that number as its own. So:
 * - close(N) and dup2/dup3 onto N, for one of loupe's N: the number becomes the program's at once
 *   (loupe__fd_surrender), then the call goes through unchanged: the program gets exactly what it
 *   would untraced, and loupe never reads, writes or closes N again (its owner opens another
 *   number: the spools reopen their files, the sampler makes another eventfd, a thread's ring
 *   stays mapped and is still drained);
 * - close_range/closefrom over a range: loupe's numbers in it stay open (they are close-on-exec,
 *   so an exec that follows still gets none) and the rest is closed, in pieces around them.
 * The wrappers call libc's own functions (a close of the program's is a cancellation point
 * still), or the system call where libc has none. Each is async-signal-safe, as the call is. */
INTERPOSE int close(int fd);
INTERPOSE int close(int fd) {
    if (!loupe__fd_closing(fd)) {
        return 0; /* loupe's thread, a number the program took over: the program's to close */
    }
    return real_close != NULL ? real_close(fd) : (int)syscall(SYS_close, fd);
}

/* open, openat (and their 64 names): on loupe's own threads (base/ownfd.h), the fd a library
 * opens (libdw's ELF and debug files, kept open while the sampler unwinds) is moved to one of
 * loupe's numbers before the library sees it, so the program's numbers stay the program's and
 * its close of every fd cannot pull a file from under libdw. The program's own calls only pay
 * one thread-local read. */

static int open_mode_given(int flags) {
#ifdef O_TMPFILE
    return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE;
#else
    return (flags & O_CREAT) != 0;
#endif
}

static int own_open(int fd) {
    return fd >= 0 && loupe__fd_is_loupe_thread()
               ? loupe__fd_adopt(fd, "a file a library opened on loupe's thread")
               : fd;
}

/* libc's own (a cancellation point, as the program's open is), or the system call before the
 * constructor looked them up. */
static int do_openat(openat_fn real, open_fn real_at_cwd, int dirfd, const char *path, int flags,
                     mode_t mode) {
    if (dirfd == AT_FDCWD && real_at_cwd != NULL) {
        return own_open(real_at_cwd(path, flags, mode));
    }
    if (real != NULL) {
        return own_open(real(dirfd, path, flags, mode));
    }
    return own_open((int)syscall(SYS_openat, dirfd, path, flags, mode));
}

#define OPEN_MODE(flags, mode)                                                                     \
    mode_t mode = 0;                                                                               \
    if (open_mode_given(flags)) {                                                                  \
        va_list ap;                                                                                \
        va_start(ap, flags);                                                                       \
        mode = (mode_t)va_arg(ap, unsigned);                                                       \
        va_end(ap);                                                                                \
    }

INTERPOSE int open(const char *path, int flags, ...);
INTERPOSE int open(const char *path, int flags, ...) {
    OPEN_MODE(flags, mode)
    return do_openat(NULL, real_open, AT_FDCWD, path, flags, mode);
}

INTERPOSE int open64(const char *path, int flags, ...);
INTERPOSE int open64(const char *path, int flags, ...) {
    OPEN_MODE(flags, mode)
    return do_openat(NULL, real_open64, AT_FDCWD, path, flags, mode);
}

INTERPOSE int openat(int dirfd, const char *path, int flags, ...);
INTERPOSE int openat(int dirfd, const char *path, int flags, ...) {
    OPEN_MODE(flags, mode)
    return do_openat(real_openat, NULL, dirfd, path, flags, mode);
}

INTERPOSE int openat64(int dirfd, const char *path, int flags, ...);
INTERPOSE int openat64(int dirfd, const char *path, int flags, ...) {
    OPEN_MODE(flags, mode)
    return do_openat(real_openat64, NULL, dirfd, path, flags, mode);
}

INTERPOSE int dup2(int oldfd, int newfd);
INTERPOSE int dup2(int oldfd, int newfd) {
    if (oldfd != newfd && loupe__fd_is_own(newfd) && !loupe__fd_is_loupe_thread()) {
        loupe__fd_surrender(newfd, "replaced (dup2)");
    }
    if (real_dup2 != NULL) {
        return real_dup2(oldfd, newfd);
    }
    if (oldfd == newfd) {
        return fcntl(oldfd, F_GETFD) < 0 ? -1 : newfd;
    }
    return (int)syscall(SYS_dup3, oldfd, newfd, 0);
}

INTERPOSE int dup3(int oldfd, int newfd, int flags);
INTERPOSE int dup3(int oldfd, int newfd, int flags) {
    if (oldfd != newfd && loupe__fd_is_own(newfd) && !loupe__fd_is_loupe_thread()) {
        loupe__fd_surrender(newfd, "replaced (dup3)");
    }
    return real_dup3 != NULL ? real_dup3(oldfd, newfd, flags)
                             : (int)syscall(SYS_dup3, oldfd, newfd, flags);
}

/* fcntl, fcntl64: to the program's threads, one of loupe's numbers is not open (EBADF for every
 * command), as it is not in the untraced run. A program that asks before it takes a number sees
 * it free: bash's `exec 1025>f` asks F_GETFD of 1025, and an open number is one bash saves and
 * puts back after the redirection (its own fds are close-on-exec, as loupe's are), so the script's
 * file was never at 1025 and its writes there failed with EBADF. Now its dup2 onto the number
 * gives it the program (loupe__fd_surrender()). The argument is passed on as the one word it is
 * (an int or a pointer, as glibc's own fcntl reads it). Async-signal-safe, as fcntl is. */
static int fcntl_call(fcntl_fn real, int fd, int cmd, void *arg) {
    if (loupe__fd_is_own(fd) && !loupe__fd_is_loupe_thread()) {
        errno = EBADF;
        return -1;
    }
    return real != NULL ? real(fd, cmd, arg) : (int)syscall(SYS_fcntl, fd, cmd, arg);
}

#define FCNTL_ARG(cmd)                                                                             \
    va_list ap;                                                                                    \
    va_start(ap, cmd);                                                                             \
    void *arg = va_arg(ap, void *);                                                                \
    va_end(ap);

INTERPOSE int fcntl(int fd, int cmd, ...);
INTERPOSE int fcntl(int fd, int cmd, ...) {
    FCNTL_ARG(cmd)
    return fcntl_call(real_fcntl, fd, cmd, arg);
}

INTERPOSE int fcntl64(int fd, int cmd, ...);
INTERPOSE int fcntl64(int fd, int cmd, ...) {
    FCNTL_ARG(cmd)
    return fcntl_call(real_fcntl64 != NULL ? real_fcntl64 : real_fcntl, fd, cmd, arg);
}

static int range_call(unsigned first, unsigned last, int flags) {
    if (real_close_range != NULL) {
        return real_close_range(first, last, flags);
    }
#ifdef SYS_close_range
    return (int)syscall(SYS_close_range, first, last, flags);
#else
    errno = ENOSYS;
    return -1;
#endif
}

/* close_range(2) of [first, last] less loupe's numbers (CLOSE_RANGE_CLOEXEC marks them, which
 * they already are). The first error is returned, as one call's would be. */
INTERPOSE int close_range(unsigned first, unsigned last, int flags);
INTERPOSE int close_range(unsigned first, unsigned last, int flags) {
    if (loupe__fd_is_loupe_thread() == 2) {
        return range_call(first, last, flags); /* a private table's: nothing of the program's */
    }
#ifdef CLOSE_RANGE_CLOEXEC
    if ((unsigned)flags & CLOSE_RANGE_CLOEXEC) {
        return range_call(first, last, flags);
    }
#endif
    if (first > last) {
        return range_call(first, last, flags); /* EINVAL, from the kernel */
    }
    int rc = 0, err = 0;
    unsigned from = first;
    unsigned top = last < LOUPE__FD_MAX - 1u ? last : LOUPE__FD_MAX - 1u;
    for (unsigned fd = first; fd <= top && fd >= first; fd++) {
        if (!loupe__fd_is_own((int)fd)) {
            continue;
        }
        if (fd > from && range_call(from, fd - 1, flags) != 0 && rc == 0) {
            rc = -1;
            err = errno;
        }
        from = fd + 1;
    }
    if (from <= last && from >= first && range_call(from, last, flags) != 0 && rc == 0) {
        rc = -1;
        err = errno;
    }
    if (rc != 0) {
        errno = err;
    }
    return rc;
}

/* closefrom(3) (glibc 2.34): close_range from lowfd to the end, loupe's numbers kept; glibc's
 * own falls back to closing each number of /proc/self/fd where the kernel has no close_range. */
INTERPOSE void closefrom(int lowfd);
INTERPOSE void closefrom(int lowfd) {
    if (lowfd < 0) {
        lowfd = 0;
    }
    if (close_range((unsigned)lowfd, ~0u, 0) == 0) {
        return;
    }
    DIR *d = opendir("/proc/self/fd");
    int self = d != NULL ? dirfd(d) : -1;
    for (struct dirent *e = d != NULL ? readdir(d) : NULL; e != NULL; e = readdir(d)) {
        int fd = atoi(e->d_name);
        if (e->d_name[0] >= '0' && e->d_name[0] <= '9' && fd >= lowfd && fd != self &&
            !loupe__fd_is_own(fd)) {
            (void)close(fd);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
}

/* In libloupe (src/record/region.h). */
void loupe__region_fit_as(uint64_t limit);

/* ---- setrlimit, prlimit: a program that lowers its own RLIMIT_AS ----
 * loupe's recording region is reserved whole at the start, sized within an eighth of the limit
 * the process started with (src/record/region.c). A program that lowers the limit itself later
 * (to 512 MiB, say) would find most of it taken by that reservation and its malloc failing: the
 * region first gives back what it never handed out, down to an eighth of the new limit
 * (loupe__region_fit_as), then the call goes through unchanged. */
/* The sanitizer runtimes call setrlimit (RLIMIT_CORE) from their own start, before their shadow
 * memory exists: these wrappers must not be instrumented (an ASan build's checked read of a
 * static here was a SIGSEGV before main in every traced program). */
#if defined(__SANITIZE_ADDRESS__)
#define RLIMIT_WRAPPER __attribute__((no_sanitize_address, noinline))
#else
#define RLIMIT_WRAPPER
#endif

typedef int (*setrlimit_fn)(__rlimit_resource_t, const struct rlimit *);
typedef int (*prlimit_fn)(pid_t, __rlimit_resource_t, const struct rlimit *, struct rlimit *);
static setrlimit_fn real_setrlimit, real_setrlimit64;
static prlimit_fn real_prlimit, real_prlimit64;

RLIMIT_WRAPPER static void as_lowered(int resource, const struct rlimit *rl) {
    if (resource == RLIMIT_AS && rl != NULL && rl->rlim_cur != RLIM_INFINITY) {
        loupe__region_fit_as((uint64_t)rl->rlim_cur);
    }
}

RLIMIT_WRAPPER static int rlimit_call(setrlimit_fn *real, const char *name,
                                      __rlimit_resource_t resource, const struct rlimit *rl) {
    if (*real == NULL) {
        *real = (setrlimit_fn)(uintptr_t)dlsym(RTLD_NEXT, name);
    }
    as_lowered((int)resource, rl);
    if (*real == NULL) {
        return (int)syscall(SYS_prlimit64, 0, resource, rl, NULL);
    }
    return (*real)(resource, rl);
}

RLIMIT_WRAPPER static int prlimit_call(prlimit_fn *real, const char *name, pid_t pid,
                                       __rlimit_resource_t resource, const struct rlimit *rl,
                                       struct rlimit *old) {
    if (*real == NULL) {
        *real = (prlimit_fn)(uintptr_t)dlsym(RTLD_NEXT, name);
    }
    if (pid == 0 || pid == getpid()) {
        as_lowered((int)resource, rl);
    }
    if (*real == NULL) {
        return (int)syscall(SYS_prlimit64, pid, resource, rl, old);
    }
    return (*real)(pid, resource, rl, old);
}

INTERPOSE RLIMIT_WRAPPER int setrlimit(__rlimit_resource_t resource, const struct rlimit *rl) {
    return rlimit_call(&real_setrlimit, "setrlimit", resource, rl);
}

INTERPOSE RLIMIT_WRAPPER int setrlimit64(__rlimit_resource_t resource, const struct rlimit64 *rl) {
    return rlimit_call(&real_setrlimit64, "setrlimit64", resource, (const struct rlimit *)rl);
}

INTERPOSE RLIMIT_WRAPPER int prlimit(pid_t pid, __rlimit_resource_t resource,
                                     const struct rlimit *rl, struct rlimit *old) {
    return prlimit_call(&real_prlimit, "prlimit", pid, resource, rl, old);
}

INTERPOSE RLIMIT_WRAPPER int prlimit64(pid_t pid, __rlimit_resource_t resource,
                                       const struct rlimit64 *rl, struct rlimit64 *old) {
    return prlimit_call(&real_prlimit64, "prlimit64", pid, resource, (const struct rlimit *)rl,
                        (struct rlimit *)old);
}
