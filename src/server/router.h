/* router.h: one listening port for the HTTP API and the gRPC ProfilerService (router.c), as
 * jax.profiler.start_server(port) serves its gRPC on the one port a user names. server.c starts it
 * and stops it under its start/stop lock. */
#ifndef LOUPE_SERVER_ROUTER_H
#define LOUPE_SERVER_ROUTER_H

#include <microhttpd.h>

/* How long an accepted connection may take to send the bytes that say its protocol (HTTP/2's
 * 24-byte connection preface, RFC 9113 section 3.4, or anything else: HTTP/1.1), in ms; and how
 * many connections may be waiting to say it at once (the longest-waiting one is closed to make
 * room for a new one). */
#define LOUPE__ROUTE_WAIT_MS 5000
#define LOUPE__ROUTE_PENDING_MAX 64

/* Starts the thread that accepts on listen_fd (taken over: closed by the stop) and hands each
 * connection to http (MHD_add_connection) or, when it opens with the HTTP/2 preface, to the gRPC
 * service (loupe__grpc_add_fd). Returns 0, or LOUPE_EIO (no thread, no eventfd: nothing runs and
 * listen_fd is still the caller's). */
int loupe__router_start(int listen_fd, struct MHD_Daemon *http);

/* Stops accepting: joins the thread, closes the listening socket and every connection not yet
 * handed over. Nothing when none runs. */
void loupe__router_stop(void);

/* In a fork child (the thread is the parent's): closes the child's copies of the listening socket,
 * the wake-up eventfd and the waiting connections, so that the parent's stop frees the port. */
void loupe__router_atfork_child(void);

#endif
