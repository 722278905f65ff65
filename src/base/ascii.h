/* ascii.h: small character helpers shared by the text parsers (the JSON reader, the server's
 * query string). */
#ifndef LOUPE_BASE_ASCII_H
#define LOUPE_BASE_ASCII_H

/* The value of a hexadecimal digit, or -1. */
static inline int loupe__hexval(char c) {
    if (c >= '0' && c <= '9') {
        return c - '0';
    }
    if (c >= 'a' && c <= 'f') {
        return c - 'a' + 10;
    }
    if (c >= 'A' && c <= 'F') {
        return c - 'A' + 10;
    }
    return -1;
}

#endif
