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

. "$E2E_DIR/oci.sh"
new_image() { oci_new "$work/$1" "$2"; }
finish() {
    oci_finish "$work/$1" "$2" "$out/$1.tar"
    log "image $1:$2 -> $out/$1.tar"
}
base_root() { oci_base_root "$1"; }

# pause
r="$work/pause-root"; mkdir -p "$r"
oci_copy_elf "$r" "$(command -v catatonit)" /catatonit
new_image pause catatonit
umoci insert --image "$work/pause:catatonit" "$r" /
umoci config --image "$work/pause:catatonit" --config.entrypoint /catatonit --config.entrypoint -P \
    --config.user 65535:65535
finish pause catatonit

# busybox
r="$work/busybox-root"; mkdir -p "$r/bin"
base_root "$r"
oci_copy_elf "$r" "$(command -v busybox)" /bin/busybox
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
