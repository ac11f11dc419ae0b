# syntax=docker/dockerfile:1
# The extender image: docker build -t runtimeclass-extender:0.1.0 .
#
# Stage 1 installs the locked dependencies into a virtual environment, then builds the
# project's wheel and adds it without its dependencies; stage 2 copies only that
# environment onto a clean slim base, so the final image carries no build frontend, no
# pip and no source tree.
#
# Nothing is resolved at build time: every package comes from requirements/, pinned with
# hashes (pip's --require-hashes refuses anything else) and as wheels only, so two
# builds of one commit install the same files (docs/development.md, "The image's
# lock files", says how the locks are made and checked).
#
# The base is pinned to a Python patch release and Debian release. A tag still moves
# when Debian's security updates are rebuilt into it: each release build's provenance
# (the release workflow builds with provenance mode=max) records the digest every FROM
# resolved to, and the workflow lists them in its run summary; to hold a build to one
# base exactly, write that digest here as python:3.11.16-slim-bookworm@sha256:<digest>.

FROM python:3.11.16-slim-bookworm AS build
ENV PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore
WORKDIR /src
COPY requirements/image.txt requirements/image-build.txt ./requirements/
# The runtime dependencies (pyproject.toml's and the `speed` extra's uvloop, which
# `serve` uses when present: BENCHMARKS.md), from the lock: all ship manylinux wheels
# for amd64 and arm64, so no compiler is needed. Then the build backend, from its own
# lock, into a second environment that only builds the wheel below. Neither environment
# gets a pip of its own: the base image's pip installs into them (--python).
RUN python -m venv --without-pip /opt/venv \
 && pip --python /opt/venv/bin/python install --require-hashes --no-deps --only-binary :all: \
      -r requirements/image.txt \
 && python -m venv --without-pip /opt/build \
 && pip --python /opt/build/bin/python install --require-hashes --no-deps --only-binary :all: \
      -r requirements/image-build.txt
COPY pyproject.toml README.md ./
COPY extender ./extender
COPY policies ./policies
# The project itself, built by the locked backend (no build isolation: nothing fetched;
# SOURCE_DATE_EPOCH, 1980-01-01, the earliest date a zip holds, makes the wheel the same
# bytes every time) and installed without dependencies, which are all in place: pip
# check says so.
RUN SOURCE_DATE_EPOCH=315532800 pip --python /opt/build/bin/python wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && pip --python /opt/venv/bin/python install --no-deps --no-index /wheels/runtimeclass_extender-*.whl \
 && pip --python /opt/venv/bin/python check

FROM python:3.11.16-slim-bookworm
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
