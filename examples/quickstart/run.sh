#!/usr/bin/env bash
# One computer, three runtimes, the same files: the shell writes, the
# JavaScript runtime reads it and writes its own, the container runtime
# (real binaries in a sandbox, when this machine can run it) reads both
# and adds a third; then the node agent restarts and every file is still
# there, in one SQLite database.
. "$(dirname "$0")/../lib.sh"

step "a local node agent (data in a temporary directory)"
start_agent
kc create notes --quota 100Mi

step "the shell runtime writes"
kc exec notes -- 'mkdir -p journal && echo "written by the shell" > journal/shell.txt && ls journal'

step "the JavaScript runtime reads it and writes its own"
kc exec notes --runtime js -- '
import { readFile, writeFile } from "node:fs/promises";
export default async () => {
  const seen = (await readFile("journal/shell.txt", "utf8")).trim();
  await writeFile("journal/js.txt", `written by JavaScript after reading: ${seen}\n`);
  return { seen };
}'

if container_possible; then
    step "the container runtime (real bash and coreutils) reads both and adds a third"
    kc exec notes --runtime container -- 'cat journal/*.txt && uname -s > journal/container.txt'
    expected="container.txt js.txt shell.txt"
else
    step "the container runtime needs root and bubblewrap: skipped here"
    expected="js.txt shell.txt"
fi

step "the node agent restarts: the files are still there"
stop_agent
start_agent
listed=$(kc exec notes -- 'ls journal | tr "\n" " " | sed "s/ $//"')
echo "$listed"
expect "files after the restart" "$listed" "$expected"
expect "the shell's file" "$(kc cat notes journal/shell.txt)" "written by the shell"
expect "JavaScript's file" "$(kc cat notes journal/js.txt)" "written by JavaScript after reading: written by the shell"
echo
echo "The whole computer is one SQLite file: $(cd "$DATA_DIR" && ls computers/notes/*.db)"
