/* pgz.c: the gzip file behind a gzip sink (sink.h), deflated in blocks on helper threads.
 *
 * The JSON writer makes text faster than zlib's deflate can take it on one core (level 1, the
 * gzipped Chrome JSON's write was 13 M events/s, docs/performance.md), so the text is cut into
 * blocks of BLOCK bytes and each block is deflated on its own, the way pigz does (Mark Adler's
 * pigz.c, "independent" mode): a raw DEFLATE stream per block, ended by Z_SYNC_FLUSH (an empty
 * stored block: the next block starts on a byte boundary, RFC 1951 3.2.4) and the last one by
 * Z_FINISH (BFINAL), all in ONE gzip member (RFC 1952 2.3: header, the blocks, then the CRC-32
 * of all the text, crc32_combine() of the blocks', and its length mod 2^32). Every gzip reader
 * reads it as any other gzip file; a block does not refer to the one before (no preset
 * dictionary), which costs about 1 % of the size at 1 MiB blocks.
 *
 * Threads: the writing thread fills block after block and hands each to the helpers; it writes
 * the deflated blocks to the file in their order. While it waits for the oldest block, it
 * deflates the blocks no helper has started on: with no helper at all (one CPU,
 * LOUPE_GZIP_THREADS=1, or pthread_create failing) every block is deflated on the writing
 * thread, in the same format. Helpers block every signal (the traced program's handlers run on
 * its own threads) and end at pgz_close. */
#include "export/sink.h"

#include "base/error.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BLOCK ((size_t)1 << 20)
#define MAX_HELPERS 3

typedef enum slot_state { S_FREE, S_READY, S_BUSY, S_DONE } slot_state;

typedef struct slot {
    unsigned char *in, *out;
    size_t in_n, out_n, out_cap;
    uLong crc;
    int last;  /* Z_FINISH: the final block */
    int zerr;  /* a zlib error deflating it (Z_MEM_ERROR, ...), 0 when fine */
    int ready; /* z is initialised */
    z_stream z;
    slot_state state;
} slot;

struct loupe__pgz {
    FILE *f;
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    slot slots[MAX_HELPERS + 2];
    size_t nslots;
    size_t head;       /* the slot being filled */
    size_t tail;       /* the oldest slot handed over, not yet written */
    size_t queued;     /* slots handed over, not yet written */
    size_t next_ready; /* the oldest READY slot a helper should take */
    pthread_t th[MAX_HELPERS];
    size_t nth;
    int quit;
    uLong crc;
    uint64_t total;
    int err_no; /* the first write error's errno; ENOMEM for zlib's memory */
};

/* Deflates s->in into s->out (on whatever thread holds it BUSY). */
static void deflate_slot(slot *s) {
    s->zerr = 0;
    s->out_n = 0;
    deflateReset(&s->z);
    s->crc = crc32(0L, s->in, (uInt)s->in_n);
    s->z.next_in = s->in;
    s->z.avail_in = (uInt)s->in_n;
    s->z.next_out = s->out;
    s->z.avail_out = (uInt)s->out_cap;
    int r = deflate(&s->z, s->last ? Z_FINISH : Z_SYNC_FLUSH);
    /* out_cap is deflateBound's + the flush marker: one call always finishes */
    if ((s->last && r != Z_STREAM_END) || (!s->last && r != Z_OK) || s->z.avail_in != 0) {
        s->zerr = r == Z_OK || r == Z_STREAM_END ? Z_BUF_ERROR : r;
        return;
    }
    s->out_n = s->out_cap - s->z.avail_out;
}

static void *helper(void *arg) {
    loupe__pgz *g = arg;
    pthread_mutex_lock(&g->lock);
    for (;;) {
        while (!g->quit && g->slots[g->next_ready].state != S_READY) {
            pthread_cond_wait(&g->work, &g->lock);
        }
        if (g->quit) {
            break;
        }
        slot *s = &g->slots[g->next_ready];
        s->state = S_BUSY;
        g->next_ready = (g->next_ready + 1) % g->nslots;
        pthread_mutex_unlock(&g->lock);
        deflate_slot(s);
        pthread_mutex_lock(&g->lock);
        s->state = S_DONE;
        pthread_cond_broadcast(&g->done);
    }
    pthread_mutex_unlock(&g->lock);
    return NULL;
}

static void put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) {
        p[i] = (unsigned char)(v >> (8 * i));
    }
}

static void file_write(loupe__pgz *g, const void *p, size_t n) {
    if (g->err_no == 0 && n > 0 && fwrite(p, 1, n, g->f) != n) {
        g->err_no = errno ? errno : EIO;
    }
}

/* Takes back the oldest handed-over slot and writes its bytes. While it is not deflated yet,
 * this thread deflates the oldest block no helper has started on (the oldest itself, or a later
 * one), so that it does not sit idle while the helpers work: with one helper on 2 CPUs both
 * deflate. */
static void retire(loupe__pgz *g) {
    slot *s = &g->slots[g->tail];
    pthread_mutex_lock(&g->lock);
    while (s->state != S_DONE) {
        slot *w = &g->slots[g->next_ready];
        if (w->state == S_READY) {
            w->state = S_BUSY;
            g->next_ready = (g->next_ready + 1) % g->nslots;
            pthread_mutex_unlock(&g->lock);
            deflate_slot(w);
            pthread_mutex_lock(&g->lock);
            w->state = S_DONE;
            continue;
        }
        pthread_cond_wait(&g->done, &g->lock);
    }
    s->state = S_FREE;
    pthread_mutex_unlock(&g->lock);
    if (s->zerr != 0 && g->err_no == 0) {
        g->err_no = s->zerr == Z_MEM_ERROR ? ENOMEM : EIO;
    }
    file_write(g, s->out, s->out_n);
    g->crc = crc32_combine(g->crc, s->crc, (z_off_t)s->in_n);
    g->total += s->in_n;
    g->tail = (g->tail + 1) % g->nslots;
    g->queued--;
}

/* Hands the slot being filled over to the helpers and makes the next one ready to fill. */
static void hand_over(loupe__pgz *g, int last) {
    slot *s = &g->slots[g->head];
    s->last = last;
    pthread_mutex_lock(&g->lock);
    s->state = S_READY;
    g->queued++;
    pthread_cond_signal(&g->work);
    pthread_mutex_unlock(&g->lock);
    g->head = (g->head + 1) % g->nslots;
    if (g->queued == g->nslots) {
        retire(g); /* every slot is out: wait for the oldest (or deflate it) */
    }
    g->slots[g->head].in_n = 0;
}

static void free_all(loupe__pgz *g) {
    for (size_t i = 0; i < g->nslots; i++) {
        if (g->slots[i].ready) {
            deflateEnd(&g->slots[i].z);
        }
        free(g->slots[i].in);
        free(g->slots[i].out);
    }
    pthread_mutex_destroy(&g->lock);
    pthread_cond_destroy(&g->work);
    pthread_cond_destroy(&g->done);
    free(g);
}

/* Helper threads: one less than the CPUs, at most MAX_HELPERS; LOUPE_GZIP_THREADS=1..4 sets the
 * threads in all (1: the writing thread alone). */
static size_t helpers_wanted(void) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const char *env = getenv("LOUPE_GZIP_THREADS");
    if (env != NULL && env[0] >= '1' && env[0] <= '4' && env[1] == 0) {
        cpus = env[0] - '0';
    }
    if (cpus <= 1) {
        return 0;
    }
    return cpus - 1 > MAX_HELPERS ? MAX_HELPERS : (size_t)(cpus - 1);
}

int loupe__pgz_open(loupe__pgz **out, FILE *f) {
    *out = NULL;
    loupe__pgz *g = calloc(1, sizeof *g);
    if (g == NULL) {
        return LOUPE_ENOMEM;
    }
    g->f = f;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->work, NULL);
    pthread_cond_init(&g->done, NULL);
    size_t helpers = helpers_wanted();
    g->nslots = helpers + 2; /* one filling, one per helper deflating, one being written */
    for (size_t i = 0; i < g->nslots; i++) {
        slot *s = &g->slots[i];
        /* deflateBound for raw deflate at these settings, plus the sync flush's 5 bytes and
         * a margin (zlib.h: deflateBound assumes a single Z_FINISH) */
        s->out_cap = BLOCK + BLOCK / 1000 + 64;
        s->in = malloc(BLOCK);
        s->out = malloc(s->out_cap);
        /* every allocation here, on the writing thread: a helper that called malloc would get
         * an arena of its own from glibc (64 MiB of address space each, kept after it ends) */
        if (s->in == NULL || s->out == NULL ||
            deflateInit2(&s->z, 1, Z_DEFLATED, -15, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
            free_all(g);
            return LOUPE_ENOMEM;
        }
        s->ready = 1; /* level 1 as before (sink.h), raw deflate (-15): the framing is pgz's */
    }
    g->crc = crc32(0L, Z_NULL, 0);
    /* RFC 1952 2.3: ID1 ID2, CM 8 (deflate), FLG 0, MTIME 0 (none), XFL 4 (fastest), OS 3 */
    static const unsigned char head[10] = {0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 3};
    file_write(g, head, sizeof head);
    if (helpers > 0) {
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_BLOCK, &all, &old);
        /* deflate needs little stack (its state is on the heap): 256 KiB, not 8 MiB */
        pthread_attr_t at;
        int attr = pthread_attr_init(&at) == 0;
        if (attr) {
            (void)pthread_attr_setstacksize(&at, (size_t)256 << 10);
        }
        for (; g->nth < helpers; g->nth++) {
            if (pthread_create(&g->th[g->nth], attr ? &at : NULL, helper, g) != 0) {
                break; /* fewer helpers, or none: retire() deflates what they do not */
            }
        }
        if (attr) {
            pthread_attr_destroy(&at);
        }
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    *out = g;
    return 0;
}

int loupe__pgz_write(loupe__pgz *g, const void *p, size_t n) {
    const unsigned char *b = p;
    while (n > 0) {
        slot *s = &g->slots[g->head];
        size_t k = BLOCK - s->in_n < n ? BLOCK - s->in_n : n;
        memcpy(s->in + s->in_n, b, k);
        s->in_n += k;
        b += k;
        n -= k;
        if (s->in_n == BLOCK) {
            hand_over(g, 0);
        }
    }
    return g->err_no;
}

/* Ends the helpers and frees g; when finish, first the last block and the trailer. */
static int end(loupe__pgz *g, int finish) {
    if (finish) {
        hand_over(g, 1); /* the last block, maybe empty: a final empty block is valid */
    }
    while (g->queued > 0) {
        retire(g);
    }
    pthread_mutex_lock(&g->lock);
    g->quit = 1;
    pthread_cond_broadcast(&g->work);
    pthread_mutex_unlock(&g->lock);
    for (size_t i = 0; i < g->nth; i++) {
        pthread_join(g->th[i], NULL);
    }
    if (finish) {
        unsigned char tail[8];
        put_le32(tail, (uint32_t)g->crc);
        put_le32(tail + 4, (uint32_t)g->total); /* ISIZE: the length mod 2^32 */
        file_write(g, tail, sizeof tail);
    }
    int e = g->err_no;
    free_all(g);
    return e;
}

int loupe__pgz_close(loupe__pgz *g) {
    return end(g, 1);
}

void loupe__pgz_discard(loupe__pgz *g) {
    (void)end(g, 0);
}
