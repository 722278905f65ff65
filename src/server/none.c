/* server_none.c: the profiler server and the Perfetto link in a build without them
 * (-DLOUPE_WITH_SERVER=OFF: src/server/ is not built and libmicrohttpd is not needed).
 *
 * Every public function of loupe/server.h is still exported, so the library's ABI is the same in
 * every build shape; each one returns LOUPE_EUNSUPPORTED with a detail that names the build
 * option. The session's one call upward (session/link.h) fails the same way, so a trace started
 * with create_perfetto_link still writes its files and then says why no link was served. */
#include "base/error.h"
#include "session/link.h"

#include <loupe/error.h>
#include <loupe/server.h>

#define NO_SERVER "this build of loupe has no profiler server (LOUPE_WITH_SERVER=OFF)"

int loupe_start_server(int port) {
    (void)port;
    return loupe__err(LOUPE_EUNSUPPORTED, NO_SERVER);
}

int loupe_start_server_ex(const loupe_server_options *options) {
    (void)options;
    return loupe__err(LOUPE_EUNSUPPORTED, NO_SERVER);
}

/* No server can be running, so a stop is the STOPPED transition's error. */
int loupe_stop_server(void) {
    return loupe__err(LOUPE_ENO_SERVER, "no profiler server is running (%s)", NO_SERVER);
}

int loupe_server_port(void) {
    return 0;
}

int loupe_server_grpc_port(void) {
    return 0;
}

int loupe_serve_perfetto_link(const char *path, const loupe_link_options *options) {
    (void)path;
    (void)options;
    return loupe__err(LOUPE_EUNSUPPORTED, "cannot serve a Perfetto link: " NO_SERVER);
}

int loupe__session_serve_link(const char *path, uint32_t timeout_ms) {
    (void)path;
    (void)timeout_ms;
    return loupe__err(LOUPE_EUNSUPPORTED, "cannot serve a Perfetto link: " NO_SERVER);
}
