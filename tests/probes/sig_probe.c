/* sig_probe.c: for tests/record_signals.sh. "dispositions": prints, at main, what sigaction()
 * reports for SIGINT, SIGTERM, SIGHUP, SIGSEGV, SIGBUS, SIGABRT, SIGFPE and SIGILL ("DFL", "IGN"
 * or "handler"): under `loupe record` every one must be what the program would have had
 * untraced. "forks N [ZONES [ALIVE]]": N fork()ed children each record ZONES zones
 * "child_work" (1 by default) and end with _exit(0) right after them (no atexit stop: `loupe
 * record` recovers each child's region), at most ALIVE of them at a time (all by default); the
 * parent waits for them and returns 0. "reenter": a SIGUSR1 handler that records a zone interrupts
 * a loop of zones, 100,000 times a second (some ticks land inside a recording call: re-entered,
 * dropped). "count FILE": counts the SIGINTs and SIGTERMs it gets (handlers, the way a server's
 * "second SIGINT forces the quit" counts them), writes FILE once they are installed, ends 300 ms
 * after its first SIGTERM (or after 10 s) and prints "INT=n TERM=m". "remount-proc" (root):
 * a child in new pid and mount namespaces mounts a /proc of its own 300 ms after its fork (what
 * `unshare -p -f --mount-proc` does between its fork and its exec), records a zone "after" 400 ms
 * later and prints "alive" (0.4's keeper read the new mount's files with the old one's tids,
 * took every thread for ended and exit(0)ed the child first). */
#include <loupe/loupe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <time.h>
#include <sys/mount.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *what(int sig) {
    struct sigaction old;
    if (sigaction(sig, NULL, &old) != 0) {
        return "error";
    }
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_DFL) {
        return "DFL";
    }
    if (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN) {
        return "IGN";
    }
    return "handler";
}

static volatile sig_atomic_t n_int, n_term;

static void in_handler(int sig) {
    (void)sig;
    LOUPE_ZONE("handler");
}

static volatile int kick_done;

/* "exec-in-handler": SIGALRM's handler execs this program again ("exec-target"), interrupting
 * a loop of malloc/free (with zones): POSIX makes execve async-signal-safe, and the exec's path
 * through loupe must not take malloc's lock that the interrupted free() may hold. */
static char self_path[4096], target_arg[] = "exec-target";

static void exec_handler(int sig) {
    (void)sig;
    char *const args[] = {self_path, target_arg, NULL};
    extern char **environ;
    execve(self_path, args, environ);
    _exit(5);
}

/* "exec-at-exit GEN US": records 200,000 zones "exit_w<GEN>", arms SIGALRM US microseconds on
 * and returns from main: the alarm lands in the exit's stop (collecting or writing the trace),
 * and its handler execs GEN + 1; GEN 3 exits 7 at once. */
static int exit_gen;
static char exit_us[32], exit_mode[] = "exec-at-exit";

static void exit_exec_handler(int sig) {
    (void)sig;
    char g[16];
    snprintf(g, sizeof g, "%d", exit_gen + 1);
    char *const args[] = {self_path, exit_mode, g, exit_us, NULL};
    extern char **environ;
    execve(self_path, args, environ);
    _exit(98);
}

static int exec_at_exit(const char *argv0, int gen, const char *us) {
    snprintf(self_path, sizeof self_path, "%s", argv0);
    snprintf(exit_us, sizeof exit_us, "%s", us);
    exit_gen = gen;
    sigset_t alrm; /* blocked across the exec from the handler: the next image unblocks it */
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    sigprocmask(SIG_UNBLOCK, &alrm, NULL);
    printf("gen %d\n", gen);
    fflush(stdout);
    if (gen >= 3) {
        return 7;
    }
    static const char *const names[] = {"exit_w0", "exit_w1", "exit_w2"};
    for (int i = 0; i < 200000; i++) {
        LOUPE_ZONE_DYN(names[gen]);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = exit_exec_handler;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, atol(us)}};
    setitimer(ITIMER_REAL, &it, NULL);
    return 0;
}

static _Noreturn void exec_in_handler(const char *argv0) {
    snprintf(self_path, sizeof self_path, "%s", argv0);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = exec_handler;
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval it = {{0, 0}, {0, 30000}}; /* 30 ms in */
    setitimer(ITIMER_REAL, &it, NULL);
    for (unsigned i = 0;; i++) {
        LOUPE_ZONE("churn");
        void *p[16];
        for (unsigned k = 0; k < 16; k++) {
            p[k] = malloc(16 + (i * 7 + k * 131) % 4000);
        }
        for (unsigned k = 0; k < 16; k++) {
            free(p[k]);
        }
    }
}

static void *kicker(void *arg) {
    pthread_t to = *(pthread_t *)arg;
    while (!kick_done) {
        pthread_kill(to, SIGUSR1);
        struct timespec d = {0, 10000};
        nanosleep(&d, NULL);
    }
    return NULL;
}

static void count_sig(int sig) {
    if (sig == SIGINT) {
        n_int++;
    } else {
        n_term++;
    }
}

static int count_signals(const char *ready) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = count_sig;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    FILE *f = fopen(ready, "w");
    if (f == NULL) {
        return 2;
    }
    fclose(f);
    for (int i = 0; i < 1000 && n_term == 0; i++) {
        usleep(10000);
    }
    usleep(300000); /* a second copy, if one is coming */
    printf("INT=%d TERM=%d\n", (int)n_int, (int)n_term);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && strcmp(argv[1], "count") == 0) {
        return count_signals(argv[2]);
    }
    if (argc >= 2 && strcmp(argv[1], "dispositions") == 0) {
        static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGSEGV,
                                   SIGBUS, SIGABRT, SIGFPE, SIGILL};
        static const char *const names[] = {"INT", "TERM", "HUP", "SEGV",
                                            "BUS", "ABRT", "FPE", "ILL"};
        for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
            printf("%s=%s\n", names[i], what(sigs[i]));
        }
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "exec-in-handler") == 0) {
        exec_in_handler(argv[0]);
    }
    if (argc >= 4 && strcmp(argv[1], "exec-at-exit") == 0) {
        return exec_at_exit(argv[0], atoi(argv[2]), argv[3]);
    }
    if (argc >= 2 && strcmp(argv[1], "exec-target") == 0) {
        { LOUPE_ZONE("target"); }
        printf("exec'd\n");
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "remount-proc") == 0) {
        /* unshare(1)'s -p -f --mount-proc, with its timing made certain: new pid and mount
         * namespaces, a fork()ed child (pid 1 there, its session and loupe's threads started in
         * the fork, all in the new mount namespace) that mounts a /proc of its own 300 ms on */
        if (unshare(CLONE_NEWNS | CLONE_NEWPID) != 0) {
            perror("sig_probe: remount-proc: unshare");
            return 3;
        }
        pid_t p = fork();
        if (p == 0) {
            struct timespec t = {0, 300000000};
            nanosleep(&t, NULL);
            if (mount("none", "/proc", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
                mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0) {
                perror("sig_probe: remount-proc: mount");
                _exit(3);
            }
            t.tv_nsec = 400000000;
            nanosleep(&t, NULL);
            { LOUPE_ZONE("after"); }
            printf("alive\n");
            exit(0);
        }
        int st = 0;
        if (p < 0 || waitpid(p, &st, 0) != p) {
            return 3;
        }
        return WIFEXITED(st) ? WEXITSTATUS(st) : 4;
    }
    if (argc >= 2 && strcmp(argv[1], "reenter") == 0) {
        /* a thread sends SIGUSR1 to this one every 10 us, whose handler records a zone, over
         * 400,000 empty zones (800,000 events, within the default per-thread limit): a signal
         * that lands inside a recording call re-enters it, and its zone is dropped and counted */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = in_handler;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGUSR1, &sa, NULL);
        pthread_t me = pthread_self(), k;
        pthread_create(&k, NULL, kicker, &me);
        for (int i = 0; i < 400000; i++) {
            LOUPE_ZONE("loop");
        }
        kick_done = 1;
        pthread_join(k, NULL);
        return 0;
    }
    if (argc >= 3 && strcmp(argv[1], "forks") == 0) {
        int n = atoi(argv[2]);
        long zones = argc >= 4 ? atol(argv[3]) : 1;
        int alive_max = argc >= 5 ? atoi(argv[4]) : n, alive = 0, st, bad = 0;
        for (int i = 0; i < n; i++) {
            if (alive >= alive_max && wait(&st) > 0) {
                bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
                alive--;
            }
            pid_t p = fork();
            if (p == 0) {
                for (long z = 0; z < zones; z++) {
                    LOUPE_ZONE("child_work");
                    volatile unsigned x = 0;
                    for (unsigned k = 0; k < (zones == 1 ? 100000u : 10u); k++) {
                        x += k;
                    }
                }
                _exit(0);
            }
            if (p < 0) {
                return 2;
            }
            alive++;
        }
        while (wait(&st) > 0) {
            bad += !WIFEXITED(st) || WEXITSTATUS(st) != 0;
        }
        return bad;
    }
    return 2;
}
