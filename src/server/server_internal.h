/* server_internal.h: what server.c shares with link.c. */
#ifndef LOUPE_SERVER_INTERNAL_H
#define LOUPE_SERVER_INTERNAL_H

#include <loupe/model.h>
#include <stddef.h>

/* Writes m in the registry's format of that index (query.h) into a malloc'd buffer (gzipped
 * when the format is).
 * 0, or LOUPE_EUNSUPPORTED (no writer in this build), LOUPE_ENOMEM, a writer's code. */
int loupe__model_to_mem(const loupe_model *m, size_t format, char **out, size_t *out_len);

/* "IDLE", "TRACING" or "CAPTURING" for a capture.h state. */
const char *loupe__state_name(int state);

#endif
