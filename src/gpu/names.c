/* names.c: the GPU region-name table (gpu.h). Id i is the i-th distinct name added; a hash of
 * the strings finds a name already present. Adding is all-or-nothing: a full table or an
 * out-of-memory leaves the table as it was (tenstorrent/tt-metal#35378 is the failure this
 * avoids: a table that fills up and silently keeps half a batch).
 */
#include "base/error.h"

#include <loupe/gpu.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct loupe_gpu_names {
    char **names;
    uint32_t count, cap, max;
    uint32_t *slots; /* open addressing: id + 1, 0 = empty; hcap a power of two */
    size_t hcap;
};

static uint64_t hash_str(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) {
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    }
    return h;
}

loupe_gpu_names *loupe_gpu_names_new(uint32_t max_names) {
    loupe_gpu_names *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return NULL;
    }
    t->max = (max_names == 0 || max_names > LOUPE_GPU_MAX_NAMES) ? LOUPE_GPU_MAX_NAMES : max_names;
    return t;
}

void loupe_gpu_names_free(loupe_gpu_names *t) {
    if (t == NULL) {
        return;
    }
    for (uint32_t i = 0; i < t->count; i++) {
        free(t->names[i]);
    }
    free(t->names);
    free(t->slots);
    free(t);
}

static int find(const loupe_gpu_names *t, const char *name, uint32_t *id) {
    if (t->hcap == 0) {
        return 0;
    }
    size_t i = (size_t)hash_str(name) & (t->hcap - 1);
    while (t->slots[i] != 0) {
        if (strcmp(t->names[t->slots[i] - 1], name) == 0) {
            *id = t->slots[i] - 1;
            return 1;
        }
        i = (i + 1) & (t->hcap - 1);
    }
    return 0;
}

static void slot_put(uint32_t *slots, size_t hcap, char **names, uint32_t id) {
    size_t i = (size_t)hash_str(names[id]) & (hcap - 1);
    while (slots[i] != 0) {
        i = (i + 1) & (hcap - 1);
    }
    slots[i] = id + 1;
}

/* Makes room for `more` new names (arrays and hash); nothing changes on failure. */
static int reserve(loupe_gpu_names *t, size_t more) {
    size_t need = (size_t)t->count + more;
    if (need > t->cap) {
        size_t nc = t->cap ? t->cap : 16;
        while (nc < need) {
            nc *= 2;
        }
        char **nn = realloc(t->names, nc * sizeof(*nn));
        if (nn == NULL) {
            return -1;
        }
        t->names = nn;
        t->cap = (uint32_t)(nc > UINT32_MAX ? UINT32_MAX : nc);
    }
    if (need * 2 > t->hcap) {
        size_t hc = t->hcap ? t->hcap : 32;
        while (need * 2 > hc) {
            hc *= 2;
        }
        uint32_t *ns = calloc(hc, sizeof(*ns));
        if (ns == NULL) {
            return -1;
        }
        for (uint32_t i = 0; i < t->count; i++) {
            slot_put(ns, hc, t->names, i);
        }
        free(t->slots);
        t->slots = ns;
        t->hcap = hc;
    }
    return 0;
}

int loupe_gpu_names_add_many(loupe_gpu_names *t, const char *const *names, size_t n,
                             uint32_t *ids) {
    if (t == NULL || (names == NULL && n > 0)) {
        return loupe__err(LOUPE_EINVALID, "loupe_gpu_names_add: NULL table or names");
    }
    for (size_t i = 0; i < n; i++) {
        if (names[i] == NULL) {
            return loupe__err(LOUPE_EINVALID, "loupe_gpu_names_add: name %zu is NULL", i);
        }
    }
    /* Count the new distinct names first: the limit is checked before anything is added. */
    size_t fresh = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id;
        int dup = find(t, names[i], &id);
        for (size_t j = 0; j < i && !dup; j++) {
            dup = strcmp(names[j], names[i]) == 0;
        }
        fresh += !dup;
    }
    if ((uint64_t)t->count + fresh > t->max) {
        return loupe__err(LOUPE_ETOO_MANY_NAMES,
                          "Allocated too many names: the table holds %u of at most %u; %zu more "
                          "do not fit (nothing was added)",
                          t->count, t->max, fresh);
    }
    uint32_t first = t->count;
    if (reserve(t, fresh) != 0) {
        return loupe__err(LOUPE_ENOMEM, "loupe_gpu_names_add: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t id;
        if (!find(t, names[i], &id)) {
            char *copy = strdup(names[i]);
            if (copy == NULL) {
                /* Roll back: remove the names added by this call. */
                for (uint32_t k = first; k < t->count; k++) {
                    free(t->names[k]);
                }
                t->count = first;
                memset(t->slots, 0, t->hcap * sizeof(*t->slots));
                for (uint32_t k = 0; k < t->count; k++) {
                    slot_put(t->slots, t->hcap, t->names, k);
                }
                return loupe__err(LOUPE_ENOMEM, "loupe_gpu_names_add: out of memory");
            }
            id = t->count++;
            t->names[id] = copy;
            slot_put(t->slots, t->hcap, t->names, id);
        }
        if (ids != NULL) {
            ids[i] = id;
        }
    }
    return 0;
}

int loupe_gpu_names_add(loupe_gpu_names *t, const char *name, uint32_t *id) {
    return loupe_gpu_names_add_many(t, &name, 1, id);
}

const char *loupe_gpu_names_get(const loupe_gpu_names *t, uint32_t id) {
    return (t != NULL && id < t->count) ? t->names[id] : NULL;
}

uint32_t loupe_gpu_names_count(const loupe_gpu_names *t) {
    return t != NULL ? t->count : 0;
}

int loupe_gpu_names_load(loupe_gpu_names *t, const char *path) {
    if (t == NULL || path == NULL) {
        return loupe__err(LOUPE_EINVALID, "loupe_gpu_names_load: NULL argument");
    }
    FILE *f = fopen(path, "r");
    if (f == NULL) {
        int e = errno;
        return loupe__err(LOUPE_EIO, "loupe_gpu_names_load: cannot open %s: %s (errno %d)", path,
                          strerror(e), e);
    }
    char line[4096];
    int r = 0;
    while (r == 0 && fgets(line, sizeof line, f) != NULL) {
        size_t len = strlen(line);
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) {
            line[--len] = 0;
        }
        /* Line i is id i, also for a repeated name: append without dedup. */
        if (t->count >= t->max) {
            r = loupe__err(LOUPE_ETOO_MANY_NAMES,
                           "Allocated too many names: %s has more than %u lines", path, t->max);
            break;
        }
        if (reserve(t, 1) != 0 || (t->names[t->count] = strdup(line)) == NULL) {
            r = loupe__err(LOUPE_ENOMEM, "loupe_gpu_names_load: out of memory");
            break;
        }
        slot_put(t->slots, t->hcap, t->names, t->count);
        t->count++;
    }
    fclose(f);
    return r;
}
