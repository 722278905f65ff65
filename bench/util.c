/* util.c: the process and file helpers the harness and the cases share: read a line, find a
 * program in PATH, sum or remove a directory tree, run a command and capture its output.
 */
#include "harness.h"

#include <errno.h>
#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

void bench_read_line(const char *path, char *buf, size_t size) {
    buf[0] = 0;
    FILE *f = fopen(path, "r");
    if (f != NULL) {
        if (fgets(buf, (int)size, f) == NULL) {
            buf[0] = 0;
        }
        fclose(f);
    }
    buf[strcspn(buf, "\n")] = 0;
}

int bench_find_in_path(const char *name, char *out, size_t size) {
    const char *path = getenv("PATH");
    if (path == NULL) {
        path = "/usr/bin:/bin";
    }
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(out, size, "%.*s/%s", (int)len, path, name);
        if (len > 0 && access(out, X_OK) == 0) {
            return 1;
        }
        path += len;
        if (*path == ':') {
            path++;
        }
    }
    out[0] = 0;
    return 0;
}

static uint64_t du_total;
static int du_add(const char *p, const struct stat *st, int type, struct FTW *ftw) {
    (void)p;
    (void)ftw;
    if (type == FTW_F) {
        du_total += (uint64_t)st->st_size;
    }
    return 0;
}

uint64_t bench_du_bytes(const char *path) {
    du_total = 0;
    (void)nftw(path, du_add, 16, FTW_PHYS);
    return du_total;
}

static int rm_one(const char *p, const struct stat *st, int type, struct FTW *ftw) {
    (void)st;
    (void)ftw;
    if (type == FTW_DP) {
        (void)rmdir(p);
    } else {
        (void)unlink(p);
    }
    return 0;
}

void bench_rm_rf(const char *path) {
    (void)nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int bench_run_cmd(const char *const argv[], char *out, size_t size, int all_cpus) {
    /* execvp takes char *const[]: copy the arguments into writable storage, before the fork so
     * that the child does no more than it did. */
    char store[16384];
    char *args[16];
    size_t stored = 0, nargs = 0;
    for (; argv[nargs] != NULL; nargs++) {
        size_t len = strlen(argv[nargs]) + 1;
        if (nargs + 1 == sizeof args / sizeof args[0] || len > sizeof store - stored) {
            out[0] = 0;
            return -1;
        }
        args[nargs] = memcpy(store + stored, argv[nargs], len);
        stored += len;
    }
    args[nargs] = NULL;
    int fds[2];
    if (pipe(fds) != 0) {
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]);
        close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        dup2(fds[1], 1);
        dup2(fds[1], 2);
        close(fds[0]);
        close(fds[1]);
        if (all_cpus) {
            bench_unpin();
        }
        execvp(args[0], args);
        _exit(127);
    }
    close(fds[1]);
    size_t used = 0;
    char scratch[4096];
    for (;;) {
        char *dst = used + 1 < size ? out + used : scratch;
        size_t room = used + 1 < size ? size - 1 - used : sizeof scratch;
        ssize_t r = read(fds[0], dst, room);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            break;
        }
        if (dst != scratch) {
            used += (size_t)r;
        }
    }
    out[used] = 0;
    close(fds[0]);
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            return -1;
        }
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

void bench_first_line(const char *s, char *buf, size_t size) {
    while (*s == '\n' || *s == ' ') {
        s++;
    }
    snprintf(buf, size, "%.*s", (int)strcspn(s, "\n"), s);
}
