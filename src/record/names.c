/* names.c: the region's name table. Layout at names_off: NAME_SLOTS entries {key, off, len},
 * then a string heap. key = addr << 2 | kind (0: empty); open addressing, linear probing. The
 * keeper is the only writer; a reader (recover.c) reads it after the recording process died, so
 * no reader ever races the writer. Strings are read from the program's own memory with
 * process_vm_readv, which fails with EFAULT instead of crashing when a pointer is stale (a
 * chunk being rewritten under the keeper's scan, a library unloaded). */
#include "record/names.h"

#include "record/record.h"
#include "record/region.h"

#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define NAME_SLOTS ((uint64_t)1 << 16)
#define NAME_MAX_LEN 512u

typedef struct name_slot {
    uint64_t key;
    uint32_t off, len;
} name_slot;

static name_slot *slots_of(const void *r) {
    const loupe__region_hdr *h = r;
    return (name_slot *)(void *)((char *)(uintptr_t)r + h->names_off);
}

static char *heap_of(const void *r) {
    return (char *)slots_of(r) + NAME_SLOTS * sizeof(name_slot);
}

static uint64_t heap_size(const void *r) {
    const loupe__region_hdr *h = r;
    return h->names_size - NAME_SLOTS * sizeof(name_slot);
}

static uint64_t slot_of(uint64_t key) {
    return (key * 0x9E3779B97F4A7C15ull) >> 48; /* 16 bits */
}

static int slot_readable(const void *r, const name_slot *p);

const char *loupe__names_find(const void *r, int kind, uint64_t addr) {
    uint64_t key = addr << 2 | (uint64_t)kind;
    const name_slot *s = slots_of(r);
    for (uint64_t i = slot_of(key), n = 0; n < NAME_SLOTS; i = (i + 1) & (NAME_SLOTS - 1), n++) {
        if (!slot_readable(r, &s[i]) || s[i].key == 0) {
            return NULL;
        }
        if (s[i].key == key) {
            const char *str = heap_of(r) + s[i].off;
            return (uint64_t)s[i].off + s[i].len < heap_size(r) ? str : NULL;
        }
    }
    return NULL;
}

/* Copies up to size-1 bytes of a string at addr in this process, NUL-terminated; its length, or
 * -1 when addr cannot be read. */
static ssize_t read_str(uint64_t addr, char *buf, size_t size) {
    struct iovec local = {buf, size - 1}, remote = {(void *)(uintptr_t)addr, size - 1};
    ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n <= 0) {
        /* the string may end before a page that is not mapped: read up to the page's end */
        size_t to_page = 4096 - (size_t)(addr & 4095);
        if (to_page >= size) {
            return -1;
        }
        local.iov_len = remote.iov_len = to_page;
        n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
        if (n <= 0) {
            return -1;
        }
    }
    buf[n] = 0;
    return (ssize_t)strlen(buf);
}

static int with_funcs = 1; /* symbolising allocates: not from a signal handler */

/* A shared region's name table is backed page by page as the keeper first touches it, reads
 * included (region.c: a tmpfs page without room is a SIGBUS): one bit per page of the table
 * (8 MiB: 2,048 pages), for the region it was set for. */
#define NAME_PAGES 2048u
static uint8_t backed[NAME_PAGES / 8];
static uint64_t backed_for; /* loupe__region_gen + 1 of the bits */

static int page_backed(uint64_t pg) {
    return backed_for == loupe__region_gen + 1 && (backed[pg / 8] >> (pg % 8) & 1);
}

/* Whether this process may read the table's slot p of region r: a page of its own shared region
 * that the keeper never backed is a hole of the file, and on a full file system touching it,
 * even to read, is a SIGBUS (a helper's fork children that exit() with /dev/shm full died of it
 * in their stop's collection, 3 of 3 runs). Such a page was never written (add() backs a page
 * before it writes a slot there): its slots are empty. Another process's region (a recovery's
 * mapping) is read as it is. */
static int slot_readable(const void *r, const name_slot *p) {
    if (r != loupe__region || !loupe__region_shared()) {
        return 1;
    }
    uint64_t pg = (uint64_t)((const char *)p - (const char *)slots_of(r)) / 4096;
    return pg < NAME_PAGES && page_backed(pg);
}

/* Makes the table's bytes [p, p + len) safe to touch: 0, or -1 (no room: leave them). */
static int names_back(const void *p, size_t len) {
    if (!loupe__region_shared()) {
        return 0;
    }
    if (backed_for != loupe__region_gen + 1) {
        memset(backed, 0, sizeof backed);
        backed_for = loupe__region_gen + 1;
    }
    const char *t = (const char *)loupe__region + LOUPE__HDR->names_off;
    uint64_t lo = (uint64_t)((const char *)p - t) / 4096;
    uint64_t hi = (uint64_t)((const char *)p + len - 1 - t) / 4096;
    for (uint64_t pg = lo; pg <= hi; pg++) {
        if (pg >= NAME_PAGES) {
            return -1;
        }
        if (!page_backed(pg)) {
            if (loupe__region_back((char *)(uintptr_t)t + pg * 4096, 4096) != 0) {
                return -1;
            }
            backed[pg / 8] |= (uint8_t)(1u << (pg % 8));
        }
    }
    return 0;
}

static void add(int kind, uint64_t addr) {
    if (kind == LOUPE__NAME_FUNC && !with_funcs) {
        return;
    }
    void *r = loupe__region;
    loupe__region_hdr *h = LOUPE__HDR;
    uint64_t key = addr << 2 | (uint64_t)kind;
    name_slot *s = slots_of(r);
    uint64_t i = slot_of(key);
    for (uint64_t n = 0;; i = (i + 1) & (NAME_SLOTS - 1), n++) {
        if (names_back(&s[i], sizeof s[i]) != 0) {
            return; /* no room for the table's page: the name reads "?" after a death */
        }
        if (s[i].key == 0) {
            break;
        }
        if (s[i].key == key || n >= NAME_SLOTS / 2) {
            return; /* known, or the table is half full: no more names (they read "?") */
        }
    }
    char buf[NAME_MAX_LEN];
    ssize_t len;
    if (kind == LOUPE__NAME_SRCLOC) {
        loupe_srcloc sl;
        struct iovec local = {&sl, sizeof sl}, remote = {(void *)(uintptr_t)addr, sizeof sl};
        if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof sl) {
            return;
        }
        len = read_str((uint64_t)(uintptr_t)sl.name, buf, sizeof buf);
    } else if (kind == LOUPE__NAME_STR) {
        len = read_str(addr, buf, sizeof buf);
    } else {
        loupe__symbolize((uintptr_t)addr, buf, sizeof buf);
        len = (ssize_t)strlen(buf);
    }
    if (len < 0 || h->names_used + (uint64_t)len + 1 > heap_size(r) ||
        names_back(heap_of(r) + h->names_used, (size_t)len + 1) != 0) {
        return;
    }
    memcpy(heap_of(r) + h->names_used, buf, (size_t)len + 1);
    s[i].off = (uint32_t)h->names_used;
    s[i].len = (uint32_t)len;
    __atomic_store_n(&s[i].key, key, __ATOMIC_RELEASE);
    h->names_used += (uint64_t)len + 1;
    h->names_count++;
}

static void scan_slots(const loupe__ev *e, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) {
        uint64_t b = __atomic_load_n(&e[i].b, __ATOMIC_RELAXED);
        switch ((unsigned)(b & 15u)) {
        case LOUPE__K_BEGIN:
            add(LOUPE__NAME_SRCLOC, b);
            break;
        case LOUPE__K_FUNC_ENTER:
            add(LOUPE__NAME_FUNC, b >> 4);
            break;
        case LOUPE__K_EXT_DATA:
            if ((b >> 4) != 0) {
                add(LOUPE__NAME_STR, b >> 4);
            }
            break;
        case LOUPE__K_ARG: /* the key of a one-slot argument */
            if ((b >> 8) != 0) {
                add(LOUPE__NAME_STR, b >> 8);
            }
            break;
        default:
            break;
        }
    }
}

static void scan_thread(loupe__thread *t, void *arg) {
    uint64_t state = *(const uint64_t *)arg;
    void *r = loupe__region;
    if ((__atomic_load_n(&t->hot.state, __ATOMIC_ACQUIRE) & ~(uint64_t)LOUPE__STATE_NOTSC) !=
        state) {
        return;
    }
    if (__atomic_load_n(&t->wraps, __ATOMIC_ACQUIRE) != 0 ||
        __atomic_load_n(&t->recycled, __ATOMIC_ACQUIRE) != 0) {
        /* a ring: scan what it holds now (it is at most a chunk, or chunks rewritten) */
        t->keeper_scanned = 0;
    }
    /* Calls taken back since the last scan (--min-duration, record.c's take_back_short): their
     * slots may hold other events now, so the scan reads again from the chunk of the first one
     * (retract_chunk; a chunk not in the chain: from the chain's head). The count is read
     * before cur (acquire: the owner writes it after the cur it took back), and acknowledged
     * after the scan. */
    uint32_t seq = __atomic_load_n(&t->retract_seq, __ATOMIC_ACQUIRE);
    int again = seq != t->retract_ack;
    uint32_t again_chunk = again ? __atomic_load_n(&t->retract_chunk, __ATOMIC_RELAXED) : 0;
    uint64_t done = 0, from = t->keeper_scanned;
    uint32_t tail = __atomic_load_n(&t->tail_chunk, __ATOMIC_ACQUIRE);
    if (tail != LOUPE__NO_CHUNK && tail < LOUPE__HDR->nchunks) {
        /* an exited thread's packed tail: the same slots its first chunk held */
        from = again ? 0 : from;
        __atomic_store_n(&t->retract_ack, seq, __ATOMIC_RELAXED);
        if (t->tail_n > from && t->tail_off + t->tail_n <= LOUPE__CHUNK_SLOTS) {
            scan_slots(loupe__chunk(r, tail) + t->tail_off + from, t->tail_n - from);
            t->keeper_scanned = t->tail_n;
        }
        return;
    }
    uint32_t c = __atomic_load_n(&t->first_chunk, __ATOMIC_ACQUIRE);
    if (again) {
        uint64_t at = 0; /* the first slot of again_chunk, counted from the chain's head */
        int found = 0;
        for (uint32_t k = c, guard = 0;
             k != LOUPE__NO_CHUNK && k < LOUPE__HDR->nchunks && guard < 1u << 20 && !found;
             guard++) {
            found = k == again_chunk;
            if (!found) {
                uint32_t u = loupe__meta(r, k)->used;
                at += u > LOUPE__CHUNK_SLOTS ? LOUPE__CHUNK_SLOTS : u;
                k = k == __atomic_load_n(&t->cur_chunk, __ATOMIC_ACQUIRE)
                        ? LOUPE__NO_CHUNK
                        : __atomic_load_n(&loupe__meta(r, k)->next, __ATOMIC_RELAXED);
            }
        }
        from = found && at < from ? at : found ? from : 0;
    }
    for (uint64_t guard = 0; c != LOUPE__NO_CHUNK && c < LOUPE__HDR->nchunks && guard < 1u << 20;
         guard++) {
        const loupe__ev *base = loupe__chunk(r, c);
        uint64_t used;
        int last = c == __atomic_load_n(&t->cur_chunk, __ATOMIC_ACQUIRE);
        if (last) {
            const loupe__ev *cur = __atomic_load_n(&t->hot.cur, __ATOMIC_ACQUIRE);
            used = cur >= base && cur <= base + LOUPE__CHUNK_SLOTS ? (uint64_t)(cur - base) : 0;
        } else {
            used = loupe__meta(r, c)->used;
            used = used > LOUPE__CHUNK_SLOTS ? LOUPE__CHUNK_SLOTS : used;
        }
        if (done + used > from) {
            uint64_t skip = from > done ? from - done : 0;
            scan_slots(base + skip, used - skip);
        }
        done += used;
        if (last) {
            break;
        }
        c = __atomic_load_n(&loupe__meta(r, c)->next, __ATOMIC_RELAXED);
    }
    t->keeper_scanned = done > from ? done : from;
    __atomic_store_n(&t->retract_ack, seq, __ATOMIC_RELAXED);
}

void loupe__names_scan(void) {
    uint64_t state = __atomic_load_n(&LOUPE__HDR->state, __ATOMIC_ACQUIRE);
    with_funcs = 1;
    loupe__threads_each(scan_thread, &state);
}

void loupe__names_scan_signal_safe(void) {
    uint64_t state = __atomic_load_n(&LOUPE__HDR->state, __ATOMIC_ACQUIRE);
    with_funcs = 0;
    loupe__threads_each(scan_thread, &state);
}

void loupe__names_reset(void) {
    loupe__region_hdr *h = LOUPE__HDR;
    if (h->names_count == 0 && h->names_used == 0) {
        return;
    }
    if (loupe__region_shared()) {
        /* only the pages touched: the others are the file's holes (zeros), and touching one
         * could be a SIGBUS */
        for (uint64_t pg = 0; pg < NAME_SLOTS * sizeof(name_slot) / 4096; pg++) {
            if (page_backed(pg)) {
                memset((char *)slots_of(loupe__region) + pg * 4096, 0, 4096);
            }
        }
    } else {
        memset(slots_of(loupe__region), 0, NAME_SLOTS * sizeof(name_slot));
    }
    h->names_used = 0;
    h->names_count = 0;
}

void loupe__names_before_unload(void) {
    if (loupe__region == NULL || !__atomic_load_n(&LOUPE__HDR->active, __ATOMIC_ACQUIRE)) {
        return;
    }
    /* Holding the keeper's lock makes this thread the table's one writer (the keeper scans
     * under it too); the scan is incremental (each thread's keeper_scanned cursor). */
    loupe__keeper_pause();
    loupe__names_scan();
    loupe__keeper_resume();
}
