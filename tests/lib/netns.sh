# Sourced by the guest harnesses (tests/realclient/*.sh, locks.py through
# bash -c). A run killed without its cleanup (a session's end, SIGKILL)
# can leave /run/netns/NAME behind while the namespace it named is gone,
# or mounted only in a mount namespace that no longer exists; `ip netns
# list` still shows it and every `ip -n NAME` then fails with "setting the
# network namespace ... failed: Invalid argument". netns_clear_stale NAME
# removes such a name, so that netns.sh up makes the namespace afresh, and
# leaves a namespace that can be entered alone.
netns_clear_stale() {
    local ns=$1
    ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$ns" || return 0
    ip netns exec "$ns" true 2>/dev/null && return 0
    echo "[netns $(date +%H:%M:%S)] netns $ns is listed but cannot be entered (left by a killed run): removing it" >&2
    ip netns del "$ns" 2>/dev/null || rm -f "/run/netns/$ns"
}
