/* instrumented.c: a call-heavy program for loupe's function tracing (-finstrument-functions).
 *
 * It has no loupe calls and is not linked with loupe: the compiler inserts a call to
 * __cyg_profile_func_enter/__cyg_profile_func_exit around every function of this file. Run alone,
 * glibc's no-op definitions answer them; under `loupe record` the preloaded library's definitions
 * win and each call becomes a zone, named from the executable's symbol table. Most functions here
 * are `static`: they are only in .symtab, not .dynsym, so naming them needs the ELF symbol table.
 *
 * About 190k calls (380k events) with the defaults: fib(22) is 57k calls, building a binary
 * search tree of 6000 random keys is about 100k recursive inserts, and the walk, the per-node
 * work and the free are 30k more. The per-node work (mix) makes the run take 0.2-0.5 s, so that
 * the calls have durations worth looking at. Usage: instrumented [ROUNDS] (default 30000).
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct node {
    uint64_t key;
    struct node *left;
    struct node *right;
} node;

/* Non-static functions: in .symtab and, with -rdynamic, in .dynsym too. */
uint64_t instrumented_tree_checksum(const node *root, unsigned rounds);
uint64_t instrumented_run(unsigned rounds);

static uint64_t fib(unsigned n) {
    return n < 2 ? n : fib(n - 1) + fib(n - 2);
}

static uint64_t next_random(uint64_t *state) {
    /* xorshift64*: a fixed seed gives the same tree, hence the same call counts, every run. */
    uint64_t x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    return x * 0x2545F4914F6CDD1Dull;
}

static node *tree_insert(node *t, node *n) {
    if (t == NULL) {
        return n;
    }
    if (n->key < t->key) {
        t->left = tree_insert(t->left, n);
    } else {
        t->right = tree_insert(t->right, n);
    }
    return t;
}

/* The per-node work: a dependent chain the compiler cannot fold or vectorise. */
static uint64_t mix(uint64_t key, unsigned rounds) {
    uint64_t h = key | 1u;
    for (unsigned i = 0; i < rounds; i++) {
        h ^= h >> 31;
        h *= 0x9E3779B97F4A7C15ull;
        h += i;
    }
    return h;
}

static uint64_t tree_walk(const node *t, unsigned rounds) {
    if (t == NULL) {
        return 0;
    }
    uint64_t left = tree_walk(t->left, rounds);
    uint64_t self = mix(t->key, rounds);
    uint64_t right = tree_walk(t->right, rounds);
    return left ^ (self + 0x9E3779B97F4A7C15ull) ^ (right << 1);
}

static void tree_free(node *t) {
    if (t != NULL) {
        tree_free(t->left);
        tree_free(t->right);
        free(t);
    }
}

uint64_t instrumented_tree_checksum(const node *root, unsigned rounds) {
    return tree_walk(root, rounds);
}

uint64_t instrumented_run(unsigned rounds) {
    enum { NODES = 6000 };
    uint64_t seed = 0x853C49E6748FEA9Bull;
    node *root = NULL;
    for (unsigned i = 0; i < NODES; i++) {
        node *n = malloc(sizeof *n);
        if (n == NULL) {
            tree_free(root);
            return 0;
        }
        *n = (node){.key = next_random(&seed)};
        root = tree_insert(root, n);
    }
    uint64_t sum = instrumented_tree_checksum(root, rounds);
    tree_free(root);
    return sum;
}

int main(int argc, char **argv) {
    unsigned rounds = 30000;
    if (argc > 1) {
        char *end = NULL;
        unsigned long v = strtoul(argv[1], &end, 10);
        if (end == argv[1] || *end != '\0' || v > 100000000ul) {
            fprintf(stderr, "usage: %s [ROUNDS]   (per-node work, default 30000)\n", argv[0]);
            return 2;
        }
        rounds = (unsigned)v;
    }
    uint64_t f = fib(22);
    uint64_t t = instrumented_run(rounds);
    printf("instrumented: fib(22) = %" PRIu64 ", tree checksum = %016" PRIx64 "\n", f, t);
    return 0;
}
