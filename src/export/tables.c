/* tables.c: the intern tables and model walks the sample writers share (tables.h). */
#include "export/tables.h"

#include "base/hash.h"

#include <stdlib.h>
#include <string.h>

static uint64_t mix64(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ull;
    return k ^ (k >> 33);
}

uint32_t loupe__u64map_get(const loupe__u64map *m, uint64_t key) {
    if (m->cap == 0) {
        return 0;
    }
    for (size_t j = (size_t)mix64(key) & (m->cap - 1);; j = (j + 1) & (m->cap - 1)) {
        if (m->vals[j] == 0) {
            return 0;
        }
        if (m->keys[j] == key) {
            return m->vals[j];
        }
    }
}

int loupe__u64map_put(loupe__u64map *m, uint64_t key, uint32_t val) {
    if ((m->count + 1) * 2 > m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 256;
        uint64_t *nk = malloc(nc * sizeof(*nk));
        uint32_t *nv = calloc(nc, sizeof(*nv));
        if (nk == NULL || nv == NULL) {
            free(nk);
            free(nv);
            return -1;
        }
        for (size_t i = 0; i < m->cap; i++) {
            if (m->vals[i] != 0) {
                size_t j = (size_t)mix64(m->keys[i]) & (nc - 1);
                while (nv[j] != 0) {
                    j = (j + 1) & (nc - 1);
                }
                nk[j] = m->keys[i];
                nv[j] = m->vals[i];
            }
        }
        free(m->keys);
        free(m->vals);
        m->keys = nk;
        m->vals = nv;
        m->cap = nc;
    }
    size_t j = (size_t)mix64(key) & (m->cap - 1);
    while (m->vals[j] != 0) {
        j = (j + 1) & (m->cap - 1);
    }
    m->keys[j] = key;
    m->vals[j] = val;
    m->count++;
    return 0;
}

void loupe__u64map_free(loupe__u64map *m) {
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof(*m));
}

static int grow_slots(loupe__strtab *t) {
    size_t nc = t->slot_cap ? t->slot_cap * 2 : 1024;
    uint32_t *ns = calloc(nc, sizeof(*ns));
    if (ns == NULL) {
        return -1;
    }
    for (uint32_t i = 0; i < t->count; i++) {
        size_t j = (size_t)loupe__hash_bytes(t->chars + t->off[i], t->off[i + 1] - t->off[i] - 1) &
                   (nc - 1);
        while (ns[j] != 0) {
            j = (j + 1) & (nc - 1);
        }
        ns[j] = i + 1;
    }
    free(t->slot);
    t->slot = ns;
    t->slot_cap = nc;
    return 0;
}

static uint32_t oom0(loupe__strtab *t) {
    t->oom = 1;
    return 0;
}

uint32_t loupe__strtab_add(loupe__strtab *t, const char *p, size_t n) {
    if (t->oom) {
        return 0;
    }
    if ((t->count + 1) * 2 > t->slot_cap && grow_slots(t) != 0) {
        return oom0(t);
    }
    size_t j = (size_t)loupe__hash_bytes(p, n) & (t->slot_cap - 1);
    for (; t->slot[j] != 0; j = (j + 1) & (t->slot_cap - 1)) {
        uint32_t i = t->slot[j] - 1;
        if (t->off[i + 1] - t->off[i] - 1 == n && memcmp(t->chars + t->off[i], p, n) == 0) {
            return i;
        }
    }
    if (t->count + 2 > t->off_cap) {
        uint32_t nc = t->off_cap ? t->off_cap * 2 : 1024;
        size_t *no = realloc(t->off, nc * sizeof(*no));
        if (no == NULL) {
            return oom0(t);
        }
        no[0] = 0; /* entry 0 starts the bytes */
        t->off = no;
        t->off_cap = nc;
    }
    if (t->chars_cap - t->chars_len < n + 1) {
        size_t nc = t->chars_cap ? t->chars_cap : 65536;
        while (nc - t->chars_len < n + 1) {
            nc *= 2;
        }
        char *np = realloc(t->chars, nc);
        if (np == NULL) {
            return oom0(t);
        }
        t->chars = np;
        t->chars_cap = nc;
    }
    memcpy(t->chars + t->chars_len, p, n);
    t->chars[t->chars_len + n] = 0;
    t->chars_len += n + 1;
    t->off[t->count + 1] = t->chars_len;
    t->slot[j] = t->count + 1;
    return t->count++;
}

const char *loupe__strtab_at(const loupe__strtab *t, uint32_t i, size_t *len) {
    if (len != NULL) {
        *len = t->off[i + 1] - t->off[i] - 1;
    }
    return t->chars + t->off[i];
}

void loupe__strtab_free(loupe__strtab *t) {
    free(t->chars);
    free(t->off);
    free(t->slot);
    memset(t, 0, sizeof(*t));
}

uint32_t loupe__stack_group(const loupe_model *m, uint32_t k, uint32_t max, uint32_t *next) {
    uint32_t n = 1;
    for (;;) {
        const loupe_stack_node *sn = &m->stack_nodes[k];
        int inl = sn->frame < m->frame_count && m->frames[sn->frame].inlined != 0;
        if (!inl || sn->parent >= m->stack_node_count || n == max) {
            *next = sn->parent;
            return n;
        }
        k = sn->parent;
        n++;
    }
}

const char *loupe__main_module(const loupe_model *m) {
    uint64_t *per = calloc(m->process_count + 1, sizeof(*per));
    size_t best = 0;
    for (size_t i = 0; per != NULL && i < m->sample_count; i++) {
        size_t t = m->samples[i].thread;
        size_t p = t < m->thread_count ? m->threads[t].process : m->process_count;
        per[p < m->process_count ? p : m->process_count]++;
    }
    for (size_t p = 1; per != NULL && p < m->process_count; p++) {
        best = per[p] > per[best] ? p : best;
    }
    free(per);
    const char *pname = best < m->process_count ? m->processes[best].name : m->process_name;
    for (size_t f = 0; pname != NULL && pname[0] != 0 && f < m->frame_count; f++) {
        const char *file = m->frames[f].module;
        const char *base = strrchr(file, '/');
        if (file[0] != 0 && strcmp(base != NULL ? base + 1 : file, pname) == 0) {
            return file;
        }
    }
    for (size_t i = 0; i < m->sample_count; i++) {
        size_t t = m->samples[i].thread;
        if (m->process_count > 0 && (t >= m->thread_count || m->threads[t].process != best)) {
            continue;
        }
        uint32_t k = m->samples[i].stack, root = UINT32_MAX;
        for (size_t depth = 0; k < m->stack_node_count && depth <= m->stack_node_count; depth++) {
            root = k;
            k = m->stack_nodes[k].parent;
        }
        if (root != UINT32_MAX) {
            uint32_t f = m->stack_nodes[root].frame;
            return f < m->frame_count && m->frames[f].module[0] != 0 ? m->frames[f].module : NULL;
        }
    }
    return NULL;
}

/* The build-id (hex) the run saw for module: its line in the metadata loupe_module_build_ids
 * ("<hex> <path>" per module: src/record/sample.c). 1 with ran set, 0 when the trace has none
 * for it (a trace of 0.4, another tool's, a module without a build-id). */
int loupe__ran_build_id(const loupe_model *m, const char *module, char *ran, size_t size) {
    const char *ids = NULL;
    for (size_t i = 0; i < m->metadata_count; i++) {
        if (strcmp(m->metadata[i].key, "loupe_module_build_ids") == 0) {
            ids = m->metadata[i].value;
        }
    }
    size_t ml = strlen(module);
    for (const char *p = ids; p != NULL && *p;) {
        const char *eol = strchr(p, '\n');
        size_t n = eol != NULL ? (size_t)(eol - p) : strlen(p);
        const char *sp = memchr(p, ' ', n);
        if (sp != NULL && (size_t)(p + n - sp - 1) == ml && memcmp(sp + 1, module, ml) == 0 &&
            (size_t)(sp - p) < size) {
            memcpy(ran, p, (size_t)(sp - p));
            ran[sp - p] = 0;
            return 1;
        }
        p = eol != NULL ? eol + 1 : p + n;
    }
    return 0;
}
