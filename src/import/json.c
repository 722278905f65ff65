/* json.c: loupe's pull JSON parser (see json.h). Recursive descent over RFC 8259's grammar, one
 * value at a time, into a reusable array of nodes. */
#include "import/json.h"
#include "base/ascii.h"

#include "base/array.h"

#include <locale.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void loupe__jp_reset(loupe__jp *p) {
    p->count = 0;
    p->undo_count = 0;
    p->undo_len = 0;
}

void loupe__jp_undo(loupe__jp *p, size_t from) {
    /* A NUL here is a closing quote this parse wrote: the parse reached the end of the text, so
     * every byte it passed was valid JSON, where a raw NUL cannot be; NULs that \u0000 decoded
     * are restored with their literal below. */
    for (size_t i = from; i < p->n; i++) {
        if (p->t[i] == 0) {
            p->t[i] = '"';
        }
    }
    for (size_t k = p->undo_count; k-- > 0;) {
        const struct loupe__jundo *u = &p->undo[k];
        memcpy(p->t + u->at, p->undo_bytes + u->off, u->len);
    }
    p->undo_count = 0;
    p->undo_len = 0;
}

/* Saves t[at..at+len) before it is overwritten; -1 on out-of-memory. */
static int save(loupe__jp *p, size_t at, size_t len) {
    if (loupe__grow((void **)&p->undo, &p->undo_cap, p->undo_count + 1, sizeof(*p->undo)) != 0 ||
        loupe__grow((void **)&p->undo_bytes, &p->undo_bytes_cap, p->undo_len + len, 1) != 0) {
        return -1;
    }
    p->undo[p->undo_count++] = (struct loupe__jundo){at, len, p->undo_len};
    memcpy(p->undo_bytes + p->undo_len, p->t + at, len);
    p->undo_len += len;
    return 0;
}

void loupe__jp_free(loupe__jp *p) {
    free(p->undo);
    free(p->undo_bytes);
    p->undo = NULL;
    p->undo_bytes = NULL;
    free(p->nodes);
    p->nodes = NULL;
    p->count = p->cap = 0;
}

void loupe__jp_linecol(const loupe__jp *p, size_t off, size_t *line, size_t *col) {
    size_t l = 1, start = 0;
    for (size_t i = 0; i < off && i < p->n; i++) {
        if (p->t[i] == '\n') {
            l++;
            start = i + 1;
        }
    }
    *line = l;
    *col = off - start + 1;
}

static int fail(loupe__jp *p, size_t at, const char *what) {
    p->err_at = at;
    p->err_what = what;
    return at >= p->n ? LOUPE__JSON_EOF : LOUPE__JSON_SYNTAX;
}

static int new_node(loupe__jp *p, uint32_t *out) {
    if (p->count >= p->cap &&
        (p->count >= UINT32_MAX - 1 ||
         loupe__grow((void **)&p->nodes, &p->cap, p->count + 1, sizeof(loupe__jnode)) != 0)) {
        return LOUPE__JSON_NOMEM;
    }
    *out = (uint32_t)p->count++;
    memset(&p->nodes[*out], 0, sizeof(loupe__jnode));
    return 0;
}

static int hex4(const char *s, size_t avail, unsigned *out) {
    if (avail < 4) {
        return -1;
    }
    unsigned v = 0;
    for (int k = 0; k < 4; k++) {
        int h = loupe__hexval(s[k]);
        if (h < 0) {
            return -1;
        }
        v = v << 4 | (unsigned)h;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp) {
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* The string at p->t[p->i] == '"', decoded in place: *s and *len. */
static int parse_string(loupe__jp *p, const char **s, size_t *len) {
    size_t start = p->i;
    char *t = p->t;
    size_t i = p->i + 1, o = i;
    /* the common case first: no escape, no control byte */
    while (i < p->n && t[i] != '"' && t[i] != '\\' && (unsigned char)t[i] >= 0x20) {
        i++;
    }
    if (i < p->n && t[i] != '"') {
        /* escapes: save the rest of the literal before decoding over it (found first, so that a
         * literal cut by the end of the text is left as it was) */
        size_t e = i;
        while (e < p->n && t[e] != '"') {
            e += t[e] == '\\' ? 2 : 1;
        }
        if (e >= p->n) {
            return fail(p, p->n, "the text ends inside a string");
        }
        if (save(p, i, e + 1 - i) != 0) {
            return LOUPE__JSON_NOMEM;
        }
    }
    o = i;
    while (i < p->n) {
        unsigned char c = (unsigned char)t[i];
        if (c == '"') {
            t[o] = 0; /* o <= i: the NUL lands inside the literal */
            *s = t + start + 1;
            *len = o - start - 1;
            p->i = i + 1;
            return 0;
        }
        if (c < 0x20) {
            return fail(p, i, "control character in a string (escape it)");
        }
        if (c != '\\') {
            t[o++] = t[i++];
            continue;
        }
        if (i + 1 >= p->n) {
            return fail(p, p->n, "the text ends inside a string");
        }
        char e = t[i + 1];
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        const char *k = e ? strchr(from, e) : NULL;
        if (k != NULL) {
            t[o++] = to[k - from];
            i += 2;
            continue;
        }
        if (e != 'u') {
            return fail(p, i, "invalid escape in a string");
        }
        unsigned cp;
        if (hex4(t + i + 2, p->n - i - 2, &cp) != 0) {
            return fail(p, p->n - i - 2 < 4 ? p->n : i, "invalid \\u escape in a string");
        }
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (i + 1 < p->n && t[i] == '\\' && t[i + 1] == 'u' &&
                hex4(t + i + 2, p->n - i - 2, &lo) == 0 && lo >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                i += 6;
            } else {
                cp = 0xFFFD; /* a lone high surrogate */
            }
        } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            cp = 0xFFFD; /* a lone low surrogate */
        }
        o += put_utf8(t + o, cp); /* at most 4 bytes for 6 or 12 read */
    }
    return fail(p, p->n, "the text ends inside a string");
}

static int is_digit(char c) {
    return c >= '0' && c <= '9';
}

static int parse_number(loupe__jp *p, loupe__jnode *v) {
    const char *t = p->t;
    size_t i = p->i, start = i;
    v->type = LOUPE__J_NUM;
    if (t[i] == '-') {
        v->neg = 1;
        i++;
    }
    if (i >= p->n) {
        return fail(p, p->n, "the text ends inside a number");
    }
    if (!is_digit(t[i])) {
        return fail(p, i, "invalid number");
    }
    uint64_t m = 0;
    int exp10 = 0, integer = 1;
    /* Digits accumulate while mant holds them; past that the value is inexact (strtod reads
     * it) and integer digits only scale it. */
    if (t[i] == '0') {
        i++;
    } else {
        for (; i < p->n && is_digit(t[i]); i++) {
            uint64_t d = (uint64_t)(t[i] - '0');
            if (!v->inexact && m <= (UINT64_MAX - d) / 10) {
                m = m * 10 + d;
            } else {
                v->inexact = 1;
                exp10++;
            }
        }
    }
    if (i < p->n && t[i] == '.') {
        integer = 0;
        i++;
        if (i >= p->n) {
            return fail(p, p->n, "the text ends inside a number");
        }
        if (!is_digit(t[i])) {
            return fail(p, i, "invalid number (a digit must follow '.')");
        }
        for (; i < p->n && is_digit(t[i]); i++) {
            uint64_t d = (uint64_t)(t[i] - '0');
            if (!v->inexact && m <= (UINT64_MAX - d) / 10) {
                m = m * 10 + d;
                exp10--;
            } else if (d != 0) {
                v->inexact = 1;
            }
        }
    }
    if (i < p->n && (t[i] == 'e' || t[i] == 'E')) {
        integer = 0;
        i++;
        int eneg = 0;
        if (i < p->n && (t[i] == '+' || t[i] == '-')) {
            eneg = t[i] == '-';
            i++;
        }
        if (i >= p->n) {
            return fail(p, p->n, "the text ends inside a number");
        }
        if (!is_digit(t[i])) {
            return fail(p, i, "invalid number (a digit must follow the exponent)");
        }
        int e = 0;
        for (; i < p->n && is_digit(t[i]); i++) {
            if (e < 100000) {
                e = e * 10 + (t[i] - '0');
            }
        }
        exp10 += eneg ? -e : e;
    }
    if (i >= p->n) {
        /* a number at the very end may be cut: "12" of "123" */
        return fail(p, p->n, "the text ends inside a number");
    }
    v->mant = m;
    v->exp10 = exp10;
    v->integer = (uint8_t)(integer && !v->inexact);
    v->s = t + start;
    v->len = i - start;
    p->i = i;
    return 0;
}

static int literal(loupe__jp *p, const char *word, loupe__jtype type, loupe__jnode *v) {
    size_t k = strlen(word);
    size_t avail = p->n - p->i;
    if (memcmp(p->t + p->i, word, avail < k ? avail : k) != 0) {
        return fail(p, p->i,
                    "invalid token (a value is a string, a number, an object, an array, "
                    "true, false or null)");
    }
    if (avail < k) {
        return fail(p, p->n, "the text ends inside a literal");
    }
    p->i += k;
    v->type = (uint8_t)type;
    return 0;
}

static int parse_value(loupe__jp *p, uint32_t *out, int depth);

static int parse_container(loupe__jp *p, uint32_t self, int depth, int obj) {
    char close = obj ? '}' : ']';
    p->i++;
    uint32_t last = 0;
    int c = loupe__jp_peek(p);
    if (c == close) {
        p->i++;
        return 0;
    }
    for (;;) {
        const char *key = NULL;
        if (obj) {
            size_t klen;
            c = loupe__jp_peek(p);
            if (c != '"') {
                return fail(p, c < 0 ? p->n : p->i, "string expected (an object member's key)");
            }
            int rc = parse_string(p, &key, &klen);
            if (rc != 0) {
                return rc;
            }
            c = loupe__jp_peek(p);
            if (c != ':') {
                return fail(p, c < 0 ? p->n : p->i, "':' expected");
            }
            p->i++;
        }
        uint32_t child;
        int rc = parse_value(p, &child, depth + 1);
        if (rc != 0) {
            return rc;
        }
        p->nodes[child].key = key;
        if (last == 0) {
            p->nodes[self].first = child;
        } else {
            p->nodes[last].next = child;
        }
        last = child;
        p->nodes[self].count++;
        c = loupe__jp_peek(p);
        if (c == ',') {
            p->i++;
            continue;
        }
        if (c == close) {
            p->i++;
            return 0;
        }
        return fail(p, c < 0 ? p->n : p->i, obj ? "',' or '}' expected" : "',' or ']' expected");
    }
}

static int parse_value(loupe__jp *p, uint32_t *out, int depth) {
    int c = loupe__jp_peek(p);
    if (c < 0) {
        return fail(p, p->n, "a value expected");
    }
    if (depth > LOUPE__JSON_MAX_DEPTH) {
        return fail(p, p->i, "nesting deeper than 1000 levels");
    }
    uint32_t self;
    if (new_node(p, &self) != 0) {
        return LOUPE__JSON_NOMEM;
    }
    *out = self;
    loupe__jnode *v = &p->nodes[self];
    switch (c) {
    case '"': {
        const char *s;
        size_t len;
        int rc = parse_string(p, &s, &len);
        if (rc != 0) {
            return rc;
        }
        v = &p->nodes[self];
        v->type = LOUPE__J_STR;
        v->s = s;
        v->len = len;
        return 0;
    }
    case '{':
    case '[':
        v->type = c == '{' ? LOUPE__J_OBJ : LOUPE__J_ARR;
        return parse_container(p, self, depth, c == '{');
    case 't':
        return literal(p, "true", LOUPE__J_TRUE, v);
    case 'f':
        return literal(p, "false", LOUPE__J_FALSE, v);
    case 'n':
        return literal(p, "null", LOUPE__J_NULL, v);
    default:
        if (c == '-' || is_digit((char)c)) {
            return parse_number(p, v);
        }
        return fail(p, p->i,
                    "invalid token (a value is a string, a number, an object, an array, "
                    "true, false or null)");
    }
}

int loupe__jp_value(loupe__jp *p, uint32_t *root) {
    return parse_value(p, root, 1);
}

const loupe__jnode *loupe__jp_get(const loupe__jp *p, const loupe__jnode *obj, const char *key) {
    const loupe__jnode *hit = NULL;
    if (obj == NULL || obj->type != LOUPE__J_OBJ) {
        return NULL;
    }
    for (uint32_t i = obj->first; i != 0; i = p->nodes[i].next) {
        if (strcmp(p->nodes[i].key, key) == 0) {
            hit = &p->nodes[i];
        }
    }
    return hit;
}

double loupe__jp_double(const loupe__jnode *v) {
    /* Exact fast path (Clinger 1990): a mantissa below 2^53 times an exact power of ten. */
    static const double pow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                   1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                   1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    if (!v->inexact && v->mant < ((uint64_t)1 << 53) && v->exp10 >= -22 && v->exp10 <= 22) {
        double d = (double)v->mant;
        d = v->exp10 < 0 ? d / pow10[-v->exp10] : d * pow10[v->exp10];
        return v->neg ? -d : d;
    }
    /* strtod reads the locale's decimal point: give it the text with that point. */
    char tmp[512];
    size_t n = v->len < sizeof tmp - 1 ? v->len : sizeof tmp - 1;
    memcpy(tmp, v->s, n);
    tmp[n] = 0;
    const char *dp = localeconv()->decimal_point;
    char *dot = strchr(tmp, '.');
    if (dot != NULL && dp != NULL && dp[0] != 0 && dp[0] != '.' && dp[1] == 0) {
        *dot = dp[0];
    }
    return strtod(tmp, NULL);
}

int loupe__jp_i64(const loupe__jnode *v, int64_t *out) {
    if (v == NULL || v->type != LOUPE__J_NUM || !v->integer) {
        return 0;
    }
    if (v->neg) {
        if (v->mant > (uint64_t)INT64_MAX + 1) {
            return 0;
        }
        *out = v->mant == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v->mant;
        return 1;
    }
    if (v->mant > (uint64_t)INT64_MAX) {
        return 0;
    }
    *out = (int64_t)v->mant;
    return 1;
}

int loupe__jp_u64(const loupe__jnode *v, uint64_t *out) {
    if (v == NULL || v->type != LOUPE__J_NUM || !v->integer || (v->neg && v->mant != 0)) {
        return 0;
    }
    *out = v->mant;
    return 1;
}

int loupe__jp_scaled(const loupe__jnode *v, int shift, int64_t limit, int64_t *out) {
    if (v->inexact) {
        return 0;
    }
    int e = v->exp10 + shift;
    uint64_t m = v->mant;
    if (e >= 0) {
        for (; e > 0; e--) {
            if (m > (uint64_t)limit / 10) {
                return 0;
            }
            m *= 10;
        }
    } else if (e < -19) {
        m = 0;
    } else {
        uint64_t div = 1;
        for (; e < 0; e++) {
            div *= 10;
        }
        m = m / div + (m % div >= div / 2 ? 1 : 0);
    }
    if (m >= (uint64_t)limit) {
        return 0;
    }
    *out = v->neg ? -(int64_t)m : (int64_t)m;
    return 1;
}

static int put(char **buf, size_t *len, size_t *cap, const char *s, size_t n) {
    if (loupe__grow((void **)buf, cap, *len + n + 1, 1) != 0) {
        return -1;
    }
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

static int dump_str(const char *s, size_t n, char **buf, size_t *len, size_t *cap) {
    static const char hex[] = "0123456789abcdef";
    int rc = put(buf, len, cap, "\"", 1);
    for (size_t i = 0; i < n && rc == 0; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char e[2] = {'\\', (char)c};
            rc = put(buf, len, cap, e, 2);
        } else if (c < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            rc = put(buf, len, cap, e, 6);
        } else {
            rc = put(buf, len, cap, (const char *)&s[i], 1);
        }
    }
    return rc != 0 ? rc : put(buf, len, cap, "\"", 1);
}

int loupe__jp_dump(const loupe__jp *p, const loupe__jnode *v, char **buf, size_t *len,
                   size_t *cap) {
    switch (v->type) {
    case LOUPE__J_NULL:
        return put(buf, len, cap, "null", 4);
    case LOUPE__J_TRUE:
        return put(buf, len, cap, "true", 4);
    case LOUPE__J_FALSE:
        return put(buf, len, cap, "false", 5);
    case LOUPE__J_NUM:
        return put(buf, len, cap, v->s, v->len);
    case LOUPE__J_STR:
        return dump_str(v->s, v->len, buf, len, cap);
    default: {
        int obj = v->type == LOUPE__J_OBJ;
        if (put(buf, len, cap, obj ? "{" : "[", 1) != 0) {
            return -1;
        }
        for (uint32_t i = v->first; i != 0; i = p->nodes[i].next) {
            const loupe__jnode *c = &p->nodes[i];
            if ((i != v->first && put(buf, len, cap, ",", 1) != 0) ||
                (obj && (dump_str(c->key, strlen(c->key), buf, len, cap) != 0 ||
                         put(buf, len, cap, ":", 1) != 0)) ||
                loupe__jp_dump(p, c, buf, len, cap) != 0) {
                return -1;
            }
        }
        return put(buf, len, cap, obj ? "}" : "]", 1);
    }
    }
}
