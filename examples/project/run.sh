#!/usr/bin/env bash
# A small web project made, built, tested, committed and published from a
# computer, the way an agent hands work over: the shell writes it, the
# JavaScript runtime tests it, git in the shell commits it, the
# JavaScript runtime's git module reads the history, and `publish` pushes
# it to a git remote (real git's http-backend on loopback, started here)
# through the computer's egress policy, which allows that one port only.
# With the container runtime (root and bubblewrap), real git there checks
# the repository too.
. "$(dirname "$0")/../lib.sh"

step "a git remote on loopback: a bare repository served by real git's http-backend"
mkdir -p "$WORK/remote"
git init -q --bare -b main "$WORK/remote/site.git"
git -C "$WORK/remote/site.git" config http.receivepack true
python3 "$EXAMPLES_DIR/project/git_server.py" "$WORK/remote" "$WORK/git.port" &
SERVER_PID=$!
trap 'kill $SERVER_PID 2>/dev/null; finish' EXIT
for _ in $(seq 100); do [ -s "$WORK/git.port" ] && break; sleep 0.1; done
PORT=$(cat "$WORK/git.port")
REMOTE="http://127.0.0.1:$PORT/site.git"
echo "remote: $REMOTE"

step "a computer that may reach that remote and nothing else"
start_agent
kc create site --quota 100Mi --allow-cidr "127.0.0.1/32:$PORT"

step "the shell writes a small web project"
kc exec site -- '
mkdir -p web/src web/test
cat > web/src/slug.js <<"JS"
// Turns a title into a URL path segment.
export function slug(title) {
  return title.toLowerCase().trim().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "");
}
JS
cat > web/test/slug.test.js <<"JS"
import { slug } from "../src/slug.js";
const cases = [["Hello, World!", "hello-world"], ["  Agent Computer  ", "agent-computer"], ["a--b", "a-b"]];
for (const [input, want] of cases) {
  const got = slug(input);
  if (got !== want) throw new Error(`slug(${JSON.stringify(input)}) = ${got}, want ${want}`);
}
console.log(`${cases.length} tests passed`);
JS
cat > web/build.sh <<"SH"
#!/bin/sh
# The build: a page listing the posts, each linked by its slug.
set -e
mkdir -p dist
{ echo "<!doctype html><title>Posts</title><ul>"
  while read -r title; do echo "<li>$title</li>"; done < posts.txt
  echo "</ul>"; } > dist/index.html
SH
chmod +x web/build.sh
printf "Hello, World!\nAgent Computer\n" > web/posts.txt
printf "dist/\n" > web/.gitignore
ls -R web'

step "build it (shell) and test it (JavaScript runtime)"
kc exec site -- 'cd web && ./build.sh && cat dist/index.html'
tested=$(kc exec site --runtime js -- 'await import("./web/test/slug.test.js")')
echo "$tested"
expect "the tests pass in the JavaScript runtime" "$tested" "3 tests passed"

step "commit it with git, in the shell"
kc exec site -- 'cd web && git init -q -b main && git add -A && git commit -qm "A page of posts, and slugs for their links" && git log --oneline && git status --short'
expect "the build output is ignored, not committed" \
    "$(kc exec site -- 'cd web && git ls-files | sort | tr "\n" " "')" \
    ".gitignore build.sh posts.txt src/slug.js test/slug.test.js "

step "the history, read from the JavaScript runtime's git module"
kc exec site --runtime js -- '
import git from "git";
const [last] = await git.log({ dir: "/workspace/web", n: 1 });
console.log(`${last.oid.slice(0, 7)} ${last.message.split("\n")[0]} (by ${last.author.name})`);'

if container_possible; then
    step "real git in the container runtime checks the same repository"
    kc exec site --runtime container -- 'cd /workspace/web && git fsck --strict && git log --oneline'
fi

step "publish: commit what changed and push it, through the egress policy"
kc exec site -- 'echo "Publishing from a computer" >> web/posts.txt'
kc publish site web --remote "$REMOTE" --branch main -m "One more post"
expect "the remote has both commits" \
    "$(git -C "$WORK/remote/site.git" log --format=%s main | tr "\n" "|")" \
    "One more post|A page of posts, and slugs for their links|"
git -C "$WORK/remote/site.git" fsck --strict
git clone -q "$WORK/remote/site.git" "$WORK/checkout"
expect "a clone of the remote has the new post" "$(tail -1 "$WORK/checkout/posts.txt")" "Publishing from a computer"

step "a remote the policy does not allow is refused, with the reason"
if kc publish site web --remote "http://127.0.0.1:$((PORT == 65535 ? PORT - 1 : PORT + 1))/site.git" 2>"$WORK/refused"; then
    fail "a publish to a port the policy does not allow succeeded"
fi
cat "$WORK/refused"
grep -q "egress" "$WORK/refused" || fail "the refusal does not name the egress policy"
echo "refused, as it should be"
