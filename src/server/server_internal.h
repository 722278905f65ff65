/* server_internal.h: what server.c shares with link.c. */
#ifndef LOUPE_SERVER_INTERNAL_H
#define LOUPE_SERVER_INTERNAL_H

#include <loupe/model.h>
#include <stddef.h>

/* Makes a listening TCP socket on a numeric address and port (0: a free one), SO_REUSEADDR when
 * reuse. Returns 0 with *fd_out and the bound *port_out, or LOUPE_EINVALID / LOUPE_EIO with the
 * detail prefixed by what (the address, port and errno; "in use" said plainly). */
int loupe__listen_socket(const char *address, int port, int reuse, int *fd_out, int *port_out,
                         const char *what);

/* Writes m in a loupe__qformat (query.h) into a malloc'd buffer (gzipped for JSON).
 * 0, or LOUPE_EUNSUPPORTED (no writer in this build), LOUPE_ENOMEM, a writer's code. */
int loupe__model_to_mem(const loupe_model *m, int format, char **out, size_t *out_len);

/* "IDLE", "TRACING" or "CAPTURING" for a capture.h state. */
const char *loupe__state_name(int state);

#endif
