/* keeper.c: the keeper thread. While a session runs it keeps chunks populated ahead of the
 * threads' demand (so that taking a chunk never faults pages in on the record path), and keeps
 * the region's clock pair fresh (recovery after a death converts ticks with it); under
 * `loupe record` it also copies the names the recorded events point at into the region's name
 * table (names.c), because a parent reading the region after the program died cannot follow
 * pointers into the dead program.
 *
 * It wakes every millisecond while the program records, and backs off while nothing happens
 * (no event recorded, no chunk taken): its nap doubles from 1 ms up to NAP_MAX_US (10 ms), so
 * an idle traced program sees 100 wake-ups a second, not 1,000 (1.2-1.8 % of a core on the
 * 2-core VM of docs/performance.md). A nap never outlasts half the time the populated chunks
 * ahead last at the fastest rate the threads took chunks recently (measured over windows of at
 * least 2 ms, so that threads joining together do not count as a rate; the memory of it halves
 * every 250 ms of passes): a burst as fast as a recent one finds its chunks populated. A spooling
 * session never backs off (only the keeper's passes give spooled chunks back to the pool, which
 * may be small: a thread recording after an idle stretch would fill it). A thread joining the
 * session wakes it (loupe__keeper_poke, on the first event, where the record path may make a system
 * call); later chunk takes make none (the record path's no-system-call guard, hotpath_syscalls.sh).
 * What the back-off costs: a first burst faster than any before, right after an idle stretch, may
 * outrun the populated chunks for up to one nap and fault its pages in itself; under `loupe
 * record`, a program killed while idle has its open zones closed at the keeper's last heartbeat, up
 * to 10 ms before the death (1 ms while it records), and a name first recorded after an idle
 * stretch is copied up to 10 ms later. It blocks every signal, so the program's handlers never run
 * on it.
 *
 * It lives only while a session does: the stop ends it and joins it (loupe__keeper_end), so
 * that a program that stops its trace and exits (every process under `loupe record`: the
 * preload stops at exit and before an exec) is down to its own threads when it ends. A thread
 * still alive at exit_group() costs the PARENT: the kernel's release_task() of the last thread
 * notifies the parent before it flushes that thread's /proc dentries (proc_flush_pid(),
 * kernel/exit.c), and the parent's reaping then invalidates /proc/<pid> (d_invalidate(),
 * fs/dcache.c), whose walk waits for the dentries the exiting thread is still shrinking: on a
 * loaded machine tens of milliseconds of the parent's system time per child (a shell or make
 * that starts 300 short processes under `loupe record` ran 75 times slower; bench/forks.sh). The
 * keeper also names itself with prctl(), not pthread_setname_np() from its creator, which writes
 * /proc/self/task/TID/comm and so makes those dentries for the keeper's tid.
 */
#include "base/ownfd.h"
#include "record/record.h"

#include "record/names.h"
#include "record/region.h"
#include "record/spool.h"

#include "record/sample.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Chunks kept populated past the pool's bump cursor: as many as the session took so far (what
 * it used is the best guess of what it uses next), at least MIN_AHEAD_CHUNKS (1 MiB) and at
 * most AHEAD_CHUNKS (16 MiB, about 10 ms of one thread recording at full speed; bench/: ~6 ns
 * per event, 16 bytes each). A flat 16 MiB was populated in every process, also one that
 * records nothing (a shell, /bin/true under `loupe record`): 4,096 shared pages faulted in, most
 * of such a process's CPU time (bench/forks.sh). */
#define AHEAD_CHUNKS 256u
#define MIN_AHEAD_CHUNKS 16u

static pthread_mutex_t keeper_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t keeper_cond = PTHREAD_COND_INITIALIZER;
static pid_t keeper_pid;        /* the process the keeper runs in (a fork child has none) */
static pthread_t keeper_thread; /* valid while keeper_pid is this process's */
static int keeper_quit;         /* set by loupe__keeper_end (under keeper_lock) */

/* Chunks populated in one pass at most (2 MiB, about a millisecond of page faults): a pass
 * that populated 16 MiB of shared memory at once took several milliseconds on a loaded machine,
 * and the names and the heartbeat waited behind it. */
#define POPULATE_STEP 32u

/* One pass; returns non-zero when the populated chunks are still short of the target, so that
 * the next pass runs at once. */
static int keep(void) {
    loupe__region_hdr *h = LOUPE__HDR;
    /* The heartbeat and the names first: they are what a recovery after a death needs. */
    uint64_t t, ns;
    loupe__clock_pair(&t, &ns);
    __atomic_store_n(&h->rate_ticks, t, __ATOMIC_RELAXED);
    __atomic_store_n(&h->rate_mono, ns, __ATOMIC_RELEASE);
    if (loupe__region_shared()) {
        loupe__names_scan();
    }
    /* after the names: a chunk leaves memory with its names copied */
    int spooling = loupe__spool_pass() != 0;
    uint64_t bump = __atomic_load_n(&h->bump, __ATOMIC_RELAXED);
    uint64_t cap = __atomic_load_n(&h->session_chunks, __ATOMIC_RELAXED);
    uint64_t ahead = bump < MIN_AHEAD_CHUNKS ? MIN_AHEAD_CHUNKS
                     : bump > AHEAD_CHUNKS   ? AHEAD_CHUNKS
                                             : bump;
    uint64_t want = bump + ahead;
    if (want > cap + 1) {
        want = cap + 1; /* the pool never hands out more than the session's capacity (+ tails) */
    }
    uint64_t have = __atomic_load_n(&h->populated, __ATOMIC_ACQUIRE);
    uint64_t target = want;
    if (want > have + POPULATE_STEP) {
        want = have + POPULATE_STEP;
    }
    loupe__region_populate(want);
    return want < target || spooling;
}

static uint64_t keeper_tid; /* the keeper's OS thread id, 0 before it runs (atomic) */

/* The back-off: a pass that saw nothing new doubles the nap, up to NAP_MAX_US; a pass that saw
 * activity, or a poke, puts it back to NAP_MIN_US. */
#define NAP_MIN_US 1000u
#define NAP_MAX_US 10000u
/* The chunk rate is measured over at least RATE_WINDOW_NS; its maximum halves every
 * RATE_HALF_LIFE_NS. */
#define RATE_WINDOW_NS 2000000u
#define RATE_HALF_LIFE_NS 250000000u

/* 1 while the keeper naps longer than NAP_MIN_US: the futex word loupe__keeper_poke wakes. */
static uint32_t keeper_napping;

void loupe__keeper_poke(void) {
    if (__atomic_load_n(&keeper_napping, __ATOMIC_RELAXED) != 0 &&
        __atomic_exchange_n(&keeper_napping, 0, __ATOMIC_SEQ_CST) != 0) {
        int e = errno; /* called from the record path, also in a signal handler */
        (void)syscall(SYS_futex, &keeper_napping, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
        errno = e;
    }
}

static void add_cursor(loupe__thread *t, void *arg) {
    *(uint64_t *)arg += (uint64_t)(uintptr_t)__atomic_load_n(&t->hot.cur, __ATOMIC_RELAXED);
}

/* A mark that changes whenever the program records: the pool's bump cursor and chunks in use,
 * and every thread's write cursor (a sum: a change anywhere moves it). */
static uint64_t activity_mark(void) {
    loupe__region_hdr *h = LOUPE__HDR;
    uint64_t m = __atomic_load_n(&h->bump, __ATOMIC_RELAXED) * 0x9e3779b97f4a7c15ull +
                 __atomic_load_n(&h->chunks_in_use, __ATOMIC_RELAXED);
    loupe__threads_each(add_cursor, &m);
    return m;
}

/* Sleeps us microseconds, or less when poked; mark is the activity seen by the pass before. */
static void nap(unsigned us, uint64_t mark) {
    if (us <= NAP_MIN_US) {
        struct timespec d = {0, (long)us * 1000};
        nanosleep(&d, NULL);
        return;
    }
    __atomic_store_n(&keeper_napping, 1, __ATOMIC_SEQ_CST);
    /* a thread that joined between the pass and the store above did not poke: look once more
     * (under the lock, as the pass: a stop may be collecting) */
    pthread_mutex_lock(&keeper_lock);
    int same = !keeper_quit && loupe__region != NULL && activity_mark() == mark;
    pthread_mutex_unlock(&keeper_lock);
    if (same) {
        struct timespec d = {0, (long)us * 1000};
        (void)syscall(SYS_futex, &keeper_napping, FUTEX_WAIT_PRIVATE, 1, &d, NULL, 0);
    }
    __atomic_store_n(&keeper_napping, 0, __ATOMIC_RELAXED);
}

/* A number field of a stat file of /proc (proc(5): field 3 is the state, field 20 num_threads),
 * counted after the ")" that ends the command name, read with pread from fd. */
static int stat_field_fd(int fd, int field, char *state, long *num) {
    char buf[1024];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0) {
        return -1;
    }
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    if (p == NULL || p[1] != ' ') {
        return -1;
    }
    p += 2; /* field 3 */
    if (state != NULL) {
        *state = *p;
    }
    for (int f = 3; f < field && p != NULL; f++) {
        p = strchr(p, ' ');
        p = p != NULL ? p + 1 : NULL;
    }
    if (num != NULL) {
        *num = p != NULL ? strtol(p, NULL, 10) : -1;
    }
    return 0;
}

/* The keeper's /proc/self/stat and /proc/self/task, kept open at numbers of loupe's
 * (base/ownfd.h) and read again each time: a scan that opened them every 100 ms took the
 * program's lowest free number for a moment, and a pipe() or open() the program made right
 * after closing its fds got another number than untraced. */
static int keeper_stat_fd = -1, keeper_task_fd = -1;

typedef struct alive_scan {
    uint64_t sampler, pid;
    char leader_state;
    int alive;
} alive_scan;

/* One thread of the listing: alive unless its stat says it ended ('Z', 'X'). Read relative to
 * the listing's own directory (the same /proc mount: tids of the same pid namespace); a thread
 * whose stat cannot be read counts as alive (a doubt never ends the program: the next check,
 * 100 ms on, sees it gone from the listing), and one named "loupe-..." is loupe's (the keeper
 * and the sampler name themselves so: their tids from gettid() are another namespace's when
 * /proc is a parent namespace's mount). */
static int alive_one(uint64_t tid, void *arg) {
    alive_scan *a = arg;
    if (tid == loupe__keeper_tid() || (a->sampler != 0 && tid == a->sampler)) {
        return 0;
    }
    char st = 0;
    if (tid == a->pid) {
        st = a->leader_state; /* /proc/self/stat's state is the leader thread's */
    } else {
        /* another thread: rare here (the count said at most one), and an open of its own */
        char path[32], buf[512];
        snprintf(path, sizeof path, "%llu/stat", (unsigned long long)tid);
        int fd = openat(keeper_task_fd, path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? pread(fd, buf, sizeof buf - 1, 0) : -1;
        if (fd >= 0) {
            close(fd);
        }
        buf[n > 0 ? n : 0] = 0;
        const char *open_paren = strchr(buf, '('), *close_paren = strrchr(buf, ')');
        if (open_paren == NULL || close_paren == NULL || close_paren[1] != ' ') {
            a->alive = 1;
            return 1;
        }
        if (strncmp(open_paren + 1, "loupe-", 6) == 0) {
            return 0;
        }
        st = close_paren[2];
    }
    a->alive = st != 0 && st != 'Z' && st != 'X';
    return a->alive;
}

/* Whether every thread of the process but loupe's own (this keeper, the sampler) is gone: the
 * program's main thread called pthread_exit() and its other threads have ended. POSIX then ends
 * the process "as if exit(0)" when the last thread ends; loupe's threads must not keep it
 * alive (a program that ends main with pthread_exit() never exited under loupe record: seen
 * with a zombie main thread and the keeper and sampler spinning). Cheap first: one read of the
 * thread count; the per-thread states only when the count says it is possible. No malloc (glibc
 * would give this thread an arena of its own: 64 MiB more address space, test_record_hostile's
 * churn bound). */
static int only_loupe_left(void) {
    uint64_t sampler = loupe__sample_tid();
    long mine = 1 + (sampler != 0), threads = -1;
    alive_scan a = {sampler, (uint64_t)getpid(), 0, 0};
    if (loupe__fd_keep(&keeper_stat_fd, "/proc/self/stat", O_RDONLY, 0,
                       "the keeper's /proc/self/stat") != 0 ||
        stat_field_fd(keeper_stat_fd, 20, &a.leader_state, &threads) != 0 || threads < 0 ||
        threads > mine + 1) { /* + 1: a main thread that ended stays a zombie, still counted */
        return 0;
    }
    if (loupe__each_task(&keeper_task_fd, alive_one, &a) != 0) {
        return 0;
    }
    return !a.alive;
}

/* Every 100 ms while a session runs: the process ends when only loupe's
 * threads are left, with exit(0) as POSIX's last pthread_exit() would (its atexit handlers run:
 * `loupe record`'s stop writes the trace). The keeper's lock is not held here. */
static void exit_if_orphaned(void) {
    if (only_loupe_left()) {
        loupe__fd_loupe_thread(0); /* the program's atexit handlers run here now: their fds */
        exit(0);
    }
}

static void *keeper_main(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    /* Named by itself (prctl(2) PR_SET_NAME: no /proc file), before its tid is published: the
     * creator waits for the tid (loupe__keeper_start), so the sampler's scan that follows at
     * the session's start (sample.c) already sees "loupe-keeper" and never opens an event on
     * it (sampled under the program's name, it was a track of loupe's own in the trace). */
    (void)prctl(PR_SET_NAME, "loupe-keeper", 0, 0, 0);
    /* The keeper stays on the program's fd table (its fds adopted: base/ownfd.h), unlike the
     * sampler: it is the thread that calls exit(0) for a program whose main thread called
     * pthread_exit() (exit_if_orphaned()), and the program's atexit handlers and stdio flush
     * must then see the program's fds. Its two /proc files were opened by its creator
     * (loupe__keeper_start()). */
    loupe__fd_loupe_thread(1);
    pthread_mutex_lock(&keeper_lock);
    __atomic_store_n(&keeper_tid, (uint64_t)syscall(SYS_gettid), __ATOMIC_RELEASE);
    pthread_cond_broadcast(&keeper_cond);
    pthread_mutex_unlock(&keeper_lock);
    unsigned nap_us = NAP_MIN_US;
    uint64_t mark = 0, orphan_check = 0, last_bump = 0, last_ns = 0;
    double max_chunks_per_us = 0; /* the fastest the bump cursor moved recently */
    for (;;) {
        pthread_mutex_lock(&keeper_lock);
        while (loupe__region == NULL || !__atomic_load_n(&LOUPE__HDR->active, __ATOMIC_ACQUIRE)) {
            if (keeper_quit) {
                pthread_mutex_unlock(&keeper_lock);
                return NULL;
            }
            struct timespec until;
            clock_gettime(CLOCK_REALTIME, &until);
            until.tv_nsec += 100000000;
            if (until.tv_nsec >= 1000000000) {
                until.tv_sec++;
                until.tv_nsec -= 1000000000;
            }
            if (pthread_cond_timedwait(&keeper_cond, &keeper_lock, &until) != 0) {
                pthread_mutex_unlock(&keeper_lock);
                exit_if_orphaned();
                pthread_mutex_lock(&keeper_lock);
            }
        }
        int behind = keep();
        uint64_t now_mark = activity_mark();
        uint64_t bump = __atomic_load_n(&LOUPE__HDR->bump, __ATOMIC_RELAXED);
        uint64_t populated = __atomic_load_n(&LOUPE__HDR->populated, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&keeper_lock);
        struct timespec now;
        clock_gettime(CLOCK_MONOTONIC, &now);
        uint64_t now_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
        if (bump < last_bump || last_ns == 0) { /* a new session's pool starts again */
            last_bump = bump;
            last_ns = now_ns;
        } else if (now_ns - last_ns >= RATE_WINDOW_NS) {
            double dt = (double)(now_ns - last_ns);
            double rate = (double)(bump - last_bump) * 1000.0 / dt;
            /* the memory halves every RATE_HALF_LIFE_NS */
            max_chunks_per_us *= exp2(-dt / (double)RATE_HALF_LIFE_NS);
            max_chunks_per_us = rate > max_chunks_per_us ? rate : max_chunks_per_us;
            last_bump = bump;
            last_ns = now_ns;
        }
        nap_us = now_mark != mark ? NAP_MIN_US : nap_us * 2 > NAP_MAX_US ? NAP_MAX_US : nap_us * 2;
        mark = now_mark;
        if (loupe__spool_on()) {
            nap_us = NAP_MIN_US;
        }
        if (nap_us > NAP_MIN_US && max_chunks_per_us > 0) {
            /* half the time the chunks populated ahead last at the fastest recent rate */
            double ahead_us =
                (double)(populated > bump ? populated - bump : 0) / max_chunks_per_us / 2.0;
            nap_us = ahead_us < (double)NAP_MIN_US ? NAP_MIN_US
                     : ahead_us < (double)nap_us   ? (unsigned)ahead_us
                                                   : nap_us;
        }
        if (now_ns - orphan_check >= 100000000u) { /* every 100 ms */
            orphan_check = now_ns;
            exit_if_orphaned();
        }
        /* Behind the threads' demand: the next pass at once. One thread writing zones at full
         * speed (32 B per ~16 ns: 2 GB/s) outruns a pass of POPULATE_STEP per millisecond
         * (2 MiB populated in 0.25-0.6 ms on the 2-core VM of docs/performance.md, so about
         * 1.4 GB/s), and a thread that passes the keeper faults its pages in itself: 1.4 us a
         * 4 KiB page there, 10 ns per zone. */
        if (!behind) {
            nap(nap_us, mark);
        } else {
            nap_us = NAP_MIN_US;
        }
    }
    return NULL;
}

void loupe__keeper_start(void) {
    pthread_mutex_lock(&keeper_lock);
    if (keeper_pid != getpid()) {
        /* The keeper's two /proc files, opened here on the starting thread and not by the
         * keeper: their numbers are taken while the program waits for the start (in a fork
         * child, before fork() returns), never at a moment of the keeper's own. An open on the
         * keeper raced a child's own fd work: xargs's child closes fd 0 and dup2()s /dev/null
         * onto it, and a number the keeper was opening made that dup2 fail with EBUSY (dup2(2)),
         * so xargs gave up on the command. */
        (void)loupe__fd_keep(&keeper_stat_fd, "/proc/self/stat", O_RDONLY, 0,
                             "the keeper's /proc/self/stat");
        (void)loupe__fd_keep(&keeper_task_fd, "/proc/self/task", O_RDONLY | O_DIRECTORY, 0,
                             "the thread list (/proc/self/task)");
        pthread_attr_t at;
        pthread_attr_init(&at);
        pthread_attr_setstacksize(&at, 256 * 1024);
        keeper_quit = 0;
        __atomic_store_n(&keeper_tid, 0, __ATOMIC_RELEASE);
        if (pthread_create(&keeper_thread, &at, keeper_main, NULL) == 0) {
            keeper_pid = getpid();
            while (__atomic_load_n(&keeper_tid, __ATOMIC_ACQUIRE) == 0) { /* named, running */
                pthread_cond_wait(&keeper_cond, &keeper_lock);
            }
        }
        pthread_attr_destroy(&at);
    }
    pthread_mutex_unlock(&keeper_lock);
}

void loupe__keeper_end(void) {
    pthread_mutex_lock(&keeper_lock);
    if (keeper_pid != getpid() || pthread_equal(pthread_self(), keeper_thread)) {
        /* none in this process, or the keeper itself (exit_if_orphaned's exit() runs the
         * program's atexit stop on it): it cannot join itself, and it is the last thread */
        pthread_mutex_unlock(&keeper_lock);
        return;
    }
    keeper_quit = 1;
    keeper_pid = 0;
    pthread_t th = keeper_thread;
    pthread_cond_broadcast(&keeper_cond);
    pthread_mutex_unlock(&keeper_lock);
    loupe__keeper_poke();   /* a long nap ends now, not up to NAP_MAX_US later */
    pthread_join(th, NULL); /* keeper_tid stays: the trace just collected names it */
}

void loupe__keeper_kick(void) {
    pthread_mutex_lock(&keeper_lock);
    pthread_cond_broadcast(&keeper_cond);
    pthread_mutex_unlock(&keeper_lock);
}

void loupe__keeper_pause(void) {
    /* Holding the lock means the keeper is between two passes: recycling and collecting may
     * rewrite chains it reads. */
    pthread_mutex_lock(&keeper_lock);
}

int loupe__keeper_trypause(void) {
    return pthread_mutex_trylock(&keeper_lock) == 0;
}

void loupe__keeper_resume(void) {
    pthread_mutex_unlock(&keeper_lock);
}

uint64_t loupe__keeper_tid(void) {
    return __atomic_load_n(&keeper_tid, __ATOMIC_ACQUIRE);
}

void loupe__keeper_forget_in_child(void) {
    __atomic_store_n(&keeper_tid, 0, __ATOMIC_RELEASE); /* the parent's: no thread here */
    /* /proc/self as the parent opened it: the parent's threads, not the child's */
    loupe__fd_close(keeper_stat_fd);
    loupe__fd_close(keeper_task_fd);
    keeper_stat_fd = keeper_task_fd = -1;
    /* The parent's keeper may have been waiting on keeper_cond at the fork: a broadcast in the
     * child would wait for that waiter, which does not exist here, forever (glibc's condition
     * variables). Called with keeper_lock held (fork_prepare took it). */
    pthread_cond_init(&keeper_cond, NULL);
}
