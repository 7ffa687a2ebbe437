#!/usr/bin/env bash
# Build the CPU image with podman (or docker): `make image`.
#
#   IMAGE_TAG      the tag to build (voxpool:0.1.0-cpu)
#   IMAGE_BASE     the Python base image (python:3.11-slim), or "mmdebstrap": a Debian bookworm base with python3
#                  built here from Debian's own packages (where container registries are out of reach)
#   TORCH_WHEELS   a folder holding the torch CPU wheel (torch-2.13.0+cpu-...whl): torch is installed from it
#                  instead of download.pytorch.org (the folder is mounted into the build, read-only: podman only)
#   CA_BUNDLE      a CA bundle file for a TLS-inspecting proxy between the build and PyPI (mounted, used by pip)
#   CONTAINER      podman (default) or docker
#
# On a VM whose cgroups are a v1/v2 hybrid and whose rlimits may not be raised (the project's 2-core build VM),
# podman needs /etc/containers/containers.conf with `default_ulimits = []` under [containers] and
# `cgroup_manager = "cgroupfs"`, `runtime = "runc"` under [engine] (docs/deploy.md, "Building the images").
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${IMAGE_TAG:-voxpool:0.1.0-cpu}"
BASE="${IMAGE_BASE:-python:3.11-slim}"
ENGINE="${CONTAINER:-podman}"
args=()
if [[ "$BASE" == "mmdebstrap" ]]; then
  BASE="localhost/voxpool-python-base:bookworm"
  if ! "$ENGINE" image exists "$BASE" 2>/dev/null; then
    command -v mmdebstrap >/dev/null || { echo "build_image: mmdebstrap is not installed (apt install mmdebstrap)" >&2; exit 2; }
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' EXIT
    mmdebstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
      bookworm "$tmp/base.tar" http://deb.debian.org/debian
    "$ENGINE" import "$tmp/base.tar" "$BASE"
  fi
fi
args+=(--build-arg "PYTHON_IMAGE=$BASE")
if [[ -n "${TORCH_WHEELS:-}" ]]; then
  ls "$TORCH_WHEELS"/torch-2.13.0+cpu-*.whl >/dev/null || { echo "build_image: no torch 2.13.0 CPU wheel in $TORCH_WHEELS" >&2; exit 2; }
  args+=(--build-arg "TORCH_INDEX_URL=" --build-arg "PIP_FIND_LINKS=/wheels" --volume "$TORCH_WHEELS:/wheels:ro")
fi
if [[ -n "${CA_BUNDLE:-}" ]]; then
  args+=(--build-arg "PIP_CERT=/etc/voxpool-build-ca.crt" --volume "$(realpath "$CA_BUNDLE"):/etc/voxpool-build-ca.crt:ro")
fi
[[ "$ENGINE" == podman ]] && args+=(--format docker)  # keeps the HEALTHCHECK (the OCI format has none)
"$ENGINE" build --ignorefile deploy/Dockerfile.cpu.dockerignore -f deploy/Dockerfile.cpu "${args[@]}" -t "$TAG" .
echo "built $TAG (base $BASE)"
