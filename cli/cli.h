/* cli.h: the verbs of the loupe command, one file each (cli/<verb>.c). Each takes the arguments
 * after the verb (argv[0] is the verb) and returns the process exit status. */
#ifndef LOUPE_CLI_H
#define LOUPE_CLI_H

int loupe_cmd_record(int argc, char **argv);
int loupe_cmd_summary(int argc, char **argv);
int loupe_cmd_convert(int argc, char **argv);
int loupe_cmd_diff(int argc, char **argv);
int loupe_cmd_gpu_decode(int argc, char **argv);
int loupe_cmd_gpu_measure(int argc, char **argv);
int loupe_cmd_capture(int argc, char **argv);
int loupe_cmd_view(int argc, char **argv);
int loupe_cmd_recover(int argc, char **argv);

/* MPI (cli/record_mpi.c, docs/mpi.md): the rank and size the launcher gave this process (1),
 * or 0 when not started by an MPI launcher. */
int loupe_cli_mpi_rank(int *rank, int *size);
/* In `loupe record`'s child, before exec: under a launcher, the job's shared run directory and
 * the rank's file prefix (LOUPE_RECORD_RUN_DIR, LOUPE_RECORD_FILE_PREFIX); when prog links libmpi
 * (mode 0) or always (mode 1), libloupe_mpi.so (beside preload) appended to LD_PRELOAD; mode -1
 * never preloads it. */
void loupe_cli_mpi_child_setup(const char *abs_log, const char *preload, const char *prog,
                               int mode);

/* `loupe summary PATH --by-rank` (cli/summary_ranks.c): PATH a run directory with rank files or
 * a log_dir; top rows (0 = all). Returns the exit status. */
#include <stddef.h>
int loupe_cli_summary_by_rank(const char *path, size_t top);

/* True when stderr is a terminal (progress is shown only then). */
int loupe_cli_tty(void);
/* A progress meter for the reads that follow, on stderr when it is a terminal (loupe_cli_tty()):
 * one line, "loupe VERB: reading F:  45% (120.3 of 267.0 MiB)" (then "decoding F" for an
 * XPlane), redrawn at most 5 times a second, shown only once the read has taken 1 s
 * (LOUPE_PROGRESS_AFTER_MS sets that, in ms), and cleared by loupe_cli_progress_end(). Nothing
 * when stderr is not a terminal. verb: a static string. */
void loupe_cli_progress_begin(const char *verb);
void loupe_cli_progress_end(void);

/* Helpers shared by the verbs (cli/util.c). */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
/* A duration with an adaptive unit: "812 ns", "1.234 µs", "5.000 ms", "2.500 s". */
void loupe_cli_fmt_dur(char *buf, size_t size, uint64_t ns);
/* The reader's warnings about m (loupe_model.warnings: what it dropped or repaired in a cut,
 * unterminated or hostile input), each on stderr as "loupe VERB: warning: [LABEL: ]TEXT" (label
 * NULL: none), and the runs loupe_trace_find() skipped on the way. */
struct loupe_model;
void loupe_cli_reader_warnings(const char *verb, const char *label, const struct loupe_model *m);
/* Writes m's sample profile of module (NULL: the program; loupe_fdo_profile) to path, whole or
 * not at all (path.tmp, then rename); fills *st. 0, or the LOUPE_E* code after one line on
 * stderr ("loupe <verb>: <path>: <what>"). */
struct loupe_fdo_stats;
int loupe_cli_write_fdo(const char *verb, const struct loupe_model *m, const char *module,
                        const char *path, struct loupe_fdo_stats *st);
/* One line on stderr: what the profile at path covers and what was left out. */
void loupe_cli_fdo_report(const char *verb, const char *path, const struct loupe_fdo_stats *st);
/* The value of m's metadata key (the first of that key), or NULL; owned by m. */
const char *loupe_cli_meta(const struct loupe_model *m, const char *key);
/* v with thousands separators ("1,234,567") in buf; returns buf. */
const char *loupe_cli_group(uint64_t v, char *buf, size_t size);
/* A JSON string; jansson wants valid UTF-8 (what the readers give): other bytes become '?'. */
json_t *loupe_cli_jstr(const char *s);
/* A uint64 as a JSON integer, saturated at INT64_MAX. */
json_int_t loupe_cli_jint(uint64_t v);

/* The names of the registry's formats (loupe/writer.h) that keep accepts, in its order, joined
 * as "a, b or c" (last is " or " / " and "), into buf (size bytes, always terminated). */
#include <loupe/writer.h>
void loupe_cli_format_names(char *buf, size_t size, int (*keep)(const loupe_format_desc *d),
                            const char *last);

/* /proc/<pid>/stat into buf (size bytes, terminated); returns the text after the command's
 * closing ')' ("pid (comm) state ...": comm may itself hold spaces and parentheses, so the
 * fields go on after its last ')', proc_pid_stat(5)), which starts with " <state>"; NULL when it
 * cannot be read or has no ") ". */
const char *loupe_cli_proc_stat(long pid, char *buf, size_t size);

#endif
