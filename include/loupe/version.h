/* loupe/version.h: the version of the headers (LOUPE_VERSION_*) and of the library a program
 * runs with (loupe_version()). They differ when a program built against one release runs with
 * another libloupe.so; docs/ABI.md says which combinations work. */
#ifndef LOUPE_VERSION_H
#define LOUPE_VERSION_H

#include <loupe/export.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LOUPE_VERSION_MAJOR 0
#define LOUPE_VERSION_MINOR 4
#define LOUPE_VERSION_PATCH 0
#define LOUPE_VERSION_STRING "0.4.0"
/* major * 10000 + minor * 100 + patch, as loupe_version_number() returns it */
#define LOUPE_VERSION_NUMBER                                                                       \
    (LOUPE_VERSION_MAJOR * 10000 + LOUPE_VERSION_MINOR * 100 + LOUPE_VERSION_PATCH)

/** The library's version, "MAJOR.MINOR.PATCH" (LOUPE_VERSION_STRING of the headers it was built
 * with). Lifetime: static. Thread-safety: any thread. */
LOUPE_API const char *loupe_version(void);

/** The library's version as major * 10000 + minor * 100 + patch (0.1.0 = 100), for comparisons:
 * loupe_version_number() >= 200 means 0.2.0 or later. Thread-safety: any thread. */
LOUPE_API int loupe_version_number(void);

#ifdef __cplusplus
}
#endif
#endif
