/* grpc_none.c: the gRPC service in a build without it (configure found no grpc or
 * libprotobuf-c, or -DLOUPE_WITH_GRPC=OFF): a server with the default grpc_port (the HTTP port)
 * or LOUPE_SERVER_GRPC_OFF serves HTTP alone; one with a gRPC port of its own fails with
 * LOUPE_EUNSUPPORTED, naming what the build lacks. */
#include "base/error.h"
#include "server/grpc.h"

#include <loupe/error.h>
#include <loupe/server.h>

#include <unistd.h>

int loupe__grpc_available(void) {
    return 0;
}

void loupe__grpc_add_fd(int fd) {
    close(fd); /* never called: server.c routes nothing to a service this build lacks */
}

int loupe__grpc_start(const char *address, int port, const char *token, uint32_t max_ms,
                      int fed_port, int *port_out) {
    (void)address;
    (void)token;
    (void)max_ms;
    (void)fed_port;
    *port_out = 0;
    return loupe__err(LOUPE_EUNSUPPORTED,
                      "loupe_start_server: grpc_port %d: this build of loupe has no gRPC service "
                      "(LOUPE_WITH_GRPC=OFF: configure with libgrpc-dev, libprotobuf-c-dev and "
                      "protobuf-c-compiler installed)",
                      port);
}

void loupe__grpc_stop_begin(void) {}

void loupe__grpc_stop_end(void) {}

int loupe_server_grpc_port(void) {
    return 0;
}
