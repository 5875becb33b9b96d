#!/usr/bin/env bash
# Runs a command beside a compile: `cargo build --release -p ochre` in a scratch target
# directory, over and over (the crate cleaned between builds), until the command ends. A user's
# machine with a build running: bursty load on every CPU, the load under which pinned workers
# lost most (`Config::unpin_when_shared`; `bench actors` measures `ochre-pinned` beside it).
#
#   scripts/beside-build.sh CMD [ARGS...]
# Example, the actor programs beside a build:
#   scripts/beside-build.sh ./target/release/ochre bench actors --quick --json /tmp/a.json
set -euo pipefail
if (($# < 1)); then
    sed -n '2,9p' "$0" >&2
    exit 2
fi
here=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
set -m # the build loop gets a process group of its own, stopped whole at the end
(
    cd "$here"
    while :; do
        cargo build --quiet --release -p ochre --target-dir "$scratch" >/dev/null 2>&1 || sleep 1
        cargo clean --quiet --release -p ochre --target-dir "$scratch" >/dev/null 2>&1 || true
    done
) &
loop=$!
set +m
stop() {
    kill -- -"$loop" 2>/dev/null || true
    wait "$loop" 2>/dev/null || true
    rm -rf "$scratch"
}
trap stop EXIT
"$@"
