/* fs.h: file-system and host helpers (fs.c). */
#ifndef LOUPE_BASE_FS_H
#define LOUPE_BASE_FS_H

#include <loupe/export.h>

#include <stddef.h>

/* Creates a directory and its parents (mode 0777 & umask); an existing one must be writable.
 * 0, or LOUPE_EIO with the detail "cannot create <path>: <strerror> (errno N)". */
LOUPE_API int loupe__mkdirs(const char *path);

/* The host name as jax.profiler writes it (':' and '/' replaced by '_'); "localhost" when
 * unknown. */
LOUPE_API void loupe__hostname(char *buf, size_t size);

#endif
