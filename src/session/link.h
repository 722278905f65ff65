/* link.h: the one call the session makes upward, into the server floor: serving a written trace
 * once to ui.perfetto.dev (create_perfetto_link). Declared here, defined by src/server/link.c, so
 * that the session does not include the server; a build without the server (LOUPE_WITH_SERVER
 * OFF) has no definition and the session refuses create_perfetto_link at its start. */
#ifndef LOUPE_SESSION_LINK_H
#define LOUPE_SESSION_LINK_H

#include <loupe/export.h>

#include <stdint.h>

/* Serves path once on 127.0.0.1:9001 and waits up to timeout_ms (0 = the default) for the UI to
 * fetch it: loupe_serve_perfetto_link() (loupe/server.h). 0 or a LOUPE_E* code, detail set. */
LOUPE_API int loupe__session_serve_link(const char *path, uint32_t timeout_ms);

#endif
