# Image of the node side of Agent Computer. It carries both programs, each
# run by its own DaemonSet of the Helm chart:
# - node-agent (unprivileged, uid 65532 set by the pod): engines, FUSE
#   serving over handed-over descriptors, gRPC API, runtimes, egress proxy;
# - agentcomputer-mounter (privileged): CSI node plugin; mounts /dev/fuse
#   descriptors into pod volume paths and hands them to the agent.
# Build from the repository root:
#   docker build -f operator/docker/node-agent.Dockerfile -t ghcr.io/agentcomputer/node-agent:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked --bin node-agent --bin agentcomputer-mounter \
 && cp target/release/node-agent target/release/agentcomputer-mounter /

# fuse3 and util-linux: the FUSE and mount tools a mounter may call; the
# agent needs neither but shares the image.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends fuse3 util-linux ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /node-agent /agentcomputer-mounter /usr/local/bin/
EXPOSE 7433 3128 9090
ENTRYPOINT ["/usr/local/bin/node-agent"]
