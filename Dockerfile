# syntax=docker/dockerfile:1
# slidegate image: both binaries, `slidegate` (the entrypoint) and `demo-upstream`.
#   docker build -t slidegate .
#   docker run --rm -p 127.0.0.1:8080:8080 -p 127.0.0.1:9091:9091 \
#       -v "$PWD/my-config.toml:/etc/slidegate/config.toml:ro" slidegate
#   docker run --rm -v "$PWD/my-config.toml:/etc/slidegate/config.toml:ro" slidegate check
#   docker run --rm --entrypoint demo-upstream slidegate 0.0.0.0:9000
# The image carries no config: mount yours at /etc/slidegate/config.toml (SLIDEGATE_CONFIG, so
# `check` and `campaign` find it too), or point SLIDEGATE_CONFIG elsewhere. Without one the
# gateway exits at once, naming the missing file and how to give one. Its listen addresses
# must not be loopback-only (0.0.0.0:8080, admin 0.0.0.0:9091) to be reachable from outside
# the container; docker compose mounts deploy/slidegate.toml, which does this.

# ---- build -------------------------------------------------------------------------------
FROM rust:1-bookworm AS builder
WORKDIR /src

# Manifests first, with stub targets, so the dependency build is cached until Cargo.toml or
# Cargo.lock change.
COPY Cargo.toml Cargo.lock ./
RUN mkdir -p src/bin \
    && echo 'fn main() {}' > src/main.rs \
    && echo 'fn main() {}' > src/bin/demo-upstream.rs \
    && touch src/lib.rs \
    && cargo build --release --locked --bins \
    && rm -rf src

# The real sources (lua/ is embedded into the binary with include_str!; build.rs compiles
# proto/ into the descriptor set gRPC reflection serves, with no protoc).
COPY build.rs ./
COPY proto ./proto
COPY src ./src
COPY lua ./lua
# Make sure cargo rebuilds the crate itself rather than trusting the stub's timestamps.
RUN touch src/main.rs src/lib.rs src/bin/demo-upstream.rs \
    && cargo build --release --locked --bins \
    && mkdir -p /out \
    && cp target/release/slidegate target/release/demo-upstream /out/

# ---- runtime -----------------------------------------------------------------------------
FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --no-create-home --shell /usr/sbin/nologin slidegate

COPY --from=builder /out/slidegate /out/demo-upstream /usr/local/bin/
USER slidegate
# 8080 traffic, 9091 admin (/metrics, /healthz, /readyz, /admin, /v1); demo-upstream uses 9000.
EXPOSE 8080 9091 9000
# SIGTERM drains in-flight requests within server.shutdown_grace.
STOPSIGNAL SIGTERM
# Healthy while the admin listener answers /healthz with 200 on 127.0.0.1 (its port:
# SLIDEGATE_HEALTH_PORT, 9091 by default, the port of the compose config). bash's /dev/tcp
# does the request, so the image needs no curl. A container that runs demo-upstream instead
# sets its own health check (docker-compose.yml does).
ENV SLIDEGATE_HEALTH_PORT=9091
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
    CMD ["bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/${SLIDEGATE_HEALTH_PORT} && printf 'GET /healthz HTTP/1.0\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]
ENV SLIDEGATE_CONFIG=/etc/slidegate/config.toml
ENTRYPOINT ["slidegate"]
CMD []
