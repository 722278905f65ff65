/* router.c: the HTTP API and the gRPC ProfilerService on one port (router.h).
 *
 * Neither protocol has the server speak first: an HTTP/1.1 client sends its request line, and a
 * gRPC client (HTTP/2 over cleartext with prior knowledge, which jax's and XProf's channels use)
 * sends the connection preface "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" (RFC 9113 section 3.4) before
 * anything else. So one thread accepts, looks at each connection's first bytes with MSG_PEEK
 * (they stay in the socket for the library that gets it) and hands it over: all 24 bytes of the
 * preface go to gRPC's C core (grpc_server_add_channel_from_fd, grpc/grpc_posix.h), any byte that
 * differs from it goes to libmicrohttpd (MHD_add_connection, on a daemon started with
 * MHD_USE_NO_LISTEN_SOCKET). Each library then owns the socket and closes it.
 *
 * No client holds the port from the others: a connection that has sent nothing, or only part of
 * the preface, waits in a table of LOUPE__ROUTE_PENDING_MAX without blocking the accepts; it is
 * closed after LOUPE__ROUTE_WAIT_MS, or when the table is full and a new connection comes (the
 * one waiting longest goes). A connection whose first bytes have come is routed within the same
 * poll round. One that has sent a prefix of the preface is looked at again every PARTIAL_MS (its
 * bytes stay readable, so polling it would spin). */
#include "server/router.h"

#include "base/error.h"
#include "server/grpc.h"

#include <loupe/error.h>

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define PARTIAL_MS 5 /* a connection that has sent part of the preface: looked at again after */

static const char PREFACE[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"; /* 24 bytes */
#define PREFACE_LEN (sizeof PREFACE - 1)

typedef struct pending {
    int fd;         /* -1: a free slot */
    uint64_t since; /* CLOCK_MONOTONIC ms of the accept */
    uint64_t next;  /* not polled before this (a partial preface) */
    struct sockaddr_storage addr;
    socklen_t addr_len;
} pending;

static pthread_t thread;
static int running;
static int lfd = -1, wake = -1;
static struct MHD_Daemon *daemon_;
static pending pend[LOUPE__ROUTE_PENDING_MAX];

static uint64_t now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000u + (uint64_t)t.tv_nsec / 1000000u;
}

static void drop(pending *p) {
    close(p->fd);
    p->fd = -1;
}

/* 1: route it to gRPC, 0: to HTTP, -1: wait for more, -2: closed or failed (drop it). */
static int sniff(int fd) {
    char b[PREFACE_LEN];
    ssize_t n = recv(fd, b, sizeof b, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0) {
        return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? -1 : -2;
    }
    if (n == 0) {
        return -2; /* the client closed before saying anything */
    }
    if (memcmp(b, PREFACE, (size_t)n) != 0) {
        return 0;
    }
    return (size_t)n == PREFACE_LEN ? 1 : -1;
}

static void route(pending *p, int to_grpc) {
    int fd = p->fd;
    p->fd = -1;
    if (to_grpc) {
        loupe__grpc_add_fd(fd); /* gRPC owns it now, and closes it */
        return;
    }
    /* libmicrohttpd owns the socket from here, and closes it on failure too (over its
     * connection limit, out of threads) */
    (void)MHD_add_connection(daemon_, fd, (const struct sockaddr *)&p->addr, p->addr_len);
}

static void accept_all(void) {
    for (;;) {
        struct sockaddr_storage a;
        socklen_t al = sizeof a;
        int fd = accept4(lfd, (struct sockaddr *)&a, &al, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd < 0) {
            return; /* EAGAIN: none left; EMFILE and the like: the backlog keeps them */
        }
        pending *slot = NULL, *oldest = NULL;
        for (size_t i = 0; i < LOUPE__ROUTE_PENDING_MAX; i++) {
            if (pend[i].fd < 0) {
                slot = &pend[i];
                break;
            }
            if (oldest == NULL || pend[i].since < oldest->since) {
                oldest = &pend[i];
            }
        }
        if (slot == NULL) {
            drop(oldest);
            slot = oldest;
        }
        *slot = (pending){fd, now_ms(), 0, a, al};
        /* most clients send their first bytes with or right after the handshake: route now */
        int k = sniff(fd);
        if (k >= 0) {
            route(slot, k);
        } else if (k == -2) {
            drop(slot);
        }
    }
}

static void *router_main(void *arg) {
    (void)arg;
    struct pollfd fds[2 + LOUPE__ROUTE_PENDING_MAX];
    size_t which[LOUPE__ROUTE_PENDING_MAX];
    for (;;) {
        uint64_t t = now_ms();
        int timeout = -1;
        nfds_t n = 2;
        fds[0] = (struct pollfd){wake, POLLIN, 0};
        fds[1] = (struct pollfd){lfd, POLLIN, 0};
        for (size_t i = 0; i < LOUPE__ROUTE_PENDING_MAX; i++) {
            pending *p = &pend[i];
            if (p->fd < 0) {
                continue;
            }
            if (t >= p->since + LOUPE__ROUTE_WAIT_MS) {
                drop(p);
                continue;
            }
            uint64_t until = p->since + LOUPE__ROUTE_WAIT_MS;
            if (p->next > t) {
                until = p->next < until ? p->next : until;
            } else {
                which[n - 2] = i;
                fds[n++] = (struct pollfd){p->fd, POLLIN, 0};
            }
            int ms = (int)(until - t);
            if (timeout < 0 || ms < timeout) {
                timeout = ms;
            }
        }
        if (poll(fds, n, timeout) < 0 && errno != EINTR) {
            timeout = 10; /* ENOMEM: try again shortly rather than spin */
            (void)poll(NULL, 0, timeout);
            continue;
        }
        if (fds[0].revents != 0) {
            return NULL; /* the stop */
        }
        for (nfds_t j = 2; j < n; j++) {
            if (fds[j].revents == 0) {
                continue;
            }
            pending *p = &pend[which[j - 2]];
            int k = sniff(p->fd);
            if (k >= 0) {
                route(p, k);
            } else if (k == -2) {
                drop(p);
            } else {
                p->next = now_ms() + PARTIAL_MS;
            }
        }
        if (fds[1].revents != 0) {
            accept_all();
        }
    }
}

int loupe__router_start(int listen_fd, struct MHD_Daemon *http) {
    int fl = fcntl(listen_fd, F_GETFL);
    if (fl < 0 || fcntl(listen_fd, F_SETFL, fl | O_NONBLOCK) != 0) {
        int e = errno;
        return loupe__err(LOUPE_EIO, "loupe_start_server: the listening socket: %s (errno %d)",
                          strerror(e), e);
    }
    wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (wake < 0) {
        int e = errno;
        return loupe__err(LOUPE_EIO, "loupe_start_server: eventfd: %s (errno %d)", strerror(e), e);
    }
    for (size_t i = 0; i < LOUPE__ROUTE_PENDING_MAX; i++) {
        pend[i].fd = -1;
    }
    lfd = listen_fd;
    daemon_ = http;
    if (pthread_create(&thread, NULL, router_main, NULL) != 0) {
        close(wake);
        wake = -1;
        lfd = -1;
        return loupe__err(LOUPE_EIO, "loupe_start_server: cannot start the accepting thread");
    }
    running = 1;
    return 0;
}

static void close_all(void) {
    for (size_t i = 0; i < LOUPE__ROUTE_PENDING_MAX; i++) {
        if (pend[i].fd >= 0) {
            close(pend[i].fd);
            pend[i].fd = -1;
        }
    }
    if (lfd >= 0) {
        close(lfd);
    }
    if (wake >= 0) {
        close(wake);
    }
    lfd = wake = -1;
    daemon_ = NULL;
}

void loupe__router_stop(void) {
    if (!running) {
        return;
    }
    uint64_t one = 1;
    while (write(wake, &one, sizeof one) < 0 && errno == EINTR) {
    }
    pthread_join(thread, NULL);
    running = 0;
    close_all();
}

void loupe__router_atfork_child(void) {
    if (running) {
        close_all();
    }
    running = 0;
}
