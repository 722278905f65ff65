/* net.h: the listening-socket helper (net.c). */
#ifndef LOUPE_BASE_NET_H
#define LOUPE_BASE_NET_H

#include <loupe/export.h>

/* Makes a listening TCP socket (SOCK_CLOEXEC, backlog 64) on a numeric IPv4 or IPv6 address and
 * port (0: a free one), SO_REUSEADDR when reuse. Returns 0 with *fd_out and the bound *port_out,
 * or LOUPE_EINVALID (not a numeric address) / LOUPE_EIO with the detail prefixed by what (the
 * address, port and errno; "in use" said plainly). */
LOUPE_API int loupe__listen_socket(const char *address, int port, int reuse, int *fd_out,
                                   int *port_out, const char *what);

#endif
