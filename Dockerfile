# syntax=docker/dockerfile:1
# Multi-stage: wheels are built with the pinned constraints, the runtime image has no build tools,
# runs as an unprivileged user and works with a read-only root filesystem.
# BASE_IMAGE: any Debian bookworm image with Python 3.11 whose `pip` installs system-wide (the public
# python:3.11-slim-bookworm by default; hack/build-image.sh passes a local debootstrap-made one).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY hack/constraints.txt hack/constraints.txt
COPY operator operator
RUN pip wheel --no-cache-dir --wheel-dir /wheels -c hack/constraints.txt .

FROM ${BASE_IMAGE}
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY --from=build /wheels /wheels
# Every wheel was built against hack/constraints.txt, so installing the files pins every version.
RUN pip install --no-cache-dir --no-index --find-links=/wheels /wheels/*.whl \
 && rm -rf /wheels \
 && useradd --system --uid 65532 --no-create-home --shell /usr/sbin/nologin draxr
USER 65532:65532
ENTRYPOINT ["draxr"]
CMD ["version"]
