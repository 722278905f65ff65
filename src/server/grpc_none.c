/* grpc_none.c: the gRPC service in a build without it (configure found no grpc or
 * libprotobuf-c, or -DLOUPE_WITH_GRPC=OFF): a server without a grpc_port starts as always; one
 * with a grpc_port fails with LOUPE_EUNSUPPORTED, naming what the build lacks. */
#include "base/error.h"
#include "server/grpc.h"

#include <loupe/error.h>
#include <loupe/server.h>

int loupe__grpc_start(const char *address, int port, const char *token, uint32_t max_ms,
                      int *port_out) {
    (void)address;
    (void)token;
    (void)max_ms;
    *port_out = 0;
    if (port == LOUPE_SERVER_GRPC_OFF) {
        return 0;
    }
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
