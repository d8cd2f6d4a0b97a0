# Image of the Agent Computer node agent (DaemonSet): CSI node plugin, FUSE
# server, gRPC API and in-process runtimes.
# Build from the repository root:
#   docker build -f operator/docker/node-agent.Dockerfile -t ghcr.io/agentcomputer/node-agent:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p agentcomputer-node-agent --bin node-agent \
 && cp target/release/node-agent /node-agent

# The agent mounts FUSE filesystems into pod volume paths: it needs fuse3's
# fusermount3 and util-linux's mount/umount; it runs privileged as root.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends fuse3 util-linux ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /node-agent /usr/local/bin/node-agent
EXPOSE 7433 3128 9090
ENTRYPOINT ["/usr/local/bin/node-agent"]
