/* compress_workload.c: a real multi-threaded workload, annotated with loupe.
 *
 * One reader thread walks a directory tree (default /usr/share), reads regular files in batches
 * and pushes them onto a bounded queue; worker threads pop them, deflate each with zlib
 * (compress2, level 6) and checksum it with crc32 and adler32. Every stage is a zone, the queue
 * depth is a counter, each file is a flow from the reader's read_file zone to the worker's
 * process_file zone, and each batch of files is a step: the reader reads a batch, pushes it and
 * waits until the workers have finished it, like one step of a training loop.
 *
 * Tracing: under `loupe record` (LOUPE_RECORD is set) the session is already running and this
 * program only annotates; with --trace DIR it starts and stops its own session; otherwise it runs
 * untraced (each annotation then costs one relaxed load and a branch).
 */
#define _POSIX_C_SOURCE 200809L

#include <loupe/loupe.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

enum {
    BATCH_FILES = 32,  /* files per step */
    QUEUE_SLOTS = 16,  /* bounded queue capacity */
    MAX_WORKERS = 64,  /* --threads upper bound */
    MAX_DEPTH = 64,    /* directory recursion limit */
    EXT_NAME_MAX = 24, /* "ext:" + the extension, cut to fit */
    PATH_BUF = 4096,   /* longest path walked, with its NUL */
};

#define DEFAULT_ROOT "/usr/share"
#define DEFAULT_MAX_FILES 10000u
#define DEFAULT_MAX_BYTES (160ull << 20)

/* ---- options ---- */

typedef struct options {
    const char *root;
    const char *trace_dir; /* --trace DIR, or NULL */
    unsigned threads;
    uint64_t max_files;
    uint64_t max_bytes;
} options;

static void usage(FILE *f, const char *prog) {
    fprintf(f,
            "usage: %s [options] [DIR]\n"
            "\n"
            "Walks DIR (default %s), reads its regular files and compresses each with zlib\n"
            "(level 6) on worker threads, checksumming with crc32 and adler32. Symbolic links,\n"
            "special files and unreadable files are skipped and counted.\n"
            "\n"
            "options:\n"
            "  --threads N      worker threads (default 2, at most %d)\n"
            "  --max-files N    stop after N files (default %u)\n"
            "  --max-bytes N    stop after N bytes read; suffixes K, M, G (default %llu M)\n"
            "  --trace DIR      record a loupe trace into DIR (ignored when LOUPE_RECORD is set,\n"
            "                   i.e. under `loupe record`, which traces the whole run)\n"
            "  -h, --help       this help\n",
            prog, DEFAULT_ROOT, MAX_WORKERS, DEFAULT_MAX_FILES, DEFAULT_MAX_BYTES >> 20);
}

/* Parses a non-negative integer with an optional K/M/G suffix (powers of 1024). */
static int parse_size(const char *s, uint64_t *out) {
    char *end = NULL;
    errno = 0;
    if (s[0] < '0' || s[0] > '9') {
        return -1;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno != 0 || end == s) {
        return -1;
    }
    unsigned shift = 0;
    switch (*end) {
    case '\0':
        break;
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default:
        return -1;
    }
    if (*end != '\0' || (shift != 0 && v > (UINT64_MAX >> shift))) {
        return -1;
    }
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_args(int argc, char **argv, options *o) {
    *o = (options){.root = DEFAULT_ROOT,
                   .threads = 2,
                   .max_files = DEFAULT_MAX_FILES,
                   .max_bytes = DEFAULT_MAX_BYTES};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout, argv[0]);
            exit(0);
        }
        if (strcmp(a, "--threads") == 0 || strcmp(a, "--max-files") == 0 ||
            strcmp(a, "--max-bytes") == 0 || strcmp(a, "--trace") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "%s: %s needs a value (see --help)\n", argv[0], a);
                return -1;
            }
            const char *v = argv[++i];
            uint64_t n = 0;
            if (strcmp(a, "--trace") == 0) {
                o->trace_dir = v;
                continue;
            }
            if (parse_size(v, &n) != 0) {
                fprintf(stderr, "%s: %s: '%s' is not a number\n", argv[0], a, v);
                return -1;
            }
            if (strcmp(a, "--threads") == 0) {
                if (n < 1 || n > MAX_WORKERS) {
                    fprintf(stderr, "%s: --threads must be 1..%d\n", argv[0], MAX_WORKERS);
                    return -1;
                }
                o->threads = (unsigned)n;
            } else if (strcmp(a, "--max-files") == 0) {
                o->max_files = n;
            } else {
                o->max_bytes = n;
            }
        } else if (a[0] == '-' && a[1] != '\0') {
            fprintf(stderr, "%s: unknown option '%s' (see --help)\n", argv[0], a);
            return -1;
        } else {
            o->root = a;
        }
    }
    return 0;
}

/* ---- the bounded queue ---- */

typedef struct item {
    uint64_t id; /* the flow id: the file's index + 1 */
    char *path;
    unsigned char *data;
    size_t len;
} item;

typedef struct queue {
    pthread_mutex_t mu;
    pthread_cond_t not_full;
    pthread_cond_t not_empty;
    pthread_cond_t batch_done;
    item slots[QUEUE_SLOTS];
    size_t head;
    size_t count;
    size_t in_flight; /* pushed and not yet finished by a worker */
    int closed;
} queue;

static void queue_init(queue *q) {
    memset(q, 0, sizeof *q);
    pthread_mutex_init(&q->mu, NULL);
    pthread_cond_init(&q->not_full, NULL);
    pthread_cond_init(&q->not_empty, NULL);
    pthread_cond_init(&q->batch_done, NULL);
}

static void queue_destroy(queue *q) {
    pthread_mutex_destroy(&q->mu);
    pthread_cond_destroy(&q->not_full);
    pthread_cond_destroy(&q->not_empty);
    pthread_cond_destroy(&q->batch_done);
}

static void queue_push(queue *q, item it) {
    pthread_mutex_lock(&q->mu);
    if (q->count == QUEUE_SLOTS) {
        LOUPE_ZONE("queue_full_wait");
        while (q->count == QUEUE_SLOTS) {
            pthread_cond_wait(&q->not_full, &q->mu);
        }
    }
    q->slots[(q->head + q->count) % QUEUE_SLOTS] = it;
    q->count++;
    q->in_flight++;
    /* Sampled under the lock, so the counter's samples are in time order. */
    LOUPE_COUNTER_I64("queue_depth", q->count);
    pthread_cond_signal(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

/* Returns 0 with an item, -1 once the queue is closed and empty. */
static int queue_pop(queue *q, item *out) {
    pthread_mutex_lock(&q->mu);
    if (q->count == 0 && !q->closed) {
        LOUPE_ZONE("queue_empty_wait");
        while (q->count == 0 && !q->closed) {
            pthread_cond_wait(&q->not_empty, &q->mu);
        }
    }
    if (q->count == 0) {
        pthread_mutex_unlock(&q->mu);
        return -1;
    }
    *out = q->slots[q->head];
    q->head = (q->head + 1) % QUEUE_SLOTS;
    q->count--;
    LOUPE_COUNTER_I64("queue_depth", q->count);
    pthread_cond_signal(&q->not_full);
    pthread_mutex_unlock(&q->mu);
    return 0;
}

static void queue_item_done(queue *q) {
    pthread_mutex_lock(&q->mu);
    if (--q->in_flight == 0) {
        pthread_cond_broadcast(&q->batch_done);
    }
    pthread_mutex_unlock(&q->mu);
}

static void queue_wait_idle(queue *q) {
    pthread_mutex_lock(&q->mu);
    while (q->in_flight != 0) {
        pthread_cond_wait(&q->batch_done, &q->mu);
    }
    pthread_mutex_unlock(&q->mu);
}

static void queue_close(queue *q) {
    pthread_mutex_lock(&q->mu);
    q->closed = 1;
    pthread_cond_broadcast(&q->not_empty);
    pthread_mutex_unlock(&q->mu);
}

/* ---- the directory walk ---- */

typedef struct file_list {
    char **paths;
    size_t count;
    size_t cap;
    uint64_t bytes; /* sum of the listed files' sizes */
} file_list;

typedef struct skip_counts {
    uint64_t symlinks;
    uint64_t unreadable; /* open/read/stat/opendir failures */
    uint64_t special;    /* not a regular file or directory */
} skip_counts;

typedef struct walker {
    const options *opt;
    file_list files;
    skip_counts skipped;
    int full; /* a limit was reached: stop walking */
} walker;

static int list_add(file_list *l, const char *path) {
    if (l->count == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 256;
        char **p = realloc(l->paths, cap * sizeof *p);
        if (p == NULL) {
            return -1;
        }
        l->paths = p;
        l->cap = cap;
    }
    char *copy = strdup(path);
    if (copy == NULL) {
        return -1;
    }
    l->paths[l->count++] = copy;
    return 0;
}

/* Walks dir (whose path is path[0..len)) depth-first without following symbolic links, listing
 * regular files until a limit is reached. path has room for PATH_BUF bytes. */
static void walk_dir(walker *w, char *path, size_t len, int depth) {
    DIR *d = opendir(path);
    if (d == NULL) {
        w->skipped.unreadable++;
        return;
    }
    struct dirent *de;
    while (!w->full && (de = readdir(d)) != NULL) {
        const char *n = de->d_name;
        if (strcmp(n, ".") == 0 || strcmp(n, "..") == 0) {
            continue;
        }
        size_t nlen = strlen(n);
        if (len + 1 + nlen + 1 > PATH_BUF) {
            w->skipped.unreadable++;
            continue;
        }
        struct stat st;
        if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0) {
            w->skipped.unreadable++;
            continue;
        }
        path[len] = '/';
        memcpy(path + len + 1, n, nlen + 1);
        if (S_ISLNK(st.st_mode)) {
            w->skipped.symlinks++;
        } else if (S_ISDIR(st.st_mode)) {
            if (depth < MAX_DEPTH) {
                walk_dir(w, path, len + 1 + nlen, depth + 1);
            }
        } else if (!S_ISREG(st.st_mode)) {
            w->skipped.special++;
        } else {
            uint64_t size = st.st_size > 0 ? (uint64_t)st.st_size : 0;
            if (w->files.count >= w->opt->max_files ||
                (w->files.bytes + size > w->opt->max_bytes && w->files.count > 0)) {
                /* A file larger than the byte budget is still taken when it is the first one, so
                 * that --max-bytes 1 reads one file instead of none. */
                w->full = 1;
            } else if (list_add(&w->files, path) == 0) {
                w->files.bytes += size;
            } else {
                w->full = 1; /* out of memory: work with what was listed */
            }
        }
        path[len] = '\0';
    }
    closedir(d);
}

/* ---- reading ---- */

/* Reads the whole file; returns 0 and a malloc'd buffer, or -1 (then it is skipped). */
static int read_file(const char *path, unsigned char **data, size_t *len) {
    int fd = open(path, O_RDONLY | O_NOFOLLOW);
    if (fd < 0) {
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return -1;
    }
    size_t cap = st.st_size > 0 ? (size_t)st.st_size : 0;
    unsigned char *buf = malloc(cap ? cap : 1);
    if (buf == NULL) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got < cap) {
        ssize_t r = read(fd, buf + got, cap - got);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            free(buf);
            close(fd);
            return -1;
        }
        if (r == 0) {
            break; /* the file shrank: keep what was there */
        }
        got += (size_t)r;
    }
    close(fd);
    *data = buf;
    *len = got;
    return 0;
}

typedef struct reader_ctx {
    const options *opt;
    queue *q;
    walker w;
    uint64_t files_read;
    uint64_t bytes_read;
    uint64_t batches;
} reader_ctx;

static void *reader_main(void *arg) {
    reader_ctx *r = arg;
    loupe_set_thread_name("reader");
    {
        LOUPE_ZONE("walk");
        LOUPE_ARG_STR("root", r->opt->root);
        char path[PATH_BUF];
        size_t len = strlen(r->opt->root);
        if (len >= sizeof path) {
            r->w.skipped.unreadable++;
        } else {
            memcpy(path, r->opt->root, len + 1);
            while (len > 1 && path[len - 1] == '/') {
                path[--len] = '\0';
            }
            walk_dir(&r->w, path, len, 0);
        }
        LOUPE_ARG_U64("files", r->w.files.count);
        LOUPE_ARG_U64("bytes", r->w.files.bytes);
    }

    const file_list *fl = &r->w.files;
    for (size_t first = 0; first < fl->count; first += BATCH_FILES) {
        LOUPE_STEP("batch", r->batches);
        size_t end = first + BATCH_FILES < fl->count ? first + BATCH_FILES : fl->count;
        for (size_t i = first; i < end; i++) {
            item it = {.id = (uint64_t)i + 1, .path = fl->paths[i]};
            {
                LOUPE_ZONE("read_file");
                LOUPE_ARG_STR("path", it.path);
                if (read_file(it.path, &it.data, &it.len) != 0) {
                    LOUPE_ARG_BOOL("skipped", 1);
                    r->w.skipped.unreadable++;
                    continue;
                }
                LOUPE_ARG_U64("bytes", it.len);
                LOUPE_FLOW_OUT(it.id);
            }
            r->files_read++;
            r->bytes_read += it.len;
            queue_push(r->q, it);
        }
        {
            LOUPE_ZONE("wait_batch");
            queue_wait_idle(r->q);
        }
        r->batches++;
    }
    queue_close(r->q);
    return NULL;
}

/* ---- workers ---- */

typedef struct worker_ctx {
    unsigned index;
    queue *q;
    unsigned char *out; /* reused deflate buffer */
    size_t out_cap;
    uint64_t files;
    uint64_t bytes_in;
    uint64_t bytes_out;
    uint32_t crc_xor; /* xor of every file's crc32, printed so the work is checkable */
    int failed;
} worker_ctx;

/* "ext:.gz" for "/a/b.tar.gz", "ext:none" without an extension; cut to fit EXT_NAME_MAX. */
static void ext_zone_name(const char *path, char *buf, size_t size) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    const char *dot = strrchr(base, '.');
    if (dot == NULL || dot == base || dot[1] == '\0') {
        snprintf(buf, size, "ext:none");
    } else {
        snprintf(buf, size, "ext:%s", dot);
    }
}

static void process_file(worker_ctx *w, const item *it) {
    LOUPE_ZONE("process_file");
    LOUPE_FLOW_IN(it->id);
    LOUPE_ARG_STR("path", it->path);
    char ext[EXT_NAME_MAX];
    ext_zone_name(it->path, ext, sizeof ext);
    LOUPE_ZONE_DYN(ext);

    uLong bound = compressBound(it->len);
    if (bound > w->out_cap) {
        unsigned char *p = realloc(w->out, bound);
        if (p == NULL) {
            w->failed = 1;
            return;
        }
        w->out = p;
        w->out_cap = bound;
    }
    uLongf out_len = bound;
    {
        LOUPE_ZONE("deflate");
        int zrc = compress2(w->out, &out_len, it->data, it->len, 6);
        if (zrc != Z_OK) {
            LOUPE_ARG_STR("error", zError(zrc));
            w->failed = 1;
            return;
        }
        LOUPE_ARG_U64("bytes_in", it->len);
        LOUPE_ARG_U64("bytes_out", out_len);
        LOUPE_ARG_F64("ratio", out_len ? (double)it->len / (double)out_len : 0.0);
    }
    uLong crc;
    {
        LOUPE_ZONE("crc32");
        crc = crc32_z(crc32_z(0, Z_NULL, 0), it->data, it->len);
    }
    uLong adler;
    {
        LOUPE_ZONE("adler32");
        adler = adler32_z(adler32_z(0, Z_NULL, 0), it->data, it->len);
    }
    (void)adler;
    w->files++;
    w->bytes_in += it->len;
    w->bytes_out += out_len;
    w->crc_xor ^= (uint32_t)crc;
}

static void *worker_main(void *arg) {
    worker_ctx *w = arg;
    char name[32];
    snprintf(name, sizeof name, "worker-%u", w->index);
    loupe_set_thread_name(name);
    item it;
    while (queue_pop(w->q, &it) == 0) {
        process_file(w, &it);
        free(it.data);
        queue_item_done(w->q);
    }
    return NULL;
}

/* ---- main ---- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    options opt;
    if (parse_args(argc, argv, &opt) != 0) {
        return 2;
    }

    /* Under `loupe record` the preloaded library has already started the session. */
    int recorded = getenv("LOUPE_RECORD") != NULL;
    int own_trace = !recorded && opt.trace_dir != NULL;
    if (recorded && opt.trace_dir != NULL) {
        fprintf(stderr, "compress_workload: LOUPE_RECORD is set: --trace %s is ignored\n",
                opt.trace_dir);
    }

    char workload[4200];
    snprintf(workload, sizeof workload, "compress %s", opt.root);
    int rc = loupe_set_metadata("workload", workload);
    if (rc != 0) {
        fprintf(stderr, "compress_workload: loupe_set_metadata: %s (%s)\n", loupe_strerror(rc),
                loupe_last_error());
    }
    loupe_set_thread_name("main");

    if (own_trace) {
        rc = loupe_start_trace(&(loupe_trace_options){.log_dir = opt.trace_dir});
        if (rc != 0) {
            fprintf(stderr, "compress_workload: loupe_start_trace: %s (%s)\n", loupe_strerror(rc),
                    loupe_last_error());
            return 1;
        }
    }

    double t0 = now_s();
    queue q;
    queue_init(&q);
    reader_ctx reader = {.opt = &opt, .q = &q, .w = {.opt = &opt}};
    worker_ctx workers[MAX_WORKERS];
    pthread_t worker_threads[MAX_WORKERS];
    pthread_t reader_thread;
    unsigned started = 0;
    int failed = 0;

    for (unsigned i = 0; i < opt.threads; i++) {
        workers[i] = (worker_ctx){.index = i, .q = &q};
        if (pthread_create(&worker_threads[i], NULL, worker_main, &workers[i]) != 0) {
            fprintf(stderr, "compress_workload: cannot start worker %u\n", i);
            failed = 1;
            break;
        }
        started++;
    }
    if (started > 0 && pthread_create(&reader_thread, NULL, reader_main, &reader) == 0) {
        pthread_join(reader_thread, NULL);
    } else {
        if (started > 0) {
            fprintf(stderr, "compress_workload: cannot start the reader\n");
        }
        failed = 1;
        queue_close(&q);
    }

    uint64_t files = 0, bytes_in = 0, bytes_out = 0;
    uint32_t crc_xor = 0;
    for (unsigned i = 0; i < started; i++) {
        pthread_join(worker_threads[i], NULL);
        files += workers[i].files;
        bytes_in += workers[i].bytes_in;
        bytes_out += workers[i].bytes_out;
        crc_xor ^= workers[i].crc_xor;
        failed |= workers[i].failed;
        free(workers[i].out);
    }
    double elapsed = now_s() - t0;
    LOUPE_INSTANT("done");

    const skip_counts *sk = &reader.w.skipped;
    printf("compress_workload: %" PRIu64 " files in %" PRIu64 " batches, %.1f MiB in, %.1f MiB "
           "out, ratio %.2fx, crc-xor %08" PRIx32 ", skipped %" PRIu64 " (%" PRIu64
           " symlinks, %" PRIu64 " unreadable, %" PRIu64 " special), workers %u, %.2f s\n",
           files, reader.batches, (double)bytes_in / (1 << 20), (double)bytes_out / (1 << 20),
           bytes_out ? (double)bytes_in / (double)bytes_out : 0.0, crc_xor,
           sk->symlinks + sk->unreadable + sk->special, sk->symlinks, sk->unreadable, sk->special,
           started, elapsed);

    for (size_t i = 0; i < reader.w.files.count; i++) {
        free(reader.w.files.paths[i]);
    }
    free(reader.w.files.paths);
    queue_destroy(&q);

    if (own_trace) {
        loupe_trace_result res = {.size = sizeof res};
        rc = loupe_stop_trace(&res);
        if (rc != 0) {
            fprintf(stderr, "compress_workload: loupe_stop_trace: %s (%s)\n", loupe_strerror(rc),
                    loupe_last_error());
            loupe_trace_result_free(&res);
            return 1;
        }
        printf("trace: %s (%" PRIu64 " events, %" PRIu64 " dropped)\n", res.run_dir,
               res.events_recorded, res.events_dropped);
        loupe_trace_result_free(&res);
    }
    return failed ? 1 : 0;
}
