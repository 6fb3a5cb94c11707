# The webhook image: `sidecar-debug serve` (gunicorn over TLS on 8443).
#
# Built by scripts/images.sh webhook, which passes
#   --from localhost/sidecar-debug/debian-base:bookworm   (debootstrap'ed: no registry needed)
#   -v $HOST_CA_BUNDLE:/usr/local/share/ca-certificates/host.crt:ro   (PyPI behind a TLS proxy)
# Anywhere else: podman build --build-arg BASE_IMAGE=debian:bookworm-slim -t webhook .
#
# Runs as uid 10001 and needs no writable path except /tmp (or /dev/shm, gunicorn's worker
# heartbeat directory): run it with readOnlyRootFilesystem: true.
ARG BASE_IMAGE=localhost/sidecar-debug/debian-base:bookworm

FROM ${BASE_IMAGE} AS build
ARG PYTHON3_VERSION=3.11.2-1+b1
# ca-certificates here picks up a mounted host.crt (update-ca-certificates runs in its postinst);
# this stage is thrown away, so that certificate never reaches the final image.
RUN apt-get update \
 && apt-get install -y --no-install-recommends \
      python3=${PYTHON3_VERSION} python3-venv=${PYTHON3_VERSION} ca-certificates \
 && update-ca-certificates \
 && rm -rf /var/lib/apt/lists/*
# The package index from the building machine's pip configuration (scripts/images.sh); empty
# means pip's default. An ARG is in the environment of this stage's RUNs only.
ARG PIP_INDEX_URL
ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN python3 -m venv /opt/sidecar-debug
WORKDIR /src
# README.md is the package long description (pyproject `readme`); the glob keeps a checkout
# without it buildable.
COPY pyproject.toml README.m[d] ./
RUN test -f README.md || echo "sidecar-debug" > README.md
# Dependencies first, from pyproject.toml alone (with a placeholder package), so that a change
# under webhook/ rebuilds only the last, cheap layer.
# kubernetes >= 35 ships an asyncio client (kubernetes/aio, ~70 MB with bytecode) and its
# aiohttp stack; the webhook uses only the synchronous client (which does need pydantic).
RUN mkdir webhook && touch webhook/__init__.py \
 && /opt/sidecar-debug/bin/pip install . \
 && /opt/sidecar-debug/bin/pip uninstall -y sidecar-debug \
 && rm -rf webhook build ./*.egg-info \
 && rm -rf /opt/sidecar-debug/lib/python3.11/site-packages/kubernetes/aio \
 && /opt/sidecar-debug/bin/pip uninstall -y aiohttp aiohttp-retry aiohappyeyeballs aiosignal \
      frozenlist multidict propcache yarl \
 && /opt/sidecar-debug/bin/python -c 'import kubernetes.client, kubernetes.stream'
COPY webhook ./webhook
RUN /opt/sidecar-debug/bin/pip install --no-deps . \
 && /opt/sidecar-debug/bin/python -c 'import webhook.commands.cli' \
 && /opt/sidecar-debug/bin/pip uninstall -y pip setuptools \
 && find /opt/sidecar-debug -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/sidecar-debug/bin/python -m compileall -q -j 0 /opt/sidecar-debug/lib

FROM ${BASE_IMAGE}
ARG PYTHON3_VERSION=3.11.2-1+b1
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3=${PYTHON3_VERSION} \
 && rm -rf /var/lib/apt/lists/* /var/log/apt /var/log/dpkg.log \
 && useradd --uid 10001 --user-group --no-create-home --home-dir /tmp \
      --shell /usr/sbin/nologin sidecar-debug
COPY --from=build /opt/sidecar-debug /opt/sidecar-debug
# Bytecode was compiled at build time; a read-only root must not be written at run time.
ENV PATH=/opt/sidecar-debug/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
USER 10001:10001
WORKDIR /tmp
EXPOSE 8443
ENTRYPOINT ["sidecar-debug"]
CMD ["serve"]
