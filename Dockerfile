# syntax=docker/dockerfile:1
# The extender image: docker build -t runtimeclass-extender:0.1.0 .
#
# Stage 1 builds the project's wheel and installs it with its dependencies into a
# virtual environment; stage 2 copies only that environment onto a clean slim base, so
# the final image carries no build frontend, no pip and no source tree.

FROM python:3.11-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY extender ./extender
COPY policies ./policies
# All dependencies ship manylinux wheels: no compiler needed even here. The `speed`
# extra adds uvloop, which `serve` uses when present (BENCHMARKS.md).
RUN pip wheel --wheel-dir /wheels ".[speed]" \
 && python -m venv /opt/venv \
 && /opt/venv/bin/pip install --no-index --find-links /wheels "runtimeclass-extender[speed]" \
 && /opt/venv/bin/pip uninstall --yes pip

FROM python:3.11-slim-bookworm
# The root filesystem is read-only in deploy/: byte code is compiled at install time
# and never written at run time.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH
RUN python -m pip uninstall --yes pip setuptools wheel \
 && groupadd --system --gid 65532 extender \
 && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin extender
COPY --from=build /opt/venv /opt/venv
# Numeric, so that Kubernetes' runAsNonRoot can verify it without /etc/passwd.
USER 65532:65532
EXPOSE 8888
ENTRYPOINT ["runtimeclass-extender"]
CMD ["serve"]
