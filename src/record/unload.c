/* unload.c: libloupe's dlclose(): before a library goes, the names the recorded events point at
 * (static zone names, counter names, function symbols: they live in the library's read-only
 * data) are copied into the region's name table, where the collector finds them at the stop.
 * Without it a zone of an unloaded plugin could only be named "(unloaded)", or worse, read from
 * whatever was mapped at its address later.
 *
 * Interposition: a program linked with libloupe (shared or static) or run under `loupe record`
 * (the preload depends on libloupe) resolves dlclose here before libc; the real one is the next
 * definition (dlsym RTLD_NEXT, glibc's dlfcn.h). A sanitizer's own dlclose interceptor, when it
 * has one, is that next definition and still runs. */
#include "record/names.h"
#include "record/record.h"

#include <dlfcn.h>
#include <loupe/export.h>

typedef int (*dlclose_fn)(void *);

static dlclose_fn real;

static dlclose_fn real_dlclose(void) {
    dlclose_fn f = __atomic_load_n(&real, __ATOMIC_ACQUIRE);
    if (f == NULL) {
        void *sym = dlsym(RTLD_NEXT, "dlclose");
        if (sym != NULL) {
            /* POSIX: a dlsym() result converts to a function pointer; ISO C needs the copy */
            __builtin_memcpy(&f, &sym, sizeof f);
            __atomic_store_n(&real, f, __ATOMIC_RELEASE);
        }
    }
    return f;
}

/* Called at every start. Besides looking the real dlclose up before it is needed, the call
 * links this file into every program that links a static libloupe: without it, a link that
 * finds dlclose in a shared library first (a sanitizer runtime that intercepts it, listed
 * before libc) would never pull this object out of the archive. A program linked with the
 * shared libloupe after such a runtime binds dlclose to the runtime's: its plugins' zones are
 * named "(unloaded)" as before. */
void loupe__unload_prepare(void) {
    (void)real_dlclose();
}

LOUPE_API int dlclose(void *handle) {
    dlclose_fn f = real_dlclose();
    if (f == NULL) {
        return -1; /* no libdl below us: nothing could have been opened */
    }
    loupe__names_before_unload();
    return f(handle);
}
