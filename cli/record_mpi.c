/* record_mpi.c: what `loupe record` does for MPI programs (docs/mpi.md). Under a launcher
 * (`mpirun -np N loupe record -- ./app`) every rank runs its own `loupe record`; they agree on
 * one run directory without talking, by naming it after the job id the launcher gives every
 * rank, and name their files by rank (rank0003.xplane.pb). A program that links libmpi gets
 * libloupe_mpi.so (src/mpi/pmpi.c) preloaded, which records its MPI calls.
 *
 * The launchers' environment (each sets it for every rank it starts):
 *   Open MPI:  OMPI_COMM_WORLD_RANK / _SIZE, OMPI_MCA_ess_base_jobid (docs: "mpirun(1)", section
 *              "Exported Environment Variables"); PMIx launchers: PMIX_RANK, PMIX_NAMESPACE.
 *   MPICH (Hydra): PMI_RANK, PMI_SIZE, and PMI_PORT (the launcher's PMI address, the same for
 *              every rank of a job) when ranks reach it over the network; with PMI_FD instead
 *              (ranks on the launcher's own host) there is no job id, and the ranks of one host
 *              share their parent, Hydra's proxy. Hydra's MPI_LOCALRANKID / MPI_LOCALNRANKS
 *              are the rank among one host's ranks, not the world rank: not used for names.
 *   Slurm:     SLURM_JOB_ID and SLURM_STEP_ID, used for the job id when the others have none.
 */
#include "cli.h"

#include <elf.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *env1(const char *a, const char *b, const char *c) {
    const char *names[3] = {a, b, c};
    for (int i = 0; i < 3; i++) {
        const char *v = names[i] ? getenv(names[i]) : NULL;
        if (v != NULL && v[0]) {
            return v;
        }
    }
    return NULL;
}

int loupe_cli_mpi_rank(int *rank, int *size) {
    const char *r = env1("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK");
    const char *s = env1("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MPI_UNIVERSE_SIZE");
    if (r == NULL) {
        return 0;
    }
    char *end;
    long v = strtol(r, &end, 10);
    if (end == r || *end != 0 || v < 0 || v > INT_MAX) {
        return 0;
    }
    *rank = (int)v;
    *size = s != NULL ? atoi(s) : 0;
    return 1;
}

/* pid's parent, from /proc/<pid>/stat's 4th field (proc(5); the 2nd, the command in
 * parentheses, may itself hold spaces and parentheses: the fields go on after its last ')');
 * 0 when it cannot be read. */
static long parent_of(long pid) {
    char buf[512];
    const char *rest = loupe_cli_proc_stat(pid, buf, sizeof buf);
    long ppid = 0;
    if (rest == NULL || sscanf(rest, " %*c %ld", &ppid) != 1) {
        return 0;
    }
    return ppid;
}

/* The job's id, the same for every rank of one launch: into buf as a path component
 * ([A-Za-z0-9._-], others '_'). Called in the program's process, forked by `loupe record`
 * (whose own parent is the launcher's). */
static void job_id(char *buf, size_t size) {
    char raw[256];
    const char *j = env1("OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_PORT");
    const char *sj = getenv("SLURM_JOB_ID");
    if (j != NULL) {
        snprintf(raw, sizeof raw, "%s", j);
    } else if (sj != NULL && sj[0]) {
        const char *st = getenv("SLURM_STEP_ID");
        snprintf(raw, sizeof raw, "slurm%s.%s", sj, st ? st : "0");
    } else {
        /* No job id: the ranks of one host share their launcher (Hydra's proxy) as the
         * parent of their `loupe record`, this process's parent; ranks on other hosts get a
         * directory of their own (docs/mpi.md says so). */
        long launcher = parent_of((long)getppid());
        snprintf(raw, sizeof raw, "ppid%ld", launcher > 0 ? launcher : (long)getppid());
    }
    size_t n = 0;
    for (const char *p = raw; *p && n + 1 < size && n < 90; p++) {
        char c = *p;
        int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '-' || c == '_';
        buf[n++] = ok ? c : '_';
    }
    buf[n] = 0;
}

/* The program's path: as given when it has a '/', else the first match on PATH. */
static int program_path(const char *prog, char *buf, size_t size) {
    if (strchr(prog, '/') != NULL) {
        snprintf(buf, size, "%s", prog);
        return 0;
    }
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        size_t len = strcspn(p, ":");
        int n = snprintf(buf, size, "%.*s/%s", (int)len, p, prog);
        if (n > 0 && (size_t)n < size && access(buf, X_OK) == 0) {
            return 0;
        }
        p += len;
        p += *p == ':';
    }
    return -1;
}

/* The first DT_NEEDED entry of an ELF64 file that names an MPI library (libmpi.so.40,
 * libmpich.so.12; not libmpi_cxx or libmpi_mpifh, which need libmpi themselves), into soname:
 * 1 when found, 0 when not (or not an ELF64 file). Reads the program headers' PT_DYNAMIC and
 * maps DT_STRTAB's address to a file offset through the PT_LOAD segments (the ELF
 * specification, "Dynamic Section"): the loader is not run, so this is safe on any file. */
static int needs_mpi(const char *path, char *soname, size_t size) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return 0;
    }
    int found = 0;
    Elf64_Ehdr eh;
    Elf64_Phdr ph[64];
    Elf64_Dyn dyn[512];
    size_t nph = 0, ndyn = 0;
    if (fread(&eh, sizeof eh, 1, f) != 1 || memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 ||
        eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_phentsize != sizeof(Elf64_Phdr)) {
        goto out;
    }
    nph = eh.e_phnum < 64 ? eh.e_phnum : 64;
    if (fseek(f, (long)eh.e_phoff, SEEK_SET) != 0 || fread(ph, sizeof ph[0], nph, f) != nph) {
        goto out;
    }
    for (size_t i = 0; i < nph; i++) {
        if (ph[i].p_type == PT_DYNAMIC) {
            ndyn = ph[i].p_filesz / sizeof(Elf64_Dyn);
            ndyn = ndyn < 512 ? ndyn : 512;
            if (fseek(f, (long)ph[i].p_offset, SEEK_SET) != 0 ||
                fread(dyn, sizeof dyn[0], ndyn, f) != ndyn) {
                goto out;
            }
        }
    }
    uint64_t strtab = 0, stroff = UINT64_MAX;
    for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL; i++) {
        if (dyn[i].d_tag == DT_STRTAB) {
            strtab = dyn[i].d_un.d_ptr;
        }
    }
    for (size_t i = 0; i < nph; i++) {
        if (ph[i].p_type == PT_LOAD && strtab >= ph[i].p_vaddr &&
            strtab < ph[i].p_vaddr + ph[i].p_filesz) {
            stroff = strtab - ph[i].p_vaddr + ph[i].p_offset;
        }
    }
    for (size_t i = 0; i < ndyn && dyn[i].d_tag != DT_NULL && stroff != UINT64_MAX; i++) {
        char name[256];
        if (dyn[i].d_tag != DT_NEEDED || fseek(f, (long)(stroff + dyn[i].d_un.d_val), SEEK_SET)) {
            continue;
        }
        size_t n = fread(name, 1, sizeof name - 1, f);
        name[n] = 0;
        if ((strncmp(name, "libmpi.so", 9) == 0 || strncmp(name, "libmpich.so", 11) == 0)) {
            snprintf(soname, size, "%s", name);
            found = 1;
            break;
        }
    }
out:
    fclose(f);
    return found;
}

void loupe_cli_mpi_child_setup(const char *abs_log, const char *preload, const char *prog,
                               int mode) {
    int rank = 0, size = 0;
    int ranked = loupe_cli_mpi_rank(&rank, &size);
    if (ranked) {
        char id[128], dir[PATH_MAX], prefix[32];
        job_id(id, sizeof id);
        snprintf(dir, sizeof dir, "%s/plugins/profile/mpi_%s", abs_log, id);
        snprintf(prefix, sizeof prefix, "rank%04d", rank);
        setenv("LOUPE_RECORD_RUN_DIR", dir, 1);
        setenv("LOUPE_RECORD_FILE_PREFIX", prefix, 1);
    }
    if (mode < 0) {
        return; /* --no-mpi */
    }
    char path[PATH_MAX], soname[256] = "", lib[PATH_MAX], libso[256] = "";
    int links =
        program_path(prog, path, sizeof path) == 0 && needs_mpi(path, soname, sizeof soname);
    if (!links && mode == 0) {
        return;
    }
    snprintf(lib, sizeof lib, "%s", preload);
    char *slash = strrchr(lib, '/');
    if (slash == NULL || (size_t)(slash + 1 - lib) + 24 > sizeof lib) {
        return;
    }
    /* The PMPI wrappers must call the program's MPI: another implementation (loupe built with
     * Open MPI, the program with MPICH) would fail at the first call. libloupe_mpi.so is built
     * with the MPI CMake found, libloupe_mpi_mpich.so beside it with MPICH where that was
     * another one: the first whose MPI soname is the program's is preloaded. */
    static const char *const libs[] = {"libloupe_mpi.so", "libloupe_mpi_mpich.so"};
    int have = 0, match = 0;
    for (size_t i = 0; i < sizeof libs / sizeof libs[0] && !match; i++) {
        char cand[PATH_MAX], candso[256] = "";
        snprintf(cand, sizeof cand, "%.*s%s", (int)(slash + 1 - lib), lib, libs[i]);
        if (access(cand, R_OK) != 0) {
            continue;
        }
        int built_with = needs_mpi(cand, candso, sizeof candso);
        if (!have) {
            snprintf(libso, sizeof libso, "%s", built_with ? candso : "");
            snprintf(path, sizeof path, "%s", cand); /* the first found: the default */
        }
        have = 1;
        if (links && built_with && strcmp(soname, candso) == 0) {
            snprintf(path, sizeof path, "%s", cand);
            match = 1;
        }
    }
    if (!have) {
        if (rank == 0) {
            fprintf(stderr,
                    "loupe record: %s links MPI, but this loupe was built without "
                    "libloupe_mpi.so (no mpi.h at build time): MPI calls are not "
                    "recorded\n",
                    prog);
        }
        return;
    }
    if (links && !match && libso[0] != 0) {
        if (rank == 0) {
            fprintf(stderr,
                    "loupe record: %s links %s, but libloupe_mpi.so was built with %s: MPI "
                    "calls are not recorded (rebuild loupe with that MPI)\n",
                    prog, soname, libso);
        }
        return;
    }
    snprintf(lib, sizeof lib, "%s", path);
    const char *old = getenv("LD_PRELOAD");
    char ldp[PATH_MAX * 4];
    snprintf(ldp, sizeof ldp, "%s%s%s", old && *old ? old : "", old && *old ? ":" : "", lib);
    setenv("LD_PRELOAD", ldp, 1);
}
