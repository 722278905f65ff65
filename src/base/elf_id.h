/* elf_id.h: the GNU build-id of an ELF file on disk (elf_id.c, libelf). */
#ifndef LOUPE_BASE_ELF_ID_H
#define LOUPE_BASE_ELF_ID_H

#include <stddef.h>

/* Copies the GNU build-id note (NT_GNU_BUILD_ID, name "GNU", from the file's SHT_NOTE sections:
 * the ELF gABI's note layout, binutils' --build-id) of the file at path into out and returns its
 * length in bytes (1..cap); 0 when the file cannot tell: gone, unreadable, not ELF, no such note,
 * or a note longer than cap. Opens the file with O_CLOEXEC and closes it before returning.
 * Thread-safety: any thread (libelf's elf_begin on a private fd). Not async-signal-safe. */
size_t loupe__elf_build_id(const char *path, unsigned char *out, size_t cap);

#endif
