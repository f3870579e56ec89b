#!/usr/bin/env bash
# Installs what mxserve needs on Debian 12 (idempotent; does nothing when all is present).
set -euo pipefail
PKGS=(build-essential cmake pkg-config git ca-certificates
      libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
      libabsl-dev nlohmann-json3-dev libpcre2-dev libopenblas-dev libboost-dev
      libsystemd-dev prometheus-cpp-dev libgtest-dev libgmock-dev googletest nodejs npm curl)
# openssl: the mutual-TLS tests make their certificates with it; systemd: systemd-analyze
# checks deploy/systemd; clang + libclang-rt-dev (libFuzzer): the fuzz targets (make fuzz);
# python3: the serving benchmark client and its tests (bench/serve) and bench/results/render.py,
# which generates docs/PERFORMANCE.md's tables (standard library only).
PKGS+=(openssl systemd clang libclang-rt-dev python3)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A machine may carry its own node/npm outside Debian's packages: accept that.
if command -v node >/dev/null && command -v npm >/dev/null; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
clean=(); for p in "${missing[@]}"; do [[ -n "$p" ]] && clean+=("$p"); done
if ((${#clean[@]})); then
  echo "install-deps: installing ${clean[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${clean[@]}"
fi
