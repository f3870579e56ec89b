#!/usr/bin/env bash
# Extracts triton_kernels (python/triton_kernels/triton_kernels at tag v3.6.0, commit 7c56a5e4) into
# .triton_kernels/ for bench/gpu/baselines.py (the matmul_ogs MXFP4 baseline: vLLM's Hopper path).
#   bench/gpu/get_triton_kernels.sh GIT_DIR
# GIT_DIR: a bare clone of a repo carrying that tag. The triton-lang/triton snapshot is too large to
# fetch; the fork yechenzhi/triton carries the same tag and an identical python/triton_kernels tree
# (a bare clone of it will do). The extracted code is
# never committed: it is listed in .git/info/exclude and carried to the GPU machine
# (carry: [".triton_kernels"]). Then: PYTHONPATH=.triton_kernels python3 -c 'import triton_kernels'
set -euo pipefail
GIT_DIR=${1:?usage: $0 GIT_DIR (bare git dir holding tag v3.6.0)}
TAG=${TRITON_KERNELS_TAG:-v3.6.0}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DST="$ROOT/.triton_kernels"
want=7c56a5e40f7fd928dfd5c72902d5def0097db73a
got=$(git --git-dir="$GIT_DIR" rev-parse "$TAG^{commit}")
[ "$TAG" != v3.6.0 ] || [ "$got" = "$want" ] || { echo "$TAG is $got, expected $want" >&2; exit 1; }
rm -rf "$DST" && mkdir -p "$DST"
git --git-dir="$GIT_DIR" archive "$TAG" python/triton_kernels/triton_kernels | tar -x -C "$DST" \
  --strip-components=2
git --git-dir="$GIT_DIR" show "$TAG:python/triton_kernels/pyproject.toml" > "$DST/pyproject.toml"
echo "$TAG $got" > "$DST/VERSION"
if [ -d "$ROOT/.git" ]; then
  mkdir -p "$ROOT/.git/info"
  grep -qx '/.triton_kernels/' "$ROOT/.git/info/exclude" 2>/dev/null || echo /.triton_kernels/ >> "$ROOT/.git/info/exclude"
fi
echo "triton_kernels $TAG ($got) -> $DST ($(du -sh "$DST" | cut -f1))"
