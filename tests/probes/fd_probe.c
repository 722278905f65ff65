/* fd_probe.c: a program that does to its own fds what daemons, shells and supervisors do, for
 * tests/record_fds.sh, which runs each mode untraced and under `loupe record` and compares what
 * it prints (stdout and stderr), the files it writes and its exit status: they must be the same.
 * Usage: fd_probe MODE ZONES FILE
 *   ZONES 1: zones around the work (a loupe-linked program), 0: no loupe call at all.
 *   closeall  close() every fd >= 3 one by one (up to the soft RLIMIT_NOFILE), then a pipe and
 *             FILE, a worker thread, and a fork()ed child that writes 2000 16-byte messages
 *             through the pipe: all 2000 must arrive, and FILE must hold exactly what was
 *             written to it
 *   closefrom the same after closefrom(3)
 *   closerange the same after close_range(3, ~0U, 0)
 *   dup2high  FILE dup2()ed onto the 60 numbers above its own and every fd of the top quarter
 *             of the soft limit (where loupe keeps its own), one line written through each,
 *             with a worker thread started and CPU burnt in between: FILE must hold those
 *             lines and nothing else
 *   nofile N  N threads alive (each past a zone when ZONES is 1, so each is sampled and
 *             registered), then the main thread opens /dev/null until EMFILE: prints how many
 *             it got (the program's share of its RLIMIT_NOFILE)
 *   std       which standard fds are open, what write(1)/read(0) give, and the number a new
 *             file gets (run with 0, 1 or 2 closed: `<&-`, `>&-`, `2>&-`); the report goes to
 *             the first standard fd that is open, else to FILE
 * Exit status 0 when the mode's own check held, 1 when it did not (the reason is printed). */
#include <loupe/loupe.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MESSAGES 2000
#define MSG 16

static int zones;

static void burn(unsigned ms) {
    struct timespec t0, t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
    volatile unsigned long x = 0;
    do {
        for (unsigned k = 0; k < 100000; k++) {
            x += k;
        }
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < (long)ms);
}

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < 20; i++) {
        if (zones) {
            LOUPE_ZONE("worker_step");
            burn(2);
        } else {
            burn(2);
        }
    }
    return NULL;
}

static void run_worker(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, worker, NULL) == 0) {
        pthread_join(t, NULL);
    }
}

static long soft_limit(void) {
    struct rlimit rl;
    return getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY ? (long)rl.rlim_cur
                                                                              : 1024;
}

/* A pipe, FILE, a worker, and a child that writes MESSAGES messages: 0 when all came and FILE
 * holds exactly what was written. */
static int pipe_and_child(const char *file) {
    int p[2];
    if (pipe(p) != 0) {
        printf("pipe: %s\n", strerror(errno));
        return 1;
    }
    int f = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f < 0) {
        printf("open %s: %s\n", file, strerror(errno));
        return 1;
    }
    printf("pipe %d %d, file %d\n", p[0], p[1], f);
    fflush(stdout);
    run_worker();
    pid_t c = fork();
    if (c == 0) {
        close(p[0]);
        for (int i = 0; i < MESSAGES; i++) {
            char m[MSG + 8];
            snprintf(m, sizeof m, "message %07d", i);
            if (zones) {
                LOUPE_ZONE("child_send");
                (void)!write(p[1], m, MSG);
            } else {
                (void)!write(p[1], m, MSG);
            }
        }
        _exit(0);
    }
    close(p[1]);
    int got = 0, bad = 0;
    char m[MSG];
    size_t have = 0;
    for (;;) {
        ssize_t n = read(p[0], m + have, MSG - have);
        if (n <= 0) {
            break;
        }
        have += (size_t)n;
        if (have == MSG) {
            char want[MSG + 8];
            snprintf(want, sizeof want, "message %07d", got);
            bad += memcmp(m, want, MSG) != 0;
            got++;
            have = 0;
        }
        if (zones) {
            LOUPE_ZONE("parent_recv");
        }
    }
    int st = 0;
    waitpid(c, &st, 0);
    char line[64];
    int len = snprintf(line, sizeof line, "messages %d\n", got);
    (void)!write(f, line, (size_t)len);
    close(f);
    f = open(file, O_RDONLY);
    char back[128];
    ssize_t n = f >= 0 ? read(f, back, sizeof back) : -1;
    if (f >= 0) {
        close(f);
    }
    int file_ok = n == len && memcmp(back, line, (size_t)len) == 0;
    printf("messages %d of %d, %d out of order, child status %d, file %s\n", got, MESSAGES, bad,
           WIFEXITED(st) ? WEXITSTATUS(st) : -1, file_ok ? "exact" : "differs");
    return got == MESSAGES && bad == 0 && file_ok && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
}

/* The numbers dup2_high() covers: the 60 above the file's own (where loupe 0.4 kept its fds)
 * and the top quarter of the soft limit, or 1024..1279 under a high limit (where loupe keeps
 * them now). */
static int dup2_target(int f, int i, int lo) {
    return i < 60 ? f + 1 + i : lo + (i - 60);
}

static int dup2_high(const char *file) {
    long lim = soft_limit();
    int lo = (int)(lim - lim / 4), hi = (int)lim - 1;
    if (lim > 2048) {
        lo = 1024; /* where loupe keeps its fds when the limit is high */
        hi = 1024 + 255;
    }
    int f = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (f < 0) {
        printf("open %s: %s\n", file, strerror(errno));
        return 1;
    }
    int count = 60 + (hi - lo + 1);
    run_worker(); /* a thread that registers now (loupe's fds are open) */
    int n = 0;
    for (int i = 0; i < count; i++) {
        int fd = dup2_target(f, i, lo);
        if (dup2(f, fd) == fd) {
            n++;
        }
    }
    run_worker(); /* registers with every one of those numbers the program's */
    burn(100);    /* samples, and a spool's writes, while they are */
    size_t want = 0;
    for (int i = 0; i < count; i++) {
        int fd = dup2_target(f, i, lo);
        char line[32];
        int len = snprintf(line, sizeof line, "fd %d\n", fd);
        if (write(fd, line, (size_t)len) == len) {
            want += (size_t)len;
        }
    }
    run_worker();
    burn(50);
    for (int i = 0; i < count; i++) {
        close(dup2_target(f, i, lo));
    }
    close(f);
    f = open(file, O_RDONLY);
    size_t have = 0;
    char buf[4096];
    ssize_t k;
    while (f >= 0 && (k = read(f, buf, sizeof buf)) > 0) {
        have += (size_t)k;
    }
    if (f >= 0) {
        close(f);
    }
    printf("dup2 onto %d fds, %zu bytes written, file has %zu\n", n, want, have);
    return n == count && have == want ? 0 : 1;
}

static pthread_mutex_t nf_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t nf_cond = PTHREAD_COND_INITIALIZER;
static int nf_ready, nf_go;

static void *nofile_thread(void *arg) {
    (void)arg;
    if (zones) {
        LOUPE_ZONE("nofile_thread");
        burn(1);
    } else {
        burn(1);
    }
    pthread_mutex_lock(&nf_lock);
    nf_ready++;
    pthread_cond_broadcast(&nf_cond);
    while (!nf_go) {
        pthread_cond_wait(&nf_cond, &nf_lock);
    }
    pthread_mutex_unlock(&nf_lock);
    return NULL;
}

static int nofile(int n) {
    pthread_t *t = calloc((size_t)n, sizeof *t);
    int made = 0;
    pthread_attr_t at;
    pthread_attr_init(&at);
    pthread_attr_setstacksize(&at, 64 * 1024);
    for (int i = 0; i < n && t != NULL; i++) {
        made += pthread_create(&t[made], &at, nofile_thread, NULL) == 0;
    }
    pthread_attr_destroy(&at);
    pthread_mutex_lock(&nf_lock);
    while (nf_ready < made) {
        pthread_cond_wait(&nf_cond, &nf_lock);
    }
    pthread_mutex_unlock(&nf_lock);
    burn(120); /* the sampler's scans (every 50 ms) find every thread */
    int got = 0;
    while (open("/dev/null", O_RDONLY) >= 0) {
        got++;
    }
    int e = errno;
    pthread_mutex_lock(&nf_lock);
    nf_go = 1;
    pthread_cond_broadcast(&nf_cond);
    pthread_mutex_unlock(&nf_lock);
    for (int i = 0; i < made; i++) {
        pthread_join(t[i], NULL);
    }
    free(t);
    printf("%d threads, %d files opened, then %s\n", made, got, strerror(e));
    return made == n && e == EMFILE ? 0 : 1;
}

static int std_fds(const char *file) {
    int open_[3];
    for (int i = 0; i < 3; i++) {
        open_[i] = fcntl(i, F_GETFD) >= 0;
    }
    char rep[512];
    size_t len = 0;
    len += (size_t)snprintf(rep + len, sizeof rep - len, "open: 0=%d 1=%d 2=%d\n", open_[0],
                            open_[1], open_[2]);
    run_worker();
    burn(50);
    errno = 0;
    ssize_t w = write(1, "", 0);
    len += (size_t)snprintf(rep + len, sizeof rep - len, "write(1): %s\n",
                            w == 0 ? "ok" : strerror(errno));
    char c;
    errno = 0;
    int fl = fcntl(0, F_GETFL);
    ssize_t r = fl >= 0 && (fl & O_NONBLOCK) ? -2 : (open_[0] ? 0 : read(0, &c, 1));
    len += (size_t)snprintf(rep + len, sizeof rep - len, "read(0): %s\n",
                            r == -2  ? "non-blocking"
                            : r == 0 ? "ok"
                                     : strerror(errno));
    int f = open(file, O_RDONLY | O_CREAT, 0644);
    len += (size_t)snprintf(rep + len, sizeof rep - len, "a new file gets fd %d\n", f);
    int out = open_[1] ? 1 : open_[2] ? 2 : -1;
    if (out < 0) {
        out = open(file, O_WRONLY | O_TRUNC);
    }
    (void)!write(out, rep, len);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: fd_probe closeall|closefrom|closerange|dup2high|std 0|1 FILE\n"
                        "       fd_probe nofile 0|1 THREADS\n");
        return 2;
    }
    zones = atoi(argv[2]);
    const char *mode = argv[1], *file = argv[3];
    if (strcmp(mode, "std") == 0) {
        return std_fds(file);
    }
    if (strcmp(mode, "nofile") == 0) {
        return nofile(atoi(file));
    }
    if (strcmp(mode, "dup2high") == 0) {
        return dup2_high(file);
    }
    burn(30);
    if (strcmp(mode, "closeall") == 0) {
        long lim = soft_limit();
        for (long fd = 3; fd < lim; fd++) {
            close((int)fd);
        }
    } else if (strcmp(mode, "closefrom") == 0) {
        closefrom(3);
    } else if (strcmp(mode, "closerange") == 0) {
        if (close_range(3, ~0u, 0) != 0) {
            printf("close_range: %s\n", strerror(errno));
            return 1;
        }
    } else {
        fprintf(stderr, "fd_probe: unknown mode %s\n", mode);
        return 2;
    }
    return pipe_and_child(file);
}
