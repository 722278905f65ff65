/* record.c: `loupe record`: runs a program with libloupe_preload.so preloaded, which traces it
 * from start to exit (see src/preload/preload.c), then reports the run directory and the counts
 * read back from the files written, on stderr: stdout is the program's. A program the preload
 * cannot enter (static; set-ID, as root) is sampled from outside instead (record_outside(),
 * loupe/outside.h).
 * Returns the program's exit status (128 + N when a signal N killed it), or one of loupe
 * record's own statuses (REC_EXIT_*: 120-123, apart from the shell's 126/127, timeout(1)'s
 * 124-127 and sysexits' 64-78, so that a script can tell them from any status the program has).
 * Once the program ran, its status is loupe record's whatever became of the trace (the trace's
 * failure is said on stderr). */
#include "cli.h"

#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <loupe/loupe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

/* loupe record's own exit statuses; any other is the program's. */
enum {
    REC_EXIT_FAILED = 120,     /* loupe record failed before running PROGRAM: usage, log
                                  directory */
    REC_EXIT_NO_TRACE = 121,   /* PROGRAM cannot be traced (found before running it) nor
                                  sampled from outside: it did not run */
    REC_EXIT_CANNOT_RUN = 122, /* PROGRAM was found but could not be executed */
    REC_EXIT_NOT_FOUND = 123,  /* PROGRAM was not found */
};

static void usage(FILE *f) {
    fprintf(f,
            "usage: loupe record [options] -- PROGRAM [ARGS...]\n"
            "\n"
            "Runs PROGRAM with loupe preloaded and traces it from start to exit: its loupe\n"
            "annotations (when it uses loupe, linked as a shared library) and, when it was\n"
            "built with -finstrument-functions, one zone per function call. Writes a run\n"
            "directory LOG_DIR/plugins/profile/<YYYY_MM_DD_HH_MM_SS>/ with jax.profiler's files\n"
            "(see --format) and prints its path. Exits with PROGRAM's exit status.\n"
            "\n"
            "options:\n"
            "  -o, --log-dir DIR      log directory (default: ./loupe-log)\n"
            "  --level N              host tracer level: 0 records nothing (no CPU samples\n"
            "                         either, unless --sample-hz is given), 1 critical,\n"
            "                         2 info (default), 3 verbose\n"
            "  --session-events N     the session's capacity in events, 16 bytes each, shared\n"
            "                         by every thread (default %llu: 1 GiB of address space,\n"
            "                         used only as events are recorded)\n"
            "  --buffer-events N      each thread's limit in events (a zone is 2; default: none,\n"
            "                         and %u with --keep-last)\n"
            "  --keep-last            when a thread's limit or the session's capacity is\n"
            "                         reached, the thread's oldest events give way (default:\n"
            "                         keep the first: the rest spill to the spool, below, or\n"
            "                         with --no-spool are dropped and counted)\n"
            "  --lazy-buffers         accepted for scripts; memory is pooled since 0.2\n"
            "  --spool[=DIR]          write every chunk a thread has filled to\n"
            "                         DIR/loupe-spool-<pid>.bin (default: the log directory)\n"
            "                         while tracing and read them back at the end: memory\n"
            "                         stays at the threads' current chunks, every event is\n"
            "                         kept; --buffer-events is then ignored. Without it, the\n"
            "                         chunks spill there only once the session's capacity is\n"
            "                         half full (keep-first: the default keeps every event, in\n"
            "                         memory while it fits)\n"
            "  --no-spool             no spill: events past the capacity are dropped (counted)\n"
            "  --spool-budget SIZE    the disk a process's spool may take (bytes, or with K, M,\n"
            "                         G, T: 20G; none: no limit; default: half the space free\n"
            "                         in its directory when the process starts); past it the\n"
            "                         spool stops and the events past the capacity are\n"
            "                         dropped, counted and named\n",
            (unsigned long long)LOUPE_DEFAULT_SESSION_EVENTS, LOUPE_DEFAULT_BUFFER_EVENTS);
    fprintf(f,
            "  --filter GLOB          function tracing: keep only calls to functions whose name\n"
            "                         matches GLOB (fnmatch(3), e.g. 'parse_*'), and the calls\n"
            "                         made inside them; repeatable\n"
            "  --exclude GLOB         function tracing: drop calls to functions matching GLOB\n"
            "                         (the calls they make stay); repeatable\n"
            "  --depth N              function tracing: keep calls at most N deep on each thread\n"
            "                         (main is 1); deeper ones are not recorded at all\n"
            "  --min-duration TIME    function tracing: drop calls shorter than TIME (a number\n"
            "                         and ns, us, ms or s: 5us), at each call's exit\n"
            "                         (dropped calls are counted as filtered, not lost)\n"
            "  --print-run-dir FILE   write the run directory's path to FILE (for scripts)\n"
            "  --fdo-profile FILE     at the end, also write the program's CPU samples as a\n"
            "                         sample profile for clang -fprofile-sample-use=FILE\n"
            "                         (LLVM's text format; build it with -g or\n"
            "                         -gline-tables-only -fdebug-info-for-profiling; the same\n"
            "                         as loupe convert RUN -o FILE.afdo afterwards); a run\n"
            "                         that cannot write one removes an older FILE\n"
            "  --no-check             run PROGRAM even when loupe finds it cannot be traced\n"
            "  --sample-hz N          CPU samples per second of each thread's CPU time, with\n"
            "                         call stacks, and on- vs. off-CPU time from context\n"
            "                         switches (default %u; 0 = off; at most 100000; above\n"
            "                         kernel.perf_event_max_sample_rate: that limit, with a\n"
            "                         warning). Where\n"
            "                         perf events are not allowed, one line says why and the\n"
            "                         trace goes on without samples\n"
            "  --no-sample            the same as --sample-hz 0\n"
            "  --sample-stacks MODE   dwarf (default: copied stacks unwound with DWARF CFI,\n"
            "                         whole stacks also without frame pointers), fp (frame\n"
            "                         pointers: cheaper) or none\n"
            "  --perfetto             also write the perfetto-json file (below)\n"
            "  --gpu                  also record the GPU's kernels, copies and memsets with\n"
            "                         CUPTI (device_tracer_level 1: a \"/device:GPU:N\" process\n"
            "                         per GPU, a track per stream); without a driver or CUPTI\n"
            "                         one line says why and the trace goes on host-only\n"
            "  --format LIST          the files to write, a comma list of:\n",
            LOUPE_SAMPLING_RECORD_HZ);
    /* The run-directory formats, from the registry (loupe/writer.h). */
    for (size_t k = 0; k < loupe_format_count(); k++) {
        const loupe_format_desc *d = loupe_format_info(k);
        if (d->run_dir_bit != 0) {
            fprintf(f, "                           %-14s %s%s\n", d->name,
                    d->host_prefixed ? "<host>" : "", d->suffix);
        }
    }
    fprintf(
        f, "                         default: jax.profiler's set (json,xplane)\n"
           "  --mpi, --no-mpi        preload the MPI library (libloupe_mpi.so: MPI calls as\n"
           "                         zones, messages as flows) always / never; default: when\n"
           "                         PROGRAM links libmpi. Under mpirun every rank writes\n"
           "                         rankNNNN.* into one run directory (docs/mpi.md)\n"
           "  --no-follow            trace PROGRAM only, not the processes it forks or the\n"
           "                         programs they exec (default: the whole process tree)\n"
           "  -q, --quiet            report only the run directory (on stderr), and what was lost\n"
           "  -h, --help             this help\n"
           "\n"
           "stdout is PROGRAM's: loupe record writes its messages and the run directory's\n"
           "path (the last line) to stderr.\n"
           "\n"
           "The whole process tree is traced: fork()ed children record into their own\n"
           "buffers and exec()ed programs from their start; every process writes\n"
           "<host>.<pid>.* files into the one run directory, which summary, convert and\n"
           "view read as one multi-process timeline; an image a pid execs writes\n"
           "<host>.<pid>.1.* (.2, ...), after the files the image before it wrote at the\n"
           "exec. loupe record waits for PROGRAM only; a child that outlives it writes its\n"
           "files when it exits. A process of the tree killed by a signal, or ending with\n"
           "_exit(), has its trace written by loupe record from the memory it recorded into\n"
           "(the cause is said). The report sums every process's files, a line each when\n"
           "there are several. Before running\n"
           "PROGRAM, loupe record checks that the loader will preload loupe into it: a\n"
           "statically linked program, a set-user-ID or set-group-ID one, one with file\n"
           "capabilities, or an ELF of another class or machine cannot be traced this way (it\n"
           "says which; call loupe_start_trace() in the program instead). A static program,\n"
           "and as root a set-ID one, is sampled from outside instead (perf events on it:\n"
           "CPU samples with frame-pointer stacks, or none with --sample-stacks none; each\n"
           "process it forks in files of its own, or none of them with --no-follow; no\n"
           "zones; a note says so). One exec'd inside the traced tree is not traced, and a\n"
           "note says so. A program that\n"
           "starts its own session sees LOUPE_RECORD=1 in its environment and gets\n"
           "LOUPE_EALREADY_STARTED: its annotations go into this recording. See docs/record.md.\n"
           "\n"
           "exit status: PROGRAM's (128 + N when signal N killed it) once it ran, even when\n"
           "its trace could not be written (that is said on stderr), or loupe record's own,\n"
           "apart from the shell's and timeout(1)'s 124-127:\n"
           "  120  loupe record failed before running PROGRAM (usage, log directory)\n"
           "  121  PROGRAM cannot be traced (found before running it) nor sampled from\n"
           "       outside: it did not run, no run directory left\n"
           "  122  PROGRAM was found but cannot be executed\n"
           "  123  PROGRAM was not found\n"
           "\n"
           "example:\n"
           "  loupe record -o /tmp/prof -- ./my_program --its-flag\n"
           "  loupe record --exclude 'std::*' --min-duration 5us -- ./my_program\n"
           "  loupe summary /tmp/prof\n");
}

/* The standard fds loupe record was started without (`prog >&-`, `<&-`: cron, supervisors):
 * /dev/null holds their numbers while loupe record runs, so that none of its own fds (the
 * memfd, its pipes) takes one and reaches the program as its stdin or stdout, and each child
 * closes them again before its exec: the program starts with the same closed ones it would have
 * untraced. */
static unsigned std_closed;

/* The program's RLIMIT_NOFILE, as loupe record was started with it: loupe record raises its own
 * soft limit (std_hold(): to 4096 within the hard limit, when it is lower: `ulimit -Sn 4` left
 * it no number for /proc/self/exe, the recorder's lock, the result file) and each child puts
 * this back before its exec (std_release_in_child()). */
static struct rlimit prog_nofile;
static int prog_nofile_known;
/* The program's SIGPIPE disposition: loupe record ignores SIGPIPE for itself (its stderr may be
 * a pipe whose reader is gone: `loupe record ... 2>&1 | head -1` killed it with SIGPIPE, 141,
 * before it gave the program's status, and left its counts directory behind), and each child
 * gets the disposition back before its exec, as it had it untraced. */
static struct sigaction prog_pipe;
static int prog_pipe_known;

static void std_hold(void) {
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    prog_pipe_known = sigaction(SIGPIPE, &ign, &prog_pipe) == 0;
    if (getrlimit(RLIMIT_NOFILE, &prog_nofile) == 0) {
        prog_nofile_known = 1;
        struct rlimit more = prog_nofile;
        if (more.rlim_cur != RLIM_INFINITY && more.rlim_cur < 4096) {
            more.rlim_cur =
                more.rlim_max == RLIM_INFINITY || more.rlim_max > 4096 ? 4096 : more.rlim_max;
            (void)setrlimit(RLIMIT_NOFILE, &more);
        }
    }
    for (int i = 0; i < 3; i++) {
        if (fcntl(i, F_GETFD) >= 0 || errno != EBADF) {
            continue;
        }
        int fd = open("/dev/null", O_RDWR | O_CLOEXEC);
        if (fd == i) {
            std_closed |= 1u << i;
        } else if (fd >= 0) {
            close(fd); /* not the lowest free number: leave it */
        }
    }
}

static void std_release_in_child(void) {
    if (prog_pipe_known) {
        (void)sigaction(SIGPIPE, &prog_pipe, NULL);
    }
    for (int i = 0; i < 3; i++) {
        if (std_closed & (1u << i)) {
            close(i);
        }
    }
    if (prog_nofile_known) {
        (void)setrlimit(RLIMIT_NOFILE, &prog_nofile); /* the program's own */
    }
}

/* In the child before its exec: the memfd moved where the program's own open()s never reach:
 * at or above its soft RLIMIT_NOFILE when that is 2048 or less (an fd above the soft limit is
 * legal, only new numbers are bounded), else at 1024 or above (select(2)'s range stays the
 * program's, as base/ownfd.h's floor). At the low number, a program run with `ulimit -Sn 4` had
 * no number left for the loader to open libc with (exit 127 under loupe record, fine untraced).
 * Where the limits leave no room, the number stays. */
static int shm_above_limit(int fd) {
    struct rlimit now;
    if (!prog_nofile_known || prog_nofile.rlim_cur == RLIM_INFINITY ||
        getrlimit(RLIMIT_NOFILE, &now) != 0) {
        return fd;
    }
    rlim_t soft = prog_nofile.rlim_cur, want = soft > 2048 ? 1024 : soft;
    if (now.rlim_cur != RLIM_INFINITY && now.rlim_cur <= want + 1) {
        /* the hard limit is the program's soft one (`ulimit -n 4`): no number above it. The
         * top quarter of a limit of 64 or more (base/ownfd.h's floor); below that, no memfd:
         * the program records in its own memory (a death loses it) rather than lose one of
         * its few numbers (at 4, the loader's for libc: exit 127) */
        if (soft < 64) {
            close(fd);
            return -1;
        }
        want = soft - soft / 4;
    }
    int nf = fcntl(fd, F_DUPFD_CLOEXEC, (int)want);
    if (nf < 0) {
        return fd;
    }
    close(fd);
    return nf;
}

/* The preload library: beside this executable (build tree), else in the install libdir. */
static int find_preload(char *buf, size_t size) {
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = 0;
        char *slash = strrchr(exe, '/');
        if (slash != NULL) {
            *slash = 0;
            int n1 = snprintf(buf, size, "%s/libloupe_preload.so", exe);
            if (n1 > 0 && (size_t)n1 < size && access(buf, R_OK) == 0) {
                return 0;
            }
            int n2 = snprintf(buf, size, "%s/../lib/libloupe_preload.so", exe);
            if (n2 > 0 && (size_t)n2 < size && access(buf, R_OK) == 0) {
                return 0;
            }
        }
    }
#ifdef LOUPE_INSTALL_LIBDIR
    snprintf(buf, size, "%s/libloupe_preload.so", LOUPE_INSTALL_LIBDIR);
    if (access(buf, R_OK) == 0) {
        return 0;
    }
#endif
    return -1;
}

static volatile pid_t child_pid;

static void forward_signal(int sig) {
    if (child_pid > 0) {
        kill(child_pid, sig);
    }
}

/* SIGINT and SIGQUIT: a terminal sends them to the whole foreground group, the program
 * included, so those are not passed on again (the program would get two); one sent to loupe's
 * own pid by a process (kill -INT) is passed on. */
static void forward_if_sent(int sig, siginfo_t *si, void *uc) {
    (void)uc;
    if (si != NULL && (si->si_code == SI_USER || si->si_code == SI_QUEUE)) {
        forward_signal(sig);
    }
}

static int parse_u(const char *s, unsigned long max, unsigned long *out) {
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (errno != 0 || end == s || *end != 0 || v > max || s[0] == '-') {
        return -1;
    }
    *out = v;
    return 0;
}

static void read_result(const char *path, char *run_dir, size_t rsize, char *lines, size_t lsize,
                        int *status) {
    FILE *f = fopen(path, "r");
    *status = -1000;
    run_dir[0] = 0;
    lines[0] = 0;
    if (f == NULL) {
        return;
    }
    char line[8192];
    size_t used = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = 0;
        char *eq = strchr(line, '=');
        if (eq == NULL) {
            continue;
        }
        *eq = 0;
        const char *k = line, *v = eq + 1;
        if (strcmp(k, "status") == 0) {
            *status = atoi(v);
        } else if (strcmp(k, "run_dir") == 0) {
            snprintf(run_dir, rsize, "%s", v);
        }
        int w = snprintf(lines + used, lsize - used, "%s=%s\n", k, v);
        if (w > 0 && (size_t)w < lsize - used) {
            used += (size_t)w;
        }
    }
    fclose(f);
}

static const char *field(const char *lines, const char *key, char *buf, size_t size) {
    size_t kl = strlen(key);
    buf[0] = 0;
    for (const char *p = lines; p && *p;) {
        if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
            size_t l = strcspn(p + kl + 1, "\n");
            snprintf(buf, size, "%.*s", (int)l, p + kl + 1);
            break;
        }
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    return buf;
}

/* mkdir -p, then a writability check: 0 or an errno. *created gets the length of the part of
 * path that existed before (path itself when it did: strlen(path)), for remove_created(). */
static int make_dirs(const char *path, size_t *created) {
    char buf[PATH_MAX];
    size_t n = strlen(path);
    *created = n;
    if (n == 0 || n >= sizeof buf) {
        return ENAMETOOLONG;
    }
    memcpy(buf, path, n + 1);
    size_t prev = 0; /* where the component being made starts (its '/') */
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0777) == 0) {
                if (*created == n) {
                    *created = prev;
                }
            } else if (errno != EEXIST) {
                return errno;
            }
            buf[i] = c;
            prev = i;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        return errno;
    }
    if (!S_ISDIR(st.st_mode)) {
        return ENOTDIR;
    }
    return access(path, W_OK | X_OK) == 0 ? 0 : errno;
}

/* <log>/plugins and <log>/plugins/profile: whether each existed before loupe_run_dir_make()
 * (note = 1 notes it), so that drop_run() removes only what this run made. */
static int had_plugins, had_profile;

static void run_parents(const char *log, int note) {
    char p[PATH_MAX + 32];
    snprintf(p, sizeof p, "%s/plugins", log);
    if (note) {
        had_plugins = access(p, F_OK) == 0;
        snprintf(p, sizeof p, "%s/plugins/profile", log);
        had_profile = access(p, F_OK) == 0;
        return;
    }
    snprintf(p, sizeof p, "%s/plugins/profile", log);
    if (!had_profile) {
        (void)rmdir(p);
    }
    snprintf(p, sizeof p, "%s/plugins", log);
    if (!had_plugins) {
        (void)rmdir(p);
    }
}

static void remove_created(const char *path, size_t created);

/* Nothing was recorded: the run directory record made (empty), its parents when record made them,
 * and the log directory's new parts go again. */
static void drop_run(const char *run, const char *log, size_t created) {
    (void)rmdir(run);
    run_parents(log, 0);
    remove_created(log, created);
}

/* Removes the directories make_dirs() created, deepest first, as long as they are empty: a run
 * that recorded nothing leaves nothing that looks like a trace. */
static void remove_created(const char *path, size_t created) {
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (created >= n || n >= sizeof buf) {
        return;
    }
    memcpy(buf, path, n + 1);
    while (n > created) {
        if (rmdir(buf) != 0) {
            return;
        }
        char *slash = strrchr(buf, '/');
        if (slash == NULL || slash == buf) {
            return;
        }
        *slash = 0;
        n = (size_t)(slash - buf);
    }
}

/* ---- what PROGRAM is (before it runs) ----
 * The dynamic loader is what preloads loupe (LD_PRELOAD, ld.so(8)), so a program it does not
 * load, or loads in secure-execution mode, cannot be traced this way. record_detect() says
 * which, from the file alone: the ELF header and program headers (elf(5): PT_INTERP names the
 * loader; none means statically linked), the mode bits, the security.capability attribute
 * (capabilities(7)) and a "#!" line (execve(2)). It is the hook a sampling recorder takes for
 * the kinds the preload cannot reach. */
typedef enum rec_kind {
    REC_TRACEABLE,      /* a dynamically linked ELF of loupe's class and machine */
    REC_SCRIPT,         /* "#!": the interpreter runs (and is what gets traced) */
    REC_OTHER,          /* neither ELF nor "#!": execvp(3) hands it to /bin/sh */
    REC_NOT_FOUND,      /* no such file (or not in PATH) */
    REC_NOT_EXECUTABLE, /* found, but not an executable file */
    REC_STATIC,         /* no PT_INTERP: statically linked, no loader runs */
    REC_SETUID,         /* set-user-ID to another user: secure-execution mode */
    REC_SETGID,         /* set-group-ID to another group: secure-execution mode */
    REC_CAPABILITIES,   /* file capabilities, for a user other than root: secure-execution */
    REC_ELF_CLASS,      /* a 32-bit ELF for a 64-bit loupe, or the reverse */
    REC_ELF_MACHINE,    /* an ELF for another machine */
} rec_kind;

/* PROGRAM as execvp(3) finds it: a name with a '/' as is, else the first executable in PATH. */
static int find_program(const char *prog, char *path, size_t size) {
    if (strchr(prog, '/') != NULL) {
        snprintf(path, size, "%s", prog);
        return access(path, F_OK) == 0 ? 0 : -1;
    }
    const char *pv = getenv("PATH");
    if (pv == NULL) {
        pv = "/usr/local/bin:/usr/bin:/bin";
    }
    for (const char *p = pv;; p++) {
        size_t len = strcspn(p, ":");
        int n = snprintf(path, size, "%.*s%s%s", (int)len, p, len ? "/" : "", prog);
        struct stat st;
        if (n > 0 && (size_t)n < size && stat(path, &st) == 0 && S_ISREG(st.st_mode) &&
            access(path, X_OK) == 0) {
            return 0;
        }
        p += len;
        if (*p == 0) {
            break;
        }
    }
    snprintf(path, size, "%s", prog);
    return -1;
}

/* The ELF header's class and machine of loupe itself (this executable). */
static void own_elf(unsigned char *cls, unsigned *machine) {
    *cls = sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32;
    *machine = 0;
    int fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
    unsigned char h[EI_NIDENT + 4];
    if (fd >= 0 && read(fd, h, sizeof h) == (ssize_t)sizeof h) {
        *machine =
            h[EI_DATA] == ELFDATA2MSB ? (unsigned)h[18] << 8 | h[19] : (unsigned)h[19] << 8 | h[18];
    }
    if (fd >= 0) {
        close(fd);
    }
}

/* PT_INTERP among an ELF's program headers: 1 yes, 0 no, -1 unreadable. The file is in the
 * machine's byte order (own_elf checked the class and machine first). */
static int has_interp(int fd, unsigned char cls) {
    uint64_t phoff;
    unsigned phnum, phentsize;
    if (cls == ELFCLASS64) {
        Elf64_Ehdr e;
        if (pread(fd, &e, sizeof e, 0) != (ssize_t)sizeof e) {
            return -1;
        }
        phoff = e.e_phoff;
        phnum = e.e_phnum;
        phentsize = e.e_phentsize;
    } else {
        Elf32_Ehdr e;
        if (pread(fd, &e, sizeof e, 0) != (ssize_t)sizeof e) {
            return -1;
        }
        phoff = e.e_phoff;
        phnum = e.e_phnum;
        phentsize = e.e_phentsize;
    }
    for (unsigned i = 0; i < phnum && i < 4096; i++) {
        uint32_t type;
        if (pread(fd, &type, sizeof type, (off_t)(phoff + (uint64_t)i * phentsize)) !=
            (ssize_t)sizeof type) {
            return -1;
        }
        if (type == PT_INTERP) {
            return 1;
        }
    }
    return 0;
}

static rec_kind record_detect_depth(const char *prog, char *path, size_t psize, char *why,
                                    size_t wsize, int depth);

/* What PROGRAM is (rec_kind); path gets the file execvp(3) would run, why a sentence for the
 * kinds other than REC_TRACEABLE and REC_OTHER ("" for those). */
static rec_kind record_detect(const char *prog, char *path, size_t psize, char *why, size_t wsize) {
    return record_detect_depth(prog, path, psize, why, wsize, 0);
}

static rec_kind record_detect_depth(const char *prog, char *path, size_t psize, char *why,
                                    size_t wsize, int depth) {
    why[0] = 0;
    if (find_program(prog, path, psize) != 0) {
        snprintf(why, wsize, "%s", strchr(prog, '/') ? strerror(ENOENT) : "not found in PATH");
        return REC_NOT_FOUND;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISREG(st.st_mode) || access(path, X_OK) != 0) {
        snprintf(why, wsize, "%s", S_ISDIR(st.st_mode) ? strerror(EISDIR) : strerror(EACCES));
        return REC_NOT_EXECUTABLE;
    }
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    unsigned char h[256];
    ssize_t n = fd >= 0 ? pread(fd, h, sizeof h - 1, 0) : -1;
    if (n < 0) {
        if (fd >= 0) {
            close(fd);
        }
        return REC_OTHER; /* executable but not readable: execve decides */
    }
    h[n] = 0;
    if (n >= 2 && h[0] == '#' && h[1] == '!') {
        close(fd);
        /* execve(2): "#!interpreter [optional-arg]" */
        char interp[PATH_MAX];
        const char *p = (const char *)h + 2;
        p += strspn(p, " \t");
        size_t len = strcspn(p, " \t\n");
        snprintf(interp, sizeof interp, "%.*s", (int)len, p);
        char ipath[PATH_MAX], iwhy[512];
        rec_kind ik = depth == 0
                          ? record_detect_depth(interp, ipath, sizeof ipath, iwhy, sizeof iwhy, 1)
                          : REC_TRACEABLE;
        if (ik >= REC_NOT_FOUND) {
            snprintf(why, wsize, "a script run by %.256s, which %s%.512s", interp,
                     ik == REC_NOT_FOUND || ik == REC_NOT_EXECUTABLE ? "cannot run: " : "is ",
                     iwhy);
            return ik;
        }
        snprintf(
            why, wsize,
            "a script run by %.256s: %.256s is what runs and what is traced, not the script (a "
            "program it starts is traced, into a run directory of its own, only when the "
            "shell passes loupe's environment on, as bash does): record the real program",
            interp, interp);
        return REC_SCRIPT;
    }
    if (n < EI_NIDENT + 4 || memcmp(h, ELFMAG, SELFMAG) != 0) {
        close(fd);
        return REC_OTHER;
    }
    unsigned char cls;
    unsigned machine;
    own_elf(&cls, &machine);
    unsigned their =
        h[EI_DATA] == ELFDATA2MSB ? (unsigned)h[18] << 8 | h[19] : (unsigned)h[19] << 8 | h[18];
    rec_kind k = REC_TRACEABLE;
    if (h[EI_CLASS] != cls) {
        snprintf(why, wsize,
                 "a %s ELF executable: loupe's preload library is %s, so the loader would skip it",
                 h[EI_CLASS] == ELFCLASS32 ? "32-bit" : "64-bit",
                 cls == ELFCLASS64 ? "64-bit" : "32-bit");
        k = REC_ELF_CLASS;
    } else if (machine != 0 && their != machine) {
        snprintf(why, wsize,
                 "an ELF executable for another machine (e_machine %u, loupe's is %u): the "
                 "loader would skip loupe's preload library",
                 their, machine);
        k = REC_ELF_MACHINE;
    } else if (has_interp(fd, cls) == 0) {
        snprintf(why, wsize,
                 "statically linked: no dynamic loader runs in it, so nothing preloads loupe "
                 "(link it dynamically, or call loupe_start_trace() in it)");
        k = REC_STATIC;
    } else if ((st.st_mode & S_ISUID) && st.st_uid != geteuid()) {
        snprintf(why, wsize,
                 "set-user-ID (owner uid %u, you are uid %u): the loader runs it in "
                 "secure-execution mode and ignores LD_PRELOAD (ld.so(8))",
                 (unsigned)st.st_uid, (unsigned)geteuid());
        k = REC_SETUID;
    } else if ((st.st_mode & S_ISGID) && st.st_gid != getegid()) {
        snprintf(why, wsize,
                 "set-group-ID (group gid %u, yours is %u): the loader runs it in "
                 "secure-execution mode and ignores LD_PRELOAD (ld.so(8))",
                 (unsigned)st.st_gid, (unsigned)getegid());
        k = REC_SETGID;
    } else if (getuid() != 0 && fgetxattr(fd, "security.capability", NULL, 0) > 0) {
        /* capabilities(7): file capabilities make the exec secure for a user other than root */
        snprintf(why, wsize,
                 "given file capabilities (security.capability, see getcap(8)): the loader runs it "
                 "in secure-execution mode and ignores LD_PRELOAD (ld.so(8))");
        k = REC_CAPABILITIES;
    }
    close(fd);
    return k;
}

/* ---- function-tracing filters (--filter, --exclude, --depth, --min-duration) ---- */
typedef struct rec_filters {
    char include[8192], exclude[8192]; /* globs, one a line (LOUPE_RECORD_FILTER / _EXCLUDE) */
    const char *depth, *min_duration;  /* as given */
    unsigned long long min_ns;
    char said[1024]; /* the options, as the final line repeats them */
} rec_filters;

static int add_line(char *buf, size_t size, const char *v) {
    size_t used = strlen(buf);
    int n = snprintf(buf + used, size - used, "%s%s", used ? "\n" : "", v);
    return n > 0 && (size_t)n < size - used && strchr(v, '\n') == NULL && v[0] ? 0 : -1;
}

/* A --min-duration: a whole number and ns, us, ms or s (uftrace's -t units). */
static int parse_duration(const char *s, unsigned long long *ns) {
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-') {
        return -1;
    }
    unsigned long long mul = strcmp(end, "ns") == 0   ? 1ull
                             : strcmp(end, "us") == 0 ? 1000ull
                             : strcmp(end, "ms") == 0 ? 1000000ull
                             : strcmp(end, "s") == 0  ? 1000000000ull
                                                      : 0;
    if (mul == 0 || v > UINT64_MAX / mul) {
        return -1;
    }
    *ns = v * mul;
    return 0;
}

/* A --spool-budget: a whole number of bytes, or one with K, M, G or T (powers of 1024), or
 * "none" (UINT64_MAX). 0 is refused (the default is written by leaving the option out). */
static int parse_bytes(const char *s, unsigned long long *out) {
    if (strcmp(s, "none") == 0) {
        *out = UINT64_MAX;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s || s[0] == '-' || v == 0) {
        return -1;
    }
    int sh = end[0] == 0     ? 0
             : end[1] != 0   ? -1
             : end[0] == 'K' ? 10
             : end[0] == 'M' ? 20
             : end[0] == 'G' ? 30
             : end[0] == 'T' ? 40
                             : -1;
    if (sh < 0 || v > (UINT64_MAX - 1) >> sh) {
        return -1;
    }
    *out = v << sh;
    return 0;
}

/* Takes argv[*i] (and its value) when it is a filter option: 1 taken, 0 not one, -1 a bad value
 * (the message printed). */
static int filter_option(rec_filters *f, int argc, char **argv, int *i) {
    const char *a = argv[*i];
    int is_f = strcmp(a, "--filter") == 0, is_e = strcmp(a, "--exclude") == 0;
    int is_d = strcmp(a, "--depth") == 0, is_m = strcmp(a, "--min-duration") == 0;
    if (!(is_f || is_e || is_d || is_m) || *i + 1 >= argc) {
        return 0;
    }
    const char *v = argv[++*i];
    size_t used = strlen(f->said);
    snprintf(f->said + used, sizeof f->said - used, "%s%s %s", used ? " " : "", a, v);
    if (is_f || is_e) {
        if (add_line(is_f ? f->include : f->exclude, sizeof f->include, v) != 0) {
            fprintf(stderr,
                    "loupe record: %s '%s': a glob must be non-empty, without a newline "
                    "(and all of them fit 8 KiB)\n",
                    a, v);
            return -1;
        }
    } else if (is_d) {
        unsigned long d;
        if (parse_u(v, 1000000, &d) != 0 || d == 0) {
            fprintf(stderr, "loupe record: --depth must be a number from 1 to 1000000, not '%s'\n",
                    v);
            return -1;
        }
        f->depth = v;
    } else {
        if (parse_duration(v, &f->min_ns) != 0) {
            fprintf(stderr,
                    "loupe record: --min-duration must be a whole number and a unit (ns, us, ms "
                    "or s), e.g. 5us, not '%s'\n",
                    v);
            return -1;
        }
        f->min_duration = v;
    }
    return 1;
}

/* The globs of one option, split into a NULL-terminated array in arr (lines is modified). */
static void filter_split(char *lines, const char **arr, size_t max) {
    size_t k = 0;
    for (char *tok = strtok(lines, "\n"); tok != NULL && k + 1 < max; tok = strtok(NULL, "\n")) {
        arr[k++] = tok;
    }
    arr[k] = NULL;
}

/* In the child, before the exec: the filters for the preload (src/preload/preload.c). */
static void filter_env(const rec_filters *f) {
    if (f->include[0]) {
        setenv("LOUPE_RECORD_FILTER", f->include, 1);
    }
    if (f->exclude[0]) {
        setenv("LOUPE_RECORD_EXCLUDE", f->exclude, 1);
    }
    if (f->depth != NULL) {
        setenv("LOUPE_RECORD_DEPTH", f->depth, 1);
    }
    if (f->min_duration != NULL) {
        char num[32];
        snprintf(num, sizeof num, "%llu", f->min_ns);
        setenv("LOUPE_RECORD_MIN_DURATION_NS", num, 1);
    }
}

/* ---- the report, from the files written ---- */
static int cmp_str(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The hint for a run that dropped events: its most-called functions (from the trace). */
static void hottest_hint(const loupe_model *m, const rec_filters *f) {
    size_t n = 0, k = 0;
    for (size_t t = 0; t < m->thread_count; t++) {
        n += m->threads[t].slice_count;
    }
    const char **names = n ? malloc(n * sizeof(*names)) : NULL;
    if (names == NULL) {
        return;
    }
    for (size_t t = 0; t < m->thread_count; t++) {
        for (size_t i = 0; i < m->threads[t].slice_count; i++) {
            const loupe_slice *s = &m->threads[t].slices[i];
            if (s->flags & LOUPE_SLICE_FUNCTION) {
                names[k++] = s->name;
            }
        }
    }
    qsort(names, k, sizeof(*names), cmp_str);
    const char *top[3] = {NULL, NULL, NULL};
    size_t topn[3] = {0, 0, 0};
    for (size_t i = 0; i < k;) {
        size_t j = i;
        while (j < k && strcmp(names[j], names[i]) == 0) {
            j++;
        }
        size_t c = j - i;
        for (int r = 0; r < 3; r++) {
            if (c > topn[r]) {
                for (int q = 2; q > r; q--) {
                    top[q] = top[q - 1];
                    topn[q] = topn[q - 1];
                }
                top[r] = names[i];
                topn[r] = c;
                break;
            }
        }
        i = j;
    }
    for (int r = 1; r < 3; r++) {
        if (top[r] != NULL && topn[r] * 10 < topn[0]) {
            top[r] = NULL; /* not hot beside the first: main, say */
        }
    }
    if (top[0] != NULL) {
        char g[3][32];
        fprintf(stderr, "loupe record: the hottest functions were %s (%s calls)", top[0],
                loupe_cli_group(topn[0], g[0], sizeof g[0]));
        for (int r = 1; r < 3 && top[r] != NULL; r++) { /* top[2] only when top[1] */
            fprintf(stderr, ", %s (%s)", top[r], loupe_cli_group(topn[r], g[r], sizeof g[r]));
        }
        /* --min-duration already set: its calls were long enough to keep, so a shorter one is
         * no remedy (a helper saw it suggested beside --min-duration 100us) */
        fprintf(stderr,
                ": try --exclude '%s', --depth N%s, or build without their "
                "hooks: -finstrument-functions-exclude-function-list=%s%s%s or "
                "-finstrument-functions-exclude-file-list=HEADER (docs/record.md)\n",
                top[0], f->min_ns != 0 ? "" : " or --min-duration 5us", top[0], top[1] ? "," : "",
                top[1] ? top[1] : "");
    }
    free(names);
}

/* ---- the report, over every process's files in the run directory ----
 * Each process image of the tree wrote (or had recovered) one file set <prefix><suffix>; one
 * file of each set is read (.xplane.pb, else .pftrace, else .trace.json.gz: what the merged
 * view reads) and the counts are summed, with a line per process when there are several. */
typedef struct rec_proc {
    char prefix[256];
    char path[PATH_MAX];
    int rank; /* of the file chosen: lower is preferred */
    uint64_t pid, events, dropped, samples, lost, filtered, need, total;
    uint64_t shm_lost; /* of dropped: lost with a death, past the regions' file system's room */
    uint64_t
        reentered;     /* of dropped: recording calls re-entered (a signal handler, an allocator) */
    uint64_t gpu_lost; /* of dropped: GPU activity records CUPTI lost or gave outside the session */
    size_t threads;
    char name[128];
    char spool_error[512]; /* metadata loupe_spool_error: why --spool stopped writing */
} rec_proc;

/* The preference of a file for the report (the merged view's order: XPlane, Perfetto protobuf,
 * Chrome JSON; suffixes from the registry), or -1; *plen gets the length of its prefix. */
static int suffix_rank(const char *name, size_t *plen) {
    static const unsigned order[] = {LOUPE_FORMAT_XPLANE, LOUPE_FORMAT_PERFETTO_PROTO,
                                     LOUPE_FORMAT_CHROME_JSON};
    size_t n = strlen(name);
    for (int r = 0; r < 3; r++) {
        const loupe_format_desc *d = loupe_format_by_bit(order[r]);
        size_t l = d != NULL ? strlen(d->suffix) : 0;
        if (l != 0 && n > l && strcmp(name + n - l, d->suffix) == 0) {
            *plen = n - l;
            return r;
        }
    }
    return -1;
}

static int cmp_proc(const void *a, const void *b) {
    const rec_proc *x = a, *y = b;
    if (x->pid != y->pid) {
        return x->pid < y->pid ? -1 : 1;
    }
    return strcmp(x->prefix, y->prefix);
}

/* Whether name (its prefix plen bytes long) is a part of a split XPlane, <x>.part<k>.xplane.pb
 * (k >= 2, src/export/xplane.c write_parts()), whose <x>.xplane.pb is in run_dir: the reader
 * reads the parts with that file, and every part holds the process's whole counts (0.4 took
 * each part for another process: "2 processes" and twice the events). */
static int split_part(const char *run_dir, const char *name, size_t plen) {
    const loupe_format_desc *x = loupe_format_by_bit(LOUPE_FORMAT_XPLANE);
    size_t n = strlen(name), d = plen;
    if (x == NULL || n - plen != strlen(x->suffix) || strcmp(name + plen, x->suffix) != 0) {
        return 0;
    }
    while (d > 0 && name[d - 1] >= '0' && name[d - 1] <= '9') {
        d--;
    }
    if (d == plen || d < 5 || strncmp(name + d - 5, ".part", 5) != 0) {
        return 0;
    }
    char base[PATH_MAX];
    snprintf(base, sizeof base, "%s/%.*s%s", run_dir, (int)(d - 5), name, x->suffix);
    return access(base, F_OK) == 0;
}

static void put_counts(rec_proc *p, const loupe_model_counts *c) {
    p->events = c->events_recorded;
    p->dropped = c->events_dropped;
    p->samples = c->samples;
    p->lost = c->samples_lost;
    p->filtered = c->functions_filtered;
    p->reentered = c->events_reentered;
    p->shm_lost = c->shm_lost;
    p->need = c->capacity_needed;
    p->total = c->session_needed;
    p->threads = c->threads;
    p->gpu_lost = c->gpu_lost;
}

/* The directory the tree's writers put a counts file per trace into (src/export/rundir.c:
 * $LOUPE_RECORD_COUNTS_DIR): made when following the tree, removed with what is in it when
 * loupe record returns (drop_counts()); "" when none. */
static char counts_dir[PATH_MAX];

static void drop_counts(void) {
    if (counts_dir[0] == 0) {
        return;
    }
    DIR *d = opendir(counts_dir);
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        if (e->d_name[0] != '.') {
            char path[PATH_MAX + 300];
            snprintf(path, sizeof path, "%s/%s", counts_dir, e->d_name);
            (void)unlink(path);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    (void)rmdir(counts_dir);
    counts_dir[0] = 0;
}

/* The processes that recorded into their own memory (the regions' file system had no room for
 * them when they started) and ended with _exit(): each left <pid>.<ppid>.memlost in the counts
 * directory (src/session/crash.c: lines "events=N dropped=D reentered=R need=T total=S"), the
 * events that died with it. Summed over the files into out[0..2], out[3] the largest need,
 * out[4] the largest total; the number of processes. */
static int read_memlost(uint64_t out[5]) {
    out[0] = out[1] = out[2] = out[3] = out[4] = 0;
    int procs = 0;
    DIR *d = counts_dir[0] != 0 ? opendir(counts_dir) : NULL;
    for (struct dirent *e; d != NULL && (e = readdir(d)) != NULL;) {
        size_t l = strlen(e->d_name);
        if (l <= 8 || strcmp(e->d_name + l - 8, ".memlost") != 0) {
            continue;
        }
        char path[PATH_MAX + 300], line[256];
        snprintf(path, sizeof path, "%s/%s", counts_dir, e->d_name);
        FILE *f = fopen(path, "re");
        while (f != NULL && fgets(line, sizeof line, f) != NULL) {
            unsigned long long a, b, c, need = 0, total = 0;
            if (sscanf(line, "events=%llu dropped=%llu reentered=%llu need=%llu total=%llu", &a, &b,
                       &c, &need, &total) >= 3) {
                out[0] += a;
                out[1] += b;
                out[2] += c;
                out[3] = need > out[3] ? need : out[3];
                out[4] = total > out[4] ? total : out[4];
                procs++;
            }
        }
        if (f != NULL) {
            fclose(f);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    return procs;
}

/* The process's counts from the counts file its trace's writer left (<counts_dir>/<prefix>.counts:
 * src/export/rundir.c), without reading the trace: 0, or -1 when there is none or it is not
 * one (then the trace is read back). */
static int read_counts_file(rec_proc *p) {
    char path[PATH_MAX + 300], line[1024];
    if (counts_dir[0] == 0) {
        return -1;
    }
    snprintf(path, sizeof path, "%s/%s.counts", counts_dir, p->prefix);
    FILE *f = fopen(path, "re");
    if (f == NULL) {
        return -1;
    }
    loupe_model_counts c;
    memset(&c, 0, sizeof c);
    int ok = 0;
    while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, "\n")] = 0;
        char *v = strchr(line, '=');
        if (v == NULL) {
            continue;
        }
        *v++ = 0;
        unsigned long long x = strtoull(v, NULL, 10);
        static const char *const keys[] = {"events_recorded",
                                           "events_dropped",
                                           "samples",
                                           "samples_lost",
                                           "events_reentered",
                                           "shm_lost",
                                           "functions_filtered",
                                           "capacity_needed",
                                           "session_needed",
                                           "gpu_lost"};
        uint64_t *dst[] = {&c.events_recorded,
                           &c.events_dropped,
                           &c.samples,
                           &c.samples_lost,
                           &c.events_reentered,
                           &c.shm_lost,
                           &c.functions_filtered,
                           &c.capacity_needed,
                           &c.session_needed,
                           &c.gpu_lost};
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            if (strcmp(line, keys[i]) == 0) {
                *dst[i] = x;
            }
        }
        if (strcmp(line, "loupe_counts") == 0) {
            ok = x == 1;
        } else if (strcmp(line, "pid") == 0) {
            p->pid = x;
        } else if (strcmp(line, "threads") == 0) {
            c.threads = (size_t)x;
        } else if (strcmp(line, "name") == 0) {
            snprintf(p->name, sizeof p->name, "%s", v);
        } else if (strcmp(line, "spool_error") == 0) {
            snprintf(p->spool_error, sizeof p->spool_error, "%s", v);
        }
    }
    fclose(f);
    if (!ok) {
        return -1;
    }
    put_counts(p, &c);
    return 0;
}

/* The process's counts from its trace, read back (a file without a counts file beside it):
 * 0, or -1 with the error said. */
static int read_back(rec_proc *p) {
    loupe_model *m = NULL;
    if (loupe_trace_read(p->path, &m) != 0) {
        fprintf(stderr, "loupe record: cannot read back %s: %s\n", p->path, loupe_last_error());
        return -1;
    }
    p->pid = m->pid;
    snprintf(p->name, sizeof p->name, "%s", m->process_name ? m->process_name : "");
    const char *se = loupe_cli_meta(m, "loupe_spool_error");
    snprintf(p->spool_error, sizeof p->spool_error, "%s", se != NULL ? se : "");
    loupe_model_counts c;
    loupe_model_counts_of(m, &c);
    put_counts(p, &c);
    loupe_model_free(m);
    return 0;
}

/* The process sets of run_dir, each read: *out (malloc'd), their count, or -1 when the directory
 * cannot be read. A file that cannot be read back is said, and its set left out. */
static int read_procs(const char *run_dir, rec_proc **out) {
    DIR *d = opendir(run_dir);
    *out = NULL;
    if (d == NULL) {
        return -1;
    }
    size_t n = 0, cap = 0;
    rec_proc *ps = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t plen;
        int r = suffix_rank(e->d_name, &plen);
        if (r < 0 || plen >= sizeof ps[0].prefix || split_part(run_dir, e->d_name, plen)) {
            continue;
        }
        size_t k = 0;
        for (; k < n; k++) {
            if (strlen(ps[k].prefix) == plen && strncmp(ps[k].prefix, e->d_name, plen) == 0) {
                break;
            }
        }
        if (k == n) {
            if (n == cap) {
                size_t nc = cap ? cap * 2 : 16;
                rec_proc *g = realloc(ps, nc * sizeof(*g));
                if (g == NULL) {
                    break;
                }
                ps = g;
                cap = nc;
            }
            memset(&ps[n], 0, sizeof ps[n]);
            snprintf(ps[n].prefix, sizeof ps[n].prefix, "%.*s", (int)plen, e->d_name);
            ps[n].rank = 99;
            n++;
        }
        if (r < ps[k].rank) {
            ps[k].rank = r;
            snprintf(ps[k].path, sizeof ps[k].path, "%s/%s", run_dir, e->d_name);
        }
    }
    closedir(d);
    /* An MPI rank's loupe record shares the run directory with the other ranks' (docs/mpi.md):
     * it reports its own processes, those whose counts its counts directory holds, and reads
     * no other rank's trace, which may be still being written (a helper saw 4 ranks report 3,
     * 3, 3 and 4 processes of one run, each reading the others' traces back) */
    int rank, size, own = 0;
    if (counts_dir[0] != 0 && loupe_cli_mpi_rank(&rank, &size)) {
        for (size_t k = 0; k < n; k++) {
            char path[PATH_MAX + 300];
            snprintf(path, sizeof path, "%s/%s.counts", counts_dir, ps[k].prefix);
            own += access(path, F_OK) == 0;
        }
    }
    size_t kept = 0;
    for (size_t k = 0; k < n; k++) {
        rec_proc *p = &ps[k];
        if (read_counts_file(p) != 0 && (own != 0 || read_back(p) != 0)) {
            continue; /* own != 0: another rank's */
        }
        ps[kept++] = *p;
    }
    qsort(ps, kept, sizeof(*ps), cmp_proc);
    *out = ps;
    return (int)kept;
}

/* "N events recorded, D dropped", or "N samples" for a run that recorded samples alone (and
 * lost no event: a tree whose every event died with its processes said "63 samples" alone). */
static void say_counts(uint64_t events, uint64_t dropped, uint64_t samples, uint64_t lost) {
    char b1[32], b2[32];
    if (events == 0 && dropped == 0 && samples != 0) {
        fprintf(stderr, "%s sample%s", loupe_cli_group(samples, b1, sizeof b1),
                samples == 1 ? "" : "s");
        if (lost != 0) {
            fprintf(stderr, ", %s lost", loupe_cli_group(lost, b2, sizeof b2));
        }
        return;
    }
    fprintf(stderr, "%s events recorded, %s dropped", loupe_cli_group(events, b1, sizeof b1),
            loupe_cli_group(dropped, b2, sizeof b2));
}

/* The counts, read back from the files in run_dir (what they hold, also when the program
 * stopped its own session): the sums, and a line per process when the tree had several. 0, or
 * -1 when nothing can be read back (said; e.g. beyond LOUPE_READ_MAX_BYTES). */
static int report_counts(const char *run_dir, const rec_filters *f, int quiet) {
    rec_proc *ps;
    int n = read_procs(run_dir, &ps);
    if (n <= 0 && quiet) {
        free(ps);
        return 0;
    }
    if (n <= 0) {
        fprintf(stderr, "loupe record: cannot read back the trace in %s%s%s\n", run_dir,
                n < 0 ? ": " : ": no trace files in it", n < 0 ? strerror(errno) : "");
        free(ps);
        return -1;
    }
    uint64_t ev = 0, dr = 0, sa = 0, lo = 0, fi = 0, need = 0, total = 0, shm = 0, re = 0, gl = 0;
    int has_filtered = 0, shm_procs = 0;
    /* the processes that died with their events in their own memory: all lost, and counted */
    uint64_t ml[5];
    int ml_procs = read_memlost(ml);
    shm = ml[0];
    shm_procs = ml_procs;
    dr = ml[0] + ml[1] + ml[2];
    re = ml[2];
    need = ml[3]; /* their capacity drops need the hint's figures too */
    total = ml[4];
    for (int k = 0; k < n; k++) {
        ev += ps[k].events;
        dr += ps[k].dropped;
        shm += ps[k].shm_lost;
        shm_procs += ps[k].shm_lost != 0;
        re += ps[k].reentered;
        gl += ps[k].gpu_lost;
        sa += ps[k].samples;
        lo += ps[k].lost;
        fi += ps[k].filtered;
        need = ps[k].need > need ? ps[k].need : need;
        total = ps[k].total > total ? ps[k].total : total;
        has_filtered |= ps[k].filtered != 0 || f->said[0] != 0;
    }
    char b1[32], b2[32];
    if (quiet && dr == 0) {
        /* -q: the totals only when events were lost (CPU samples lost to a full perf ring are
         * in the trace, and loupe summary says them) */
        free(ps);
        return 0;
    }
    fprintf(stderr, "loupe record: ");
    if (n + ml_procs > 1) {
        fprintf(stderr, "%d processes, ", n + ml_procs);
    }
    say_counts(ev, dr, sa, lo);
    if (has_filtered) {
        fprintf(stderr, ", %s calls filtered", loupe_cli_group(fi, b1, sizeof b1));
        if (f->said[0]) {
            fprintf(stderr, " (%s)", f->said);
        }
    }
    const char *spool_error = NULL;
    for (int k = 0; k < n && spool_error == NULL; k++) {
        spool_error = ps[k].spool_error[0] ? ps[k].spool_error : NULL;
    }
    if (shm != 0) {
        fprintf(stderr,
                " (%s lost with %d process%s that died: the regions' file system (/dev/shm) "
                "had no room for them, so they were recorded in the processes' own memory; a "
                "larger /dev/shm keeps them)",
                loupe_cli_group(shm, b2, sizeof b2), shm_procs, shm_procs == 1 ? "" : "es");
    }
    if (re != 0) {
        fprintf(stderr,
                " (%s where a signal handler or the program's allocator interrupted a recording "
                "call on the same thread: re-entry, which a larger buffer would not keep)",
                loupe_cli_group(re, b2, sizeof b2));
    }
    if (gl != 0) {
        fprintf(stderr,
                " (%s GPU activity records that CUPTI dropped, or gave without timestamps or "
                "starting outside the session, such as kernels still running at the program's "
                "exit: the trace's device_tracer metadata says which)",
                loupe_cli_group(gl, b2, sizeof b2));
    }
    /* the capacity's share: what neither a death past /dev/shm, re-entry nor CUPTI lost */
    uint64_t cap_dropped = dr > shm + re + gl ? dr - shm - re - gl : 0;
    if (cap_dropped != 0 && spool_error == NULL) {
        fprintf(stderr,
                " (to keep them all: the busiest thread needed %llu events, the session %llu: "
                "rerun with --buffer-events and --session-events at least that",
                (unsigned long long)need, (unsigned long long)total);
        long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
        uint64_t mem = pages > 0 && psize > 0 ? (uint64_t)pages * (uint64_t)psize : 0;
        if (mem != 0 && total * 16 > mem / 2) {
            /* 16 bytes an event: a session that size would take half the machine or more */
            fprintf(stderr,
                    "; that is %.1f GiB of buffers on a machine of %.1f GiB: --spool keeps every "
                    "event in bounded memory instead, --keep-last the latest",
                    (double)(total * 16) / (double)(1ull << 30),
                    (double)mem / (double)(1ull << 30));
        }
        fprintf(stderr, ")");
    }
    fprintf(stderr, "\n");
    /* A spool that could not be written drops what it could not take: the capacities are not
     * the cause, and more of them would not help. */
    for (int k = 0; k < n; k++) {
        if (ps[k].spool_error[0]) {
            fprintf(stderr, "loupe record: pid %llu: the spool failed: %s\n",
                    (unsigned long long)ps[k].pid, ps[k].spool_error);
        }
    }
    if (quiet) {
        free(ps);
        return 0;
    }
    /* Up to 8 processes, a line each; beyond, the ones that recorded nothing (a shell's
     * subshells, say) share one line. */
    int empty = 0;
    for (int k = 0; k < n; k++) {
        empty += ps[k].events == 0 && ps[k].dropped == 0 && ps[k].samples == 0;
    }
    int fold = n > 8 && empty > 1;
    for (int k = 0; n > 1 && k < n; k++) {
        if (fold && ps[k].events == 0 && ps[k].dropped == 0 && ps[k].samples == 0) {
            continue;
        }
        fprintf(stderr, "loupe record:   pid %llu %s: ", (unsigned long long)ps[k].pid,
                ps[k].name[0] ? ps[k].name : "?");
        say_counts(ps[k].events, ps[k].dropped, ps[k].samples, ps[k].lost);
        if (ps[k].events != 0 && ps[k].samples != 0) {
            fprintf(stderr, ", %s sample%s", loupe_cli_group(ps[k].samples, b2, sizeof b2),
                    ps[k].samples == 1 ? "" : "s");
        }
        fprintf(stderr, ", %zu thread%s (%s)\n", ps[k].threads, ps[k].threads == 1 ? "" : "s",
                ps[k].prefix);
    }
    if (fold) {
        fprintf(stderr, "loupe record:   %d other processes recorded nothing\n", empty);
    }
    if (cap_dropped != 0) {
        for (int k = 0; k < n; k++) {
            loupe_model *m = NULL;
            if (ps[k].dropped > ps[k].shm_lost + ps[k].reentered + ps[k].gpu_lost &&
                loupe_trace_read(ps[k].path, &m) == 0) {
                hottest_hint(m, f); /* the first process that dropped: where to look */
                loupe_model_free(m);
                break;
            }
        }
    }
    free(ps);
    return 0;
}

/* The first free file prefix of pid in run_dir: <host>.<pid>, else <host>.<pid>.1, .2, ...
 * (the preload's own rule: one file set per image a pid ran, in exec order). */
static void free_prefix(const char *run_dir, const char *host, long pid, char *out, size_t size) {
    char base[400], probe[PATH_MAX + 800];
    snprintf(base, sizeof base, "%s.%ld", host[0] ? host : "localhost", pid);
    snprintf(out, size, "%s", base);
    for (int n = 1; n < 1000; n++) {
        int taken = 0;
        for (size_t k = 0; k < loupe_format_count() && !taken; k++) {
            const loupe_format_desc *d = loupe_format_info(k);
            if (d->run_dir_bit != 0 && d->host_prefixed) {
                snprintf(probe, sizeof probe, "%s/%s%s", run_dir, out, d->suffix);
                taken = access(probe, F_OK) == 0;
            }
        }
        if (!taken) {
            return;
        }
        snprintf(out, size, "%s.%d", base, n);
    }
}

/* Whether pid is a live process (a zombie is dead: its memory, the region, is final). For a
 * zombie, *status gets its wait status (proc_pid_stat(5) field 52, exit_code, Linux 3.5) and
 * *known 1. */
static int alive_status(long pid, int *status, int *known) {
    char buf[2048];
    const char *rp = loupe_cli_proc_stat(pid, buf, sizeof buf); /* " state ..." */
    if (rp == NULL) {
        return 0;
    }
    /* rp[1] is the state (rp[2] was: the space after it, so no zombie was ever seen and its
     * exit_code never read; a helper's zombie killed by SIGKILL read "how is unknown") */
    if (rp[1] != 'Z' && rp[1] != 'X') {
        return 1;
    }
    const char *p = rp + 1; /* field 3, state */
    for (int field = 3; field < 52 && p != NULL; field++) {
        p = strchr(p, ' ');
        p = p != NULL ? p + 1 : NULL;
    }
    if (p != NULL && known != NULL) {
        *status = atoi(p);
        *known = 1;
    }
    return 0;
}

/* Whether a process of the tree still maps the region file at path: each holds an OFD write
 * lock on its region file from its start (src/preload/preload.c, make_region_file), kept by its
 * mapping after the fd is closed and gone when the process is (exit, exec, death). Told from the
 * file, not from a pid: a process inside a pid namespace of its own (unshare -p -f under loupe
 * record) names its region by a pid that is another process's out here. 1 held, 0 not, -1 when
 * the file cannot tell (gone, or no lock support). */
static int region_held(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return -1;
    }
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    int r = fcntl(fd, F_OFD_GETLK, &fl);
    close(fd);
    return r != 0 ? -1 : fl.l_type != F_UNLCK;
}

/* A region's process is alive: its lock says so, else (no lock to ask) its pid. */
static int region_alive(const char *path, long pid, int *status, int *known) {
    int held = region_held(path);
    if (held == 1) {
        return 1;
    }
    int a = alive_status(pid, status, known); /* a zombie's status, when the pid is the one */
    return held == 0 ? 0 : a;
}

/* The lock loupe record holds on <regions>/recorder while it runs: a process of the tree that
 * outlives it (an orphan) removes the directory once it is gone (the preload's
 * drop_region_file), which a pid cannot tell across pid namespaces either. */
static int recorder_lock = -1;

static void hold_recorder_lock(const char *dir) {
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/recorder", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    struct flock fl;
    memset(&fl, 0, sizeof fl);
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (fd >= 0 && fcntl(fd, F_OFD_SETLK, &fl) != 0) {
        close(fd);
        fd = -1;
    }
    recorder_lock = fd;
}

/* The regions of the tree's other processes (the preload's LOUPE_RECORD_REGIONS): every process
 * that is gone without writing its trace (killed, crashed, _exit()) is recovered into run_dir
 * as <host>.<pid>[.<n>].*, with the cause said (from the wait status its parent's wait*() left
 * in <pid>.status). Files of processes still alive stay (they remove their own); the directory
 * goes when it is empty. Returns how many processes were recovered; *root (a pid, or NULL) is
 * set to 0 when that pid was one of them. */
static int recover_regions(const char *dir, const char *run_dir, const char *host,
                           const loupe_recover_options *base, long *root, int quiet) {
    DIR *d = dir[0] != 0 ? opendir(dir) : NULL;
    if (d == NULL) {
        return 0;
    }
    int recovered = 0, said = 0, more = 0, no_room = 0;
    uint64_t more_events = 0, more_dropped = 0;
    struct dirent *e;
    char path[PATH_MAX + 300];
    while ((e = readdir(d)) != NULL) {
        long pid = 0, ppid = 0;
        int gen = 0, used = 0;
        if (sscanf(e->d_name, "%ld.%ld.%d%n", &pid, &ppid, &gen, &used) != 3 ||
            e->d_name[used] != 0 || pid <= 0) {
            continue;
        }
        int zst = 0, zknown = 0;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (region_alive(path, pid, &zst, &zknown)) {
            /* it outlives the program (an orphan: `bash -c 'x &'` ended, or was killed, before
             * x): said even under -q, since its region stays on disk after loupe record */
            fprintf(stderr,
                    "loupe record: pid %ld is still running: its recording region %s stays "
                    "until it ends (it then writes its trace into %s and removes the region); "
                    "if it dies first, `loupe recover %s -o LOG_DIR` reads it and `rm -r %s` "
                    "removes the rest\n",
                    pid, path, run_dir, path, dir);
            continue;
        }
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
            continue;
        }
        struct stat rst;
        if (fstat(fd, &rst) == 0 && rst.st_size == 1) {
            /* region.c's mark: no room for the region's first pages at the process's start.
             * One that ended with _exit() said what it lost (<pid>.<ppid>.memlost: counted in
             * the totals); one killed by a signal could not. */
            char ml[PATH_MAX + 300];
            snprintf(ml, sizeof ml, "%s/%ld.%ld.memlost", counts_dir, pid, ppid);
            no_room += counts_dir[0] == 0 || access(ml, F_OK) != 0;
        }
        char spath[PATH_MAX + 310], cause[256], prefix[512];
        /* the parent's wait status, beside the region, or in the counts directory when the
         * regions' file system had no room for it (the preload's note_status) */
        int st = 0, known = 0;
        for (int w = 0; w < 2 && !known; w++) {
            snprintf(spath, sizeof spath, "%s/%ld.status", w == 0 ? dir : counts_dir, pid);
            FILE *sf = (w == 0 || counts_dir[0] != 0) ? fopen(spath, "r") : NULL;
            known = sf != NULL && fscanf(sf, "%d", &st) == 1;
            if (sf != NULL) {
                fclose(sf);
            }
        }
        if (!known && zknown) { /* not reaped yet: the kernel still has the status */
            st = zst;
            known = 1;
        }
        int signaled = known && WIFSIGNALED(st);
        /* the preload's marker: this image exec'd from a signal handler and handed its
         * recording over (nothing lost: a note, as a recording of nothing is) */
        snprintf(spath, sizeof spath, "%s.lost", path);
        if (access(spath, F_OK) == 0) {
            (void)unlink(spath);
            fprintf(stderr,
                    "loupe record: pid %ld exec'd from a signal handler while its trace was being "
                    "written (at its exit): that image's trace is lost, uncounted\n",
                    pid);
        }
        snprintf(spath, sizeof spath, "%s.exec", path);
        int handed = access(spath, F_OK) == 0;
        if (handed) {
            (void)unlink(spath);
            snprintf(cause, sizeof cause,
                     "exec'd from a signal handler (its trace is recovered, not written)");
        } else if (signaled) {
            const char *abbrev = sigabbrev_np(WTERMSIG(st));
            snprintf(cause, sizeof cause, "killed by SIG%s", abbrev != NULL ? abbrev : "?");
        } else if (known) {
            snprintf(cause, sizeof cause, "exited without writing its trace");
        } else {
            /* no wait status: its parent never waited for it (or died first) and it is reaped */
            snprintf(cause, sizeof cause, "ended without writing its trace (how is unknown)");
        }
        free_prefix(run_dir, host, pid, prefix, sizeof prefix);
        /* its command line, which the preload wrote beside the region (NUL-separated) */
        char cpath[PATH_MAX + 310], cmdline[4096] = "", pname[256] = "";
        snprintf(cpath, sizeof cpath, "%s.cmd", path);
        FILE *cf = fopen(cpath, "r");
        size_t cn = cf != NULL ? fread(cmdline, 1, sizeof cmdline - 1, cf) : 0;
        if (cf != NULL) {
            fclose(cf);
        }
        (void)unlink(cpath);
        cmdline[cn] = 0;
        const char *argv0 = strrchr(cmdline, '/');
        snprintf(pname, sizeof pname, "%.255s", argv0 != NULL ? argv0 + 1 : cmdline);
        while (cn > 0 && cmdline[cn - 1] == 0) {
            cn--;
        }
        for (size_t c = 0; c < cn; c++) {
            cmdline[c] = cmdline[c] == 0 ? ' ' : cmdline[c];
        }
        loupe_recover_options ro = *base;
        ro.process_name = pname;
        ro.cmdline = cmdline;
        ro.cause = cause;
        ro.file_prefix = prefix;
        ro.parent_pid = (uint64_t)ppid;
        loupe_trace_result rr = {.size = sizeof rr};
        int rc = loupe_recover_trace(fd, &ro, &rr);
        close(fd);
        if (rc == 0) {
            char n1[32];
            recovered++;
            if (root != NULL && *root == pid) {
                *root = 0; /* said to the caller: the root pid's image was recovered */
            }
            /* a warning, not a note: said also under -q; but a process that ended with
             * _exit() having recorded nothing lost nothing (dash runs every system() command
             * so): a note then */
            if (signaled || (rr.events_recorded > 0 && !handed) || rr.events_dropped > 0 ||
                !quiet) {
                if (said < 8) {
                    char n2[32];
                    fprintf(stderr, "loupe record: pid %ld %s: recovered %s events", pid, cause,
                            loupe_cli_group(rr.events_recorded, n1, sizeof n1));
                    if (rr.events_dropped != 0) {
                        fprintf(stderr, ", %s dropped",
                                loupe_cli_group(rr.events_dropped, n2, sizeof n2));
                    }
                    fprintf(stderr, "\n");
                } else {
                    more++;
                    more_events += rr.events_recorded;
                    more_dropped += rr.events_dropped;
                }
                said++;
            }
        } else if (rc != LOUPE_ENO_TRACE) {
            fprintf(stderr, "loupe record: pid %ld %s, and its trace could not be recovered: %s\n",
                    pid, cause, loupe_last_error());
        }
        loupe_trace_result_free(&rr);
        (void)unlink(path);
        /* its samples' spool (<region>.samples): read into the trace, or not readable */
        snprintf(cpath, sizeof cpath, "%s.samples", path);
        (void)unlink(cpath);
    }
    closedir(d);
    if (more != 0) {
        char n1[32], n2[32];
        fprintf(stderr,
                "loupe record: and %d more processes that ended without writing their "
                "traces: recovered %s events, %s dropped\n",
                more, loupe_cli_group(more_events, n1, sizeof n1),
                loupe_cli_group(more_dropped, n2, sizeof n2));
    }
    if (no_room != 0) {
        fprintf(stderr,
                "loupe record: %d process%s died with %s events in %s own memory, not counted: "
                "the regions' file system (%s) had no room for %s recording region%s when %s "
                "started\n",
                no_room, no_room == 1 ? "" : "es", no_room == 1 ? "its" : "their",
                no_room == 1 ? "its" : "their", dir, no_room == 1 ? "its" : "their",
                no_room == 1 ? "" : "s", no_room == 1 ? "it" : "they");
    }
    /* the wait statuses go; the directory too when no live process still records into it (a
     * region's .cmd and .samples go with a region no process holds) */
    d = opendir(dir);
    while (d != NULL && (e = readdir(d)) != NULL) {
        size_t l = strlen(e->d_name);
        int cmd = l > 4 && strcmp(e->d_name + l - 4, ".cmd") == 0;
        int smp = l > 8 && strcmp(e->d_name + l - 8, ".samples") == 0;
        int exe = l > 5 && (strcmp(e->d_name + l - 5, ".exec") == 0 ||
                            strcmp(e->d_name + l - 5, ".lost") == 0);
        char region[PATH_MAX + 300];
        snprintf(region, sizeof region, "%s/%.*s", dir,
                 (int)(l - (cmd   ? 4
                            : smp ? 8
                            : exe ? 5
                                  : 0)),
                 e->d_name);
        if ((l > 7 && strcmp(e->d_name + l - 7, ".status") == 0) ||
            strcmp(e->d_name, "recorder") == 0 ||
            ((cmd || smp || exe) && !region_alive(region, atol(e->d_name), NULL, NULL))) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            (void)unlink(path);
        }
    }
    if (d != NULL) {
        closedir(d);
    }
    (void)rmdir(dir);
    return recovered;
}

/* A directory for the tree's recording regions: on /dev/shm when it is there (tmpfs: the
 * regions are memory, as the root's memfd is; a disk would write them back), else TMPDIR. */
static int make_regions_dir(char *buf, size_t size) {
    const char *tmpdir = getenv("TMPDIR");
    const char *where[2] = {"/dev/shm", tmpdir != NULL && tmpdir[0] ? tmpdir : "/tmp"};
    for (int k = 0; k < 2; k++) {
        snprintf(buf, size, "%s/loupe-regions-XXXXXX", where[k]);
        if (mkdtemp(buf) != NULL) {
            return 0;
        }
    }
    buf[0] = 0;
    return -1;
}

/* Waits for the program, passing signals on: SIGTERM and SIGHUP sent to loupe alone, so that the
 * program is not orphaned; SIGINT and SIGQUIT only when a process sent them to loupe
 * (forward_if_sent: the terminal's reach the program itself, same process group). Returns its
 * wait status. */
/* loupe record's own ending signals (SIGINT, SIGTERM, SIGHUP, SIGQUIT) are blocked from the
 * moment the regions' directory is made until loupe record returns, except while it waits for
 * the program (wait_program() passes them on then): one that comes before the program runs or
 * while the tree is recovered is held, and takes its default action once everything is
 * written and the directory is removed (loupe_cmd_record()), so that no ending leaves the
 * regions behind. The program gets the mask loupe record had. */
static sigset_t ending_mask;
static int ending_blocked;

/* The signals that end loupe record: SIGINT, SIGTERM, SIGHUP and SIGQUIT. */
static void ending_set(sigset_t *set) {
    sigemptyset(set);
    sigaddset(set, SIGINT);
    sigaddset(set, SIGTERM);
    sigaddset(set, SIGHUP);
    sigaddset(set, SIGQUIT);
}

static void block_ending_signals(void) {
    sigset_t set;
    ending_set(&set);
    (void)sigprocmask(SIG_BLOCK, &set, ending_blocked ? NULL : &ending_mask);
    ending_blocked = 1;
}

static void restore_ending_signals(void) {
    if (ending_blocked) {
        ending_blocked = 0;
        (void)sigprocmask(SIG_SETMASK, &ending_mask, NULL);
    }
}

/* The program's wait status, once wait_program() reaped it (loupe_cmd_record() ends the way it
 * ended). */
static int prog_status;
static int prog_reaped;

/* A signal sent to the process group (kill -INT -PGID, what CI cancellation, supervisors and
 * `kill 0` send) reached the program itself: loupe record must not pass on a copy of its own (a
 * server whose second SIGINT means "force quit" then exited 9 instead of shutting down). So
 * loupe record leaves the program's group for one of its own, unless it leads that group (an
 * interactive shell's job: it cannot, and the program would be in a group of another pid); the
 * program keeps the group, the terminal and the process group id it would have had. A signal
 * that reaches loupe record then was sent to it alone, and is passed on. */
static void leave_program_group(void) {
    if (getpgrp() != getpid()) {
        (void)setpgid(0, 0);
    }
}

static int wait_program(pid_t pid) {
    leave_program_group();
    child_pid = pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    struct sigaction si;
    memset(&si, 0, sizeof si);
    si.sa_sigaction = forward_if_sent;
    si.sa_flags = SA_SIGINFO;
    sigaction(SIGINT, &si, NULL);
    sigaction(SIGQUIT, &si, NULL);
    int blocked = ending_blocked;
    if (blocked) {
        sigset_t set;
        ending_set(&set);
        (void)sigprocmask(SIG_UNBLOCK, &set, NULL); /* held ones are passed on now */
    }
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (blocked) {
        block_ending_signals();
    }
    child_pid = 0; /* reaped: its pid may be another process's now */
    prog_status = st;
    prog_reaped = 1;
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    return st;
}

/* --fdo-profile FILE: the sample profile written at the end (NULL: none). */
static const char *fdo_out;

/* Writes the --fdo-profile of the trace in run_dir (its program's samples), saying what went
 * in unless quiet; a failure is said and leaves the exit status alone (the program ran). */
/* A --fdo-profile FILE that this run could not write is an older run's (the writer replaces it
 * only when complete): removed, and said, so that a build never takes it for this run's. */
static void drop_stale_fdo(void) {
    if (access(fdo_out, F_OK) == 0 && unlink(fdo_out) == 0) {
        fprintf(stderr, "loupe record: removed %s, an earlier run's profile: this run wrote none\n",
                fdo_out);
    }
}

static void write_fdo_profile(const char *run_dir, int quiet) {
    if (fdo_out == NULL) {
        return;
    }
    char file[PATH_MAX];
    loupe_model *m = NULL;
    int rc = loupe_trace_find(run_dir, file, sizeof file);
    if (rc == 0) {
        rc = loupe_trace_read(file, &m);
    }
    if (rc != 0) {
        fprintf(stderr, "loupe record: --fdo-profile %s: cannot read back the trace: %s: %s\n",
                fdo_out, loupe_strerror(rc), loupe_last_error());
        drop_stale_fdo();
        return;
    }
    loupe_fdo_stats st;
    if (loupe_cli_write_fdo("record", m, NULL, fdo_out, &st) == 0) {
        if (!quiet) {
            loupe_cli_fdo_report("record", fdo_out, &st);
        }
    } else {
        drop_stale_fdo();
    }
    loupe_model_free(m);
}

/* The run directory: the last line on stderr, and into --print-run-dir's FILE. */
static int say_run_dir(const char *run_dir, const char *print_to) {
    /* loupe gpu-measure runs loupe record and reads the run directory itself: it says where the
     * trace is (or removes it) */
    const char *inner = getenv("LOUPE_RECORD_FOR_GPU_MEASURE");
    if (inner == NULL || strcmp(inner, "1") != 0) {
        fprintf(stderr, "%s\n", run_dir);
    }
    if (print_to == NULL) {
        return 0;
    }
    FILE *f = fopen(print_to, "w");
    int bad = f == NULL;
    if (f != NULL) {
        bad = fprintf(f, "%s\n", run_dir) < 0;
        bad |= fclose(f) != 0;
    }
    if (bad) {
        fprintf(stderr, "loupe record: --print-run-dir %s: %s\n", print_to, strerror(errno));
        return -1;
    }
    return 0;
}

/* ---- sampling from outside (loupe/outside.h) ----
 * A program the preload cannot enter (statically linked; set-user-ID or set-group-ID, run by
 * root, who may open perf events on it after its exec) is sampled from here: the child waits on a
 * pipe until the events are open on its pid (enable_on_exec), then execs; its samples are
 * written as <host>.<pid>.* into the run directory, like a preloaded process's files. Returns
 * the exit status of `loupe record`. */
static int record_outside(char **prog, const char *run_made, const char *abs_log, size_t existed,
                          const char *host, uint32_t hz, unsigned formats, rec_kind kind,
                          const char *why, int quiet, const char *print_to, const rec_filters *filt,
                          unsigned oflags) {
    const char *what = kind == REC_STATIC   ? "static binary"
                       : kind == REC_SETUID ? "set-user-ID program"
                                            : "set-group-ID program";
    int gate[2], ep[2] = {-1, -1};
    if (pipe2(gate, O_CLOEXEC) != 0) {
        fprintf(stderr, "loupe record: cannot make a pipe: %s\n", strerror(errno));
        drop_run(run_made, abs_log, existed);
        return REC_EXIT_FAILED;
    }
    if (pipe2(ep, O_CLOEXEC) != 0) {
        ep[0] = ep[1] = -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "loupe record: fork failed: %s\n", strerror(errno));
        drop_run(run_made, abs_log, existed);
        return REC_EXIT_FAILED;
    }
    /* A set-user-ID exec detaches the perf events the process had (loupe/outside.h,
     * LOUPE_OUTSIDE_NOW): such a program is stopped at its exec by ptrace(2) instead (the
     * kernel stops a tracee with SIGTRAP after a successful execve), sampled from there on. */
    int now = kind != REC_STATIC;
    if (pid == 0) {
        if (now) {
            (void)ptrace(PTRACE_TRACEME, 0, NULL, NULL);
        }
        /* held here until the events are open: what it runs from its exec on is sampled */
        close(gate[1]);
        char go = 0;
        ssize_t n;
        while ((n = read(gate[0], &go, 1)) < 0 && errno == EINTR) {
        }
        if (n != 1) {
            _exit(REC_EXIT_FAILED); /* loupe could not sample it: it does not run */
        }
        std_release_in_child();
        execvp(prog[0], prog);
        int e = errno;
        if (ep[1] >= 0) {
            (void)!write(ep[1], &e, sizeof e);
        }
        _exit(REC_EXIT_NOT_FOUND);
    }
    close(gate[0]);
    if (ep[1] >= 0) {
        close(ep[1]);
    }
    loupe_outside *smp = NULL;
    int stopped = 0, st = 0;
    if (now) {
        (void)!write(gate[1], "1", 1);
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
        }
        stopped = WIFSTOPPED(st);
    }
    if ((!now || stopped) &&
        loupe_outside_open((int)pid, hz, (now ? LOUPE_OUTSIDE_NOW : 0) | oflags, &smp) != 0) {
        char detail[512];
        snprintf(detail, sizeof detail, "%s", loupe_last_error());
        close(gate[1]);
        if (stopped) {
            kill(pid, SIGKILL); /* stopped at its exec: it ran nothing of its own */
        }
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {
        }
        if (ep[0] >= 0) {
            close(ep[0]);
        }
        drop_run(run_made, abs_log, existed);
        fprintf(stderr,
                "loupe record: cannot trace %s: it is %s; sampling it from outside failed too: "
                "%s; nothing was run\n",
                prog[0], why, detail);
        return REC_EXIT_NO_TRACE;
    }
    if (!now) {
        (void)!write(gate[1], "1", 1);
    } else if (stopped) {
        (void)ptrace(PTRACE_DETACH, pid, NULL, NULL);
    }
    close(gate[1]);
    int exec_errno = 0;
    if (ep[0] >= 0) {
        while (read(ep[0], &exec_errno, sizeof exec_errno) < 0 && errno == EINTR) {
        }
        close(ep[0]);
    }
    if (!now || stopped) {
        st = wait_program(pid);
    }
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (exec_errno != 0 || smp == NULL) {
        if (smp != NULL) {
            (void)loupe_outside_finish(smp, NULL, NULL);
        }
        drop_run(run_made, abs_log, existed);
        fprintf(stderr, "loupe record: cannot run '%s': %s\n", prog[0], strerror(exec_errno));
        return exec_errno == ENOENT ? REC_EXIT_NOT_FOUND : REC_EXIT_CANNOT_RUN;
    }
    char prefix[512], cmdline[4096] = "";
    free_prefix(run_made, host, (long)pid, prefix, sizeof prefix);
    for (int k = 0; prog[k] != NULL; k++) {
        size_t l = strlen(cmdline);
        snprintf(cmdline + l, sizeof cmdline - l, "%s%s", k > 0 ? " " : "", prog[k]);
    }
    const char *slash = strrchr(prog[0], '/');
    char child_prefix[300];
    snprintf(child_prefix, sizeof child_prefix, "%s.", host);
    loupe_outside_options oo = {
        .child_prefix = child_prefix,
        .run_dir = run_made,
        .file_prefix = prefix,
        .formats = formats,
        .process_name = slash ? slash + 1 : prog[0],
        .cmdline = cmdline,
        .parent_pid = (uint64_t)getpid(),
    };
    loupe_trace_result r = {.size = sizeof r};
    int rc = loupe_outside_finish(smp, &oo, &r);
    char said[64];
    if (WIFSIGNALED(st)) {
        snprintf(said, sizeof said, "was killed by signal %d (%s)", WTERMSIG(st),
                 strsignal(WTERMSIG(st)));
    } else {
        snprintf(said, sizeof said, "exited with status %d", code);
    }
    if (rc != 0) {
        drop_run(run_made, abs_log, existed);
        fprintf(stderr, "loupe record: %s %s; writing its samples failed: %s\n", prog[0], said,
                loupe_last_error());
        return code; /* it ran: its status (the failure is said) */
    }
    loupe_trace_result_free(&r);
    if (!quiet) {
        fprintf(stderr, "loupe record: note: %s: sampled from outside, no zones\n", what);
        fprintf(stderr, "loupe record: %s %s\n", prog[0], said);
        (void)report_counts(run_made, filt, 0);
    } else {
        (void)report_counts(run_made, filt, 1);
    }
    write_fdo_profile(run_made, quiet);
    (void)say_run_dir(run_made, print_to); /* it ran: its status (a failure here is said) */
    return code;
}

static int record_main(int argc, char **argv);

/* Ends loupe record as the program ended: killed by the same signal when a signal that dumps no
 * core killed it (SIGINT, SIGTERM, SIGHUP, SIGPIPE, SIGKILL...), so that a shell waiting for
 * loupe record sees what it would have seen of the program (bash stops a script whose
 * foreground command died of SIGINT, and goes on when it only exited 130). A core-dumping
 * signal is left as the status 128 + N: loupe record's own core would say nothing. */
static void end_as_program(void) {
    if (!prog_reaped || !WIFSIGNALED(prog_status)) {
        return;
    }
    int sig = WTERMSIG(prog_status);
    switch (sig) {
    case SIGQUIT:
    case SIGILL:
    case SIGTRAP:
    case SIGABRT:
    case SIGBUS:
    case SIGFPE:
    case SIGSEGV:
    case SIGSYS:
    case SIGXCPU:
    case SIGXFSZ:
        return; /* core-dumping (signal(7)) */
    default:
        break;
    }
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    (void)sigprocmask(SIG_UNBLOCK, &one, NULL);
    (void)raise(sig);
}

int loupe_cmd_record(int argc, char **argv) {
    std_hold();
    int code = record_main(argc, argv);
    drop_counts();
    fflush(NULL);
    restore_ending_signals(); /* a signal held since the program ended takes effect now */
    end_as_program();
    return code;
}

static int record_main(int argc, char **argv) {
    const char *log_dir = "loupe-log";
    const char *level = NULL, *buffer = NULL, *formats = NULL, *session = NULL;
    const char *print_to = NULL, *spool = NULL, *spool_budget = NULL;
    int perfetto = 0, gpu = 0, quiet = 0, keep_last = 0, lazy = 0, no_check = 0, mpi = 0,
        follow = 1;
    int no_spool = 0;
    rec_filters filt;
    memset(&filt, 0, sizeof filt);
    const char *sample_hz = NULL, *sample_stacks = NULL;
    int i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        }
        int fo = filter_option(&filt, argc, argv, &i);
        if (fo < 0) {
            return REC_EXIT_FAILED;
        }
        if (fo > 0) {
            continue;
        }
        if ((strcmp(a, "-o") == 0 || strcmp(a, "--log-dir") == 0) && i + 1 < argc) {
            log_dir = argv[++i];
        } else if (strcmp(a, "--level") == 0 && i + 1 < argc) {
            level = argv[++i];
        } else if (strcmp(a, "--buffer-events") == 0 && i + 1 < argc) {
            buffer = argv[++i];
        } else if (strcmp(a, "--session-events") == 0 && i + 1 < argc) {
            session = argv[++i];
        } else if (strcmp(a, "--perfetto") == 0) {
            perfetto = 1;
        } else if (strcmp(a, "--gpu") == 0) {
            gpu = 1;
        } else if (strcmp(a, "--format") == 0 && i + 1 < argc) {
            formats = argv[++i];
        } else if (strcmp(a, "--print-run-dir") == 0 && i + 1 < argc) {
            print_to = argv[++i];
        } else if (strcmp(a, "--fdo-profile") == 0 && i + 1 < argc) {
            fdo_out = argv[++i];
        } else if (strcmp(a, "--keep-last") == 0) {
            keep_last = 1;
        } else if (strcmp(a, "--spool") == 0 || strncmp(a, "--spool=", 8) == 0) {
            spool = a[7] == '=' ? a + 8 : "";
        } else if (strcmp(a, "--no-spool") == 0) {
            no_spool = 1;
        } else if (strcmp(a, "--spool-budget") == 0 && i + 1 < argc) {
            spool_budget = argv[++i];
        } else if (strcmp(a, "--lazy-buffers") == 0) {
            lazy = 1;
        } else if (strcmp(a, "--no-check") == 0) {
            no_check = 1;
        } else if (strcmp(a, "--mpi") == 0 || strcmp(a, "--no-mpi") == 0) {
            mpi = a[2] == 'm' ? 1 : -1;
        } else if (strcmp(a, "--sample-hz") == 0 && i + 1 < argc) {
            sample_hz = argv[++i];
        } else if (strcmp(a, "--no-sample") == 0) {
            sample_hz = "0";
        } else if (strcmp(a, "--sample-stacks") == 0 && i + 1 < argc) {
            sample_stacks = argv[++i];
        } else if (strcmp(a, "--no-follow") == 0) {
            follow = 0;
        } else if (strcmp(a, "--follow") == 0) {
            follow = 1;
        } else if (strcmp(a, "-q") == 0 || strcmp(a, "--quiet") == 0) {
            quiet = 1;
        } else if (a[0] == '-') {
            fprintf(stderr,
                    "loupe record: unknown or incomplete option '%s'\n"
                    "Run 'loupe record --help' for usage.\n",
                    a);
            return REC_EXIT_FAILED;
        } else {
            break; /* the program, without a "--" */
        }
    }
    if (i >= argc) {
        fprintf(stderr, "loupe record: no program to run\n"
                        "usage: loupe record [options] -- PROGRAM [ARGS...]\n");
        return REC_EXIT_FAILED;
    }
    unsigned long v;
    if (level != NULL && parse_u(level, 3, &v) != 0) {
        fprintf(stderr, "loupe record: --level must be 0, 1, 2 or 3, not '%s'\n", level);
        return REC_EXIT_FAILED;
    }
    if (session != NULL && (parse_u(session, (unsigned long)1 << 40, &v) != 0 || v < 64)) {
        fprintf(stderr,
                "loupe record: --session-events must be a number from 64 to 2^40, not '%s'\n",
                session);
        return REC_EXIT_FAILED;
    }
    if (sample_hz != NULL && parse_u(sample_hz, 100000, &v) != 0) {
        fprintf(stderr, "loupe record: --sample-hz must be a number from 0 to 100000, not '%s'\n",
                sample_hz);
        return REC_EXIT_FAILED;
    }
    if (sample_stacks != NULL && strcmp(sample_stacks, "dwarf") != 0 &&
        strcmp(sample_stacks, "fp") != 0 && strcmp(sample_stacks, "none") != 0) {
        fprintf(stderr, "loupe record: --sample-stacks must be dwarf, fp or none, not '%s'\n",
                sample_stacks);
        return REC_EXIT_FAILED;
    }
    if (buffer != NULL && (parse_u(buffer, UINT32_MAX, &v) != 0 || v < 64)) {
        fprintf(stderr, "loupe record: --buffer-events must be a number from 64 to %u, not '%s'\n",
                UINT32_MAX, buffer);
        return REC_EXIT_FAILED;
    }
    if (fdo_out != NULL && sample_hz == NULL && level != NULL && strcmp(level, "0") == 0) {
        fprintf(stderr, "loupe record: --fdo-profile is made of CPU samples, which --level 0 "
                        "turns off: add --sample-hz N\n");
        return REC_EXIT_FAILED;
    }
    if (fdo_out != NULL && sample_hz != NULL && strcmp(sample_hz, "0") == 0) {
        fprintf(stderr, "loupe record: --fdo-profile is made of CPU samples; it cannot be "
                        "combined with --no-sample or --sample-hz 0\n");
        return REC_EXIT_FAILED;
    }
    if (spool != NULL && keep_last) {
        fprintf(stderr, "loupe record: --spool keeps the first events; it cannot be combined "
                        "with --keep-last\n");
        return REC_EXIT_FAILED;
    }
    if (spool != NULL && no_spool) {
        fprintf(stderr, "loupe record: --spool and --no-spool say the opposite; give one\n");
        return REC_EXIT_FAILED;
    }
    unsigned long long budget_v = 0;
    if (spool_budget != NULL && parse_bytes(spool_budget, &budget_v) != 0) {
        fprintf(stderr,
                "loupe record: --spool-budget: \"%s\" is not a size (a whole number of bytes, "
                "or with K, M, G or T: 20G; or none)\n",
                spool_budget);
        return REC_EXIT_FAILED;
    }
    if (spool_budget != NULL && (no_spool || keep_last)) {
        fprintf(stderr, "loupe record: --spool-budget bounds the spool, which %s turns off\n",
                no_spool ? "--no-spool" : "--keep-last");
        return REC_EXIT_FAILED;
    }
    /* By default the events past the session's capacity spill to a spool in the log directory
     * (keep-first only), so a long run keeps them instead of dropping them (0.4 dropped them,
     * and a busy thread's past 1 Mi events). */
    int spill = spool == NULL && !no_spool && !keep_last;
    if (spill) {
        spool = "";
    }
    unsigned bits = 0;
    if (formats != NULL && loupe_format_parse_list(formats, &bits) != 0) {
        fprintf(stderr, "loupe record: --format '%s': %s\n", formats, loupe_last_error());
        return REC_EXIT_FAILED;
    }
    /* Before anything is made: can the loader put loupe into PROGRAM at all? */
    char prog_path[PATH_MAX], why[1024];
    rec_kind kind = record_detect(argv[i], prog_path, sizeof prog_path, why, sizeof why);
    if (kind == REC_NOT_FOUND || kind == REC_NOT_EXECUTABLE) {
        fprintf(stderr, "loupe record: cannot run '%s': %s\n", argv[i], why);
        return kind == REC_NOT_FOUND ? REC_EXIT_NOT_FOUND : REC_EXIT_CANNOT_RUN;
    }
    /* Sampling from outside where the kernel allows it: any static program; a set-user-ID or
     * set-group-ID one when loupe runs as root (perf_event_open(2) on a process of another
     * user needs CAP_PERFMON or CAP_SYS_ADMIN). */
    /* --level 0 is jax.profiler's host_tracer_level 0: the host tracer records nothing, and CPU
     * samples are the host's too (a gRPC capture at level 0 does not sample either); an explicit
     * --sample-hz still samples: a samples-only trace */
    unsigned long hz_v =
        level != NULL && strtoul(level, NULL, 10) == 0 ? 0 : LOUPE_SAMPLING_RECORD_HZ;
    if (sample_hz != NULL) {
        (void)parse_u(sample_hz, 100000, &hz_v);
    }
    int outside = hz_v != 0 && (kind == REC_STATIC ||
                                ((kind == REC_SETUID || kind == REC_SETGID) && geteuid() == 0));
    if (kind >= REC_STATIC && !no_check && !outside) {
        fprintf(stderr,
                "loupe record: cannot trace %s: it is %s; nothing was run (--no-check runs it "
                "anyway)\n",
                argv[i], why);
        return REC_EXIT_NO_TRACE;
    }
    if (outside && sample_stacks != NULL && strcmp(sample_stacks, "dwarf") == 0) {
        /* the DWARF unwinding needs the process's memory maps when its stacks are unwound,
         * which a process sampled from outside may no longer have (loupe/outside.h) */
        fprintf(stderr,
                "loupe record: --sample-stacks dwarf: %s is %s, sampled from outside, where only "
                "frame-pointer stacks are taken; give --sample-stacks fp or none; nothing was "
                "run\n",
                argv[i], kind == REC_STATIC ? "a static binary" : "a set-ID program");
        return REC_EXIT_FAILED;
    }
    if ((kind == REC_SCRIPT || (kind >= REC_STATIC && no_check && !outside)) && !quiet) {
        fprintf(stderr, "loupe record: note: %s is %s\n", argv[i], why);
    }
    if (spool != NULL && spool[0] != 0) {
        /* found now, not after the program ran (the session opens its spool at its start):
         * made as the session would (mkdir -p), and checked for writing */
        size_t sp_existed;
        int se = make_dirs(spool, &sp_existed);
        if (se != 0) {
            fprintf(stderr,
                    "loupe record: --spool=%s: cannot write spool files there: %s; nothing was "
                    "run (give a writable directory, or --spool alone for the log directory)\n",
                    spool, strerror(se));
            return REC_EXIT_FAILED;
        }
    }
    char preload[PATH_MAX];
    if (find_preload(preload, sizeof preload) != 0) {
        fprintf(stderr, "loupe record: cannot find libloupe_preload.so next to the loupe "
                        "command or in its library directory; is loupe installed?\n");
        return REC_EXIT_FAILED;
    }
    char abs_log[PATH_MAX];
    if (log_dir[0] != '/') {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd) == NULL) {
            fprintf(stderr, "loupe record: cannot read the working directory: %s\n",
                    strerror(errno));
            return REC_EXIT_FAILED;
        }
        int n = snprintf(abs_log, sizeof abs_log, "%s/%s", cwd, log_dir);
        if (n < 0 || (size_t)n >= sizeof abs_log) {
            fprintf(stderr, "loupe record: the log directory path is too long\n");
            return REC_EXIT_FAILED;
        }
    } else {
        snprintf(abs_log, sizeof abs_log, "%s", log_dir);
    }
    /* loupe record needs some numbers of its own (the preload's path, the recorder's lock, the
     * result file, the run directory's listing, a region at a time): under a hard
     * RLIMIT_NOFILE below 16 it could run the program but not recover or clean up after it
     * (the regions' directory was left behind), so it says so first */
    struct rlimit nf;
    if (getrlimit(RLIMIT_NOFILE, &nf) == 0 && nf.rlim_max != RLIM_INFINITY && nf.rlim_max < 16) {
        fprintf(stderr,
                "loupe record: the hard RLIMIT_NOFILE is %llu: loupe record needs 16 file "
                "descriptors; start it under a hard limit of 16 or more (the program gets its "
                "own soft limit back before it runs)\n",
                (unsigned long long)nf.rlim_max);
        return REC_EXIT_FAILED;
    }
    size_t existed;
    int md = make_dirs(abs_log, &existed);
    if (md != 0) {
        fprintf(stderr, "loupe record: cannot use the log directory %s: %s\n", abs_log,
                strerror(md));
        return REC_EXIT_FAILED;
    }
    /* One run directory for the whole tree, made here: every process writes
     * <host>.<pid><suffix> into it. */
    char run_made[PATH_MAX];
    run_parents(abs_log, 1);
    if (loupe_run_dir_make(abs_log, NULL, run_made, sizeof run_made) != 0) {
        fprintf(stderr, "loupe record: cannot make the run directory: %s\n", loupe_last_error());
        return 1;
    }
    char host[256] = "";
    (void)gethostname(host, sizeof host - 1);
    if (outside) {
        return record_outside(
            argv + i, run_made, abs_log, existed, host, (uint32_t)hz_v,
            bits | (perfetto ? LOUPE_FORMAT_PERFETTO_JSON : 0), kind, why, quiet, print_to, &filt,
            (sample_stacks != NULL && strcmp(sample_stacks, "none") == 0 ? LOUPE_OUTSIDE_NO_STACKS
                                                                         : 0) |
                (follow ? 0 : LOUPE_OUTSIDE_NO_CHILDREN));
    }
    const char *tmpdir = getenv("TMPDIR");
    char result[PATH_MAX];
    snprintf(result, sizeof result, "%s/loupe-record-XXXXXX",
             tmpdir != NULL && tmpdir[0] ? tmpdir : "/tmp");
    int rfd = mkstemp(result);
    if (rfd < 0) {
        fprintf(stderr, "loupe record: cannot create a temporary file (%s): %s\n", result,
                strerror(errno));
        drop_run(run_made, abs_log, existed);
        return REC_EXIT_FAILED;
    }
    close(rfd);
    /* The preload goes first, libloupe.so second: both come before libc in the lookup order, so
     * libloupe's __cyg_profile_func_* still win over glibc's no-op ones (which an executable
     * built with -finstrument-functions binds to otherwise). In this order glibc's exit runs the
     * preload's stop before libloupe's own exit check (the other order warned, in every
     * process, that its session was never stopped, because _dl_fini finalised libloupe first). */
    char lib[PATH_MAX + 32];
    snprintf(lib, sizeof lib, "%s", preload);
    char *base = strrchr(lib, '/');
    snprintf(base + 1, sizeof lib - (size_t)(base + 1 - lib), "libloupe.so.0");
    char ldp[PATH_MAX * 3];
    const char *old = getenv("LD_PRELOAD");
    snprintf(ldp, sizeof ldp, "%s:%s%s%s", preload, lib, old && *old ? ":" : "", old ? old : "");
    /* The program records into this memfd (its recording region): loupe keeps it, so that what
     * the program recorded survives its death (SIGKILL, a crash, _exit, exec). Without memfd
     * the program records in its own memory, as a linked program does. */
    int shm = memfd_create("loupe-record", MFD_CLOEXEC);
    /* The other processes of the tree record into files here (src/preload/preload.c), so that
     * one that dies without writing its trace is recovered too. */
    char regions[PATH_MAX] = "";
    if (follow) {
        block_ending_signals();
        if (make_regions_dir(regions, sizeof regions) == 0) {
            hold_recorder_lock(regions);
        }
        /* Each trace's writer leaves its counts here (rundir.c), so that the report reads no
         * trace back: 0.4 took 2.3 GB for one of 100 M events. Without it (TMPDIR full), the
         * report reads the traces as before. */
        snprintf(counts_dir, sizeof counts_dir, "%s/loupe-counts-XXXXXX",
                 tmpdir != NULL && tmpdir[0] ? tmpdir : "/tmp");
        if (mkdtemp(counts_dir) == NULL) {
            counts_dir[0] = 0;
        }
    }
    if (counts_dir[0] != 0) {
        setenv("LOUPE_RECORD_COUNTS_DIR", counts_dir, 1); /* for this process's recoveries too */
    } else {
        unsetenv("LOUPE_RECORD_COUNTS_DIR");
    }
    /* The exec's errno comes back on this pipe (closed by a successful exec): a program's own
     * exit status 122 or 123 (or 126, 127) is then never taken for a failed exec. */
    int ep[2] = {-1, -1};
    if (pipe2(ep, O_CLOEXEC) != 0) {
        ep[0] = ep[1] = -1;
    }
    /* The run's timeline base (model/merge.h): now, before any process of the tree starts its
     * session. Every file of the tree counts its XPlane times from it (the program's through
     * its environment, a recovered or outside-sampled process's through this one's), so XProf
     * shows the tree's processes aligned. */
    struct timespec now_rt;
    clock_gettime(CLOCK_REALTIME, &now_rt);
    char base_ns[32];
    snprintf(base_ns, sizeof base_ns, "%lld",
             (long long)now_rt.tv_sec * 1000000000LL + (long long)now_rt.tv_nsec);
    setenv("LOUPE_RECORD_CLOCK_BASE_NS", base_ns, 1);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "loupe record: fork failed: %s\n", strerror(errno));
        unlink(result);
        if (regions[0] != 0) {
            (void)rmdir(regions);
        }
        drop_run(run_made, abs_log, existed);
        return REC_EXIT_FAILED;
    }
    if (pid == 0) {
        restore_ending_signals();
        if (shm >= 0) {
            shm = shm_above_limit(shm);
        }
        if (shm >= 0) {
            char num[32];
            (void)fcntl(shm, F_SETFD, 0); /* inherited by the program, and by it alone */
            snprintf(num, sizeof num, "%d", shm);
            setenv("LOUPE_RECORD_SHM_FD", num, 1);
            snprintf(num, sizeof num, "%ld", (long)getpid());
            setenv("LOUPE_RECORD_SHM_PID", num, 1);
        }
        setenv("LD_PRELOAD", ldp, 1);
        setenv("LOUPE_RECORD_DIR", abs_log, 1);
        setenv("LOUPE_RECORD_RUN_DIR", run_made, 1);
        setenv("LOUPE_RECORD_FOLLOW", follow ? "1" : "0", 1);
        if (quiet) {
            setenv("LOUPE_RECORD_QUIET", "1", 1); /* the preload's notes (an untraced exec) */
        } else {
            unsetenv("LOUPE_RECORD_QUIET");
        }
        setenv("LOUPE_RECORD_RESULT", result, 1);
        char rootpid[32];
        snprintf(rootpid, sizeof rootpid, "%ld", (long)getpid());
        setenv("LOUPE_RECORD_ROOT_PID", rootpid, 1);
        if (regions[0] != 0) {
            setenv("LOUPE_RECORD_REGIONS", regions, 1);
        } else {
            unsetenv("LOUPE_RECORD_REGIONS");
        }
        if (level) {
            setenv("LOUPE_RECORD_LEVEL", level, 1);
        }
        if (buffer) {
            setenv("LOUPE_RECORD_BUFFER_EVENTS", buffer, 1);
        }
        if (session) {
            setenv("LOUPE_RECORD_SESSION_EVENTS", session, 1);
        }
        if (perfetto) {
            setenv("LOUPE_RECORD_PERFETTO", "1", 1);
        }
        if (gpu) {
            setenv("LOUPE_RECORD_DEVICE_TRACER", "1", 1);
        }
        if (formats) {
            setenv("LOUPE_RECORD_FORMATS", formats, 1);
        }
        if (keep_last) {
            setenv("LOUPE_RECORD_OVERFLOW", "last", 1);
        }
        char hz[32];
        snprintf(hz, sizeof hz, "%lu", hz_v);
        setenv("LOUPE_RECORD_SAMPLE_HZ", sample_hz ? sample_hz : hz, 1);
        if (sample_stacks) {
            setenv("LOUPE_RECORD_SAMPLE_STACKS", sample_stacks, 1);
        }
        if (lazy) {
            setenv("LOUPE_RECORD_LAZY", "1", 1);
        }
        if (spool) {
            setenv("LOUPE_RECORD_SPOOL", spool, 1);
            if (spill) {
                setenv("LOUPE_RECORD_SPOOL_SPILL", "1", 1);
            }
            if (spool_budget != NULL) {
                char bb[32];
                snprintf(bb, sizeof bb, "%llu", budget_v);
                setenv("LOUPE_RECORD_SPOOL_BUDGET", bb, 1);
            }
        }
        filter_env(&filt);
        loupe_cli_mpi_child_setup(abs_log, preload, argv[i], mpi);
        std_release_in_child();
        execvp(argv[i], argv + i);
        int e = errno;
        if (ep[1] >= 0) {
            (void)!write(ep[1], &e, sizeof e);
        }
        _exit(REC_EXIT_NOT_FOUND);
    }
    int exec_errno = 0;
    if (ep[1] >= 0) {
        close(ep[1]);
        while (read(ep[0], &exec_errno, sizeof exec_errno) < 0 && errno == EINTR) {
        }
        close(ep[0]);
    }
    /* The program gets terminal signals itself (same process group); loupe waits for it.
     * SIGTERM and SIGHUP sent to loupe alone are passed on, so that the program is not orphaned;
     * SIGINT and SIGQUIT only when a process sent them to loupe (forward_if_sent). */
    int st = wait_program(pid);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char run_dir[PATH_MAX], lines[16384], lines_err[4096], b1[64];
    int status;
    read_result(result, run_dir, sizeof run_dir, lines, sizeof lines, &status);
    unlink(result);
    int started = status != -1000 || strcmp(field(lines, "started", b1, sizeof b1), "1") == 0;
    if (exec_errno != 0 || !started) {
        (void)recover_regions(regions, run_made, host, &(loupe_recover_options){.log_dir = abs_log},
                              NULL, quiet);
    }
    if (exec_errno != 0) {
        if (shm >= 0) {
            close(shm);
        }
        drop_run(run_made, abs_log, existed);
        fprintf(stderr, "loupe record: cannot run '%s': %s\n", argv[i], strerror(exec_errno));
        return exec_errno == ENOENT ? REC_EXIT_NOT_FOUND : REC_EXIT_CANNOT_RUN;
    }
    if (!started) {
        /* The preload never ran in the program (static, secure-execution, or it replaced
         * LD_PRELOAD before loading): nothing was recorded, and no run directory is left. */
        if (shm >= 0) {
            close(shm);
        }
        drop_run(run_made, abs_log, existed);
        if (WIFSIGNALED(st)) {
            fprintf(stderr, "loupe record: %s was killed by signal %d (%s); ", argv[i],
                    WTERMSIG(st), strsignal(WTERMSIG(st)));
        } else {
            fprintf(stderr, "loupe record: %s exited with status %d; ", argv[i], code);
        }
        fprintf(stderr, "loupe's preload never started in it, so nothing was recorded%s%s\n",
                kind >= REC_STATIC ? ": it is " : "", kind >= REC_STATIC ? why : "");
        return code; /* it ran: its status, whatever became of the trace */
    }
    /* The recovery options of every process of the tree: filtered as its stop would have
     * been. */
    const char *inc[1024], *exc[1024];
    filter_split(filt.include, inc, sizeof inc / sizeof inc[0]);
    filter_split(filt.exclude, exc, sizeof exc / sizeof exc[0]);
    loupe_recover_options ro = {
        .log_dir = abs_log,
        .formats = bits | (perfetto ? LOUPE_FORMAT_PERFETTO_JSON : 0),
        .function_filter = inc,
        .function_exclude = exc,
        .function_depth = filt.depth ? (uint32_t)strtoul(filt.depth, NULL, 10) : 0,
        .function_min_duration_ns = filt.min_ns,
        .run_dir = run_made,
    };
    int root_recovered = 0, root_said = 0;
    /* An image of the root that exec'd from a signal handler handed its recording over (the
     * preload's hand_over_at_exec(): its stop would have called malloc) and left this marker;
     * the next image recorded into a region file of its own. */
    char handover[PATH_MAX + 32] = "";
    if (regions[0] != 0) {
        snprintf(handover, sizeof handover, "%s/%ld.exec", regions, (long)pid);
    }
    int handed = handover[0] != 0 && access(handover, F_OK) == 0;
    if (handed) {
        (void)unlink(handover);
    }
    if (regions[0] != 0) {
        /* the preload's other marker: an exec from a signal handler interrupted the stop that
         * was writing an image's trace (at its exit): that image's events are lost */
        char lost[PATH_MAX + 32];
        snprintf(lost, sizeof lost, "%s/%ld.lost", regions, (long)pid);
        if (access(lost, F_OK) == 0) {
            (void)unlink(lost);
            char samples_file[PATH_MAX + 64]; /* its samples' spool: nothing reads it now */
            snprintf(samples_file, sizeof samples_file, "%s/loupe-samples-%ld.bin", run_made,
                     (long)pid);
            (void)unlink(samples_file);
            fprintf(stderr,
                    "loupe record: %s exec'd from a signal handler while its trace was being "
                    "written (at its exit): that image's trace is lost, uncounted\n",
                    argv[i]);
        }
    }
    if ((status == -1000 || handed) && shm >= 0) {
        /* The program ended without stopping its session: what it recorded is in the memfd. */
        char cause[256];
        if (handed) {
            snprintf(cause, sizeof cause,
                     "exec'd from a signal handler (its trace is recovered, not written: the "
                     "stop's malloc may not run there)");
        } else if (WIFSIGNALED(st)) {
            snprintf(cause, sizeof cause, "killed by signal %d (%s)", WTERMSIG(st),
                     strsignal(WTERMSIG(st)));
        } else {
            snprintf(cause, sizeof cause,
                     "exited with status %d without stopping its session (_exit() or exec())",
                     code);
        }
        const char *slash = strrchr(argv[i], '/');
        /* <host>.<pid>, or the next free <host>.<pid>.<n> when an image this pid ran before
         * (an exec) wrote that name already. */
        char prefix[512], cmdline[4096] = "";
        free_prefix(run_made, host, (long)pid, prefix, sizeof prefix);
        for (int k = i; k < argc; k++) {
            size_t l = strlen(cmdline);
            snprintf(cmdline + l, sizeof cmdline - l, "%s%s", k > i ? " " : "", argv[k]);
        }
        loupe_recover_options rr_o = ro;
        rr_o.process_name = slash ? slash + 1 : argv[i];
        rr_o.cause = cause;
        rr_o.file_prefix = prefix;
        rr_o.cmdline = cmdline;
        rr_o.parent_pid = (uint64_t)getpid();
        loupe_trace_result rr = {.size = sizeof rr};
        int rc = loupe_recover_trace(shm, &rr_o, &rr);
        close(shm);
        /* its samples' spool, when the recovery could not read it into the trace (the
         * recovery removes one it read) */
        char samples_file[PATH_MAX + 64];
        snprintf(samples_file, sizeof samples_file, "%s/loupe-samples-%ld.bin", run_made,
                 (long)pid);
        (void)unlink(samples_file);
        if (rc == 0) {
            root_recovered = 1;
            char n1[32], n2[32];
            if (handed ? rr.events_dropped != 0 || !quiet
                       : rr.events_recorded != 0 || rr.events_dropped != 0 || WIFSIGNALED(st)) {
                fprintf(stderr, "loupe record: %s %s; %s events recovered, %s dropped\n", argv[i],
                        cause, loupe_cli_group(rr.events_recorded, n1, sizeof n1),
                        loupe_cli_group(rr.events_dropped, n2, sizeof n2));
                root_said = 1;
            }
            /* else: it recorded nothing and exited (a shell's exit builtin calls _exit(): dash's
             * does), nothing was lost and there is nothing to warn about */
            snprintf(run_dir, sizeof run_dir, "%s", run_made);
            loupe_trace_result_free(&rr);
        } else if (rc != LOUPE_ENO_TRACE) {
            fprintf(stderr, "loupe record: %s %s, and its trace could not be recovered: %s\n",
                    argv[i], cause, loupe_last_error());
            root_said = 1;
        }
    } else if (shm >= 0) {
        close(shm);
    }
    /* Every other process of the tree that is gone without writing its trace. */
    long root_in_regions = (long)pid;
    int others = recover_regions(regions, run_made, host, &ro, &root_in_regions, quiet);
    if (root_in_regions == 0) {
        root_recovered = 1; /* an image the program exec'd, recovered from its region file */
        snprintf(run_dir, sizeof run_dir, "%s", run_made);
    }
    if (!root_recovered && !root_said) {
        if (others == 0) {
            (void)rmdir(run_made); /* when no process of the tree wrote into it (fails otherwise) */
        }
        if (WIFSIGNALED(st)) {
            fprintf(stderr,
                    "loupe record: %s was killed by signal %d (%s) before it could write "
                    "its trace\n",
                    argv[i], WTERMSIG(st), strsignal(WTERMSIG(st)));
            return code;
        }
        if (status == -1000) {
            fprintf(stderr,
                    "loupe record: %s exited (status %d) without writing a trace: it may have "
                    "called _exit() or exec()\n",
                    argv[i], code);
            return code;
        }
        if (status != 0) {
            /* The process is gone and its recording with it: nothing is kept to write again.
             * The remedy is the one for the cause the stop gave: "free space" only for a full
             * disk. */
            const char *err = field(lines, "error", lines_err, sizeof lines_err);
            fprintf(stderr,
                    "loupe record: %s exited with status %d, but writing the trace failed: %s",
                    argv[i], code, err);
            if (strstr(err, "(errno 28)") != NULL || strstr(err, "(errno 122)") != NULL) {
                fprintf(stderr,
                        "; the recording is lost: free space in %s, or rerun with -o DIR on a "
                        "file system with room\n",
                        abs_log);
            } else if (strstr(err, "RLIMIT_AS (ulimit -v)") != NULL) {
                fprintf(stderr, "; the recording is lost: the program used the address space its "
                                "RLIMIT_AS allows, and the stop found none left to write the "
                                "trace\n");
            } else if (strstr(err, "(errno 12)") != NULL || strstr(err, "out of memory") != NULL) {
                fprintf(stderr, "; the recording is lost: the machine had no memory left for "
                                "the stop\n");
            } else if (strstr(err, "(errno 24)") != NULL) {
                fprintf(stderr, "; the recording is lost: the program left no free fd within its "
                                "RLIMIT_NOFILE (ulimit -n) for the trace's files\n");
            } else {
                fprintf(stderr, "; the recording is lost\n");
            }
            return code; /* it ran: its status */
        }
    }
    if (root_said && !root_recovered) {
        return code;
    }
    if (!quiet) {
        if (!root_said) {
            fprintf(stderr, "loupe record: %s exited with status %d\n", argv[i], code);
        }
        if (report_counts(run_dir, &filt, 0) != 0 && !root_recovered) {
            /* the trace is written (a size limit of the reader, say): the stop's own counts */
            char n1[64], n2[64];
            fprintf(stderr, "loupe record: the stop's counts: %s events recorded, %s dropped\n",
                    field(lines, "events_recorded", n1, sizeof n1),
                    field(lines, "events_dropped", n2, sizeof n2));
        }
    } else {
        (void)report_counts(run_dir, &filt, 1); /* -q: one line when anything was lost */
    }
    write_fdo_profile(run_dir, quiet);
    (void)say_run_dir(run_dir, print_to); /* it ran: its status (a failure here is said) */
    return code;
}
