/* zstdlike.c: loupe_bench_zstdlike, a program shaped as zstd's compressor is: a few long calls
 * (a block, the entropy stage) over a great many tiny helpers (zstd's MEM_read32, ZSTD_hash4,
 * ZSTD_count, ZSTD_storeSeq, HUF_encodeSymbol: lib/common/mem.h, lib/compress/
 * zstd_compress_internal.h and huf_compress.c in facebook/zstd). Built with
 * -finstrument-functions: every helper call is a zone under `loupe record`, as in a function
 * trace of zstd itself, most of them shorter than a microsecond. bench/min_duration.sh records
 * it with and without --min-duration and counts the events each trace holds.
 *
 * It greedily matches 4-byte hashes over a synthetic input (a text-like byte stream with
 * repeats), emits literals and sequences, then Huffman-codes each block's literals.
 * Usage: loupe_bench_zstdlike [KiB of input] (default 1024); prints a checksum.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { BLOCK = 64 * 1024, HASH_LOG = 14, MIN_MATCH = 4 };

typedef struct seq {
    uint32_t lit_len, offset, match_len;
} seq;

typedef struct block_state {
    uint32_t table[1u << HASH_LOG];
    seq seqs[BLOCK / MIN_MATCH];
    uint32_t nseqs;
    uint8_t lits[BLOCK];
    uint32_t nlits;
    uint32_t counts[256];
    uint8_t code_len[256];
    uint64_t bits;
    uint32_t nbits;
    uint64_t out;
} block_state;

static uint32_t read32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint32_t hash4(uint32_t v) {
    return (v * 2654435761u) >> (32 - HASH_LOG);
}

static uint32_t count_match(const uint8_t *a, const uint8_t *b, const uint8_t *end) {
    const uint8_t *s = a;
    while (a < end && *a == *b) {
        a++;
        b++;
    }
    return (uint32_t)(a - s);
}

static void store_lits(block_state *st, const uint8_t *p, uint32_t n) {
    memcpy(st->lits + st->nlits, p, n);
    st->nlits += n;
}

static void store_seq(block_state *st, uint32_t lit_len, uint32_t offset, uint32_t match_len) {
    st->seqs[st->nseqs++] = (seq){lit_len, offset, match_len};
}

static void count_symbols(block_state *st) {
    memset(st->counts, 0, sizeof st->counts);
    for (uint32_t i = 0; i < st->nlits; i++) {
        st->counts[st->lits[i]]++;
    }
}

/* Code lengths from the counts: not optimal Huffman, a rank-based stand-in of the same cost. */
static void build_table(block_state *st) {
    for (int s = 0; s < 256; s++) {
        uint32_t rank = 0;
        for (int t = 0; t < 256; t++) {
            rank += st->counts[t] > st->counts[s];
        }
        st->code_len[s] = (uint8_t)(rank < 8 ? 3 + rank / 2 : rank < 64 ? 8 : 11);
    }
}

static void put_bits(block_state *st, uint64_t v, uint32_t n) {
    st->bits |= v << st->nbits;
    st->nbits += n;
    if (st->nbits >= 32) {
        st->out = st->out * 31 + (st->bits & 0xffffffffu);
        st->bits >>= 32;
        st->nbits -= 32;
    }
}

static void encode_symbol(block_state *st, uint8_t s) {
    put_bits(st, s, st->code_len[s]);
}

static void encode_literals(block_state *st) {
    count_symbols(st);
    build_table(st);
    for (uint32_t i = 0; i < st->nlits; i++) {
        encode_symbol(st, st->lits[i]);
    }
}

static void encode_sequences(block_state *st) {
    for (uint32_t i = 0; i < st->nseqs; i++) {
        put_bits(st, st->seqs[i].lit_len, 8);
        put_bits(st, st->seqs[i].offset, 16);
        put_bits(st, st->seqs[i].match_len, 8);
    }
}

static void compress_block(block_state *st, const uint8_t *src, uint32_t n) {
    memset(st->table, 0, sizeof st->table);
    st->nseqs = st->nlits = 0;
    const uint8_t *p = src, *anchor = src, *end = src + n, *limit = end - 8;
    while (p < limit) {
        uint32_t h = hash4(read32(p));
        const uint8_t *m = src + st->table[h];
        st->table[h] = (uint32_t)(p - src);
        if (m < p && read32(m) == read32(p)) {
            uint32_t len = MIN_MATCH + count_match(p + MIN_MATCH, m + MIN_MATCH, end);
            store_lits(st, anchor, (uint32_t)(p - anchor));
            store_seq(st, (uint32_t)(p - anchor), (uint32_t)(p - m), len);
            p += len;
            anchor = p;
        } else {
            p += 1 + ((uint32_t)(p - anchor) >> 6); /* zstd's fast strategy skips ahead */
        }
    }
    store_lits(st, anchor, (uint32_t)(end - anchor));
    encode_literals(st);
    encode_sequences(st);
}

static void make_input(uint8_t *buf, size_t n) {
    static const char *words[] = {"the ",   "profiler ", "samples ", "each ", "thread ",
                                  "trace ", "zone ",     "of ",      "a ",    "block "};
    uint64_t x = 88172645463325252ull;
    size_t i = 0;
    while (i < n) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const char *w = words[x % 10];
        for (; *w && i < n; w++) {
            buf[i++] = (uint8_t)((x >> 40) % 16 == 0 ? (uint8_t)(x >> 8) : (uint8_t)*w);
        }
    }
}

int main(int argc, char **argv) {
    size_t kib = argc > 1 ? strtoul(argv[1], NULL, 10) : 1024;
    size_t n = kib * 1024;
    uint8_t *in = malloc(n);
    block_state *st = calloc(1, sizeof *st);
    if (in == NULL || st == NULL) {
        return 1;
    }
    make_input(in, n);
    for (size_t off = 0; off < n; off += BLOCK) {
        compress_block(st, in + off, (uint32_t)(n - off < BLOCK ? n - off : BLOCK));
    }
    printf("zstdlike: %zu KiB, checksum %016llx\n", kib, (unsigned long long)st->out);
    free(st);
    free(in);
    return 0;
}
