# Sourced by run.sh: cargo --config flags that compile the interpreters'
# hot crates optimised inside a debug build (a debug Pulley or monty runs
# 10-50x slower than the release binary the agent ships as).
OPT_FLAGS=()
for pkg in pulley-interpreter wasmtime wasmtime-internal-fiber wasmtime-environ \
           monty monty-types ruff_python_parser ruff_python_ast; do
  OPT_FLAGS+=(--config "profile.dev.package.$pkg.opt-level=3")
done
