/* version.c: loupe_version() and loupe_version_number() (loupe/version.h): the library's own
 * version, fixed when it was built, whatever headers its caller was compiled with. */
#include <loupe/version.h>

const char *loupe_version(void) {
    return LOUPE_VERSION_STRING;
}

int loupe_version_number(void) {
    return LOUPE_VERSION_NUMBER;
}
