/* symbols.c: code address → function name for -finstrument-functions zones, resolved at stop,
 * never on the hot path. dl_iterate_phdr finds the loaded object holding the address; libelf
 * reads that file's .symtab (static functions included) or, when stripped, .dynsym; the
 * function whose [st_value, st_value + st_size) holds the address names it. Results are cached
 * per object for the life of the process (loupe__symbols_reset() empties the cache: tests).
 * Unknown addresses read "0x<hex>". C++ names are demangled when the process has a C++ runtime.
 * loupe__eh_frame_start() finds the function around an address of a stripped object from its
 * unwind tables (the sampler's names for code without symbols).
 */
#include "record/record.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct sym {
    uint64_t lo, hi;
    char *name;
} sym;

typedef struct object {
    char path[1024];
    uintptr_t bias;
    uintptr_t lo, hi; /* loaded address range */
    sym *syms;
    size_t nsyms;
    int loaded;
    struct object *next;
} object;

static object *objects;
static pthread_mutex_t sym_lock = PTHREAD_MUTEX_INITIALIZER;

static int cmp_sym(const void *a, const void *b) {
    const sym *x = a, *y = b;
    return x->lo < y->lo ? -1 : (x->lo > y->lo);
}

static void load_symbols(object *o) {
    o->loaded = 1;
    const char *path = o->path[0] ? o->path : "/proc/self/exe";
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return;
    }
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    if (e == NULL) {
        close(fd);
        return;
    }
    for (int pass = 0; pass < 2 && o->nsyms == 0; pass++) {
        Elf_Scn *scn = NULL;
        while ((scn = elf_nextscn(e, scn)) != NULL) {
            GElf_Shdr sh;
            if (gelf_getshdr(scn, &sh) == NULL ||
                sh.sh_type != (pass == 0 ? SHT_SYMTAB : SHT_DYNSYM) || sh.sh_entsize == 0) {
                continue;
            }
            Elf_Data *d = elf_getdata(scn, NULL);
            if (d == NULL) {
                continue;
            }
            size_t n = sh.sh_size / sh.sh_entsize;
            sym *arr = realloc(o->syms, (o->nsyms + n) * sizeof(sym));
            if (arr == NULL) {
                break;
            }
            o->syms = arr;
            for (size_t i = 0; i < n; i++) {
                GElf_Sym s;
                if (gelf_getsym(d, (int)i, &s) == NULL || GELF_ST_TYPE(s.st_info) != STT_FUNC ||
                    s.st_value == 0) {
                    continue;
                }
                const char *nm = elf_strptr(e, sh.sh_link, s.st_name);
                if (nm == NULL || *nm == 0) {
                    continue;
                }
                char *dup = strdup(nm);
                if (dup == NULL) {
                    continue;
                }
                o->syms[o->nsyms++] =
                    (sym){s.st_value, s.st_value + (s.st_size ? s.st_size : 1), dup};
            }
        }
    }
    qsort(o->syms, o->nsyms, sizeof(sym), cmp_sym);
    elf_end(e);
    close(fd);
}

static int add_object(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    (void)data;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type == PT_LOAD) {
            uintptr_t a = info->dlpi_addr + ph->p_vaddr;
            if (a < lo) {
                lo = a;
            }
            if (a + ph->p_memsz > hi) {
                hi = a + ph->p_memsz;
            }
        }
    }
    for (object *o = objects; o != NULL; o = o->next) {
        if (o->lo == lo && o->bias == info->dlpi_addr) {
            return 0;
        }
    }
    object *o = calloc(1, sizeof(*o));
    if (o == NULL) {
        return 0;
    }
    snprintf(o->path, sizeof o->path, "%s", info->dlpi_name ? info->dlpi_name : "");
    o->bias = info->dlpi_addr;
    o->lo = lo;
    o->hi = hi;
    o->next = objects;
    objects = o;
    return 0;
}

/* C++ names: demangled with the C++ runtime's __cxa_demangle (libstdc++, loaded if needed; loupe
 * itself stays C). NULL when not mangled or not demangled. */
typedef char *(*demangle_fn)(const char *, char *, size_t *, int *);

char *loupe__demangle(const char *name) {
    if (strncmp(name, "_Z", 2) != 0) {
        return NULL;
    }
    void *f = dlsym(RTLD_DEFAULT, "__cxa_demangle");
    if (f == NULL) {
        /* A C++ program linked --as-needed may have no libstdc++ loaded: load it (at the stop,
         * never on the hot path; kept loaded). */
        void *h = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_LOCAL);
        f = h != NULL ? dlsym(h, "__cxa_demangle") : NULL;
        if (f == NULL) {
            return NULL;
        }
    }
    demangle_fn fn;
    memcpy(&fn, &f, sizeof fn);
    int status = -1;
    char *out = fn(name, NULL, NULL, &status);
    if (status != 0) {
        free(out);
        return NULL;
    }
    return out;
}

void loupe__symbolize(uintptr_t addr, char *buf, size_t size) {
    pthread_mutex_lock(&sym_lock);
    object *found = NULL;
    for (int tries = 0; tries < 2 && found == NULL; tries++) {
        for (object *o = objects; o != NULL; o = o->next) {
            if (addr >= o->lo && addr < o->hi) {
                found = o;
                break;
            }
        }
        if (found == NULL && tries == 0) {
            dl_iterate_phdr(add_object, NULL); /* objects loaded since the last look */
        }
    }
    if (found != NULL) {
        if (!found->loaded) {
            load_symbols(found);
        }
        uint64_t rel = addr - found->bias;
        size_t lo = 0, hi = found->nsyms;
        while (lo < hi) { /* the last symbol starting at or before rel */
            size_t mid = (lo + hi) / 2;
            if (found->syms[mid].lo <= rel) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if (lo > 0 && rel < found->syms[lo - 1].hi) {
            const char *name = found->syms[lo - 1].name;
            char *dm = loupe__demangle(name);
            snprintf(buf, size, "%s", dm ? dm : name);
            free(dm);
            pthread_mutex_unlock(&sym_lock);
            return;
        }
    }
    pthread_mutex_unlock(&sym_lock);
    snprintf(buf, size, "0x%lx", (unsigned long)addr);
}

void loupe__symbols_reset(void) {
    pthread_mutex_lock(&sym_lock);
    while (objects != NULL) {
        object *o = objects;
        objects = o->next;
        for (size_t i = 0; i < o->nsyms; i++) {
            free(o->syms[i].name);
        }
        free(o->syms);
        free(o);
    }
    pthread_mutex_unlock(&sym_lock);
}

void loupe__symbols_each(void (*fn)(uintptr_t addr, const char *name, void *arg),
                         void (*range)(uintptr_t lo, uintptr_t hi, void *arg), void *arg) {
    pthread_mutex_lock(&sym_lock);
    dl_iterate_phdr(add_object, NULL);
    for (object *o = objects; o != NULL; o = o->next) {
        if (!o->loaded) {
            load_symbols(o);
        }
        range(o->lo, o->hi, arg);
        for (size_t i = 0; i < o->nsyms; i++) {
            const char *name = o->syms[i].name;
            char *dm = loupe__demangle(name);
            fn((uintptr_t)(o->bias + o->syms[i].lo), dm ? dm : name, arg);
            free(dm);
        }
    }
    pthread_mutex_unlock(&sym_lock);
}

/* A DW_EH_PE_* encoded value of .eh_frame_hdr (LSB Core Specification, "DWARF Exception Header
 * Encoding"): the value formats only (the low nibble) and, for the table, datarel; 0, or -1
 * for a format this does not read. */
static int eh_read(const unsigned char **p, const unsigned char *end, unsigned enc, int64_t *v) {
    unsigned fmt = enc & 0x0fu;
    size_t n = fmt == 0x00 || fmt == 0x04 || fmt == 0x0c ? 8
                                                         : (fmt == 0x03 || fmt == 0x0b     ? 4
                                                            : (fmt == 0x02 || fmt == 0x0a) ? 2
                                                                                           : 0);
    if (n == 0 || enc == 0xffu || (size_t)(end - *p) < n) {
        return -1;
    }
    uint64_t u = 0;
    memcpy(&u, *p, n); /* x86-64 is little-endian, like the file */
    if (n < 8 && (fmt & 0x08u) && (u >> (8 * n - 1))) {
        u |= ~0ull << (8 * n); /* sdata2 / sdata4: sign-extended */
    }
    *p += n;
    *v = (int64_t)u;
    return 0;
}

int loupe__eh_frame_start(void *elf, uint64_t addr, uint64_t *start) {
    Elf *e = elf;
    size_t nph = 0;
    if (e == NULL || elf_getphdrnum(e, &nph) != 0) {
        return -1;
    }
    /* PT_GNU_EH_FRAME, not the .eh_frame_hdr section: a binary stripped of its section headers
     * (sstrip) keeps the segment, which is what the unwinder of libgcc reads too. */
    for (size_t i = 0; i < nph; i++) {
        GElf_Phdr ph;
        if (gelf_getphdr(e, (int)i, &ph) == NULL || ph.p_type != PT_GNU_EH_FRAME) {
            continue;
        }
        Elf_Data *d = elf_getdata_rawchunk(e, (int64_t)ph.p_offset, ph.p_filesz, ELF_T_BYTE);
        if (d == NULL || d->d_size < 4) {
            return -1;
        }
        const unsigned char *b = d->d_buf, *p = b + 4, *end = b + d->d_size;
        int64_t ptr, count;
        /* version 1; the table: (initial location, FDE address) pairs sorted by location, in
         * DW_EH_PE_datarel | sdata4 (0x3b) relative to the header's start, which GNU ld, gold
         * and lld all write; another table encoding is not searched */
        if (b[0] != 1 || b[3] != 0x3bu || eh_read(&p, end, b[1], &ptr) != 0 ||
            eh_read(&p, end, b[2], &count) != 0 || count <= 0 ||
            (uint64_t)count > (uint64_t)(end - p) / 8) {
            return -1;
        }
        size_t lo = 0, hi = (size_t)count; /* the last entry starting at or before addr */
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            int32_t loc;
            memcpy(&loc, p + mid * 8, 4);
            if (ph.p_vaddr + (uint64_t)(int64_t)loc <= addr) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if (lo == 0) {
            return -1;
        }
        int32_t loc;
        memcpy(&loc, p + (lo - 1) * 8, 4);
        *start = ph.p_vaddr + (uint64_t)(int64_t)loc;
        return 0;
    }
    return -1;
}
