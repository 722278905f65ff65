/* loupe/export.h: the LOUPE_API symbol-visibility macro.
 * libloupe is built with -fvisibility=hidden; only LOUPE_API symbols are exported (libuv's
 * UV_EXTERN).
 */
#ifndef LOUPE_EXPORT_H
#define LOUPE_EXPORT_H

#if defined(LOUPE_BUILDING) && (defined(__GNUC__) || defined(__clang__))
#define LOUPE_API __attribute__((visibility("default")))
#else
#define LOUPE_API
#endif

#endif
