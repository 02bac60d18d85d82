# floodgate's image: Debian 12, two stages.
#   docker build -t floodgate .
#   export ADMIN_TOKEN=$(openssl rand -hex 32)
#   docker run --rm -p 8080:8080 -p 127.0.0.1:9901:9901 -e FG_UPSTREAM=host:port -e ADMIN_TOKEN floodgate
# The image's config puts the admin listener on 0.0.0.0:9901 with admin.token
# "${ADMIN_TOKEN}": without that variable the gateway refuses to start.
# See docs/docker.md. tests/docker/test_image.sh builds and runs this file.

# --- build: the same scripts as a checkout (scripts/deps.sh, scripts/build.sh) ---------
FROM debian:bookworm AS build
# Where the source is built. The image test passes the checkout's own path, so that
# the compiler sees the paths of the host's build and ccache can answer from it.
ARG FG_SRC=/src
# Parallel jobs (default: every core).
ARG FG_JOBS
# ccache's settings, passed through from the host when its cache is mounted at
# /ccache (buildah bud --volume HOST_CACHE:/ccache); without a mount the cache stays
# in this stage and goes with it.
ARG CCACHE_BASEDIR
ARG CCACHE_NOHASHDIR
ENV CCACHE_DIR=/ccache
WORKDIR ${FG_SRC}
# The packages first, so that a builder with layer caching keeps them across source changes.
COPY scripts/deps.sh scripts/deps.sh
RUN scripts/deps.sh build
COPY . .
# The packages' versions go in the build log: where they differ from the host's,
# ccache misses (its cache is keyed on every header's content).
RUN dpkg-query -W -f '${Package}=${Version}\n' g++-12 libc6-dev linux-libc-dev libboost1.81-dev \
 && export CCACHE_STATSLOG=/tmp/ccache.log \
 && FG_JOBS="${FG_JOBS:-$(nproc)}" scripts/build.sh release floodgate \
 && { ccache --show-log-stats | sed 's/^/ccache (this build): /' || true; } \
 && mkdir -p /out && strip --strip-debug -o /out/floodgate build/src/floodgate \
 && /out/floodgate --version

# --- runtime: the binary, the shared libraries it links, nothing else ----------------
FROM debian:bookworm
COPY scripts/deps.sh /tmp/deps.sh
RUN /tmp/deps.sh runtime \
 && rm -rf /tmp/deps.sh /var/lib/apt/lists/* /var/cache/apt/*.bin \
 && useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
            --shell /usr/sbin/nologin floodgate
COPY --from=build /out/floodgate /usr/local/bin/floodgate
COPY docker/floodgate.yaml /etc/floodgate/floodgate.yaml
# Numeric, so that Kubernetes' runAsNonRoot can verify it (a name it cannot).
USER 10001:10001
# The proxy, the admin listener (/healthz /readyz /metrics open; /config /limits
# POST /reload with the bearer ADMIN_TOKEN).
EXPOSE 8080 9901
# Liveness, not readiness: /healthz answers while the process serves, whatever the
# store does. An orchestrator that restarts unhealthy containers must not restart every
# gateway at once during a Redis outage (/readyz is for the load balancer's rotation).
# No curl in the image: the binary asks its own admin listener (exit 0 on 2xx, within
# 3 s); the probes need neither the token nor a Host name.
HEALTHCHECK --interval=10s --timeout=5s --start-period=5s --retries=3 \
  CMD ["floodgate", "--health-check", "http://127.0.0.1:9901/healthz"]
ENTRYPOINT ["floodgate"]
CMD ["--config", "/etc/floodgate/floodgate.yaml"]
