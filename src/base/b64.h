/* b64.h: base64 (RFC 4648 §4, the standard alphabet, with '=' padding) for binary payloads that
 * must travel as text: the XPlane writer's loupe_stack_nodes, loupe_off_cpu and
 * loupe_off_cpu_kinds plane stats are str_values of base64, because jax's
 * jax.profiler.ProfileData decodes every stat's bytes as UTF-8 text and raised UnicodeDecodeError
 * on binary bytes_values (jax 0.10.2). Thread-safety: any thread; no state.
 */
#ifndef LOUPE_BASE_B64_H
#define LOUPE_BASE_B64_H

#include <stddef.h>

/* The encoded length of n bytes: 4 * ceil(n / 3). */
size_t loupe__b64_len(size_t n);

/* Writes loupe__b64_len(n) characters (no NUL) of in's encoding at out. */
void loupe__b64_encode(char *out, const unsigned char *in, size_t n);

/* Decodes n characters at in into out (room for 3 * (n / 4) bytes): the decoded length, or
 * (size_t)-1 when in is not base64 (a length not a multiple of 4, a character outside the
 * alphabet, '=' anywhere but the last two places, or non-zero bits under the padding). */
size_t loupe__b64_decode(unsigned char *out, const unsigned char *in, size_t n);

#endif
