# The sandbox image of the end-to-end suite on kind: the same userland as
# e2e/images/build.sh assembles without Docker (bash, coreutils, git,
# python3, node, npm, curl) and the user `agent` (1000:1000).
FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends bash coreutils findutils grep sed procps \
      git python3 nodejs npm curl ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd -g 1000 agent && useradd -u 1000 -g 1000 -d /workspace -s /bin/bash agent
USER 1000:1000
