#!/usr/bin/env bash
# Brings the published source of the `brush-shell` crate (whose tests/cases/
# hold the brush shell's YAML compatibility cases) into Cargo's registry
# cache without building anything, and prints the directory holding
# tests/cases. The cases are read from there at run time, never copied into
# this repository.
#
# Usage: bash bench/shell-spec/fetch-brush.sh        -> prints .../brush-shell-0.4.0
# Env:   BRUSH_VERSION (default the pinned one below), CARGO_HOME,
#        SHELL_SPEC_CACHE (where the tiny manifest lives; default
#        ${XDG_CACHE_HOME:-~/.cache}/agentcomputer/shell-spec-brush).
set -euo pipefail

# Newest published version that ships tests/cases (114 YAML files).
version="${BRUSH_VERSION:-0.4.0}"
cache="${SHELL_SPEC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentcomputer/shell-spec-brush}"
cargo_home="${CARGO_HOME:-$HOME/.cargo}"

find_src() {
    local d
    for d in "$cargo_home"/registry/src/*/"brush-shell-$version"; do
        if [ -d "$d/tests/cases" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

if src=$(find_src); then
    echo "$src"
    exit 0
fi

# A manifest that only names the crate: `cargo fetch` downloads and unpacks
# it (and its dependencies' sources) but compiles nothing.
mkdir -p "$cache/src"
cat >"$cache/Cargo.toml" <<TOML
[package]
name = "shell-spec-brush-fetch"
version = "0.0.0"
edition = "2021"
publish = false

[lib]
path = "src/lib.rs"

[dependencies]
brush-shell = { version = "=$version", default-features = false }

[workspace]
TOML
: >"$cache/src/lib.rs"
# `cargo fetch` downloads the .crate files; unpacking into registry/src
# happens when cargo reads the package, which `cargo metadata` does.
cargo fetch --quiet --manifest-path "$cache/Cargo.toml" >&2
cargo metadata --quiet --format-version 1 --manifest-path "$cache/Cargo.toml" >/dev/null

if src=$(find_src); then
    echo "$src"
else
    echo "error: brush-shell $version was fetched but tests/cases was not found under $cargo_home/registry/src" >&2
    exit 1
fi
