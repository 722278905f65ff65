/* svg.c: an SVG flame graph of a trace's zones (`loupe convert IN -o OUT.svg`), in the layout of
 * Brendan Gregg's flamegraph.pl (github.com/brendangregg/FlameGraph): one box per distinct stack
 * (the call tree of flame.h, one root per track), its width the stack's total time (self plus
 * children), the roots at the bottom, siblings sorted by name, colours from a hash of the name in
 * flamegraph.pl's "hot" palette, and a <title> tooltip with the name, the time and the share.
 *
 * A small writer of our own rather than flamegraph.pl or a PyPI tool: Debian's flamegraph package
 * is a Perl script that would make the library (and the server) depend on a Perl at run time;
 * this one streams through the same sink as every other writer and its output is deterministic
 * (fixed formatting, no timestamps, sorted siblings), which a golden file test holds.
 *
 * Names are XML-escaped (& < > " '), invalid UTF-8 bytes become U+FFFD (as in every writer:
 * base/utf8.h), and characters XML 1.0 forbids even escaped (controls, U+FFFE/U+FFFF, XML 1.0
 * §2.2 Char) become '?'. Boxes narrower than 0.1 px are left out, as flamegraph.pl's --minwidth
 * does, which also bounds the output: at most 11,800 boxes per row.
 */
#include "export/flame.h"

#include "base/hash.h"
#include "base/utf8.h"
#include "export/writers.h"

#include <loupe/writer.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IMAGE_WIDTH 1200 /* px, flamegraph.pl's default */
#define SIDE_PAD 10
#define FRAME_HEIGHT 16
#define TOP_PAD 40 /* the title */
#define BOTTOM_PAD 10
#define GLYPH_WIDTH 7.0 /* px per character of a 12 px Verdana, as flamegraph.pl estimates */
#define MIN_WIDTH 0.1

/* Writes n bytes of name XML-escaped; at most max_chars characters (0: all) and then "..". */
static void put_xml(loupe__sink *s, const char *name, size_t max_chars) {
    const unsigned char *p = (const unsigned char *)name;
    size_t chars = 0, total = 0;
    if (max_chars > 0) {
        for (const unsigned char *q = p; *q;) {
            size_t k = loupe__utf8_seq_len(q, 4);
            q += k ? k : 1;
            total++;
        }
    }
    int cut = max_chars > 0 && total > max_chars;
    while (*p) {
        if (cut && chars + 2 >= max_chars) {
            loupe__put(s, "..", 2);
            return;
        }
        size_t k = loupe__utf8_seq_len(p, 4);
        chars++;
        if (k == 0) {
            loupe__put(s, "\xef\xbf\xbd", 3);
            p++;
            continue;
        }
        if (k == 3 && p[0] == 0xef && p[1] == 0xbf && (p[2] == 0xbe || p[2] == 0xbf)) {
            loupe__put(s, "?", 1); /* U+FFFE, U+FFFF: not XML characters */
        } else if (k > 1) {
            loupe__put(s, (const char *)p, k);
        } else if (*p == '&') {
            loupe__puts(s, "&amp;");
        } else if (*p == '<') {
            loupe__puts(s, "&lt;");
        } else if (*p == '>') {
            loupe__puts(s, "&gt;");
        } else if (*p == '"') {
            loupe__puts(s, "&quot;");
        } else if (*p == '\'') {
            loupe__puts(s, "&apos;");
        } else if (*p < 0x20 || *p == 0x7f) {
            loupe__put(s, "?", 1);
        } else {
            loupe__put(s, (const char *)p, 1);
        }
        p += k;
    }
}

typedef struct order_ix {
    size_t parent1; /* parent + 1: the roots (parent NONE) first */
    const char *name;
    size_t node;
} order_ix;

static int cmp_order(const void *pa, const void *pb) {
    const order_ix *a = pa, *b = pb;
    if (a->parent1 != b->parent1) {
        return a->parent1 < b->parent1 ? -1 : 1;
    }
    int c = strcmp(a->name, b->name);
    return c != 0 ? c : (a->node > b->node) - (a->node < b->node);
}

static void putf(loupe__sink *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void putf(loupe__sink *s, const char *fmt, ...) {
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) {
        loupe__put(s, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
    }
}

int loupe__write_svg(const loupe_model *m, loupe__sink *s) {
    return loupe__write_svg_weighted(m, s, LOUPE_FLAME_WEIGHT_AUTO);
}

int loupe__write_svg_weighted(const loupe_model *m, loupe__sink *s, int weight) {
    loupe__flame f;
    int rc = loupe__flame_use_samples(m, weight) ? loupe__flame_build_samples(m, &f)
                                                 : loupe__flame_build(m, &f);
    if (rc != 0) {
        return rc;
    }
    order_ix *ix = malloc((f.count ? f.count : 1) * sizeof(*ix));
    uint64_t *off = malloc((f.count ? f.count : 1) * sizeof(*off));
    if (ix == NULL || off == NULL) {
        free(ix);
        free(off);
        loupe__flame_free(&f);
        return loupe__err(LOUPE_ENOMEM, "SVG writer: out of memory");
    }
    uint64_t total = 0;
    uint32_t max_depth = 0;
    for (size_t i = 0; i < f.count; i++) {
        const loupe__flame_node *n = &f.nodes[i];
        ix[i] = (order_ix){n->parent + 1, n->name, i};
        total += n->parent == LOUPE__FLAME_NONE ? n->total_ns : 0;
        max_depth = n->depth > max_depth ? n->depth : max_depth;
    }
    qsort(ix, f.count, sizeof(*ix), cmp_order);
    /* Offsets in ns from the left edge: a parent's group follows its own (a parent's index is
     * below its children's, and the sort is by parent index first). */
    for (size_t i = 0; i < f.count;) {
        size_t p1 = ix[i].parent1;
        uint64_t x = p1 == 0 ? 0 : off[p1 - 1];
        for (; i < f.count && ix[i].parent1 == p1; i++) {
            off[ix[i].node] = x;
            x += f.nodes[ix[i].node].total_ns;
        }
    }
    unsigned height = TOP_PAD + (max_depth + 1) * FRAME_HEIGHT + BOTTOM_PAD;
    double scale = total > 0 ? (double)(IMAGE_WIDTH - 2 * SIDE_PAD) / (double)total : 0.0;
    putf(s,
         "<?xml version=\"1.0\" encoding=\"UTF-8\" standalone=\"no\"?>\n"
         "<svg version=\"1.1\" width=\"%d\" height=\"%u\" viewBox=\"0 0 %d %u\" "
         "xmlns=\"http://www.w3.org/2000/svg\">\n",
         IMAGE_WIDTH, height, IMAGE_WIDTH, height);
    loupe__puts(s, f.samples ? "<!-- loupe flame graph of the CPU samples: one root per "
                               "thread; a box's width is the samples with its stack -->\n"
                             : "<!-- loupe flame graph: one root per track; a box's width is "
                               "its stack's total time (self + children) -->\n");
    loupe__puts(s, "<style>text{font-family:Verdana,sans-serif;font-size:12px;fill:#000}"
                   "</style>\n");
    putf(s, "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%u\" fill=\"#f8f8f0\"/>\n", IMAGE_WIDTH,
         height);
    putf(s,
         "<text x=\"%d\" y=\"24\" text-anchor=\"middle\" style=\"font-size:17px\">Flame graph "
         "(%llu %s)</text>\n",
         IMAGE_WIDTH / 2, (unsigned long long)total, f.samples ? "CPU samples" : "ns in zones");
    for (size_t i = 0; i < f.count && total > 0; i++) {
        const loupe__flame_node *n = &f.nodes[ix[i].node];
        double w = (double)n->total_ns * scale;
        if (w < MIN_WIDTH) {
            continue;
        }
        double x = SIDE_PAD + (double)off[ix[i].node] * scale;
        unsigned y = height - BOTTOM_PAD - (n->depth + 1) * FRAME_HEIGHT;
        uint64_t h = loupe__hash_str(n->name);
        loupe__puts(s, "<g><title>");
        put_xml(s, n->name, 0);
        putf(s, " (%llu %s, %.2f%%)</title>", (unsigned long long)n->total_ns,
             f.samples ? (n->total_ns == 1 ? "sample" : "samples") : "ns",
             (double)n->total_ns * 100.0 / (double)total);
        putf(s,
             "<rect x=\"%.2f\" y=\"%u\" width=\"%.2f\" height=\"%d\" fill=\"rgb(%u,%u,%u)\" "
             "rx=\"2\"/>",
             x, y, w, FRAME_HEIGHT - 1, (unsigned)(205 + h % 51), (unsigned)((h >> 8) % 231),
             (unsigned)((h >> 16) % 56));
        size_t fit = (size_t)((w - 6.0) / GLYPH_WIDTH);
        if (fit >= 3) {
            putf(s, "<text x=\"%.2f\" y=\"%u\">", x + 3.0, y + 11);
            put_xml(s, n->name, fit);
            loupe__puts(s, "</text>");
        }
        loupe__puts(s, "</g>\n");
    }
    loupe__puts(s, "</svg>\n");
    free(ix);
    free(off);
    loupe__flame_free(&f);
    return 0;
}
