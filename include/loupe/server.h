/* loupe/server.h: the profiler server (capture the next N ms of a running process over HTTP, and
 * over gRPC as jax.profiler.start_server() does) and the Perfetto link (hand a trace file to
 * ui.perfetto.dev). Protocols: docs/server.md.
 *
 * Linked with libloupe.so, these calls live in libloupe_server.so.0 (installed beside it), which
 * libloupe loads at the first start or link (dlopen): a program that starts no server loads none
 * of the server's libraries (libmicrohttpd, jansson, gRPC, protobuf-c). libloupe.a has them in it.
 *
 * Server state machine (one server per process):
 *
 *            loupe_start_server() / loupe_start_server_ex()         loupe_stop_server()
 *   STOPPED ─────────────────────────────────────────► RUNNING ─────────────────────► STOPPED
 *      │  start while RUNNING: LOUPE_ESERVER_RUNNING (the detail names the running port)
 *      │  stop while STOPPED:  LOUPE_ENO_SERVER
 *      └─ a failed start (port in use, bad address, ...) stays STOPPED and returns the error
 *
 * The server lives until loupe_stop_server() (or the process ends): there is no handle to lose.
 * It answers on its own threads (libmicrohttpd, one thread per connection, at most 64
 * connections; the gRPC service, when asked for, on one thread of its own); the traced program's
 * threads never wait on it. A capture runs a session of its
 * own (the same one loupe_start_trace() runs): while a local trace runs a capture gets 409 and the
 * local trace is not disturbed; while a capture runs, loupe_start_trace() returns
 * LOUPE_EALREADY_STARTED and loupe_stop_trace() LOUPE_ENOT_STARTED (the capture ends by itself).
 *
 * fork(): a child forked while the server runs has no server (its state is STOPPED); it may start
 * one of its own.
 */
#ifndef LOUPE_SERVER_H
#define LOUPE_SERVER_H

#include <loupe/error.h>
#include <loupe/export.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The longest capture a server allows by default: 60 000 ms. */
#define LOUPE_SERVER_DEFAULT_MAX_DURATION_MS 60000u

/** loupe_server_options.grpc_port: the gRPC service on the HTTP port (the zero default), as
 * jax.profiler.start_server(port) serves it; HTTP alone in a build without gRPC. */
#define LOUPE_SERVER_GRPC_SAME_PORT 0
/** loupe_server_options.grpc_port: the gRPC service on a free port of its own
 * (loupe_server_grpc_port()). */
#define LOUPE_SERVER_GRPC_ANY_PORT (-1)
/** loupe_server_options.grpc_port: no gRPC service, HTTP alone (0.4's default, which was 0). */
#define LOUPE_SERVER_GRPC_OFF (-2)

/** Options of loupe_start_server_ex(). Zero-initialise, then set what you need.
 *
 * One port, two protocols: `port` serves loupe's HTTP API (GET /v1/status, /v1/profile,
 * /v1/clock: curl, `loupe capture`) and, by default, the gRPC `tensorflow.ProfilerService` that
 * jax.profiler.start_server(port) serves (jax.collect_profile, XProf's "Capture Profile",
 * `loupe capture grpc://`): each connection goes to the protocol its first bytes say (HTTP/2's
 * connection preface: gRPC; anything else: HTTP/1.1), so loupe_start_server(9999) answers
 * `python -m jax.collect_profile 9999 ...` as jax's own server does. A connection that says
 * nothing is closed after 5 s and never holds the others up. `grpc_port` can still give gRPC a
 * port of its own, or turn it off.
 *
 * A capture (either protocol) also samples every thread's CPU at 999 Hz (as `loupe record`;
 * HTTP's sample_hz= sets the rate, 0 turns it off; host tracer level 0 records nothing) where
 * the process may use perf_event_open, and goes on without samples where it may not (the trace's
 * loupe_sampling metadata says why). Protocol details: docs/server.md. */
typedef struct loupe_server_options {
    /** HTTP port, 0..65535; 0 picks a free port (loupe_server_port() reports it). */
    int port;
    /** Numeric IPv4 or IPv6 address to listen on; NULL = "127.0.0.1" (loopback only).
     * "0.0.0.0" listens on every interface: set a token then. Copied. */
    const char *bind_address;
    /** Non-NULL and non-empty: every request must carry `Authorization: Bearer <token>`, else
     * 401. Copied. Up to 255 bytes. */
    const char *token;
    /** The longest capture allowed, in ms; 0 = LOUPE_SERVER_DEFAULT_MAX_DURATION_MS. A request
     * for more gets 400. */
    uint32_t max_duration_ms;
    /** The gRPC ProfilerService's port, on the same bind_address: LOUPE_SERVER_GRPC_SAME_PORT (0,
     * the default) the HTTP port, 1..65535 a port of its own, LOUPE_SERVER_GRPC_ANY_PORT (-1) a
     * free one, LOUPE_SERVER_GRPC_OFF (-2) none.
     * Its Profile writes <repository_root>/<session_id>/<host_name>.xplane.pb on this machine
     * (as jax's server does), or returns the XSpace when the request sets emit_xspace. With a
     * token, calls need the metadata `authorization: Bearer <token>` (jax's clients cannot send
     * it). max_duration_ms applies. A port of its own needs a build with the gRPC service
     * (LOUPE_WITH_GRPC); the default then serves HTTP alone. */
    int grpc_port;
} loupe_server_options;

/** Starts the profiler server on 127.0.0.1:port (port 0: a free port): loupe's HTTP API and
 * (in a build with gRPC) the gRPC ProfilerService on that one port, as
 * jax.profiler.start_server(port). Same as loupe_start_server_ex() with only the port set. */
LOUPE_API int loupe_start_server(int port);

/** Starts the profiler server: HTTP on options->port and gRPC on the same port or where
 * options->grpc_port says. Returns once both listen (0) or failed.
 * Errors: LOUPE_EINVALID (NULL options, port or grpc_port out of range, an address that is not
 * numeric, a token over 255 bytes), LOUPE_EUNSUPPORTED (a gRPC port of its own in a build
 * without the gRPC service; with libloupe.so, libloupe_server.so.0, which holds the server and is
 * loaded at the first start, cannot be loaded: the detail gives the loader's reason),
 * LOUPE_ESERVER_RUNNING (a server runs: the detail names its address and port), LOUPE_EIO (a socket
 * cannot be made or bound, e.g. the port is in use: the detail names the address, port and errno,
 * for the gRPC port too ("loupe_start_server (gRPC): ..."); or a server thread cannot start),
 * LOUPE_ENOMEM. On error nothing changes. Thread-safety: any thread; start and stop calls are
 * serialised. */
LOUPE_API int loupe_start_server_ex(const loupe_server_options *options);

/** Stops the server: stops accepting, ends a capture in progress (its client gets 503, or gRPC
 * UNAVAILABLE), gives
 * the requests in flight up to 2 s to finish sending, closes the rest, waits for the server's
 * threads, and frees everything. After it, a start works again (also on the same port).
 * Errors: LOUPE_ENO_SERVER (STOPPED). Thread-safety: any thread. Blocks for about 2 s at most. */
LOUPE_API int loupe_stop_server(void);

/** The port the running server listens on (the chosen one after a start with port 0), or 0 when
 * no server runs. Thread-safety: any thread. */
LOUPE_API int loupe_server_port(void);

/** The port the running server's gRPC service listens on (the HTTP port by default, the chosen
 * one after LOUPE_SERVER_GRPC_ANY_PORT), or 0 when no server or no gRPC service runs.
 * Thread-safety: any thread. */
LOUPE_API int loupe_server_grpc_port(void);

/** The port Perfetto's UI may fetch a trace from (its content security policy allows
 * http://127.0.0.1:9001 only: the trace_processor RPC port). */
#define LOUPE_PERFETTO_LINK_PORT 9001
/** How long a link waits for the UI to fetch the trace by default: 5 minutes. */
#define LOUPE_PERFETTO_LINK_DEFAULT_TIMEOUT_MS 300000u

/** Options of loupe_serve_perfetto_link(). Zero-initialise. */
typedef struct loupe_link_options {
    /** How long to wait for the fetch, in ms; 0 = LOUPE_PERFETTO_LINK_DEFAULT_TIMEOUT_MS. */
    uint32_t timeout_ms;
    /** TCP port on 127.0.0.1; 0 = LOUPE_PERFETTO_LINK_PORT; -1 = a free port (the URL given to
     * on_ready names it). Ports other than 9001 are for tests: the UI will not fetch from them. */
    int port;
    /** Called once the server listens, with the link to open, before waiting; NULL prints
     * "Open URL in browser: <url>" on stderr. Lifetime: url is valid during the call. */
    void (*on_ready)(const char *url, void *user);
    void *user;
} loupe_link_options;

/** Serves the file at path once on http://127.0.0.1:<port>/<basename>, with
 * `Access-Control-Allow-Origin: https://ui.perfetto.dev`, for the link
 *     https://ui.perfetto.dev/#!/?url=http://127.0.0.1:9001/<basename>
 * and returns once the file was sent completely (0) or the timeout passed. Other paths get 404
 * and other methods 405 without ending the wait. Blocks the calling thread.
 * Errors: LOUPE_EINVALID (NULL path, a name the URL cannot carry), LOUPE_EIO (the file cannot be
 * opened; the port is in use or cannot be bound: the detail says which port and what to do;
 * the timeout passed with no complete fetch: the detail says "timed out"), LOUPE_ENOMEM.
 * Thread-safety: any thread; two links at once need two ports. */
LOUPE_API int loupe_serve_perfetto_link(const char *path, const loupe_link_options *options);

#ifdef __cplusplus
}
#endif
#endif
