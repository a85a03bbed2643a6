# syntax=docker/dockerfile:1
# vgpu-guard: one image for `vgpu-guard serve webhook` and `vgpu-guard serve controller`.
#
#   docker build -t <registry>/vgpu-guard:0.1.0 .
#
# Stage 1 builds wheels for the project and every dependency; stage 2 installs them with no index
# and no compiler, so the final image holds only the interpreter and installed packages.

ARG PYTHON_IMAGE=python:3.11-slim

FROM ${PYTHON_IMAGE} AS builder
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the package build reads (pyproject's package-dir maps these four trees).
COPY pyproject.toml ./
COPY vgpu_guard ./vgpu_guard
COPY webhook ./webhook
COPY controller ./controller
COPY certs ./certs
RUN pip wheel --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
# No .pyc writes at run time (the root filesystem is read-only in the chart); output unbuffered
# so logs reach the kubelet as they happen.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# Offline install from the builder's wheels; pip compiles the bytecode now, as root, once.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels vgpu-guard \
    && useradd --uid 10001 --user-group --no-create-home --home-dir /tmp --shell /usr/sbin/nologin vgpu-guard
# Numeric, so Kubernetes can verify runAsNonRoot without reading /etc/passwd.
USER 10001:10001
ENV HOME=/tmp
WORKDIR /tmp
EXPOSE 9443 8080
ENTRYPOINT ["vgpu-guard"]
CMD ["--help"]
