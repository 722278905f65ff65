/* record.c: `loupe record`: runs a program with libloupe_preload.so preloaded, which traces it
 * from start to exit (see src/preload/preload.c), then prints the run directory and the counts.
 * Returns the program's exit status (128 + N when a signal N killed it). */
#include "cli.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <loupe/loupe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

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
            "  --level N              host tracer level: 0 records nothing, 1 critical,\n"
            "                         2 info (default), 3 verbose\n"
            "  --session-events N     the session's capacity in events, 16 bytes each, shared\n"
            "                         by every thread (default %llu: 1 GiB of address space,\n"
            "                         used only as events are recorded)\n"
            "  --buffer-events N      each thread's limit in events (default %u; a zone is 2)\n"
            "  --keep-last            when a thread's limit or the session's capacity is\n"
            "                         reached, the thread's oldest events give way (default:\n"
            "                         keep the first, drop and count the rest)\n"
            "  --lazy-buffers         accepted for scripts; memory is pooled since 0.2\n"
            "  --perfetto             also write the perfetto-json file (below)\n"
            "  --format LIST          the files to write, a comma list of:\n",
            (unsigned long long)LOUPE_DEFAULT_SESSION_EVENTS, LOUPE_DEFAULT_BUFFER_EVENTS);
    /* The run-directory formats, from the registry (loupe/writer.h). */
    for (size_t k = 0; k < loupe_format_count(); k++) {
        const loupe_format_desc *d = loupe_format_info(k);
        if (d->run_dir_bit != 0) {
            fprintf(f, "                           %-14s %s%s\n", d->name,
                    d->host_prefixed ? "<host>" : "", d->suffix);
        }
    }
    fprintf(f,
            "                         default: jax.profiler's set (json,xplane)\n"
            "  --no-follow            trace PROGRAM only, not the processes it forks or the\n"
            "                         programs they exec (default: the whole process tree)\n"
            "  -q, --quiet            print only the run directory\n"
            "  -h, --help             this help\n"
            "\n"
            "The whole process tree is traced: fork()ed children record into their own\n"
            "buffers and exec()ed programs from their start; every process writes\n"
            "<host>.<pid>.* files into the one run directory, which summary, convert and\n"
            "view read as one multi-process timeline. loupe record waits for PROGRAM only;\n"
            "a child that outlives it writes its files when it exits. PROGRAM, when killed\n"
            "by a signal or when it calls _exit() or execs, has its trace written by loupe\n"
            "record from the memory it recorded into (the cause is said); other processes\n"
            "of the tree that die that way leave no file. Statically linked programs (or ones "
            "linked with\n"
            "libloupe.a) cannot be recorded this way: call loupe_start_trace(). A program that\n"
            "starts its own session sees LOUPE_RECORD=1 in its environment and gets\n"
            "LOUPE_EALREADY_STARTED: its annotations go into this recording. See docs/record.md.\n"
            "\n"
            "example:\n"
            "  loupe record -o /tmp/prof -- ./my_program --its-flag\n"
            "  loupe summary /tmp/prof\n");
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

/* mkdir -p, then a writability check: 0 or an errno. */
static int make_dirs(const char *path) {
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        return ENAMETOOLONG;
    }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                return errno;
            }
            buf[i] = c;
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

int loupe_cmd_record(int argc, char **argv) {
    const char *log_dir = "loupe-log";
    const char *level = NULL, *buffer = NULL, *formats = NULL, *session = NULL;
    int perfetto = 0, quiet = 0, keep_last = 0, lazy = 0, follow = 1;
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
        } else if (strcmp(a, "--format") == 0 && i + 1 < argc) {
            formats = argv[++i];
        } else if (strcmp(a, "--keep-last") == 0) {
            keep_last = 1;
        } else if (strcmp(a, "--lazy-buffers") == 0) {
            lazy = 1;
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
            return 2;
        } else {
            break; /* the program, without a "--" */
        }
    }
    if (i >= argc) {
        fprintf(stderr, "loupe record: no program to run\n"
                        "usage: loupe record [options] -- PROGRAM [ARGS...]\n");
        return 2;
    }
    unsigned long v;
    if (level != NULL && parse_u(level, 3, &v) != 0) {
        fprintf(stderr, "loupe record: --level must be 0, 1, 2 or 3, not '%s'\n", level);
        return 2;
    }
    if (session != NULL && (parse_u(session, (unsigned long)1 << 40, &v) != 0 || v < 64)) {
        fprintf(stderr,
                "loupe record: --session-events must be a number from 64 to 2^40, not '%s'\n",
                session);
        return 2;
    }
    if (buffer != NULL && (parse_u(buffer, UINT32_MAX, &v) != 0 || v < 64)) {
        fprintf(stderr, "loupe record: --buffer-events must be a number from 64 to %u, not '%s'\n",
                UINT32_MAX, buffer);
        return 2;
    }
    unsigned bits = 0;
    if (formats != NULL && loupe_format_parse_list(formats, &bits) != 0) {
        fprintf(stderr, "loupe record: --format '%s': %s\n", formats, loupe_last_error());
        return 2;
    }
    char preload[PATH_MAX];
    if (find_preload(preload, sizeof preload) != 0) {
        fprintf(stderr, "loupe record: cannot find libloupe_preload.so next to the loupe "
                        "command or in its library directory; is loupe installed?\n");
        return 1;
    }
    char abs_log[PATH_MAX];
    if (log_dir[0] != '/') {
        char cwd[PATH_MAX];
        if (getcwd(cwd, sizeof cwd) == NULL) {
            fprintf(stderr, "loupe record: cannot read the working directory: %s\n",
                    strerror(errno));
            return 1;
        }
        int n = snprintf(abs_log, sizeof abs_log, "%s/%s", cwd, log_dir);
        if (n < 0 || (size_t)n >= sizeof abs_log) {
            fprintf(stderr, "loupe record: the log directory path is too long\n");
            return 2;
        }
    } else {
        snprintf(abs_log, sizeof abs_log, "%s", log_dir);
    }
    int md = make_dirs(abs_log);
    if (md != 0) {
        fprintf(stderr, "loupe record: cannot use the log directory %s: %s\n", abs_log,
                strerror(md));
        return 1;
    }
    /* One run directory for the whole tree, made here: every process writes
     * <host>.<pid><suffix> into it. */
    char run_made[PATH_MAX];
    if (loupe_run_dir_make(abs_log, NULL, run_made, sizeof run_made) != 0) {
        fprintf(stderr, "loupe record: cannot make the run directory: %s\n", loupe_last_error());
        return 1;
    }
    char host[256] = "";
    (void)gethostname(host, sizeof host - 1);
    const char *tmpdir = getenv("TMPDIR");
    char result[PATH_MAX];
    snprintf(result, sizeof result, "%s/loupe-record-XXXXXX",
             tmpdir != NULL && tmpdir[0] ? tmpdir : "/tmp");
    int rfd = mkstemp(result);
    if (rfd < 0) {
        fprintf(stderr, "loupe record: cannot create a temporary file (%s): %s\n", result,
                strerror(errno));
        return 1;
    }
    close(rfd);
    /* libloupe.so goes first: its __cyg_profile_func_* must win over glibc's no-op ones, which
     * an executable built with -finstrument-functions binds to otherwise. */
    char lib[PATH_MAX + 32];
    snprintf(lib, sizeof lib, "%s", preload);
    char *base = strrchr(lib, '/');
    snprintf(base + 1, sizeof lib - (size_t)(base + 1 - lib), "libloupe.so.0");
    char ldp[PATH_MAX * 3];
    const char *old = getenv("LD_PRELOAD");
    snprintf(ldp, sizeof ldp, "%s:%s%s%s", lib, preload, old && *old ? ":" : "", old ? old : "");
    /* The program records into this memfd (its recording region): loupe keeps it, so that what
     * the program recorded survives its death (SIGKILL, a crash, _exit, exec). Without memfd
     * the program records in its own memory, as a linked program does. */
    int shm = memfd_create("loupe-record", MFD_CLOEXEC);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "loupe record: fork failed: %s\n", strerror(errno));
        unlink(result);
        return 1;
    }
    if (pid == 0) {
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
        setenv("LOUPE_RECORD_RESULT", result, 1);
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
        if (formats) {
            setenv("LOUPE_RECORD_FORMATS", formats, 1);
        }
        if (keep_last) {
            setenv("LOUPE_RECORD_OVERFLOW", "last", 1);
        }
        if (lazy) {
            setenv("LOUPE_RECORD_LAZY", "1", 1);
        }
        execvp(argv[i], argv + i);
        fprintf(stderr, "loupe record: cannot run '%s': %s\n", argv[i], strerror(errno));
        _exit(127);
    }
    /* The program gets terminal signals itself (same process group); loupe waits for it.
     * SIGTERM and SIGHUP sent to loupe alone are passed on, so that the program is not orphaned;
     * SIGINT and SIGQUIT only when a process sent them to loupe (forward_if_sent). */
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
    int st;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    signal(SIGINT, SIG_DFL);
    signal(SIGQUIT, SIG_DFL);
    int code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    char run_dir[PATH_MAX], lines[16384], lines_err[4096], b1[64], b2[64], b3[64];
    int status;
    read_result(result, run_dir, sizeof run_dir, lines, sizeof lines, &status);
    unlink(result);
    if (status == -1000 && shm >= 0 && code != 127) {
        /* The program ended without stopping its session: what it recorded is in the memfd. */
        char cause[256];
        if (WIFSIGNALED(st)) {
            snprintf(cause, sizeof cause, "killed by signal %d (%s)", WTERMSIG(st),
                     strsignal(WTERMSIG(st)));
        } else {
            snprintf(cause, sizeof cause,
                     "exited with status %d without stopping its session (_exit() or exec())",
                     code);
        }
        const char *slash = strrchr(argv[i], '/');
        /* <host>.<pid>, or <host>.<pid>.0 when a program it exec'd (same pid, traced from its
         * start under follow) wrote that name already. */
        char prefix[512], probe[PATH_MAX + 600], cmdline[4096] = "";
        snprintf(prefix, sizeof prefix, "%s.%ld", host[0] ? host : "localhost", (long)pid);
        int taken = 0;
        for (size_t k = 0; k < loupe_format_count() && !taken; k++) {
            const loupe_format_desc *d = loupe_format_info(k);
            if (d->run_dir_bit != 0 && d->host_prefixed) {
                snprintf(probe, sizeof probe, "%s/%s%s", run_made, prefix, d->suffix);
                taken = access(probe, F_OK) == 0;
            }
        }
        if (taken) {
            snprintf(prefix, sizeof prefix, "%s.%ld.0", host[0] ? host : "localhost", (long)pid);
        }
        for (int k = i; k < argc; k++) {
            size_t l = strlen(cmdline);
            snprintf(cmdline + l, sizeof cmdline - l, "%s%s", k > i ? " " : "", argv[k]);
        }
        loupe_recover_options ro = {.log_dir = abs_log,
                                    .formats = bits | (perfetto ? LOUPE_FORMAT_PERFETTO_JSON : 0),
                                    .process_name = slash ? slash + 1 : argv[i],
                                    .cause = cause,
                                    .run_dir = run_made,
                                    .file_prefix = prefix,
                                    .cmdline = cmdline,
                                    .parent_pid = (uint64_t)getpid()};
        loupe_trace_result rr = {.size = sizeof rr};
        int rc = loupe_recover_trace(shm, &ro, &rr);
        close(shm);
        if (rc == 0) {
            char n1[32], n2[32];
            fprintf(stderr, "loupe record: %s %s; %s events recovered, %s dropped\n", argv[i],
                    cause, loupe_cli_group(rr.events_recorded, n1, sizeof n1),
                    loupe_cli_group(rr.events_dropped, n2, sizeof n2));
            printf("%s\n", rr.run_dir);
            loupe_trace_result_free(&rr);
            return code;
        }
        if (rc != LOUPE_ENO_TRACE) {
            fprintf(stderr, "loupe record: %s %s, and its trace could not be recovered: %s\n",
                    argv[i], cause, loupe_last_error());
            return code;
        }
    } else if (shm >= 0) {
        close(shm);
    }
    (void)rmdir(run_made); /* when no process of the tree wrote into it (fails otherwise) */
    if (WIFSIGNALED(st)) {
        fprintf(stderr,
                "loupe record: %s was killed by signal %d (%s) before it could write "
                "its trace\n",
                argv[i], WTERMSIG(st), strsignal(WTERMSIG(st)));
        return code;
    }
    if (status == -1000) {
        if (code != 127) {
            fprintf(stderr,
                    "loupe record: %s exited (status %d) without writing a trace: it "
                    "may have called _exit(), or be statically linked\n",
                    argv[i], code);
        }
        return code;
    }
    if (status != 0) {
        fprintf(stderr, "loupe record: writing the trace failed: %s\n",
                field(lines, "error", lines_err, sizeof lines_err));
        return code ? code : 1;
    }
    if (quiet) {
        printf("%s\n", run_dir);
        return code;
    }
    fprintf(stderr, "loupe record: %s exited with status %d\n", argv[i], code);
    fprintf(stderr, "loupe record: %s events recorded, %s dropped",
            field(lines, "events_recorded", b1, sizeof b1),
            field(lines, "events_dropped", b2, sizeof b2));
    if (strcmp(b2, "0") != 0) {
        char b4[64];
        fprintf(stderr,
                " (to keep them all: the busiest thread needed %s events, the session %s: rerun "
                "with --buffer-events and --session-events at least that)",
                field(lines, "capacity_needed", b3, sizeof b3),
                field(lines, "session_needed", b4, sizeof b4));
    }
    fprintf(stderr, "\n");
    printf("%s\n", run_dir);
    return code;
}
