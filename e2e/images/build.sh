#!/usr/bin/env bash
# Builds the product's images as OCI archives without a container engine
# (umoci), for the end-to-end cluster; the Dockerfiles under operator/docker
# stay what users build with. Each archive holds one image whose reference name
# is the tag; import with
#   ctr -n k8s.io images import --base-name localhost/agentcomputer-e2e/NAME OUT/NAME.tar
# and install the chart with image.registry=localhost/agentcomputer-e2e,
# image.tag=TAG, image.pullPolicy=Never.
#
#   operator    the operator, agentcomputer-share-gateway and agentcomputer-gateway binaries, the
#               shared libraries they link (from this
#               Debian host's packages: libc6, libgcc-s1, ...), CA certificates;
#               runs as 65532:65532 like the distroless image of the Dockerfile
#   node-agent  node-agent and agentcomputer-mounter (when built), the static
#               agentcomputer-runner (built here for x86_64-unknown-linux-musl:
#               sandbox pods copy it into any image with an init container),
#               fusermount3 (fuse3), mount and umount (util-linux), their
#               libraries, CA certificates
#   sandbox     a Debian bookworm userland made by mmdebstrap from Debian's
#               packages: bash, coreutils, git, python3, nodejs, npm, curl,
#               ca-certificates, pandoc with groff's pdfroff (and the
#               ghostscript it runs) and poppler-utils for examples/document,
#               and the sandbox user "sandbox" (1000:1000,
#               agentcomputer_runtime_contract::SANDBOX_USER);
#               cached in ~/.cache/agentcomputer/e2e-images by package list
#
# Usage: e2e/images/build.sh [--bin-dir DIR] [--runner PATH] [--out DIR] [--tag TAG] [--also-tag TAG] [NAME...]
#   --bin-dir  where the product binaries are (default: $CARGO_TARGET_DIR or
#              target, then /release)
#   --runner   a static agentcomputer-runner to put into the node-agent image
#              (default: `cargo build --release --target
#              x86_64-unknown-linux-musl -p agentcomputer-runner`, run here)
#   --out      directory of the archives (default $E2E_STATE/images)
#   --tag      image tag (default e2e)
#   --also-tag a second tag of the same images in each archive (both names
#              are imported), so that a `helm upgrade` can move the release
#              to another image tag, as an upgrade to a new product version
#              does, with the same binaries
#   NAME       operator, node-agent, sandbox (default: all three)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/../cluster/lib.sh"
. "$here/../cluster/oci.sh"

bin_dir="${CARGO_TARGET_DIR:-$E2E_REPO/target}/release"
out="$S/images"
tag=e2e
also_tag=
runner=
names=()
while [ $# -gt 0 ]; do
    case "$1" in
        --bin-dir) bin_dir="$2"; shift 2 ;;
        --runner) runner="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --tag) tag="$2"; shift 2 ;;
        --also-tag) also_tag="$2"; shift 2 ;;
        operator|node-agent|sandbox) names+=("$1"); shift ;;
        *) die "unknown argument $1 (usage: build.sh [--bin-dir DIR] [--runner PATH] [--out DIR] [--tag TAG] [--also-tag TAG] [operator|node-agent|sandbox...])" ;;
    esac
done
[ ${#names[@]} -gt 0 ] || names=(operator node-agent sandbox)
[ "$also_tag" != "$tag" ] || die "--also-tag must differ from --tag ($tag)"
ensure_packages umoci:umoci
mkdir -p "$out"
work="$(mktemp -d "$out/work.XXXXXX")"
trap 'rm -rf "$work"' EXIT

IMAGE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
need_bin() { [ -x "$bin_dir/$1" ] || die "$bin_dir/$1 is missing: build it first (cargo build --release -p ...)"; }
# finish LAYOUT ARCHIVE: the image of $tag (and $also_tag) written out.
finish() {
    [ -z "$also_tag" ] || umoci tag --image "$1:$tag" "$also_tag"
    oci_finish "$1" "$tag" "$2"
}
certs() { install -D -m 0644 /etc/ssl/certs/ca-certificates.crt "$1/etc/ssl/certs/ca-certificates.crt"; }

build_operator() {
    need_bin operator
    need_bin agentcomputer-share-gateway
    need_bin agentcomputer-gateway
    local r="$work/operator-root"
    oci_base_root "$r"
    certs "$r"
    oci_copy_elf "$r" "$bin_dir/operator" /usr/local/bin/operator
    # The share-link gateway runs from this image (command
    # agentcomputer-share-gateway, found through PATH).
    oci_copy_elf "$r" "$bin_dir/agentcomputer-share-gateway" /usr/local/bin/agentcomputer-share-gateway
    # So does the API gateway (command agentcomputer-gateway).
    oci_copy_elf "$r" "$bin_dir/agentcomputer-gateway" /usr/local/bin/agentcomputer-gateway
    oci_new "$work/operator" "$tag"
    umoci insert --image "$work/operator:$tag" "$r" /
    umoci config --image "$work/operator:$tag" --config.entrypoint /usr/local/bin/operator \
        --config.user 65532:65532 --config.env "PATH=$IMAGE_PATH" --config.exposedports 8080/tcp
    finish "$work/operator" "$out/operator.tar"
}

# The runner must run in any sandbox image, whatever its libc: a static
# musl build (rustup target x86_64-unknown-linux-musl; ring, its TLS
# crypto, compiles C and assembly with musl-gcc from Debian's musl-tools).
MUSL=x86_64-unknown-linux-musl
static_runner() {
    if [ -z "$runner" ]; then
        rustup target list --installed 2>/dev/null | grep -qx "$MUSL" ||
            die "the Rust target $MUSL is missing: rustup target add $MUSL"
        command -v musl-gcc >/dev/null ||
            die "musl-gcc is missing (ring needs it for $MUSL): apt-get install musl-tools"
        log "building agentcomputer-runner for $MUSL"
        (cd "$E2E_REPO" && nice cargo build --release --locked --target "$MUSL" -p agentcomputer-runner >&2) ||
            die "cannot build agentcomputer-runner for $MUSL"
        runner="${CARGO_TARGET_DIR:-$E2E_REPO/target}/$MUSL/release/agentcomputer-runner"
    fi
    [ -x "$runner" ] || die "$runner is missing"
    # ldd lists "lib => path" lines only for a dynamically linked program.
    if ldd "$runner" 2>&1 | grep -q '=>'; then
        die "$runner is dynamically linked; build it with --target $MUSL"
    fi
}

build_node_agent() {
    need_bin node-agent
    static_runner
    local r="$work/node-agent-root" p
    ensure_packages fusermount3:fuse3
    oci_base_root "$r"
    certs "$r"
    oci_copy_elf "$r" "$bin_dir/node-agent" /usr/local/bin/node-agent
    echo node-agent >"$work/node-agent.programs"
    if [ -x "$bin_dir/agentcomputer-mounter" ]; then
        oci_copy_elf "$r" "$bin_dir/agentcomputer-mounter" /usr/local/bin/agentcomputer-mounter
        echo agentcomputer-mounter >>"$work/node-agent.programs"
    fi
    # Static: nothing else to copy. The operator's sandbox pods run
    # `agentcomputer-runner install /agentcomputer` from this image (by PATH).
    # Stripped: 2.4 MB instead of 17 MB with line tables; sandbox pods copy it.
    install -D -s -m 0755 "$runner" "$r/usr/local/bin/agentcomputer-runner"
    echo agentcomputer-runner >>"$work/node-agent.programs"
    for p in fusermount3 mount umount; do oci_copy_elf "$r" "$(command -v "$p")" "/usr/bin/$p"; done
    chmod 4755 "$r/usr/bin/fusermount3"
    oci_new "$work/node-agent" "$tag"
    umoci insert --image "$work/node-agent:$tag" "$r" /
    # The chart starts the mounter as `command: [agentcomputer-mounter]`: by PATH.
    umoci config --image "$work/node-agent:$tag" --config.entrypoint /usr/local/bin/node-agent \
        --config.env "PATH=$IMAGE_PATH" \
        --config.exposedports 7433/tcp --config.exposedports 3128/tcp --config.exposedports 9090/tcp
    finish "$work/node-agent" "$out/node-agent.tar"
    # Which product programs the image carries, for e2e/images/smoke.
    mv "$work/node-agent.programs" "$out/node-agent.programs"
}

SANDBOX_PACKAGES=bash,coreutils,findutils,grep,sed,procps,git,python3,nodejs,npm,curl,ca-certificates,pandoc,groff,ghostscript,poppler-utils
build_sandbox() {
    ensure_packages mmdebstrap:mmdebstrap
    local cache="${AGENTCOMPUTER_E2E_IMAGES:-$HOME/.cache/agentcomputer/e2e-images}"
    local key
    key="$(printf 'bookworm minbase %s uid1000 sandbox' "$SANDBOX_PACKAGES" | sha256sum | cut -c1-16)"
    local layer="$cache/sandbox-rootfs-$key.tar"
    mkdir -p "$cache"
    if [ ! -f "$layer" ]; then
        log "building the sandbox userland with mmdebstrap (Debian bookworm: $SANDBOX_PACKAGES)"
        nice mmdebstrap --variant=minbase --include="$SANDBOX_PACKAGES" \
            --customize-hook='chroot "$1" useradd --create-home --uid 1000 --user-group --shell /bin/bash sandbox' \
            --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/*.bin' \
            bookworm "$layer.tmp.tar" >&2
        mv "$layer.tmp.tar" "$layer"
    fi
    oci_new "$work/sandbox" "$tag"
    umoci raw add-layer --image "$work/sandbox:$tag" "$layer"
    umoci config --image "$work/sandbox:$tag" --config.cmd /bin/bash --config.user 1000:1000 \
        --config.workingdir /home/sandbox \
        --config.env "PATH=$IMAGE_PATH" \
        --config.env HOME=/home/sandbox --config.env LANG=C.UTF-8
    finish "$work/sandbox" "$out/sandbox.tar"
}

for n in "${names[@]}"; do
    start=$SECONDS
    case "$n" in
        operator) build_operator ;;
        node-agent) build_node_agent ;;
        sandbox) build_sandbox ;;
    esac
    log "image $n:$tag${also_tag:+ and :$also_tag} -> $out/$n.tar ($(du -h "$out/$n.tar" | cut -f1), $((SECONDS - start))s)"
done
