#!/usr/bin/env bash
# Try and roll back, as an agent does before a risky step: a checkpoint
# (snapshot), a change that breaks the project, a check that fails, and
# a restore that brings back every file as it was, byte for byte. The
# restore is itself undoable (it takes a snapshot first). Snapshots are
# positions in the computer's continuous backup, here a directory
# (`--backup file://DIR`; S3-compatible object storage in production).
. "$(dirname "$0")/../lib.sh"

step "a local node agent that backs every computer up to $WORK/backup"
start_agent --backup "file://$WORK/backup"
kc create app --quota 100Mi

step "a small project, and the check it must pass"
kc exec app -- '
mkdir -p src tests
printf "def add(a, b):\n    return a + b\n" > src/calc.py
printf "from calc import add\nassert add(2, 3) == 5\n" > tests/test_calc.py
printf "#!/bin/sh\ngrep -q \"return a + b\" src/calc.py && test -f tests/test_calc.py\n" > check.sh
chmod +x check.sh'
kc exec app -- 'sh check.sh && echo "check passes"'
before=$(kc exec app -- 'find . -type f | sort | xargs sha256sum')
echo "$before"
case $before in *"./src/calc.py"*"./tests/test_calc.py"*) ;; *) fail "no checksums of the project's files: $before" ;; esac

step "checkpoint before the risky step"
kc snapshot app before-refactor
kc snapshots app

step "the risky step goes wrong"
kc exec app -- 'rm -rf tests && sed -i "s/a + b/a - b/" src/calc.py && echo "half done" > NOTES.md'
if kc exec app -- 'sh check.sh' 2>/dev/null; then fail "the broken project passed its check"; fi
echo "the check fails now"

step "restore the checkpoint"
kc restore app --to before-refactor
after=$(kc exec app -- 'find . -type f | sort | xargs sha256sum')
expect "every file as before, byte for byte" "$after" "$before"
kc exec app -- 'sh check.sh && echo "check passes again"'
expect "the half-done note is gone" "$(kc exec app -- 'test -e NOTES.md && echo there || echo gone')" "gone"
kc snapshots app
