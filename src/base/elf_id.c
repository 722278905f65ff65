/* elf_id.c: reads an ELF file's GNU build-id note (elf_id.h) through libelf: what the sample
 * spool compares a recorded module with before symbolising against the file (sample_spool.c), and
 * what the pprof writer names a mapping by (pprof.c). */
#include "base/elf_id.h"

#include <elf.h>
#include <fcntl.h>
#include <gelf.h>
#include <string.h>
#include <unistd.h>

size_t loupe__elf_build_id(const char *path, unsigned char *out, size_t cap) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return 0;
    }
    (void)elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ_MMAP, NULL);
    size_t got = 0;
    for (Elf_Scn *scn = e != NULL ? elf_nextscn(e, NULL) : NULL; scn != NULL;
         scn = elf_nextscn(e, scn)) {
        GElf_Shdr sh;
        if (gelf_getshdr(scn, &sh) == NULL || sh.sh_type != SHT_NOTE) {
            continue;
        }
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t off = 0, name_off, desc_off;
        GElf_Nhdr nh;
        while (d != NULL && (off = gelf_getnote(d, off, &nh, &name_off, &desc_off)) > 0) {
            if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 &&
                memcmp((const char *)d->d_buf + name_off, "GNU", 4) == 0) {
                if (nh.n_descsz > 0 && nh.n_descsz <= cap) {
                    memcpy(out, (const char *)d->d_buf + desc_off, nh.n_descsz);
                    got = nh.n_descsz;
                }
                goto done;
            }
        }
    }
done:
    if (e != NULL) {
        elf_end(e);
    }
    close(fd);
    return got;
}
