/* builder.h: building a loupe_model (internal to libloupe; used by the collector and the readers).
 *
 * A builder owns a bump arena (every string, arg array and slice of the model lives in it or in
 * growable arrays it hands to the model) and a string intern table. Strings passed in are copied.
 * loupe__mb_finish() sorts each thread's slices into start order (longer first on ties), computes
 * depths, sorts counters, and hands everything to a loupe_model. Single-threaded.
 * Every function that allocates returns NULL / SIZE_MAX, or the int ones LOUPE_ENOMEM with the
 * detail set (base/error.h), on out-of-memory, and then the builder is "failed": finish returns
 * NULL and abort frees everything.
 */
#ifndef LOUPE_MODEL_BUILDER_H
#define LOUPE_MODEL_BUILDER_H

#include <loupe/model.h>
#include <stddef.h>
#include <stdint.h>

typedef struct loupe__mb loupe__mb;

loupe__mb *loupe__mb_new(void);
/* Frees a builder that was not finished. */
void loupe__mb_abort(loupe__mb *mb);
/* The model; NULL on out-of-memory (the builder is freed either way). */
loupe_model *loupe__mb_finish(loupe__mb *mb);
/* Non-zero once an allocation failed. */
int loupe__mb_failed(const loupe__mb *mb);

/* Interns len bytes (need not be NUL-terminated). The result lives as long as the model. */
const char *loupe__mb_strn(loupe__mb *mb, const char *s, size_t len);
const char *loupe__mb_str(loupe__mb *mb, const char *s);
/* n bytes from the arena, 16-byte aligned, zeroed. */
void *loupe__mb_alloc(loupe__mb *mb, size_t n);

/* The model under construction: set its scalar fields (pid, host, ...) directly. The thread,
 * counter, flow and metadata arrays are managed by the calls below. */
loupe_model *loupe__mb_model(loupe__mb *mb);

/* The index of the process with this pid, added (name "", rank -1) when missing. The first
 * process added is processes[0], the model's own; finish adds one from the model's pid,
 * process_name and host when none was, and fills whichever of the two sides is unset from the
 * other. SIZE_MAX on OOM. */
size_t loupe__mb_process(loupe__mb *mb, uint64_t pid);
/* Appends a process that loupe__mb_process() will not find (a second process with a pid
 * already seen: two hosts' pid 1234). SIZE_MAX on OOM. */
size_t loupe__mb_process_add(loupe__mb *mb, uint64_t pid);
/* Valid until the next process is added. Set its strings with loupe__mb_str(). */
loupe_model_process *loupe__mb_process_at(loupe__mb *mb, size_t process);

/* The index of the thread with this tid in process 0, added (name "") when missing (a hash: O(1)
 * per call). SIZE_MAX on OOM. */
size_t loupe__mb_thread(loupe__mb *mb, uint64_t tid);
/* The same in any process: the key is (process, tid). */
size_t loupe__mb_thread_in(loupe__mb *mb, size_t process, uint64_t tid);
/* Appends a thread with this tid, which loupe__mb_thread() will not find (and whose tid the
 * caller may change): for readers that key tracks themselves, where a GPU track and a host
 * thread may share a tid, and for the collector, whose threads are registry entries (a tid the
 * kernel reused is another thread). SIZE_MAX on OOM. */
size_t loupe__mb_thread_add(loupe__mb *mb, uint64_t tid);
/* Sets a thread's name (interned). */
void loupe__mb_thread_name(loupe__mb *mb, size_t thread, const char *name);
loupe_model_thread *loupe__mb_thread_at(loupe__mb *mb, size_t thread);

/* Appends a zeroed slice (name "", category 0 = none) to a thread; returns its index, SIZE_MAX on
 * OOM. Pointers into a thread's slices are valid only until the next append to that thread. */
size_t loupe__mb_slice(loupe__mb *mb, size_t thread);
loupe_slice *loupe__mb_slice_at(loupe__mb *mb, size_t thread, size_t slice);
/* Sets the args of a slice (copied into the arena; keys and string values interned). */
int loupe__mb_slice_args(loupe__mb *mb, size_t thread, size_t slice, const loupe_arg *args,
                         uint32_t n);
/* Appends an arg to a slice (arrays grow by copying into the arena: fine for a few args). */
int loupe__mb_slice_add_arg(loupe__mb *mb, size_t thread, size_t slice, const loupe_arg *arg);

/* The args of a slice under construction (*n entries; NULL when none): the caller may change
 * them in place (a value replaced; keys and string values must be interned). Valid until the
 * next args call on that slice. */
loupe_arg *loupe__mb_slice_args_at(loupe__mb *mb, size_t thread, size_t slice, uint32_t *n);
/* The index of a slice category in the model's categories (interned; "" or NULL: 0, none).
 * 0 as well past 65535 distinct categories (a warning says so once) or on OOM (the builder is
 * then failed). O(1): a hash on the interned pointer, and the last one is remembered. */
uint16_t loupe__mb_category(loupe__mb *mb, const char *category);
/* Sets the category of a slice (loupe__mb_category()). */
void loupe__mb_slice_category(loupe__mb *mb, size_t thread, size_t slice, const char *category);

int loupe__mb_instant(loupe__mb *mb, size_t thread, uint64_t ts_ns, const char *name,
                      const loupe_arg *args, uint32_t n);
int loupe__mb_counter(loupe__mb *mb, const loupe_counter_sample *sample);
/* Flows are recorded by (thread, slice) before sorting; finish remaps the indices. */
int loupe__mb_flow(loupe__mb *mb, uint64_t id, size_t from_thread, size_t from_slice,
                   size_t to_thread, size_t to_slice);
/* Samples. A frame is interned (equal frames: one index), so is a stack node (parent, frame);
 * parent UINT32_MAX for the outermost frame. UINT32_MAX on OOM or past 2^32 - 1 entries. */
uint32_t loupe__mb_frame(loupe__mb *mb, const loupe_frame *frame);
/* An unknown frame or parent index gives UINT32_MAX without failing the builder. */
uint32_t loupe__mb_stack(loupe__mb *mb, uint32_t parent, uint32_t frame);
/* A stack from frames given innermost first (frames[0] = where the sample hit): the leaf node,
 * UINT32_MAX when n == 0 or on OOM. */
uint32_t loupe__mb_stack_of(loupe__mb *mb, const uint32_t *frames, size_t n);
int loupe__mb_sample(loupe__mb *mb, size_t thread, uint64_t ts_ns, uint32_t stack, uint32_t cpu);
/* An off-CPU interval of a thread, kind LOUPE_OFF_CPU_UNKNOWN (finish sorts them and joins
 * those of one kind that overlap or touch). */
int loupe__mb_off_cpu(loupe__mb *mb, size_t thread, uint64_t start_ns, uint64_t dur_ns);
/* The same with its kind (a loupe_off_cpu_kind; a value past LOUPE_OFF_CPU_PREEMPTED is kept as
 * LOUPE_OFF_CPU_UNKNOWN: a reader never invents a kind). */
int loupe__mb_off_cpu_kind(loupe__mb *mb, size_t thread, uint64_t start_ns, uint64_t dur_ns,
                           unsigned kind);

/* Sets (or replaces) a metadata pair (a hash on the interned key: O(1) per call). */
int loupe__mb_metadata(loupe__mb *mb, const char *key, const char *value);

/* The most warnings a model keeps; later ones are counted in a last "and N more warnings". */
#define LOUPE__MB_MAX_WARNINGS 64
/* Appends a warning (printf format, cut at 511 bytes) to the model's warnings: what a reader
 * dropped or repaired, and where. Returns 0 or LOUPE_ENOMEM. */
int loupe__mb_warn(loupe__mb *mb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Appends a warning to a finished model (a reader's caller that learnt something after the
 * model was built: a gzip stream cut short). Returns 0 or LOUPE_ENOMEM. */
int loupe__model_warn(loupe_model *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
