# Image of the node side of Agent Computer. It carries both programs, each
# run by its own DaemonSet of the Helm chart:
# - node-agent (unprivileged, uid 65532 set by the pod): engines, FUSE
#   serving over handed-over descriptors, gRPC API, runtimes, egress proxy;
# - agentcomputer-mounter (privileged): CSI node plugin; mounts /dev/fuse
#   descriptors into pod volume paths and hands them to the agent.
# It also carries agentcomputer-runner, static (musl), which the operator's
# sandbox pods copy into their own image with an init container and run to
# serve container execs.
# Build from the repository root:
#   docker build -f operator/docker/node-agent.Dockerfile -t ghcr.io/agentcomputer/node-agent:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    rustup target add x86_64-unknown-linux-musl \
 && cargo build --release --locked --bin node-agent --bin agentcomputer-mounter \
 && cargo build --release --locked --target x86_64-unknown-linux-musl -p agentcomputer-runner \
 && cp target/release/node-agent target/release/agentcomputer-mounter / \
 && strip -o /agentcomputer-runner target/x86_64-unknown-linux-musl/release/agentcomputer-runner

# fuse3 and util-linux: the FUSE and mount tools a mounter may call; the
# agent needs neither but shares the image.
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends fuse3 util-linux ca-certificates \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /node-agent /agentcomputer-mounter /agentcomputer-runner /usr/local/bin/
EXPOSE 7433 3128 9090
ENTRYPOINT ["/usr/local/bin/node-agent"]
