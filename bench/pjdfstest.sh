#!/usr/bin/env bash
# Runs pjdfstest (the Rust rewrite, crates.io `pjdfstest`) against a local
# directory on / (ext4 or whatever backs it) and against an Agent Computer
# FUSE mount, prints both summaries, and fails if the mount has a failure
# that the local filesystem does not also show.
#
# Needs root (the suite switches users and makes device nodes) and
# /dev/fuse. Installs pjdfstest and the dummy user `tests` when missing.
# Usage: bench/pjdfstest.sh [TEST_PATTERN...]
set -euo pipefail
cd "$(dirname "$0")/.."

[ "$(id -u)" = 0 ] || { echo "error: run as root" >&2; exit 2; }
[ -e /dev/fuse ] || { echo "SKIPPED: /dev/fuse is absent" >&2; exit 0; }
[ -f "$HOME/.cargo/env" ] && . "$HOME/.cargo/env"
command -v pjdfstest >/dev/null || cargo install --locked pjdfstest
# Dummy users of the suite: nobody/nogroup exist on Debian; add `tests`.
getent group tests >/dev/null || groupadd tests
id tests >/dev/null 2>&1 || useradd -g tests -M -N -s /usr/sbin/nologin tests
nobody_group=$(id -gn nobody)

cargo build --release -q -p agentcomputer-fuse --bin agentcomputer-fuse
server=target/release/agentcomputer-fuse

work=$(mktemp -d /var/tmp/pjdfstest.XXXXXX)
chmod 755 "$work"
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    mountpoint -q "$work/mnt" && umount -l "$work/mnt"
    rm -rf "$work"
}
trap cleanup EXIT

# naptime: the shortest sleep between timestamp checks with which the local
# filesystem passes every test.
cat > "$work/pjdfstest.toml" <<TOML
[features]
posix_fallocate = {}
rename_ctime = {}
utime_now = {}
utimensat = {}

[settings]
naptime = 0.01
allow_remount = false

[dummy_auth]
entries = [["nobody", "$nobody_group"], ["tests", "tests"]]
TOML

mkdir -m 755 "$work/local" "$work/mnt"
"$server" --db "$work/fs.db" --mountpoint "$work/mnt" > "$work/server.out" &
pid=$!
for _ in $(seq 100); do grep -q mounted "$work/server.out" 2>/dev/null && break; sleep 0.1; done
grep -q mounted "$work/server.out" || { echo "error: the mount did not come up" >&2; exit 1; }

run() { (cd "$work" && pjdfstest -c pjdfstest.toml -p "$1" "${@:2}") > "$work/$(basename "$1").log" 2>&1 || true; }
run "$work/local" "$@"
run "$work/mnt" "$@"

# Lines look like "<name> <padding> ok|FAILED|skipped|PASSED UNEXPECTEDLY".
failures() {
    sed 's/\x1b\[[0-9;]*m//g' "$1" | { grep -E '[[:space:]](FAILED|PASSED UNEXPECTEDLY)$' || true; } |
        awk '{print $1}' | sort -u
}
failures "$work/local.log" > "$work/local.failed"
failures "$work/mnt.log" > "$work/mnt.failed"

echo "local filesystem ($(stat -f -c %T "$work/local")): $(grep Summary "$work/local.log" | sed 's/\x1b\[[0-9;]*m//g')"
echo "agentcomputer FUSE mount:  $(grep Summary "$work/mnt.log" | sed 's/\x1b\[[0-9;]*m//g')"
extra=$(comm -13 "$work/local.failed" "$work/mnt.failed")
if [ -n "$extra" ]; then
    echo "failures on the mount only:"
    echo "$extra"
    grep -A8 -F -f <(echo "$extra") "$work/mnt.log" | head -200
    exit 1
fi
echo "no failures beyond the local filesystem's"
