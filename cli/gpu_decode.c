/* gpu_decode.c: `loupe gpu-decode`: decodes a saved in-kernel timeline buffer (raw little-endian
 * u32 words, from a loupe kernel or from JAX's Mosaic GPU profiler) into Chrome JSON, and prints
 * a one-line summary. Uses only the public API (loupe/gpu.h). */
#include "cli.h"

#include <loupe/loupe.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: loupe gpu-decode BUFFER --grid X,Y,Z --block X,Y,Z --entries E\n"
            "                        [--scope warp|warpgroup] [--names FILE]\n"
            "                        [--layout loupe|mosaic] [--strict] [--ghz F] -o OUT.json\n"
            "\n"
            "Decodes an in-kernel timeline buffer saved as raw little-endian u32 words and writes\n"
            "Chrome JSON in Mosaic's layout (pid = 1 + SM, tid = 1 + trace).\n"
            "\n"
            "  --grid, --block  the launch's dimensions (Y and Z default to 1: --grid 132)\n"
            "  --entries E      u32 words per trace, header included (Mosaic's\n"
            "                   entries_per_warpgroup)\n"
            "  --scope          threads per trace: warp (32) or warpgroup (128, the default)\n"
            "  --names FILE     region names, one per line: line i names id i\n"
            "  --layout         loupe (loupe_device.cuh, the default) or mosaic (JAX)\n"
            "  --strict         fail when a trace overflowed (Mosaic's all-or-nothing)\n"
            "  --ghz F          cycles per ns when the buffer cannot give it (default 1.0)\n"
            "  -o OUT.json      the output (.gz: gzipped)\n"
            "\n"
            "Exit status: 0 decoded (also when events were dropped: see the summary), 1 the\n"
            "buffer could not be decoded, 2 usage.\n");
}

static int parse_dim3(const char *s, uint32_t d[3]) {
    d[0] = d[1] = d[2] = 1;
    for (int i = 0; i < 3; i++) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || errno != 0 || v == 0 || v > UINT32_MAX || *s == '-') {
            return -1;
        }
        d[i] = (uint32_t)v;
        if (*end == 0) {
            return 0;
        }
        if (*end != ',' || i == 2) {
            return -1;
        }
        s = end + 1;
    }
    return -1;
}

static uint32_t *read_buffer(const char *path, size_t *n_words) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "loupe gpu-decode: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, len = 0;
    unsigned char *b = malloc(cap);
    size_t got;
    while (b != NULL && (got = fread(b + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            unsigned char *nb = realloc(b, cap * 2);
            if (nb == NULL) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    if (b == NULL || err) {
        fprintf(stderr, "loupe gpu-decode: cannot read %s\n", path);
        free(b);
        return NULL;
    }
    if (len % 4 != 0) {
        fprintf(stderr,
                "loupe gpu-decode: %s has %zu bytes, not a whole number of u32 words: not a "
                "buffer copied from the device?\n",
                path, len);
        free(b);
        return NULL;
    }
    size_t n = len / 4;
    uint32_t *w = malloc(n ? n * 4 : 4);
    for (size_t i = 0; w != NULL && i < n; i++) { /* little-endian, whatever the host */
        w[i] = (uint32_t)b[4 * i] | (uint32_t)b[4 * i + 1] << 8 | (uint32_t)b[4 * i + 2] << 16 |
               (uint32_t)b[4 * i + 3] << 24;
    }
    free(b);
    *n_words = n;
    return w;
}

int loupe_cmd_gpu_decode(int argc, char **argv) {
#if !LOUPE_CLI_WITH_GPU
    (void)argc;
    (void)argv;
    (void)usage;
    (void)parse_dim3;
    (void)read_buffer;
    fprintf(stderr, "loupe gpu-decode: this build of loupe has no GPU support (rebuild with "
                    "-DLOUPE_WITH_GPU=ON)\n");
    return 2;
#else
    const char *in = NULL, *out = NULL, *names_path = NULL;
    uint32_t grid[3] = {0, 0, 0}, block[3] = {0, 0, 0};
    loupe_gpu_spec spec = {0};
    loupe_gpu_decode_options o = {0};
    int have_grid = 0, have_block = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--strict") == 0) {
            o.strict = 1;
            continue;
        } else if (a[0] == '-' && v == NULL) {
            fprintf(stderr, "loupe gpu-decode: %s needs a value\n", a);
            return 2;
        }
        if (strcmp(a, "--grid") == 0) {
            if (parse_dim3(v, grid) != 0) {
                fprintf(stderr, "loupe gpu-decode: --grid %s: use X[,Y[,Z]] with values >= 1\n", v);
                return 2;
            }
            have_grid = 1;
        } else if (strcmp(a, "--block") == 0) {
            if (parse_dim3(v, block) != 0) {
                fprintf(stderr, "loupe gpu-decode: --block %s: use X[,Y[,Z]] with values >= 1\n",
                        v);
                return 2;
            }
            have_block = 1;
        } else if (strcmp(a, "--entries") == 0) {
            char *end;
            errno = 0;
            unsigned long e = strtoul(v, &end, 10);
            if (*end != 0 || end == v || errno != 0 || e == 0 || e > UINT32_MAX) {
                fprintf(stderr, "loupe gpu-decode: --entries %s: not a positive integer\n", v);
                return 2;
            }
            spec.entries_per_trace = (uint32_t)e;
        } else if (strcmp(a, "--scope") == 0) {
            if (strcmp(v, "warp") == 0) {
                spec.scope = 32;
            } else if (strcmp(v, "warpgroup") == 0) {
                spec.scope = 128;
            } else {
                fprintf(stderr, "loupe gpu-decode: --scope %s: use warp or warpgroup\n", v);
                return 2;
            }
        } else if (strcmp(a, "--layout") == 0) {
            if (strcmp(v, "loupe") == 0) {
                spec.layout = LOUPE_GPU_LAYOUT_LOUPE;
            } else if (strcmp(v, "mosaic") == 0) {
                spec.layout = LOUPE_GPU_LAYOUT_MOSAIC;
            } else {
                fprintf(stderr, "loupe gpu-decode: --layout %s: use loupe or mosaic\n", v);
                return 2;
            }
        } else if (strcmp(a, "--names") == 0) {
            names_path = v;
        } else if (strcmp(a, "--ghz") == 0) {
            char *end;
            o.fallback_ghz = strtod(v, &end);
            /* A GPU clock between 1 MHz and 1 THz: anything else is a typo (inf would become the
             * 1 GHz default, 1e-300 would push timestamps past int64 ns). */
            if (*end != 0 || !(o.fallback_ghz >= 0.001 && o.fallback_ghz <= 1000.0)) {
                fprintf(stderr,
                        "loupe gpu-decode: --ghz %s: not a clock rate in GHz from 0.001 to 1000\n",
                        v);
                return 2;
            }
        } else if (strcmp(a, "-o") == 0 || strcmp(a, "--output") == 0) {
            out = v;
        } else if (a[0] == '-') {
            fprintf(stderr, "loupe gpu-decode: unknown option %s\n", a);
            usage(stderr);
            return 2;
        } else {
            if (in != NULL) {
                fprintf(stderr, "loupe gpu-decode: one BUFFER only (got %s and %s)\n", in, a);
                return 2;
            }
            in = a;
            continue;
        }
        i++;
    }
    if (in == NULL || out == NULL || !have_grid || !have_block || spec.entries_per_trace == 0) {
        fprintf(stderr, "loupe gpu-decode: BUFFER, --grid, --block, --entries and -o are "
                        "required\n");
        usage(stderr);
        return 2;
    }
    loupe_gpu_names *names = NULL;
    if (names_path != NULL) {
        names = loupe_gpu_names_new(0);
        int r = names == NULL ? LOUPE_ENOMEM : loupe_gpu_names_load(names, names_path);
        if (r != 0) {
            fprintf(stderr, "loupe gpu-decode: %s: %s\n", loupe_strerror(r), loupe_last_error());
            loupe_gpu_names_free(names);
            return 1;
        }
    }
    size_t n = 0;
    uint32_t *buf = read_buffer(in, &n);
    if (buf == NULL) {
        loupe_gpu_names_free(names);
        return 1;
    }
    loupe_gpu_decoded *d = NULL;
    int r = loupe_gpu_decode(buf, n, &spec, grid, block, names, &o, &d);
    free(buf);
    loupe_gpu_names_free(names);
    if (r != 0) {
        fprintf(stderr, "loupe gpu-decode: %s\n  %s\n", loupe_strerror(r), loupe_last_error());
        return 1;
    }
    r = loupe_gpu_write_chrome_json(d, out);
    if (r != 0) {
        fprintf(stderr, "loupe gpu-decode: %s\n", loupe_last_error());
        loupe_gpu_decoded_free(d);
        return 1;
    }
    if (d->warnings[0]) {
        fprintf(stderr, "%s", d->warnings);
    }
    printf("%zu traces, %llu events, %llu dropped, needed entries %u (have %u), %.4f GHz %s, "
           "overhead %u cycles -> %s\n",
           d->trace_count, (unsigned long long)d->events, (unsigned long long)d->events_dropped,
           d->needed_entries, d->spec.entries_per_trace, d->ghz,
           d->ghz_measured ? "measured" : "assumed", d->overhead_cycles, out);
    loupe_gpu_decoded_free(d);
    return 0;
#endif
}
