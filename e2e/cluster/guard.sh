#!/usr/bin/env bash
# The network guard of the end-to-end cluster: no packet of the cluster may
# leave this machine. Installed by `up` before any component starts, removed
# by `down` after everything else is gone.
#
# Usage: e2e/cluster/guard.sh install|remove|check|counters
#
# Inside every node's network namespace (iptables, the same nf_tables backend
# that kube-proxy and kube-router use there; the nodes' addresses count as
# the node's own, so node 1 lets the API server reach the other kubelets):
#   mangle FORWARD     -> ACE2E-GUARD-FWD: forwarded packets (pods, masqueraded
#                         or not) may go only to the pod range, the service
#                         range, the node's own address and loopback; a packet
#                         from a pod to anywhere else is dropped by the rule
#                         "pod egress", any other by "forwarded egress".
#   mangle POSTROUTING -> ACE2E-GUARD-OUT: every packet leaving an interface
#                         (so also the node's own processes and proxies, after
#                         any DNAT) obeys the same list, else "node egress";
#                         replies to connections the host opened over the
#                         veth link pass as well.
#   mangle OUTPUT, filter FORWARD: the documentation range 192.0.2.0/24
#                         (RFC 5737, TEST-NET-1, the probe's target) is dropped
#                         again: the second wall (for the node's own packets
#                         before anything else sees them; for forwarded ones
#                         after the guard).
#   ip6tables mangle POSTROUTING: everything but loopback is dropped (the
#                         cluster is IPv4-only and IPv6 is disabled there).
# The mangle table is used because the filter chains are shared with
# kube-proxy and kube-router, which insert ACCEPT rules ahead of anything
# appended there, and kube-router rewrites the filter table with
# iptables-restore (resetting its counters); nothing in the cluster touches the
# mangle chains used here, and `check` verifies the jumps are still first.
#
# On the host (root network namespace), for the veth link to the node:
#   filter FORWARD: nothing coming from the link is routed anywhere;
#   filter INPUT:   the cluster cannot open connections to the host (only
#                   replies to connections the host opened pass).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

TAG="agentcomputer-e2e guard"
HOST_TAG=agentcomputer-e2e-guard
TESTNET1=192.0.2.0/24

allowed_rules() { # chain
    local c="$1"
    echo "-A $c -o lo -j RETURN"
    for d in 127.0.0.0/8 "$E2E_POD_CIDR" "$E2E_SERVICE_CIDR" $(node_ips | sed 's|$|/32|'); do
        echo "-A $c -d $d -j RETURN"
    done
}

node_rules() {
    echo "*mangle"
    echo ":ACE2E-GUARD-FWD - [0:0]"
    echo ":ACE2E-GUARD-OUT - [0:0]"
    allowed_rules ACE2E-GUARD-FWD | grep -v -- '-o lo'
    echo "-A ACE2E-GUARD-FWD -s $E2E_POD_CIDR -m comment --comment \"$TAG: pod egress\" -j DROP"
    echo "-A ACE2E-GUARD-FWD -m comment --comment \"$TAG: forwarded egress\" -j DROP"
    allowed_rules ACE2E-GUARD-OUT
    # Replies to connections the host opened (kubectl, the suite).
    echo "-A ACE2E-GUARD-OUT -d $E2E_LINK_HOST/32 -m conntrack --ctstate ESTABLISHED -j RETURN"
    echo "-A ACE2E-GUARD-OUT -m comment --comment \"$TAG: node egress\" -j DROP"
    echo "-I FORWARD 1 -j ACE2E-GUARD-FWD"
    echo "-I POSTROUTING 1 -j ACE2E-GUARD-OUT"
    echo "-I OUTPUT 1 -d $TESTNET1 -m comment --comment \"$TAG: second wall output\" -j DROP"
    echo "COMMIT"
    echo "*filter"
    echo "-I FORWARD 1 -d $TESTNET1 -m comment --comment \"$TAG: second wall forward\" -j DROP"
    echo "COMMIT"
}

node_rules6() {
    echo "*mangle"
    echo ":ACE2E-GUARD-OUT - [0:0]"
    echo "-A ACE2E-GUARD-OUT -o lo -j RETURN"
    echo "-A ACE2E-GUARD-OUT -m comment --comment \"$TAG: ipv6 egress\" -j DROP"
    echo "-I POSTROUTING 1 -j ACE2E-GUARD-OUT"
    echo "COMMIT"
}

host_rule_specs() {
    echo "FORWARD -i $E2E_HOST_IF -m comment --comment $HOST_TAG:host-forward -j DROP"
    echo "FORWARD -o $E2E_HOST_IF -m comment --comment $HOST_TAG:host-forward -j DROP"
    echo "INPUT -i $E2E_HOST_IF -m conntrack ! --ctstate ESTABLISHED,RELATED -m comment --comment $HOST_TAG:host-input -j DROP"
}

install_host() {
    local spec
    while read -r spec; do
        # shellcheck disable=SC2086
        iptables -w -C $spec 2>/dev/null || iptables -w -I ${spec%% *} 1 ${spec#* }
    done < <(host_rule_specs)
}

remove_host() {
    local spec
    while read -r spec; do
        # shellcheck disable=SC2086
        while iptables -w -C $spec 2>/dev/null; do iptables -w -D $spec; done
    done < <(host_rule_specs)
}

install_node() {
    ns_id "$NETNS" >/dev/null || die "no cluster network namespace at $NETNS"
    if in_net iptables -w -t mangle -S ACE2E-GUARD-FWD >/dev/null 2>&1; then
        check_node && return 0
        die "the guard in $NETNS is incomplete; run e2e/cluster/down first"
    fi
    # IPv6 off before the first interface comes up; its rules as well.
    in_net sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
    node_rules | in_net iptables-restore -w --noflush
    node_rules6 | in_net ip6tables-restore -w --noflush
}

# The jumps to the guard chains come first in their chains, every chain ends
# with its DROP rules, and the host rules are in place.
check_node() {
    local ok=0
    ns_id "$NETNS" >/dev/null || { log "guard: node $NODE_NAME has no network namespace at $NETNS"; return 1; }
    [ "$(in_net iptables -w -t mangle -S FORWARD | sed -n 2p)" = "-A FORWARD -j ACE2E-GUARD-FWD" ] \
        || { log "guard: $NODE_NAME: mangle FORWARD does not start with the guard"; ok=1; }
    [ "$(in_net iptables -w -t mangle -S POSTROUTING | sed -n 2p)" = "-A POSTROUTING -j ACE2E-GUARD-OUT" ] \
        || { log "guard: $NODE_NAME: mangle POSTROUTING does not start with the guard"; ok=1; }
    [ "$(in_net ip6tables -w -t mangle -S POSTROUTING | sed -n 2p)" = "-A POSTROUTING -j ACE2E-GUARD-OUT" ] \
        || { log "guard: $NODE_NAME: ip6 mangle POSTROUTING does not start with the guard"; ok=1; }
    in_net iptables -w -t mangle -S ACE2E-GUARD-FWD | tail -n1 | grep -q -- '-j DROP$' \
        || { log "guard: $NODE_NAME: ACE2E-GUARD-FWD does not end with DROP"; ok=1; }
    in_net iptables -w -t mangle -S ACE2E-GUARD-OUT | tail -n1 | grep -q -- '-j DROP$' \
        || { log "guard: $NODE_NAME: ACE2E-GUARD-OUT does not end with DROP"; ok=1; }
    in_net iptables -w -t mangle -S OUTPUT | sed -n 2p | grep -q "$TAG: second wall output" \
        || { log "guard: $NODE_NAME: mangle OUTPUT does not start with the second wall"; ok=1; }
    return $ok
}

check_host() {
    local spec ok=0
    while read -r spec; do
        # shellcheck disable=SC2086
        iptables -w -C $spec 2>/dev/null || { log "guard: host rule missing: $spec"; ok=1; }
    done < <(host_rule_specs)
    return $ok
}

# Packet counters of every guard rule, summed over the nodes, one
# "COUNT comment" per line.
counters() {
    local i
    {
        for i in $(seq 1 "$(cluster_nodes)"); do
            node_use "$i"
            ns_id "$NETNS" >/dev/null || continue
            in_net iptables -w -t mangle -L ACE2E-GUARD-FWD -v -x -n
            in_net iptables -w -t mangle -L ACE2E-GUARD-OUT -v -x -n
            in_net iptables -w -t mangle -L OUTPUT -v -x -n
            in_net iptables -w -L FORWARD -v -x -n
            in_net ip6tables -w -t mangle -L ACE2E-GUARD-OUT -v -x -n
        done
        iptables -w -L FORWARD -v -x -n
        iptables -w -L INPUT -v -x -n
    } | awk -v t1="$TAG: " -v t2="$HOST_TAG:" '{
            i = index($0, t1); l = length(t1)
            if (!i) { i = index($0, t2); l = length(t2) }
            if (!i) next
            c = substr($0, i + l); sub(/ \*\/.*/, "", c); n[c] += $1
        } END { for (c in n) print n[c] " " c }' | sort -k2
}

# each_node FUNCTION: runs FUNCTION for every node of the cluster in turn;
# fails when one of them fails.
each_node() {
    local i ok=0
    for i in $(seq 1 "$(cluster_nodes)"); do
        node_use "$i"
        "$1" || ok=1
    done
    node_use 1
    return $ok
}

need_root
case "${1:-}" in
    install) install_host; each_node install_node; each_node check_node; check_host; log "guard installed on $(cluster_nodes) node(s)" ;;
    install-host) install_host ;;
    remove) remove_host; log "guard removed from the host (the nodes' rules go with their namespaces)" ;;
    check) each_node check_node && check_host ;;
    counters) counters ;;
    *) echo "usage: $0 install|install-host|remove|check|counters" >&2; exit 2 ;;
esac
