#!/usr/bin/env bash
# Checks deploy/ without Docker, Kubernetes or helm (none run in CI):
#   systemd  systemd-analyze verify + security on the units (deploy/systemd/verify.sh)
#   docker   the Dockerfile parses and lints clean (npm dockerfile-utils), runs as non-root,
#            builds with the same steps CI uses (scripts/install-deps.sh, cmake), COPYs files
#            that exist
#   k8s      every manifest in deploy/k8s and deploy/hyperpod against the Kubernetes schemas
#            (npm kubernetes-models), with a negative control that must fail, and the shell
#            snippets that derive --workers, each worker's experts and its --device
#   helm     the chart rendered (tools/render-chart.mjs, the subset of Go templates it uses)
#            with default and non-default values (CPU workers among them), then the same schema
#            and command checks (each worker's --device and its nvidia.com/gpu request)
# Usage: deploy/lint.sh [systemd|docker|k8s|helm]...   (default: all)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
parts=("$@")
((${#parts[@]})) || parts=(systemd docker k8s helm)
tools=$here/tools

need_npm() {
  if [[ ! -d $tools/node_modules/kubernetes-models || ! -d $tools/node_modules/dockerfile-utils ]]; then
    (cd "$tools" && npm install --no-audit --no-fund --loglevel=error >/dev/null)
  fi
}

lint_docker() {
  need_npm
  local df=$here/docker/Dockerfile
  "$tools/node_modules/.bin/dockerfile-utils" lint "$df"
  grep -qE '^FROM nvidia/cuda:\$\{CUDA_VERSION\}-devel-' "$df" || { echo "docker: build stage is not a CUDA devel image"; return 1; }
  grep -qE '^FROM nvidia/cuda:\$\{CUDA_VERSION\}-runtime-' "$df" || { echo "docker: run stage is not a CUDA runtime image"; return 1; }
  grep -qE '^RUN scripts/install-deps.sh' "$df" || { echo "docker: does not run scripts/install-deps.sh (the script CI uses)"; return 1; }
  grep -qE 'cmake -S \. -B build' "$df" || { echo "docker: does not build with cmake like make build"; return 1; }
  local user
  user=$(grep -E '^USER ' "$df" | tail -1 | awk '{print $2}')
  [[ -n $user && ${user%%:*} != root && ${user%%:*} != 0 ]] || { echo "docker: the final USER is root"; return 1; }
  # Every COPY source from the build context must exist.
  while read -r src; do
    [[ -e $root/$src ]] || { echo "docker: COPY $src: no such file"; return 1; }
  done < <(grep -E '^COPY ' "$df" | grep -v -- '--from=' | awk '{for (i=2;i<NF;i++) print $i}')
  echo "docker: $df OK"
}

lint_k8s() {
  need_npm
  if node "$tools/validate-k8s.mjs" "$tools/testdata/invalid.yaml" >/dev/null 2>&1; then
    echo "k8s: the validator accepted tools/testdata/invalid.yaml: it validates nothing"; return 1
  fi
  node "$tools/validate-k8s.mjs" "$here"/k8s/*.yaml "$here"/hyperpod/*.yaml
  cat "$here/k8s/coordinator.yaml" <(echo ---) "$here/k8s/workers.yaml" |
    node "$tools/check-commands.mjs" - 4 1 128 mxserve
}

lint_helm() {
  need_npm
  local out
  out=$(mktemp -d)
  trap 'rm -rf "$out"' RETURN
  node "$tools/render-chart.mjs" "$here/helm/mxserve" > "$out/default.yaml"
  node "$tools/render-chart.mjs" "$here/helm/mxserve" --release prod --set model.source=hostPath \
    --set workers.count=8 --set workers.expertReplicas=2 --set model.numExperts=32 > "$out/replicas.yaml"
  node "$tools/render-chart.mjs" "$here/helm/mxserve" --set workers.gpu=false > "$out/cpu.yaml"
  node "$tools/validate-k8s.mjs" "$out/default.yaml" "$out/replicas.yaml" "$out/cpu.yaml"
  node "$tools/check-commands.mjs" "$out/default.yaml" 4 1 128 mxserve cuda:0
  node "$tools/check-commands.mjs" "$out/replicas.yaml" 8 2 32 prod cuda:0
  node "$tools/check-commands.mjs" "$out/cpu.yaml" 4 1 128 mxserve cpu
  grep -q 'hostPath:' "$out/replicas.yaml" || { echo "helm: model.source=hostPath did not select hostPath"; return 1; }
  grep -q 'persistentVolumeClaim:' "$out/default.yaml" || { echo "helm: the default model source is not the PVC"; return 1; }
}

for p in "${parts[@]}"; do
  case $p in
    systemd) "$here/systemd/verify.sh" ;;
    docker) lint_docker ;;
    k8s) lint_k8s ;;
    helm) lint_helm ;;
    *) echo "lint.sh: unknown part $p"; exit 2 ;;
  esac
done
echo "deploy/lint.sh: ${parts[*]}: OK"
