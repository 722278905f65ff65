/* follow.c: a program for tests/record_follow.sh (loupe record following a process tree):
 *   follow zones NAME N       N zones named NAME, then exit
 *   follow server K N         forks K workers, each recording N "worker" zones and exiting;
 *                             the parent records one "serve" zone around the wait
 *   follow killed N           forks a child that records N zones and is killed by SIGKILL;
 *                             the parent records N "parent" zones and exits normally
 *   follow forkexec N M       forks a child that records N "pre" zones, then execs
 *                             "follow zones post M"; the parent records nothing and waits
 *   follow grandkill N        forks a child that forks a grandchild recording N "doomed"
 *                             zones and killed by SIGKILL; the child waits for it and exits
 *   follow quickexit N        forks a child that records N "quick" zones and ends with
 *                             _exit(0) (as Python's os._exit in a multiprocessing worker)
 *   follow spawn N M          records N "parent" zones, runs "follow zones sys M" with
 *                             system() and "follow zones spawned M" with posix_spawn() (glibc
 *                             execs both inside itself, not through the exec family), waits
 *                             for the spawned one, then N more "parent" zones
 * Linked with libloupe.so: under loupe record its zones land in the preloaded session. */
#include <loupe/loupe.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void zones(const char *name, int n) {
    for (int i = 0; i < n; i++) {
        loupe_zone_end_dyn(loupe_zone_begin_dyn(name, LOUPE_LEVEL_ZONE));
    }
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "zones") == 0) {
        zones(argv[2], atoi(argv[3]));
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "server") == 0) {
        int k = atoi(argv[2]), n = atoi(argv[3]);
        LOUPE_ZONE("serve");
        for (int w = 0; w < k; w++) {
            pid_t p = fork();
            if (p == 0) {
                zones("worker", n);
                exit(0);
            }
        }
        while (wait(NULL) > 0) {
        }
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "killed") == 0) {
        int n = atoi(argv[2]);
        pid_t p = fork();
        if (p == 0) {
            zones("doomed", n);
            raise(SIGKILL);
        }
        waitpid(p, NULL, 0);
        zones("parent", n);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "forkexec") == 0) {
        pid_t p = fork();
        if (p == 0) {
            zones("pre", atoi(argv[2]));
            execl("/proc/self/exe", argv[0], "zones", "post", argv[3], (char *)NULL);
            _exit(127);
        }
        waitpid(p, NULL, 0);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "grandkill") == 0) {
        pid_t p = fork();
        if (p == 0) {
            pid_t g = fork();
            if (g == 0) {
                zones("doomed", atoi(argv[2]));
                raise(SIGKILL);
            }
            waitpid(g, NULL, 0);
            exit(0);
        }
        waitpid(p, NULL, 0);
        return 0;
    }
    if (argc == 3 && strcmp(argv[1], "quickexit") == 0) {
        pid_t p = fork();
        if (p == 0) {
            zones("quick", atoi(argv[2]));
            _exit(0);
        }
        waitpid(p, NULL, 0);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "spawn") == 0) {
        extern char **environ;
        int n = atoi(argv[2]);
        zones("parent", n);
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "'%s' zones sys %s", argv[0], argv[3]);
        if (system(cmd) != 0) {
            return 1;
        }
        char zname[] = "zones", sname[] = "spawned";
        char *args[] = {argv[0], zname, sname, argv[3], NULL};
        pid_t p;
        if (posix_spawn(&p, "/proc/self/exe", NULL, NULL, args, environ) != 0) {
            return 1;
        }
        int st = 0;
        waitpid(p, &st, 0);
        zones("parent", n);
        return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : 1;
    }
    fprintf(stderr, "usage: follow zones NAME N | server K N | killed N | forkexec N M | "
                    "grandkill N | quickexit N | spawn N M\n");
    return 2;
}
