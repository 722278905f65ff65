/* ownfd.c: the table of the fds loupe keeps open in the traced program (ownfd.h says the rule).
 *
 * One state byte per number: FREE (not loupe's), OWN (adopted; its identity is in s_dev/s_ino)
 * and GIVEN (the program closed or replaced it: loupe must not touch the number until the owner
 * has forgotten it, loupe__fd_close()). A GIVEN number is never adopted again before that, so
 * an owner that still holds the old number cannot mistake a later file of loupe's at the same
 * number for its own. Every change is one compare-and-swap, so no lock is taken anywhere: the
 * preload's close() runs in any thread and in signal handlers. */
#include "base/ownfd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#if defined(__linux__) && !defined(CLOSE_RANGE_UNSHARE)
#include <linux/close_range.h>
#endif

enum { FD_FREE = 0, FD_OWN = 1, FD_GIVEN = 2 };

static unsigned char s_state[LOUPE__FD_MAX];
static uint64_t s_id[LOUPE__FD_MAX]; /* st_dev ^ st_ino, mixed: what the number held */
static const char *s_what[LOUPE__FD_MAX];
static uint64_t s_lost;
/* T_SHARED: this thread is one of loupe's (the keeper) or runs loupe's own file work (the stop's
 * symbolisation): the preload's open() adopts what it opens, and its close() of a number the
 * program took over closes nothing. T_PRIVATE: the thread has an fd table of its own (the
 * sampler: loupe__fd_private_table()), whose numbers the program never sees: nothing to adopt,
 * check or guard there. */
enum { T_PROGRAM = 0, T_SHARED = 1, T_PRIVATE = 2 };
static __thread int t_loupe;
static int s_cause_set;
static char s_cause[160];

static uint64_t ident(const struct stat *st) {
    uint64_t x = (uint64_t)st->st_ino * 0x9e3779b97f4a7c15ull;
    return x ^ ((uint64_t)st->st_dev << 17) ^ (uint64_t)(st->st_mode & S_IFMT);
}

/* loupe's own closes: never through the preload's close() (which would take them for the
 * program's). */
static void raw_close(int fd) {
    int saved = errno;
#if defined(__SANITIZE_THREAD__)
    /* TSan tracks each fd number's state through its close() interceptor: a close it never saw
     * made the next accept4() of that number (libmicrohttpd's listener) a "data race" with the
     * eventfd that had it, which halted the traced test's server. No preload runs under TSan
     * (its runtime cannot be preloaded), so close() reaches libc. */
    (void)close(fd);
#else
    (void)syscall(SYS_close, fd);
#endif
    errno = saved;
}

int loupe__fd_floor(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > 2048) {
        return 1024;
    }
    long l = (long)rl.rlim_cur, f = l - l / 4;
    return f < 3 ? 3 : (int)f;
}

/* The number's cause, once: the first is the one a user can act on. */
static void note_lost(int fd, const char *how) {
    __atomic_add_fetch(&s_lost, 1, __ATOMIC_RELAXED);
    int no = 0;
    if (__atomic_compare_exchange_n(&s_cause_set, &no, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
        /* snprintf is not async-signal-safe in general; glibc's with %d and %s allocates
         * nothing, and this runs once per process */
        snprintf(s_cause, sizeof s_cause, "the program %s fd %d (%s)", how, fd,
                 s_what[fd] != NULL ? s_what[fd] : "loupe's");
        __atomic_store_n(&s_cause_set, 2, __ATOMIC_RELEASE);
    }
}

/* Room above a small soft RLIMIT_NOFILE (at most 2048): the soft limit raised by a quarter (64
 * at least) within the hard one while loupe opens and moves an fd, so that loupe's numbers lie
 * at or above the program's soft limit, where its own open()s never reach (an fd above the soft
 * limit is legal; only new numbers are bounded), and take none of its room: 0.4 took the top
 * quarter of it (with `ulimit -Sn 8`, numbers 6 and 7; with 4, the one number the loader
 * needed). *was: the limit before; 1 when raised (room_end() puts it back), 0 when there is no
 * room to raise into (the hard limit) and the floor is loupe__fd_floor()'s. */
static int room_busy; /* a thread is between room_begin() and room_end() */
static int room_raise(struct rlimit *was, struct rlimit *up);

static int room_begin(struct rlimit *was, struct rlimit *up) {
    if (__atomic_exchange_n(&room_busy, 1, __ATOMIC_ACQ_REL)) {
        return 0; /* another thread's room (a raise over a raise would not be put back right) */
    }
    int raised = room_raise(was, up);
    if (!raised) {
        __atomic_store_n(&room_busy, 0, __ATOMIC_RELEASE);
    }
    return raised;
}

static int room_raise(struct rlimit *was, struct rlimit *up) {
    if (getrlimit(RLIMIT_NOFILE, was) != 0 || was->rlim_cur == RLIM_INFINITY ||
        was->rlim_cur > 2048 ||
        (was->rlim_max != RLIM_INFINITY && was->rlim_max <= was->rlim_cur)) {
        return 0;
    }
    rlim_t add = was->rlim_cur / 4 > 64 ? was->rlim_cur / 4 : 64;
    *up = *was;
    up->rlim_cur = was->rlim_max != RLIM_INFINITY && was->rlim_max - was->rlim_cur < add
                       ? was->rlim_max
                       : was->rlim_cur + add;
    return setrlimit(RLIMIT_NOFILE, up) == 0;
}

/* The limit back as it was, unless the program changed it meanwhile (a thread of its own
 * raising its limit at its start: its value stands). */
static void room_end(const struct rlimit *was, const struct rlimit *up) {
    struct rlimit now;
    if (getrlimit(RLIMIT_NOFILE, &now) == 0 && now.rlim_cur == up->rlim_cur &&
        now.rlim_max == up->rlim_max) {
        (void)setrlimit(RLIMIT_NOFILE, was);
    }
    __atomic_store_n(&room_busy, 0, __ATOMIC_RELEASE);
}

static int adopt_from(int fd, const char *what, int from);

int loupe__fd_adopt(int fd, const char *what) {
    if (fd < 0) {
        errno = EBADF;
        return -1;
    }
    if (t_loupe == T_PRIVATE || loupe__fd_is_own(fd)) {
        return fd; /* a private table's, or adopted already (the preload's open()) */
    }
    struct rlimit was, up;
    int raised = room_begin(&was, &up);
    /* in another thread's room: its floor is the raised limit's top quarter, still above the
     * program's own soft limit */
    int nf = adopt_from(fd, what, raised ? (int)was.rlim_cur : loupe__fd_floor());
    if (raised) {
        int e = errno;
        room_end(&was, &up);
        errno = e;
    }
    return nf;
}

static int adopt_from(int fd, const char *what, int from) {
    int saved = errno;
    for (;;) {
        int nf = (int)syscall(SYS_fcntl, fd, F_DUPFD_CLOEXEC, from);
        if (nf < 0) {
            int e = errno == EINVAL ? EMFILE : errno; /* EINVAL: the floor is past the limit */
            raw_close(fd);
            errno = e;
            return -1;
        }
        if (nf >= LOUPE__FD_MAX) {
            raw_close(nf);
            raw_close(fd);
            errno = EMFILE;
            return -1;
        }
        struct stat st;
        unsigned char want = FD_FREE;
        if (fstat(nf, &st) == 0) {
            s_id[nf] = ident(&st);
            s_what[nf] = what;
            if (__atomic_compare_exchange_n(&s_state[nf], &want, FD_OWN, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_RELAXED)) {
                raw_close(fd);
                errno = saved;
                return nf;
            }
        }
        /* GIVEN: its old owner has not forgotten it yet; a higher number */
        raw_close(nf);
        from = nf + 1;
    }
}

int loupe__fd_open(const char *path, int flags, unsigned mode, const char *what) {
    /* the open itself within the room too: a program at its limit still lets loupe open */
    struct rlimit was, up;
    int raised = room_begin(&was, &up);
    int fd = open(path, flags | O_CLOEXEC, (mode_t)mode);
    int nf = fd < 0 ? -1
             : t_loupe == T_PRIVATE || loupe__fd_is_own(fd)
                 ? fd
                 : adopt_from(fd, what, raised ? (int)was.rlim_cur : loupe__fd_floor());
    if (raised) {
        int e = errno;
        room_end(&was, &up);
        errno = e;
    }
    return nf;
}

int loupe__fd_is_own(int fd) {
    return fd >= 0 && fd < LOUPE__FD_MAX &&
           __atomic_load_n(&s_state[fd], __ATOMIC_ACQUIRE) == FD_OWN;
}

void loupe__fd_surrender(int fd, const char *how) {
    unsigned char want = FD_OWN;
    if (fd >= 0 && fd < LOUPE__FD_MAX &&
        __atomic_compare_exchange_n(&s_state[fd], &want, FD_GIVEN, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_RELAXED)) {
        note_lost(fd, how);
    }
}

int loupe__fd_ok(int fd) {
    if (t_loupe == T_PRIVATE) {
        return fd >= 0;
    }
    if (!loupe__fd_is_own(fd)) {
        return 0;
    }
    int saved = errno;
    struct stat st;
    int same = fstat(fd, &st) == 0 && ident(&st) == s_id[fd];
    errno = saved;
    if (!same) {
        /* closed (EBADF) or another file at the number: linked use, where no preload told us */
        loupe__fd_surrender(fd, syscall(SYS_fcntl, fd, F_GETFD) < 0 ? "closed" : "replaced");
        errno = saved;
    }
    return same;
}

void loupe__fd_close(int fd) {
    if (fd >= 0 && t_loupe == T_PRIVATE) {
        raw_close(fd);
        return;
    }
    if (fd < 0 || fd >= LOUPE__FD_MAX) {
        return;
    }
    int ours = loupe__fd_ok(fd);
    unsigned char st = __atomic_load_n(&s_state[fd], __ATOMIC_ACQUIRE);
    if (ours) {
        /* FREE before the close: the number may be the program's again right after it */
        __atomic_store_n(&s_state[fd], FD_FREE, __ATOMIC_RELEASE);
        raw_close(fd);
    } else if (st == FD_GIVEN) {
        __atomic_store_n(&s_state[fd], FD_FREE, __ATOMIC_RELEASE);
    }
}

uint64_t loupe__fd_lost(char *buf, size_t size) {
    uint64_t n = __atomic_load_n(&s_lost, __ATOMIC_RELAXED);
    if (buf != NULL && size > 0) {
        buf[0] = 0;
        if (__atomic_load_n(&s_cause_set, __ATOMIC_ACQUIRE) == 2) {
            snprintf(buf, size, "%s", s_cause);
        }
    }
    return n;
}

int loupe__fd_keep(int *fd, const char *path, int flags, uint64_t size, const char *what) {
    if (loupe__fd_ok(*fd)) {
        return 0;
    }
    loupe__fd_close(*fd); /* forgets a number the program took: it is not touched again */
    *fd = -1;
    int nf = path != NULL && path[0] ? loupe__fd_open(path, flags, 0, what) : -1;
    struct stat st;
    if (nf >= 0 && (fstat(nf, &st) != 0 || (uint64_t)st.st_size < size ||
                    lseek(nf, (off_t)size, SEEK_SET) < 0)) {
        loupe__fd_close(nf); /* not the file loupe wrote: cut or replaced */
        nf = -1;
    }
    *fd = nf;
    return nf >= 0 ? 0 : -1;
}

int loupe__each_task(int *dirfd, int (*fn)(uint64_t tid, void *arg), void *arg) {
    /* /proc mounted anew since the fd was opened (`unshare -p -f --mount-proc`, a container's
     * set-up after the program started): the old mount lists the tids of another pid namespace,
     * which neither this process's gettid() nor the new /proc/self/task/<tid> paths name (the
     * keeper took every thread of such a process for ended, and ended it). The new one is read. */
    struct stat now, was;
    if (*dirfd >= 0 && loupe__fd_ok(*dirfd) && stat("/proc/self/task", &now) == 0 &&
        fstat(*dirfd, &was) == 0 && now.st_dev != was.st_dev) {
        loupe__fd_close(*dirfd);
        *dirfd = -1;
    }
    if (loupe__fd_keep(dirfd, "/proc/self/task", O_RDONLY | O_DIRECTORY, 0,
                       "the thread list (/proc/self/task)") != 0 ||
        lseek(*dirfd, 0, SEEK_SET) != 0) {
        return -1;
    }
    _Alignas(8) char ents[4096];
    long got;
    while ((got = syscall(SYS_getdents64, *dirfd, ents, sizeof ents)) > 0) {
        for (long off = 0; off < got;) {
            /* struct linux_dirent64 (getdents64(2)): d_ino 8, d_off 8, d_reclen 2, d_type 1,
             * d_name */
            unsigned short reclen;
            memcpy(&reclen, ents + off + 16, sizeof reclen);
            const char *name = ents + off + 19;
            if (reclen == 0) {
                return 0;
            }
            off += reclen;
            if (name[0] < '0' || name[0] > '9') {
                continue;
            }
            uint64_t tid = 0;
            for (const char *p = name; *p >= '0' && *p <= '9'; p++) {
                tid = tid * 10 + (uint64_t)(*p - '0');
            }
            if (fn(tid, arg) != 0) {
                return 0;
            }
        }
    }
    return got < 0 ? -1 : 0;
}

void loupe__fd_loupe_thread(int on) {
    if (t_loupe != T_PRIVATE) {
        t_loupe = on ? T_SHARED : T_PROGRAM;
    }
}

int loupe__fd_is_loupe_thread(void) {
    return t_loupe;
}

int loupe__fd_private_table(const int *keep, size_t n) {
#if defined(SYS_close_range) && defined(CLOSE_RANGE_UNSHARE) && !defined(__SANITIZE_THREAD__)
    int k[8];
    size_t m = 0;
    for (size_t i = 0; i < n && m < 8; i++) {
        if (keep[i] >= 0) {
            size_t j = m++;
            for (; j > 0 && k[j - 1] > keep[i]; j--) {
                k[j] = k[j - 1];
            }
            k[j] = keep[i];
        }
    }
    unsigned top = m > 0 ? (unsigned)k[m - 1] + 1u : 0u;
    /* The kernel copies only the numbers below `top` into the new table (fs/file.c,
     * __close_range with CLOSE_RANGE_UNSHARE), and the rest of them are closed right after:
     * the program's files are held by the copy for two system calls, never longer. */
    if (syscall(SYS_close_range, top, ~0u, CLOSE_RANGE_UNSHARE) != 0) {
        return -1;
    }
    unsigned from = 0;
    for (size_t i = 0; i < m; i++) {
        if ((unsigned)k[i] > from) {
            (void)syscall(SYS_close_range, from, (unsigned)k[i] - 1u, 0);
        }
        from = (unsigned)k[i] + 1u;
    }
    t_loupe = T_PRIVATE;
    return 0;
#else
    /* TSan tracks fds by number (its fd table is the process's): a second table would read to
     * it as races between unrelated files. The thread stays on the shared table. */
    (void)keep;
    (void)n;
    errno = ENOSYS;
    return -1;
#endif
}

int loupe__fd_closing(int fd) {
    if (t_loupe == T_PRIVATE) {
        return 1; /* a number of the thread's own table */
    }
    if (fd < 0 || fd >= LOUPE__FD_MAX) {
        return 1;
    }
    unsigned char st = __atomic_load_n(&s_state[fd], __ATOMIC_ACQUIRE);
    if (!t_loupe) {
        if (st == FD_OWN) {
            loupe__fd_surrender(fd, "closed");
        }
        return 1;
    }
    /* loupe's own close (a library's, as libdw's of the ELF files it had open) */
    if (st == FD_GIVEN) {
        __atomic_store_n(&s_state[fd], FD_FREE, __ATOMIC_RELEASE);
        return 0; /* the program's file now: left open */
    }
    if (st == FD_OWN) {
        __atomic_store_n(&s_state[fd], FD_FREE, __ATOMIC_RELEASE);
    }
    return 1;
}
