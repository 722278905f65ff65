/* net.c: the listening-socket helper the profiler server and the Perfetto link share. */
#include "base/net.h"

#include "base/error.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

int loupe__listen_socket(const char *address, int port, int reuse, int *fd_out, int *port_out,
                         const char *what) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    socklen_t sl;
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, address, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        sl = sizeof *s4;
    } else if (inet_pton(AF_INET6, address, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        sl = sizeof *s6;
    } else {
        return loupe__err(LOUPE_EINVALID,
                          "%s: bind address \"%.80s\" is not a numeric IPv4 or IPv6 address", what,
                          address);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        int e = errno;
        return loupe__err(LOUPE_EIO, "%s: cannot create a socket: %s (errno %d)", what, strerror(e),
                          e);
    }
    int one = 1;
    if (reuse) {
        (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    }
    if (bind(fd, (struct sockaddr *)&ss, sl) != 0 || listen(fd, 64) != 0) {
        int e = errno;
        close(fd);
        return loupe__err(LOUPE_EIO, "%s: cannot listen on %s port %d: %s (errno %d)%s", what,
                          address, port, strerror(e), e,
                          e == EADDRINUSE ? "; another process holds the port" : "");
    }
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) != 0) {
        int e = errno;
        close(fd);
        return loupe__err(LOUPE_EIO, "%s: getsockname: %s (errno %d)", what, strerror(e), e);
    }
    *port_out = ntohs(ss.ss_family == AF_INET ? s4->sin_port : s6->sin6_port);
    *fd_out = fd;
    return 0;
}
