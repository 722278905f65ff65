#!/usr/bin/env bash
# tools/setup.sh: installs the Debian 12 packages loupe needs to build, test and benchmark, when
# they are missing (as root, with apt-get; prefixes sudo when not root and sudo exists).
# Called by tools/main.sh and tools/test.sh; safe to run again.
set -euo pipefail
PKGS=(build-essential cmake pkg-config zlib1g-dev libjansson-dev libelf-dev libcmocka-dev
      libmicrohttpd-dev libcurl4-openssl-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
      python3 python3-venv clang clang-format liblttng-ust-dev lttng-tools uftrace strace
      protobuf-compiler iproute2 libcap2-bin openmpi-bin libopenmpi-dev mpich libmpich-dev
      libdw-dev golang-go llvm)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "loupe setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
