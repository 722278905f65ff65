/* testutil.h: helpers shared by the cmocka tests (include after cmocka.h's prerequisites). */
#ifndef LOUPE_TESTUTIL_H
#define LOUPE_TESTUTIL_H

#include <jansson.h>
#include <stddef.h>

/* A fresh empty directory under $TMPDIR (or /tmp); the returned string is malloc'd. */
char *tu_tmpdir(const char *tag);
/* Removes a directory tree (rm -rf). */
void tu_rmtree(const char *path);
/* Reads a whole file, gunzipping when it starts with 1f 8b. malloc'd, NUL-terminated; *len set. */
char *tu_read_file(const char *path, size_t *len);
/* Parses a (possibly gzipped) JSON file; fails the test on error. */
json_t *tu_load_json(const char *path);
/* Runs a shell command; returns its exit status, its stdout+stderr in *out (malloc'd) if out. */
int tu_run(const char *cmd, char **out);
/* Writes text to a file; fails the test on error. */
void tu_write_file(const char *path, const char *text);
/* cmocka setup/teardown pair: tu_setup makes a fresh tu_dir (named after the test program);
 * tu_teardown stops any session left active, removes tu_dir and frees it. */
extern char *tu_dir;
int tu_setup(void **state);
int tu_teardown(void **state);

/* Path of the loupe CLI (env LOUPE_CLI, set by CTest). */
const char *tu_cli(void);

#include <loupe/model.h>
/* Reads a trace file with loupe_trace_read(); fails the test (with the detail) on error. */
loupe_model *tu_read_back(const char *path);
/* Asserts two typed argument arrays are equal (doubles bit for bit). */
void tu_args_equal(const loupe_arg *a, const loupe_arg *b, size_t n);
/* Slice `slice` of track th: its argument count / its arguments (loupe_slice_args()). */
size_t tu_nargs(const loupe_model_thread *th, size_t slice);
const loupe_arg *tu_args(const loupe_model_thread *th, size_t slice);
/* Asserts two models are equal: scalars, every track (matched by tid, kind and device), slices,
 * instants, counters, and flows (by id and endpoints). */
void tu_models_equal(const loupe_model *a, const loupe_model *b);

/* The value of metadata key in m, or dflt when m has no such key. */
const char *tu_meta(const loupe_model *m, const char *key, const char *dflt);
/* 1 when this process may open a task-clock perf event on itself (what loupe's sampler needs),
 * else 0: a test of sampling skips then. */
int tu_perf_allowed(void);

#endif
