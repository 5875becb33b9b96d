#!/usr/bin/env bash
# Compares two builds of ochre on one benchmark, as this project compares them on a shared
# machine: one process per build, the builds alternated, PROCS processes each, every process's
# JSON kept; then the paired ratios of each process (`paired_ratios`, an ochre-bench example).
#
#   scripts/ab-bench.sh BASE_CHECKOUT NEW_CHECKOUT PROCS OUT_DIR BENCH [bench flags...]
#
# Each checkout must have built `target/release/ochre` (cargo build --release -p ochre-cli).
# Example, the actor programs at the quick size, quiet half only, ochre and tokio-mt:
#   OCHRE_ACTORS_MODE=quiet OCHRE_ACTORS_SYSTEMS=ochre,tokio-mt \
#     scripts/ab-bench.sh ../base . 4 /tmp/ab actors --quick --reps 5
# Environment variables (OCHRE_ACTORS, OCHRE_MR, ...) pass through to every process.
set -euo pipefail
if (($# < 5)); then
    sed -n '2,12p' "$0" >&2
    exit 2
fi
base=$(cd "$1" && pwd)
new=$(cd "$2" && pwd)
procs=$3
out=$4
bench=$5
shift 5
mkdir -p "$out"
for checkout in "$base" "$new"; do
    if [[ ! -x "$checkout/target/release/ochre" ]]; then
        echo "ab-bench: $checkout/target/release/ochre is missing: build it first" >&2
        exit 1
    fi
done
for ((i = 1; i <= procs; i++)); do
    for pair in "base:$base" "new:$new"; do
        label=${pair%%:*}
        checkout=${pair#*:}
        echo "ab-bench: process $i of $procs, $label ($checkout)" >&2
        (cd "$checkout" && OCHRE_LOG=${OCHRE_LOG:-off} ./target/release/ochre bench "$bench" "$@" \
            --json "$out/$label-$i.json" >/dev/null)
    done
done
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here"
cargo run --quiet --release -p ochre-bench --example paired_ratios -- "$out" \
    "${AB_SYSTEM:-ochre}" "${AB_PEER:-tokio-mt}"
