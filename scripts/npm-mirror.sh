#!/usr/bin/env bash
# A local npm registry mirror, so that `npm ci` (or `npm install` with a
# lockfile) of a project runs with no internet: the public registry is used
# once, as an install step, to put the project's whole dependency closure
# into the mirror's storage; after that the mirror serves from its storage
# alone. The registry is Verdaccio (MIT), pinned with its whole tree by
# scripts/npm-mirror/package-lock.json and installed once into a cache.
#
#   scripts/npm-mirror.sh install
#       installs Verdaccio into the cache if it is not there (from the npm
#       registry) and prints its directory
#   scripts/npm-mirror.sh fill STORAGE_DIR PROJECT_DIR
#       puts every package PROJECT_DIR/package-lock.json names (lockfile
#       version 2 or 3; optional packages of other platforms left out) into
#       STORAGE_DIR: Verdaccio on loopback proxies the public registry while
#       each tarball is fetched through it and checked against the
#       lockfile's integrity; then a mirror with no uplink must serve every
#       one of them. Done once per lockfile: a stamp in STORAGE_DIR makes a
#       rerun return at once without the network, while every file it
#       names is still there (else it fills again). Several projects may
#       share one STORAGE_DIR (conventionally
#       ~/.cache/agentcomputer/npm-mirror/storage).
#   scripts/npm-mirror.sh serve STORAGE_DIR ADDR:PORT
#       runs the registry on ADDR:PORT (port 0: a free one) with no uplink,
#       so it serves what STORAGE_DIR holds and nothing else (a package or
#       version it lacks: 404); prints its URL (http://ADDR:PORT/) on stdout
#       once it answers, its log on stderr; stops on SIGTERM or SIGINT.
#       A port another program holds is refused. A fill of the same
#       STORAGE_DIR waits while it serves.
#       Needs no network: it can run in a network namespace with nothing
#       but the address it listens on.
#
# Then, in the project: npm ci --registry URL (npm sends the lockfile's
# registry.npmjs.org tarball addresses to the registry it is given, by its
# default replace-registry-host=npmjs).
#
# Needs node 20 or later and npm (Debian/Ubuntu: apt-get install nodejs
# npm), and flock (util-linux).
#   AGENTCOMPUTER_NPM_MIRROR_CACHE     where Verdaccio is installed (default
#                                      ~/.cache/agentcomputer/npm-mirror)
#   AGENTCOMPUTER_NPM_MIRROR_UPSTREAM  the registry `fill` copies from
#                                      (default https://registry.npmjs.org/)
#   AGENTCOMPUTER_NPM_MIRROR_LOG       Verdaccio's log level (default http:
#                                      a line per request)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$here/npm-mirror
cache=${AGENTCOMPUTER_NPM_MIRROR_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentcomputer/npm-mirror}
upstream=${AGENTCOMPUTER_NPM_MIRROR_UPSTREAM:-https://registry.npmjs.org/}
log_level=${AGENTCOMPUTER_NPM_MIRROR_LOG:-http}

die() { echo "npm-mirror: $*" >&2; exit 1; }
usage() {
    die "usage: npm-mirror.sh install | fill STORAGE_DIR PROJECT_DIR | serve STORAGE_DIR ADDR:PORT"
}

need_node() {
    command -v node >/dev/null || die "node is missing (Debian/Ubuntu: apt-get install nodejs npm)"
    local major
    major=$(node -p 'process.versions.node.split(".")[0]')
    [ "$major" -ge 20 ] || die "node $(node --version) is too old: Verdaccio $(verdaccio_version) needs node 20 or later"
}
verdaccio_version() { node -p 'require(process.argv[1]).dependencies.verdaccio' "$src/package.json"; }
# The install directory, named by the lockfile that pins it.
verdaccio_dir() { echo "$cache/verdaccio-$(sha256sum "$src/package-lock.json" | cut -c1-16)"; }

install_verdaccio() {
    need_node
    local dir
    dir=$(verdaccio_dir)
    if [ ! -f "$dir/.installed" ]; then
        command -v npm >/dev/null || die "npm is missing (Debian/Ubuntu: apt-get install npm)"
        mkdir -p "$cache"
        exec 8>"$cache/install.lock"
        flock 8
        if [ ! -f "$dir/.installed" ]; then
            echo "npm-mirror: installing Verdaccio $(verdaccio_version) into $dir" >&2
            rm -rf "$dir"
            mkdir -p "$dir"
            cp "$src/package.json" "$src/package-lock.json" "$dir/"
            # No install scripts: Verdaccio's tree needs none.
            (cd "$dir" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >&2) ||
                die "could not install Verdaccio from the npm registry (npm ci in $dir)"
            touch "$dir/.installed"
        fi
        exec 8>&-
    fi
    echo "$dir"
}

# Verdaccio, installed, or a clear error: serving needs no network, so it
# never installs.
installed_verdaccio() {
    need_node
    local dir
    dir=$(verdaccio_dir)
    [ -f "$dir/.installed" ] || die "Verdaccio is not installed in $dir: run scripts/npm-mirror.sh install (or fill) first"
    echo "$dir"
}

free_port() {
    node -e 'const s = require("net").createServer().listen(0, process.argv[1], () => { console.log(s.address().port); s.close(); })' "$1"
}

# start_registry MODE STORAGE ADDR:PORT LOG: Verdaccio in the background
# (pid in $registry_pid, URL in $registry_url), its configuration in $tmp,
# its log appended to the file LOG (-: stderr); returns once it answers.
start_registry() {
    local mode=$1 storage=$2 listen=$3 log=$4 host port
    host=${listen%:*} port=${listen##*:}
    case $port in "" | *[!0-9]*) die "$listen is not ADDR:PORT" ;; esac
    [ "${#port}" -le 5 ] && [ "$port" -le 65535 ] || die "$listen: port $port is not a TCP port (0 to 65535)"
    [ -n "$host" ] && [ "$host" != "$listen" ] || die "$listen is not ADDR:PORT"
    if [ "$port" = 0 ]; then
        port=$(free_port "$(tr -d '[]' <<<"$host")") || die "no free port on $host"
    elif node -e 'const s = require("net").connect(+process.argv[2], process.argv[1]); s.on("connect", () => process.exit(0)); s.on("error", () => process.exit(1))' "$(tr -d '[]' <<<"$host")" "$port" 2>/dev/null; then
        # Its answers to the ping below would pass for this mirror's.
        die "$host:$port is in use by another program"
    fi
    registry_url="http://$host:$port/"
    node "$src/mirror.mjs" config "$mode" "$storage" "$upstream" "$log_level" >"$tmp/$mode.yaml"
    if [ "$log" = - ]; then
        node "$verdaccio/node_modules/verdaccio/bin/verdaccio" --config "$tmp/$mode.yaml" --listen "$host:$port" >&2 &
    else
        node "$verdaccio/node_modules/verdaccio/bin/verdaccio" --config "$tmp/$mode.yaml" --listen "$host:$port" >>"$log" 2>&1 &
    fi
    registry_pid=$!
    local _
    for _ in $(seq 300); do
        kill -0 "$registry_pid" 2>/dev/null || { show_log "$log"; die "Verdaccio exited (listening on $host:$port)"; }
        node -e 'fetch(process.argv[1]).then(r => process.exit(r.ok ? 0 : 1), () => process.exit(1))' "$registry_url-/ping" 2>/dev/null && return
        sleep 0.1
    done
    show_log "$log"
    die "Verdaccio did not answer at $registry_url within 30 s"
}

show_log() { [ "$1" = - ] || tail -20 "$1" >&2; }

stop_registry() {
    if [ -n "${registry_pid:-}" ]; then
        kill "$registry_pid" 2>/dev/null || true
        wait "$registry_pid" 2>/dev/null || true
        registry_pid=
    fi
}

cmd=${1:-}
case $cmd in
install)
    [ $# = 1 ] || usage
    install_verdaccio
    ;;
fill)
    [ $# = 3 ] || usage
    storage=$2 project=$3
    [ -f "$project/package-lock.json" ] ||
        die "$project has no package-lock.json: make one there with npm install --package-lock-only"
    need_node
    node "$src/mirror.mjs" list "$project/package-lock.json" "$upstream"
    verdaccio=$(install_verdaccio)
    mkdir -p "$storage/.npm-mirror-filled"
    storage=$(cd "$storage" && pwd)
    lock=$(cd "$project" && pwd)/package-lock.json
    stamp="$storage/.npm-mirror-filled/$(cat "$lock" "$src/package-lock.json" "$src/mirror.mjs" | sha256sum | cut -c1-16)-$(node -p 'process.platform + "-" + process.arch')"
    exec 9>"$storage/.npm-mirror.lock"
    # Exclusive: no fill while a serve of this storage runs (it holds the
    # lock shared), so no version gets into its metadata without its
    # tarball under a running mirror.
    flock 9
    if [ -f "$stamp" ]; then
        # The stamp is trusted only while the files are there.
        if node "$src/mirror.mjs" stored "$lock" "$upstream" "$storage"; then
            echo "npm-mirror: $storage already holds what $lock names" >&2
            exit 0
        fi
        echo "npm-mirror: filling again" >&2
        rm -f "$stamp"
    fi
    tmp=$(mktemp -d -t npm-mirror.XXXXXX)
    trap 'stop_registry; rm -rf "$tmp"' EXIT
    echo "npm-mirror: filling $storage with what $lock names, from $upstream" >&2
    start_registry fill "$storage" 127.0.0.1:0 "$tmp/fill.log"
    node "$src/mirror.mjs" fetch "$lock" "$upstream" "$registry_url" ||
        { echo "Verdaccio's log:" >&2; tail -20 "$tmp/fill.log" >&2; die "could not fill $storage from $upstream"; }
    stop_registry
    # The same check a consumer makes, on a mirror with no uplink.
    node "$src/mirror.mjs" trim "$storage" "$verdaccio"
    start_registry serve "$storage" 127.0.0.1:0 "$tmp/serve.log"
    node "$src/mirror.mjs" fetch "$lock" "$upstream" "$registry_url" --check ||
        { echo "Verdaccio's log:" >&2; tail -20 "$tmp/serve.log" >&2; die "the filled mirror does not serve everything $lock names"; }
    touch "$stamp"
    ;;
serve)
    [ $# = 3 ] || usage
    storage=$2 listen=$3
    [ -d "$storage" ] || die "$storage does not exist: fill it first (scripts/npm-mirror.sh fill $storage PROJECT_DIR)"
    storage=$(cd "$storage" && pwd)
    verdaccio=$(installed_verdaccio)
    tmp=$(mktemp -d -t npm-mirror.XXXXXX)
    trap 'stop_registry; rm -rf "$tmp"' EXIT
    trap 'exit 0' TERM INT
    # Shared, for as long as it serves: a fill of this storage waits.
    exec 9>"$storage/.npm-mirror.lock"
    flock -s 9
    node "$src/mirror.mjs" trim "$storage" "$verdaccio"
    start_registry serve "$storage" "$listen" -
    echo "$registry_url"
    wait "$registry_pid" || true
    registry_pid=
    die "Verdaccio exited"
    ;;
*)
    usage
    ;;
esac
