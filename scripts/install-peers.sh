#!/usr/bin/env bash
# Installs the peer programs the benchmarks and some tests compare against or drive: nginx (the
# web-server peer), wrk (the reference injector), curl (a real HTTP client). Each one that cannot
# be installed is reported and skipped: callers check for the command and skip with a message.
set -u
need=()
command -v nginx >/dev/null 2>&1 || [[ -x /usr/sbin/nginx ]] || need+=(nginx-light)
command -v wrk >/dev/null 2>&1 || need+=(wrk)
command -v curl >/dev/null 2>&1 || need+=(curl)
if ((${#need[@]} == 0)); then
    exit 0
fi
if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null 2>&1; then
    echo "install-peers: cannot install ${need[*]} (needs root and apt-get); dependent benchmarks are skipped" >&2
    exit 0
fi
echo "install-peers: installing ${need[*]}" >&2
timeout 600 apt-get update -q >/dev/null 2>&1
DEBIAN_FRONTEND=noninteractive timeout 900 apt-get install -y -q --no-install-recommends "${need[@]}" >/dev/null 2>&1 \
    || echo "install-peers: could not install some of ${need[*]}; dependent benchmarks are skipped" >&2
exit 0
