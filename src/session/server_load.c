/* server_load.c: the profiler server's calls in libloupe.so, which load the server itself from
 * libloupe_server.so.0 at the first call that needs it (dlopen, RTLD_LOCAL) and then call it.
 *
 * Why: the server links libmicrohttpd, jansson, gRPC's C core and protobuf-c, and through gRPC
 * about 60 more libraries (Abseil, OpenSSL, c-ares, re2, ...). Linked into libloupe.so, they were
 * loaded into every program that links loupe and into every process `loupe record` preloads it
 * into: 71 libraries and about 17 ms of loader work per exec, whether a server ever started or
 * not (docs/performance.md, "Cost per process"). Now libloupe.so needs libc, zlib, libelf and
 * libdw only, and the server's libraries come with the server.
 *
 * Where: libloupe_server.so.0 in the directory libloupe.so was loaded from (dladdr: the build
 * tree and an installed prefix alike), else wherever the dynamic loader's search finds it. Its
 * entry points are the public calls under the names loupe__srv_* (CMakeLists.txt renames them
 * when it compiles src/server/ for that library); libloupe.a links the server directly.
 *
 * When it cannot be loaded, a start returns LOUPE_EUNSUPPORTED with the loader's reason, and the
 * calls that only ask (the ports) or stop answer as when no server runs. Thread-safety: the load
 * happens once (pthread_once), and a fork waits for a load in progress (load_lock); every call
 * may come from any thread. */
#include "base/error.h"
#include "session/link.h"

#include <loupe/error.h>
#include <loupe/server.h>

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define SERVER_SONAME "libloupe_server.so.0"

static struct {
    int (*start)(int);
    int (*start_ex)(const loupe_server_options *);
    int (*stop)(void);
    int (*port)(void);
    int (*grpc_port)(void);
    int (*link)(const char *, const loupe_link_options *);
    int (*session_link)(const char *, uint32_t);
} srv;
static int loaded; /* 1 once every entry point was found */
static char why[768];
static pthread_once_t once = PTHREAD_ONCE_INIT;
/* Held while the library is being loaded, and by fork()'s prepare handler: a fork never lands
 * inside the dlopen of another thread, whose child would find the library in its link map half
 * relocated (a helper's children crashed in their own first start, 5-26 of 40, when another
 * thread's first start was loading it: pthread_once@plt jumped to an unrelocated address). */
static pthread_mutex_t load_lock = PTHREAD_MUTEX_INITIALIZER;

static void fork_prepare(void) {
    pthread_mutex_lock(&load_lock);
}

static void fork_after(void) {
    pthread_mutex_unlock(&load_lock);
}

__attribute__((constructor)) static void server_load_init(void) {
    (void)pthread_atfork(fork_prepare, fork_after, fork_after);
}

static void *open_beside_self(void) {
    Dl_info di;
    if (dladdr((const void *)why, &di) != 0 && di.dli_fname != NULL) { /* an address in us */
        const char *slash = strrchr(di.dli_fname, '/');
        if (slash != NULL) {
            char path[PATH_MAX];
            int n = snprintf(path, sizeof path, "%.*s/%s", (int)(slash - di.dli_fname),
                             di.dli_fname, SERVER_SONAME);
            if (n > 0 && (size_t)n < sizeof path) {
                void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
                if (h != NULL) {
                    return h;
                }
            }
        }
    }
    return dlopen(SERVER_SONAME, RTLD_NOW | RTLD_LOCAL);
}

static void load_locked(void);

static void load(void) {
    pthread_mutex_lock(&load_lock);
    load_locked();
    pthread_mutex_unlock(&load_lock);
}

static void load_locked(void) {
    void *h = open_beside_self();
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(why, sizeof why,
                 "cannot load the profiler server: %s (it is installed beside libloupe.so.0)",
                 e != NULL ? e : SERVER_SONAME " not found");
        return;
    }
    static const char *const names[] = {
        "loupe__srv_start_server",      "loupe__srv_start_server_ex",
        "loupe__srv_stop_server",       "loupe__srv_server_port",
        "loupe__srv_server_grpc_port",  "loupe__srv_serve_perfetto_link",
        "loupe__srv_session_serve_link"};
    void *f[sizeof names / sizeof names[0]];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        f[i] = dlsym(h, names[i]);
        if (f[i] == NULL) {
            snprintf(why, sizeof why,
                     "cannot load the profiler server: " SERVER_SONAME
                     " has no %s (another version of loupe's?)",
                     names[i]);
            return; /* the handle stays open: harmless, and the reason stays true */
        }
    }
    /* POSIX's dlsym gives object pointers; the conversion to function pointers is the
     * documented way (dlsym(3), "the ISO C standard does not require..."). */
    memcpy(&srv.start, &f[0], sizeof f[0]);
    memcpy(&srv.start_ex, &f[1], sizeof f[1]);
    memcpy(&srv.stop, &f[2], sizeof f[2]);
    memcpy(&srv.port, &f[3], sizeof f[3]);
    memcpy(&srv.grpc_port, &f[4], sizeof f[4]);
    memcpy(&srv.link, &f[5], sizeof f[5]);
    memcpy(&srv.session_link, &f[6], sizeof f[6]);
    __atomic_store_n(&loaded, 1, __ATOMIC_RELEASE);
}

/* Loads the server when needed (need != 0); returns whether it is loaded. */
static int have(int need) {
    if (need) {
        pthread_once(&once, load);
    }
    return __atomic_load_n(&loaded, __ATOMIC_ACQUIRE);
}

int loupe_start_server(int port) {
    return have(1) ? srv.start(port) : loupe__err(LOUPE_EUNSUPPORTED, "%s", why);
}

int loupe_start_server_ex(const loupe_server_options *options) {
    return have(1) ? srv.start_ex(options) : loupe__err(LOUPE_EUNSUPPORTED, "%s", why);
}

/* No server was loaded, so none runs: the STOPPED transition's error, as the server gives it. */
int loupe_stop_server(void) {
    return have(0) ? srv.stop()
                   : loupe__err(LOUPE_ENO_SERVER, "loupe_stop_server: the server is STOPPED (no "
                                                  "loupe_start_server() is active)");
}

int loupe_server_port(void) {
    return have(0) ? srv.port() : 0;
}

int loupe_server_grpc_port(void) {
    return have(0) ? srv.grpc_port() : 0;
}

int loupe_serve_perfetto_link(const char *path, const loupe_link_options *options) {
    return have(1) ? srv.link(path, options)
                   : loupe__err(LOUPE_EUNSUPPORTED, "cannot serve a Perfetto link: %s", why);
}

int loupe__session_serve_link(const char *path, uint32_t timeout_ms) {
    return have(1) ? srv.session_link(path, timeout_ms)
                   : loupe__err(LOUPE_EUNSUPPORTED, "cannot serve a Perfetto link: %s", why);
}
