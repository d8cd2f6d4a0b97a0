#!/usr/bin/env bash
# A small web project made, built, tested, committed and published from a
# computer, the way an agent hands work over: the shell writes it, the
# JavaScript runtime tests it, git in the shell commits it, the
# JavaScript runtime's git module reads the history, and `publish` pushes
# it to a git remote (real git's http-backend on loopback, started here)
# through the computer's egress policy, which allows that one port only.
#
# With the container runtime (root and bubblewrap), the project's
# third-party dependencies (marked, front-matter: package.json and
# package-lock.json beside this script) are installed there with `npm ci`
# from a local npm mirror (scripts/npm-mirror.sh: Verdaccio with no uplink)
# in a network namespace this example creates, at 198.18.7.6:4873, an
# address no real host has, which the policy also allows; then the
# project is built and tested there with node, and real git checks the
# repository. The mirror is filled once from the public registry (an
# install step, cached in ~/.cache/agentcomputer/npm-mirror/storage, or
# AGENTCOMPUTER_NPM_MIRROR_STORAGE); the install itself reaches nothing
# but the mirror.
. "$(dirname "$0")/../lib.sh"
MIRROR_STORAGE=${AGENTCOMPUTER_NPM_MIRROR_STORAGE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentcomputer/npm-mirror/storage}

step "a git remote on loopback: a bare repository served by real git's http-backend"
mkdir -p "$WORK/remote"
git init -q --bare -b main "$WORK/remote/site.git"
git -C "$WORK/remote/site.git" config http.receivepack true
python3 "$EXAMPLES_DIR/project/git_server.py" "$WORK/remote" "$WORK/git.port" &
at_exit "kill $! 2>/dev/null"
for _ in $(seq 100); do [ -s "$WORK/git.port" ] && break; sleep 0.1; done
PORT=$(cat "$WORK/git.port")
REMOTE="http://127.0.0.1:$PORT/site.git"
echo "remote: $REMOTE"
allow=(--allow-cidr "127.0.0.1/32:$PORT")

if container_possible; then
    step "the project's dependencies in a local npm mirror (filled once from the public registry)"
    bash "$REPO/scripts/npm-mirror.sh" fill "$MIRROR_STORAGE" "$EXAMPLES_DIR/project"

    step "the mirror, serving from its storage alone, in a network namespace of its own"
    server_netns 1
    MIRROR_ADDR=$NETNS_ADDR:4873
    # Its own session, so that the end of the example stops it whole.
    ip netns exec "$NETNS" setsid bash "$REPO/scripts/npm-mirror.sh" serve "$MIRROR_STORAGE" "$MIRROR_ADDR" \
        >"$WORK/mirror.url" 2>"$WORK/mirror.log" &
    MIRROR_PID=$!
    at_exit "kill -- -$MIRROR_PID 2>/dev/null; wait $MIRROR_PID 2>/dev/null"
    for _ in $(seq 300); do
        [ -s "$WORK/mirror.url" ] && break
        kill -0 "$MIRROR_PID" 2>/dev/null || { cat "$WORK/mirror.log" >&2; fail "the npm mirror exited"; }
        sleep 0.1
    done
    MIRROR_URL=$(cat "$WORK/mirror.url")
    [ -n "$MIRROR_URL" ] || { cat "$WORK/mirror.log" >&2; fail "the npm mirror did not start within 30 s"; }
    echo "npm mirror: $MIRROR_URL"
    allow+=(--allow-cidr "$NETNS_ADDR/32:4873")
fi

step "a computer that may reach that remote${MIRROR_URL:+ and the mirror}, and nothing else"
start_agent
kc create site --quota 100Mi "${allow[@]}"

step "the shell writes a small web project: Markdown posts become HTML pages"
kc exec site -- '
mkdir -p web/src web/test web/posts
cat > web/src/slug.js <<"JS"
// Turns a title into a URL path segment.
export function slug(title) {
  return title.toLowerCase().trim().replace(/[^a-z0-9]+/g, "-").replace(/^-|-$/g, "");
}
JS
cat > web/src/render.js <<"JS"
// A post (Markdown after a front matter giving its title) as an HTML page.
import frontMatter from "front-matter";
import { marked } from "marked";
import { slug } from "./slug.js";

export const escape = (s) => s.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);

export function renderPost(text) {
  const { attributes, body } = frontMatter(text);
  if (!attributes.title) throw new Error("a post needs a title in its front matter");
  const title = String(attributes.title);
  const html = `<!doctype html><title>${escape(title)}</title>\n<h1>${escape(title)}</h1>\n${marked.parse(body)}`;
  return { title, slug: slug(title), html };
}
JS
cat > web/build.js <<"JS"
// The build: each post of posts/ becomes dist/<slug>.html, listed by
// dist/index.html.
import fs from "node:fs";
import { escape, renderPost } from "./src/render.js";

const posts = fs.readdirSync("posts").filter((f) => f.endsWith(".md")).sort()
  .map((f) => renderPost(fs.readFileSync(`posts/${f}`, "utf8")));
fs.mkdirSync("dist", { recursive: true });
for (const post of posts) fs.writeFileSync(`dist/${post.slug}.html`, post.html);
const items = posts.map((p) => `<li><a href="${p.slug}.html">${escape(p.title)}</a></li>`);
fs.writeFileSync("dist/index.html", `<!doctype html><title>Posts</title>\n<ul>\n${items.join("\n")}\n</ul>\n`);
console.log(`built ${posts.length} posts into dist/`);
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
cat > web/test/render.test.js <<"JS"
import { test } from "node:test";
import assert from "node:assert/strict";
import { renderPost } from "../src/render.js";

test("the front matter gives the title and the slug; the Markdown becomes HTML", () => {
  const post = renderPost("---\ntitle: Fish & <Chips>\n---\nSome **bold** text.\n");
  assert.equal(post.slug, "fish-chips");
  assert.match(post.html, /<h1>Fish &#38; &#60;Chips&#62;<\/h1>/);
  assert.match(post.html, /<p>Some <strong>bold<\/strong> text.<\/p>/);
});

test("a post without a title is refused", () => {
  assert.throws(() => renderPost("Just text."), /needs a title/);
});
JS
cat > web/posts/hello-world.md <<"MD"
---
title: Hello, World!
---
The first post, written by an agent in its computer.
MD
cat > web/posts/agent-computer.md <<"MD"
---
title: Agent Computer
---
Every agent gets a computer: **one SQLite database** holds its files.
MD
printf "dist/\nnode_modules/\n" > web/.gitignore
ls -R web'
# The dependencies, pinned with their whole tree.
kc put site "$EXAMPLES_DIR/project/package.json" web/package.json
kc put site "$EXAMPLES_DIR/project/package-lock.json" web/package-lock.json

step "the JavaScript runtime runs the tests that need no dependency"
tested=$(kc exec site --runtime js -- 'await import("./web/test/slug.test.js")')
echo "$tested"
expect "the slug tests pass in the JavaScript runtime" "$tested" "3 tests passed"

if [ -n "${MIRROR_URL:-}" ]; then
    step "the container runtime installs the dependencies from the mirror, builds and tests"
    # Every npm command asks the mirror (never the public registry, not
    # even for its update check), through the egress proxy.
    kc exec site --runtime container -e "npm_config_registry=$MIRROR_URL" -e npm_config_update_notifier=false \
        -e npm_config_cache=/tmp/npm-cache -- 'cd /workspace/web && npm ci --no-audit --no-fund && npm run build && npm test'
    # Verdaccio logs a request when it answers and again, with the size, when done.
    served=$(grep -o "'GET /[^']*\.tgz', bytes: 0/[1-9]" "$WORK/mirror.log" | sort -u | wc -l)
    expect "the mirror served every package of the lockfile" "$served" \
        "$(grep -c '"node_modules/' "$EXAMPLES_DIR/project/package-lock.json")"
    kc exec site -- 'cat web/dist/index.html'
    expect "the post's Markdown became HTML" \
        "$(kc exec site -- 'grep -o "<strong>[^<]*</strong>" web/dist/agent-computer.html')" \
        "<strong>one SQLite database</strong>"
else
    echo "SKIPPED: installing the dependencies from a local npm mirror, then building and testing" \
        "with them, needs the container runtime (root and bubblewrap)"
fi

step "commit it with git, in the shell"
kc exec site -- 'cd web && git init -q -b main && git add -A && git commit -qm "Markdown posts rendered to pages, with slugs for their links" && git log --oneline && git status --short'
expect "dependencies and the build output are ignored, not committed" \
    "$(kc exec site -- 'cd web && git ls-files | sort | tr "\n" " "')" \
    ".gitignore build.js package-lock.json package.json posts/agent-computer.md posts/hello-world.md src/render.js src/slug.js test/render.test.js test/slug.test.js "

step "the history, read from the JavaScript runtime's git module"
kc exec site --runtime js -- '
import git from "git";
const [last] = await git.log({ dir: "/workspace/web", n: 1 });
console.log(`${last.oid.slice(0, 7)} ${last.message.split("\n")[0]} (by ${last.author.name})`);'

if container_possible; then
    step "real git in the container runtime checks the same repository"
    kc exec site --runtime container -- 'cd /workspace/web && git fsck --strict && git log --oneline && git status --short'
fi

step "publish: commit what changed and push it, through the egress policy"
kc exec site -- 'cat > web/posts/publishing.md <<"MD"
---
title: Publishing from a computer
---
Pushed by kubectl-computer publish.
MD'
kc publish site web --remote "$REMOTE" --branch main -m "One more post"
expect "the remote has both commits" \
    "$(git -C "$WORK/remote/site.git" log --format=%s main | tr "\n" "|")" \
    "One more post|Markdown posts rendered to pages, with slugs for their links|"
git -C "$WORK/remote/site.git" fsck --strict
git clone -q "$WORK/remote/site.git" "$WORK/checkout"
expect "a clone of the remote has the new post" "$(sed -n 2p "$WORK/checkout/posts/publishing.md")" \
    "title: Publishing from a computer"

step "a remote the policy does not allow is refused, with the reason"
if kc publish site web --remote "http://127.0.0.1:$((PORT == 65535 ? PORT - 1 : PORT + 1))/site.git" 2>"$WORK/refused"; then
    fail "a publish to a port the policy does not allow succeeded"
fi
cat "$WORK/refused"
grep -q "egress" "$WORK/refused" || fail "the refusal does not name the egress policy"
echo "refused, as it should be"
