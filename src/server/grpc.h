/* grpc.h: the gRPC tensorflow.ProfilerService beside the HTTP server (grpc.c; grpc_none.c in a
 * build without gRPC). server.c starts and stops it inside its own start and stop, under its
 * lock, so one loupe_start_server_ex() starts both and one loupe_stop_server() stops both. */
#ifndef LOUPE_SERVER_GRPC_H
#define LOUPE_SERVER_GRPC_H

#include <stdint.h>

/* Starts the service with the server's token ("" = none) and duration limit, and sets
 * *port_out. Where: on address:port (loupe_server_options.grpc_port 1..65535, or -1: a free
 * port) when fed_port is 0; with fed_port, the HTTP port, on no port of its own: server.c's
 * router (router.h) then hands it the connections that open with HTTP/2's preface
 * (loupe__grpc_add_fd), and *port_out is fed_port. Returns 0, LOUPE_EUNSUPPORTED (a build without
 * gRPC), LOUPE_EIO (cannot bind or start: the detail names the address and port), LOUPE_ENOMEM.
 * On error nothing runs. Caller: server.c, under its start/stop lock. */
int loupe__grpc_start(const char *address, int port, const char *token, uint32_t max_ms,
                      int fed_port, int *port_out);

/* 1 when this build has the gRPC service (grpc.c) and it can start in this process; 0 in a build
 * without it (grpc_none.c) and in a child forked from a process where gRPC ran (its core does not
 * survive fork(): loupe__grpc_start() refuses there, and the default server serves HTTP alone). */
int loupe__grpc_available(void);

/* Hands a connected socket to the running service (a connection the router saw open with
 * HTTP/2's preface, which is still unread in it); the service owns it then and closes it, also
 * when it is not running. Thread-safety: the router's thread, between start and stop_begin. */
void loupe__grpc_add_fd(int fd);

/* Stopping in two halves so that the HTTP server's grace period and gRPC's overlap:
 * stop_begin refuses new calls and ends a capture in progress (its caller gets UNAVAILABLE);
 * stop_end waits (about 2 s at most) for the calls in flight and frees everything. Both do
 * nothing when the service is not running. */
void loupe__grpc_stop_begin(void);
void loupe__grpc_stop_end(void);

#endif
