#!/usr/bin/env bash
# record_mpi_env.sh: `loupe record` under an MPI launcher finds the rank and the job from the
# environment the launcher gives each rank (cli/record_mpi.c), faked here for each launcher
# (no MPI needed; the launchers themselves run in mpi_record.sh, Open MPI's mpirun, and
# mpi_record_mpich.sh, MPICH's mpiexec.mpich): Open MPI, PMIx, MPICH's Hydra (PMI_RANK / PMI_SIZE, with PMI_PORT over the
# network or PMI_FD on its own host, MPI_LOCALRANKID beside), Slurm's PMI-2 (SLURM_JOB_ID).
# Each run writes its rank's files rankNNNN.* into plugins/profile/mpi_<job>/, exactly; with
# none of them set the run directory is the usual timestamp. Args: BUILD_DIR SOURCE_DIR.
set -euo pipefail
build=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
name=record_mpi_env
. "$2/tests/probes/record_under_sanitizer.sh" # sets $loupe (ASan: its runtime preloaded)

printf '#include <stdio.h>\nint main(void) { puts("RAN"); return 0; }\n' >"$tmp/p.c"
cc -std=c11 "$tmp/p.c" -o "$tmp/prog"

# every launcher variable cli/record_mpi.c reads, unset around each case (the machine running
# the test may itself be inside a job)
launcher_vars="OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_MCA_ess_base_jobid PMIX_RANK
  PMIX_NAMESPACE PMI_RANK PMI_SIZE PMI_PORT PMI_FD MPI_UNIVERSE_SIZE MPI_LOCALRANKID
  MPI_LOCALNRANKS SLURM_JOB_ID SLURM_STEP_ID"

# case_env NAME WANT_DIR_REGEX WANT_FILES_REGEX VAR=VALUE...: one `loupe record` with that environment
case_env() {
  local label=$1 want_dir=$2 want_files=$3
  shift 3
  local log="$tmp/log-$label"
  # a subshell, not env(1): under ASan $loupe is a shell function (record_under_sanitizer.sh)
  (
    for v in $launcher_vars; do unset "$v"; done
    for kv in "$@"; do export "${kv?}"; done
    "$loupe" record -q -o "$log" -- "$tmp/prog"
  ) >"$tmp/out" 2>&1 || fail "$label: loupe record failed: $(cat "$tmp/out")"
  grep -qx RAN "$tmp/out" || fail "$label: the program did not run: $(cat "$tmp/out")"
  local runs
  runs=$(ls "$log/plugins/profile")
  [ "$(echo "$runs" | wc -l)" = 1 ] || fail "$label: run directories: $runs"
  [[ $runs =~ ^${want_dir}$ ]] || fail "$label: run directory $runs, want $want_dir"
  local files
  files=$(ls "$log/plugins/profile/$runs" | tr '\n' ' ')
  [[ $files =~ ^${want_files}$ ]] || fail "$label: files '$files', want '$want_files'"
  echo "record_mpi_env: $label: $runs/ $files"
}

rank_files() { printf 'rank%04d\\.trace\\.json\\.gz rank%04d\\.xplane\\.pb ' "$1" "$1"; }
# not a rank: loupe record's own <host>.<pid> names
h=$(hostname | sed 's/[.]/\\./g')
pid_files="$h\\.[0-9]+\\.trace\\.json\\.gz $h\\.[0-9]+\\.xplane\\.pb "

case_env openmpi 'mpi_777' "$(rank_files 3)" \
  OMPI_COMM_WORLD_RANK=3 OMPI_COMM_WORLD_SIZE=4 OMPI_MCA_ess_base_jobid=777
case_env pmix 'mpi_ns_x_1' "$(rank_files 2)" PMIX_RANK=2 PMIX_NAMESPACE='ns_x:1'
case_env hydra_port 'mpi_node1_4567' "$(rank_files 5)" \
  PMI_RANK=5 PMI_SIZE=8 PMI_PORT=node1:4567 MPI_LOCALRANKID=1 MPI_LOCALNRANKS=4
case_env hydra_fd 'mpi_ppid[0-9]+' "$(rank_files 1)" \
  PMI_RANK=1 PMI_SIZE=2 PMI_FD=7 MPI_LOCALRANKID=1 MPI_LOCALNRANKS=2
case_env slurm_pmi2 'mpi_slurm42\.3' "$(rank_files 12)" \
  PMI_RANK=12 PMI_SIZE=16 SLURM_JOB_ID=42 SLURM_STEP_ID=3
# a rank that is not a number: not an MPI rank, the usual run directory and file names
case_env bad_rank '[0-9_]+' "$pid_files" PMI_RANK=x
case_env none '[0-9_]+' "$pid_files"
echo "record_mpi_env: ok"
