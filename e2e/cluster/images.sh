#!/usr/bin/env bash
# Builds the cluster's own OCI images without a container engine, with umoci,
# as OCI archives in $E2E_STATE/images/NAME.tar, each holding one image whose
# reference name is a tag; `up` imports them with
# `ctr -n k8s.io images import --base-name localhost/agentcomputer-e2e/NAME`.
#   pause    catatonit (Debian) as `catatonit -P`: the pod sandbox image
#   busybox  busybox-static (Debian) with its applets: pods of the smoke test
#   coredns  the CoreDNS binary built by build-tools.sh
#
# Usage: e2e/cluster/images.sh BIN_DIR
set -euo pipefail
. "$(dirname "$0")/lib.sh"

bin="${1:?usage: images.sh BIN_DIR}"
out="$S/images"
work="$S/images/work"
rm -rf "$work"; mkdir -p "$work" "$out"

# new_image NAME TAG: an empty image in its own OCI layout.
new_image() {
    umoci init --layout "$work/$1"
    umoci new --image "$work/$1:$2"
}

# finish NAME TAG: drops unreferenced blobs and writes the archive.
finish() {
    umoci gc --layout "$work/$1"
    tar -C "$work/$1" -cf "$out/$1.tar.tmp" .
    mv "$out/$1.tar.tmp" "$out/$1.tar"
    log "image $1:$2 -> $out/$1.tar"
}

# A minimal root: /etc/passwd and /etc/group for root and nobody, /tmp.
base_root() {
    local r="$1"
    mkdir -p "$r/etc" "$r/tmp"
    chmod 1777 "$r/tmp"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$r/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$r/etc/group"
}

# pause
r="$work/pause-root"; mkdir -p "$r"
install -m 0755 "$(command -v catatonit)" "$r/catatonit"
new_image pause catatonit
umoci insert --image "$work/pause:catatonit" "$r" /
umoci config --image "$work/pause:catatonit" --config.entrypoint /catatonit --config.entrypoint -P \
    --config.user 65535:65535
finish pause catatonit

# busybox
r="$work/busybox-root"; mkdir -p "$r/bin"
base_root "$r"
install -m 0755 "$(command -v busybox)" "$r/bin/busybox"
for applet in $("$r/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -s busybox "$r/bin/$applet"
done
new_image busybox 1
umoci insert --image "$work/busybox:1" "$r" /
umoci config --image "$work/busybox:1" --config.env PATH=/bin --config.cmd /bin/sh
finish busybox 1

# coredns
coredns_version="$("$bin/coredns" -version | sed -n 's/^CoreDNS-\([^ ]*\).*/v\1/p' | head -n1)"
[ -n "$coredns_version" ] || die "cannot read the version of $bin/coredns"
r="$work/coredns-root"; mkdir -p "$r"
base_root "$r"
install -m 0755 "$bin/coredns" "$r/coredns"
new_image coredns "$coredns_version"
umoci insert --image "$work/coredns:$coredns_version" "$r" /
umoci config --image "$work/coredns:$coredns_version" --config.entrypoint /coredns
finish coredns "$coredns_version"
echo "$coredns_version" >"$out/coredns.version"

rm -rf "$work"
