/* readers.h: the readers' internal entry points (for the fuzz targets and the CLI-free tests). */
#ifndef LOUPE_IMPORT_READERS_H
#define LOUPE_IMPORT_READERS_H

#include <loupe/model.h>
#include <stddef.h>

/* Reads Chrome JSON text (not gzipped) of n bytes into a model. Takes ownership of buf (malloc'd;
 * freed before return). name is used in error details. Returns 0 or a LOUPE_E* code. */
int loupe__chrome_json_read_mem(const char *name, char *buf, size_t n, loupe_model **out);

/* Where more text comes from: up to cap bytes into buf, *got of them (0 at the end). Returns 0
 * or a LOUPE_E* code (with the detail set). */
typedef int (*loupe__read_fn)(void *ctx, char *buf, size_t cap, size_t *got);
/* Reads Chrome JSON whose first n bytes are in buf (malloc'd, cap > n bytes; taken over and
 * freed before return) and whose rest comes from more (NULL: there is none), in a window of a
 * few MiB (chrome_json.c). Returns 0 or a LOUPE_E* code. */
int loupe__chrome_json_read_stream(const char *name, char *buf, size_t n, size_t cap,
                                   loupe__read_fn more, void *ctx, loupe_model **out);

/* Reads an XSpace (XPlane protobuf) of n bytes into a model (xplane.c). Takes ownership of buf.
 * Returns 0 or a LOUPE_E* code (LOUPE_EFORMAT names the byte offset). */
int loupe__xplane_read_mem(const char *name, char *buf, size_t n, loupe_model **out);
/* Non-zero when the bytes look like an XSpace (cheap: the first plane's first 4 KiB). */
int loupe__xplane_sniff(const char *buf, size_t n);

/* Reads a Perfetto protobuf trace (.pftrace) of n bytes into a model (perfetto_proto.c). Takes
 * ownership of buf. Returns 0 or a LOUPE_E* code (LOUPE_EFORMAT names the byte offset). */
int loupe__perfetto_proto_read_mem(const char *name, char *buf, size_t n, loupe_model **out);
/* Non-zero when the bytes look like a Perfetto Trace: the top-level fields of the first 64 KiB
 * are all TracePackets (tag 0x0A) whose fields parse. Sniff XPlane first (an XSpace also starts
 * with 0x0A). */
int loupe__perfetto_proto_sniff(const char *buf, size_t n);
/* Reads a .pftrace file (perfetto_proto.c). */
int loupe__perfetto_proto_read_file(const char *path, loupe_model **out);

/* The reader for these bytes, chosen by content (read.c): XPlane, then Perfetto protobuf, else
 * Chrome JSON. Takes ownership of buf (malloc'd, NUL-terminated at n, with 16
 * spare bytes after it, as loupe_trace_read() reads files). Returns 0 or a LOUPE_E* code. */
int loupe__trace_read_mem(const char *name, char *buf, size_t n, loupe_model **out);

/* Reads a run directory that several processes wrote (<prefix>.<pid> files: loupe record
 * following a process tree) into one merged model (run.c); a directory without such files is
 * LOUPE_EIO (EISDIR), as before. */
int loupe__read_run(const char *dir, loupe_model **out);

#endif
