/* readers.h: the readers' internal entry points (for the fuzz targets and the CLI-free tests). */
#ifndef LOUPE_IMPORT_READERS_H
#define LOUPE_IMPORT_READERS_H

#include <loupe/model.h>
#include <stddef.h>

/* Reads Chrome JSON text (not gzipped) of n bytes into a model. Takes ownership of buf (malloc'd;
 * freed before return). name is used in error details. Returns 0 or a LOUPE_E* code. */
int loupe__chrome_json_read_mem(const char *name, char *buf, size_t n, loupe_model **out);

#endif
