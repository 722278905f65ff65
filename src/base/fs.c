/* fs.c: file-system and host helpers: mkdir -p, the host name. */
#include "base/error.h"
#include "base/fs.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int mkdirs_err(const char *path, int e) {
    return loupe__err(LOUPE_EIO, "cannot create %s: %s (errno %d)", path, strerror(e), e);
}

int loupe__mkdirs(const char *path) {
    char buf[4096];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf) {
        return mkdirs_err(n == 0 ? "\"\"" : path, n == 0 ? ENOENT : ENAMETOOLONG);
    }
    memcpy(buf, path, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST) {
                return mkdirs_err(path, errno);
            }
            buf[i] = c;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0) {
        return mkdirs_err(path, errno);
    }
    if (!S_ISDIR(st.st_mode)) {
        return mkdirs_err(path, ENOTDIR);
    }
    if (access(path, W_OK | X_OK) != 0) {
        return mkdirs_err(path, errno);
    }
    return 0;
}

void loupe__hostname(char *buf, size_t size) {
    if (gethostname(buf, size) != 0 || buf[0] == 0) {
        snprintf(buf, size, "localhost");
    }
    buf[size - 1] = 0;
    for (char *p = buf; *p; p++) {
        if (*p == ':' || *p == '/') {
            *p = '_';
        }
    }
}
