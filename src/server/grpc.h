/* grpc.h: the gRPC tensorflow.ProfilerService beside the HTTP server (grpc.c; grpc_none.c in a
 * build without gRPC). server.c starts and stops it inside its own start and stop, under its
 * lock, so one loupe_start_server_ex() starts both and one loupe_stop_server() stops both. */
#ifndef LOUPE_SERVER_GRPC_H
#define LOUPE_SERVER_GRPC_H

#include <stdint.h>

/* Starts the service on address:port (loupe_server_options.grpc_port: 0 none, -1 a free port)
 * with the server's token ("" = none) and duration limit, and sets *port_out (0 when none).
 * Returns 0, LOUPE_EINVALID (port out of range), LOUPE_EUNSUPPORTED (a port in a build without
 * gRPC), LOUPE_EIO (cannot bind or start: the detail names the address and port), LOUPE_ENOMEM.
 * On error nothing runs. Caller: server.c, under its start/stop lock. */
int loupe__grpc_start(const char *address, int port, const char *token, uint32_t max_ms,
                      int *port_out);

/* Stopping in two halves so that the HTTP server's grace period and gRPC's overlap:
 * stop_begin refuses new calls and ends a capture in progress (its caller gets UNAVAILABLE);
 * stop_end waits (about 2 s at most) for the calls in flight and frees everything. Both do
 * nothing when the service is not running. */
void loupe__grpc_stop_begin(void);
void loupe__grpc_stop_end(void);

#endif
