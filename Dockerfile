# syntax=docker/dockerfile:1
#
# kube-gpu-exporter: the per-node exporter (`serve`) and the rules/dashboards generator
# (`generate`) in one image.
#
#   docker build -t kube-gpu-exporter .
#
# Two stages on the same slim Python base. The builder turns the project and its runtime
# dependencies, at the versions requirements.lock pins, into wheels (all of them ship manylinux
# wheels, so no compiler is needed there either); the final stage installs only those wheels,
# with no compiler, no build tools, no test extras and no source tree. The installed footprint
# is measured without a Docker engine by `bench/image_footprint.py` (target: under 200 MB).
#
# NVML (libnvidia-ml.so.1) is not in the image: the NVIDIA container toolkit mounts the host
# driver's copy into the container (runtimeClassName: nvidia, or NVIDIA's runtime as the node
# default), so the library always matches the node's kernel module.

ARG PYTHON_IMAGE=python:3.12-slim

# --- builder: wheels of the project and of its runtime dependencies ----------------------------
FROM ${PYTHON_IMAGE} AS builder

ENV PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1

WORKDIR /src
# The runtime dependencies first, exactly as requirements.lock pins them, each wheel checked
# against its hash, so two builds of one commit install the same bytes (`make lock` writes the
# lock from pyproject.toml's ranges; a dependency missing from it fails here, never fetched
# unpinned). Their layer is cached until the lock changes. The `test` extra is never asked for.
COPY requirements.lock ./
RUN pip wheel --no-cache-dir --require-hashes --wheel-dir /wheels -r requirements.lock

# Then the project's own wheel: only what it is built from (pyproject.toml names README.md as
# the long description). Its dependencies are the wheels above: the final stage's install,
# from them alone, fails if the lock does not satisfy pyproject.toml's ranges.
COPY pyproject.toml README.md ./
COPY exporter ./exporter
COPY rules ./rules
COPY grafana ./grafana
COPY demo ./demo
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

# --- final: the installed wheels on a clean slim base --------------------------------------------
FROM ${PYTHON_IMAGE}

# A global ARG reaches a stage's instructions only when the stage declares it again.
ARG PYTHON_IMAGE
# The release; tests/test_dockerfile.py keeps it equal to kube_gpu_exporter.exporter.__version__.
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kube-gpu-exporter" \
      org.opencontainers.image.description="Prometheus exporter for NVIDIA GPUs on Kubernetes, with pod attribution, alert rules and dashboards" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/kube-gpu-exporter/kube-gpu-exporter" \
      org.opencontainers.image.documentation="https://github.com/kube-gpu-exporter/kube-gpu-exporter/blob/main/README.md" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="docker.io/library/${PYTHON_IMAGE}"

# PYTHONDONTWRITEBYTECODE: the root filesystem is read-only in the DaemonSet, so Python must
# not try to write __pycache__ (the base image ships its standard library without .pyc too).
# PYTHONUNBUFFERED: log lines reach `kubectl logs` as they are written.
# NVIDIA_*: ask the container toolkit for NVML and the device nodes of every GPU, and for the
# `utility` capability only (no CUDA compute libraries); the DaemonSet sets the same.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility

# The wheels are bind-mounted from the builder, not copied: a COPY would stay in the image as a
# layer of its own even after the files were deleted. pip compiles .pyc as it installs: the tree
# is read-only at run time, and without them every start would compile the modules again. What
# pip installs is the image: nothing is trimmed afterwards (the `kubernetes` package, which
# once needed that, is the optional auth-provider extra and not installed here; figures in
# bench/README.md). The last command proves the entry point.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels kube-gpu-exporter \
    && kube-gpu-exporter --version

# Root (uid 0), with every capability dropped by the DaemonSet: the kubelet's pod-resources
# socket (/var/lib/kubelet/pod-resources/kubelet.sock) is owned by root and not writable by
# anyone else, and connecting to a unix socket needs write permission on it. Nothing else needs
# root; nothing is written anywhere at run time.
USER 0:0
WORKDIR /

EXPOSE 19400
ENTRYPOINT ["kube-gpu-exporter"]
CMD ["serve"]
