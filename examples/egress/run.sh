#!/usr/bin/env bash
# One web server, three egress policies, three runtimes: what each runtime
# of a computer may fetch under deny-all, allow-all and an allow-list, and
# the reason given when it may not. The servers run in a network
# namespace this example creates (198.18.7.2, a benchmarking address no
# real host has), reached over a veth pair; it is removed at the end.
# Needs root (the namespace; the container runtime) and iproute2.
. "$(dirname "$0")/../lib.sh"
[ "$(id -u)" = 0 ] || fail "this example needs root: it creates a network namespace for its web servers"

server_netns 0
SERVER=$NETNS_ADDR
step "web servers on $SERVER:8080 and :8081, in network namespace $NETNS"
mkdir -p "$WORK/www"
echo "hello from the test server" >"$WORK/www/index.html"
for port in 8080 8081; do
    ip netns exec "$NETNS" python3 -m http.server "$port" --bind "$SERVER" --directory "$WORK/www" >/dev/null 2>&1 &
    at_exit "kill $! 2>/dev/null"
done
for port in 8080 8081; do
    for _ in $(seq 100); do curl -fsS --max-time 1 "http://$SERVER:$port/" >/dev/null 2>&1 && break; sleep 0.1; done
    curl -fsS --max-time 2 "http://$SERVER:$port/" >/dev/null || fail "the test server on port $port does not answer from the host"
done

step "a local node agent (its egress proxy serves the container runtime)"
start_agent --proxy-listen 127.0.0.1:0
kc create denied >/dev/null                                  # deny-all, the default
kc create open --egress allow-all >/dev/null
kc create listed --allow-cidr "$SERVER/32:8080" >/dev/null  # an allow-list: that port only

runtimes=(shell javascript)
container_possible && runtimes+=(container)

# One fetch: "ok", or "denied: <the first line of what the runtime said>".
fetch() {
    local computer=$1 runtime=$2 url=$3 out
    case $runtime in
        javascript) out=$("$BIN/kubectl-computer" exec "$computer" --runtime js -- \
            "export default async () => { try { return (await (await fetch('$url')).text()).trim(); } catch (e) { return e.message; } }" 2>&1 | tr -d '"') ;;
        *) out=$("$BIN/kubectl-computer" exec "$computer" --runtime "$runtime" -- "curl -sS --max-time 5 $url" 2>&1) || true ;;
    esac
    case $out in
        "hello from the test server") echo ok ;;
        *) echo "denied: $(echo "$out" | head -1 | cut -c1-100)" ;;
    esac
}

step "what each runtime may fetch"
printf '%-8s %-6s %-11s %s\n' policy port runtime result
table=""
for computer in denied open listed; do
    for port in 8080 8081; do
        for rt in "${runtimes[@]}"; do
            r=$(fetch "$computer" "$rt" "http://$SERVER:$port/")
            printf '%-8s %-6s %-11s %s\n' "$computer" "$port" "$rt" "$r"
            table+="$computer $port $rt ${r%%:*}"$'\n'
        done
    done
done

# What the policies say must happen.
for rt in "${runtimes[@]}"; do
    for port in 8080 8081; do
        grep -qx "denied $port $rt denied" <<<"$table" || fail "deny-all let $rt reach port $port"
        grep -qx "open $port $rt ok" <<<"$table" || fail "allow-all kept $rt from port $port"
    done
    grep -qx "listed 8080 $rt ok" <<<"$table" || fail "the allow-list kept $rt from its own port"
    grep -qx "listed 8081 $rt denied" <<<"$table" || fail "the allow-list let $rt reach another port"
done
echo
echo "ok: every runtime followed each policy (${#runtimes[@]} runtimes)"
