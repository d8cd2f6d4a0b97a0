# Image of the Agent Computer operator.
# Build from the repository root:
#   docker build -f operator/docker/operator.Dockerfile -t ghcr.io/agentcomputer/operator:0.1.0 .
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p agentcomputer-operator \
        --bin operator --bin agentcomputer-share-gateway \
 && cp target/release/operator target/release/agentcomputer-share-gateway /

# distroless: no shell, no package manager; runs as uid 65532 (nonroot).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /operator /usr/local/bin/operator
# The share-link gateway (chart: shareGateway.enabled) runs from this image
# with command agentcomputer-share-gateway.
COPY --from=build /agentcomputer-share-gateway /usr/local/bin/agentcomputer-share-gateway
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/usr/local/bin/operator"]
