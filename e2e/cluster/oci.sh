# shellcheck shell=bash
# Helpers to build OCI images without a container engine (umoci), shared by
# e2e/cluster/images.sh and e2e/images/build.sh. Each image is an OCI layout in
# a work directory, written out as an OCI archive whose one reference name is
# the image's tag (import with `ctr images import --base-name REPO`).

# oci_new LAYOUT TAG: an empty image.
oci_new() {
    rm -rf "$1"
    umoci init --layout "$1"
    umoci new --image "$1:$2"
}

# oci_finish LAYOUT TAG ARCHIVE: drops unreferenced blobs, writes the archive.
oci_finish() {
    umoci gc --layout "$1"
    tar -C "$1" -cf "$3.tmp" .
    mv "$3.tmp" "$3"
}

# oci_base_root DIR: /etc/passwd and /etc/group (root, nobody, and the
# "nonroot" user 65532 of distroless images), /tmp.
oci_base_root() {
    mkdir -p "$1/etc" "$1/tmp"
    chmod 1777 "$1/tmp"
    printf 'root:x:0:0:root:/root:/bin/sh\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$1/etc/passwd"
    printf 'root:x:0:\nnonroot:x:65532:\nnogroup:x:65534:\n' >"$1/etc/group"
}

# oci_copy_elf ROOT FILE [DEST]: copies an executable and the shared libraries
# and dynamic loader it needs (as ldd resolves them on this Debian host) into
# ROOT, at the same paths.
oci_copy_elf() {
    local root="$1" file="$2" dest="${3:-$2}" lib
    install -D -m 0755 "$file" "$root$dest"
    if ldd "$file" >/dev/null 2>&1; then
        ldd "$file" | grep -q 'not found' && { echo "oci: $file needs a library not found here" >&2; return 1; }
        for lib in $(ldd "$file" | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
            [ -e "$root$lib" ] || install -D -m 0755 "$(readlink -f "$lib")" "$root$lib"
        done
    fi
}
