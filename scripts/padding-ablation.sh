#!/usr/bin/env bash
# The ablation step `ochre bench ablation` cannot make in one process: padding against false
# sharing is a compile-time layout (the `unpadded` feature of the `ochre` crate). This script
# builds both layouts (the unpadded one in target/unpadded), then runs `ochre bench ablation
# --quick` with each, alternately, REPS times (default 3), so that drift of the machine hits both
# alike, and prints for each case and configuration the median over the runs of each layout and
# the padded / unpadded ratio. Every run's JSON stays in target/padding-ablation/.
#
#   scripts/padding-ablation.sh            # about 4 minutes on 2 cores after the builds
#   REPS=5 scripts/padding-ablation.sh
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${REPS:-3}
out=target/padding-ablation
mkdir -p "$out"
echo "padding-ablation: building the padded and the unpadded ochre" >&2
cargo build --release -q -p ochre-cli
cargo build --release -q -p ochre-cli --features ochre/unpadded --target-dir target/unpadded
for i in $(seq "$reps"); do
    for layout in padded unpadded; do
        bin=target/release/ochre
        [ "$layout" = unpadded ] && bin=target/unpadded/release/ochre
        echo "padding-ablation: run $i/$reps, $layout" >&2
        "$bin" bench ablation --quick --json "$out/ablation-$layout-$i.json" >/dev/null
    done
done
python3 - "$out" "$reps" <<'EOF'
import json, statistics, sys
out, reps = sys.argv[1], int(sys.argv[2])
med = {}
for layout in ("padded", "unpadded"):
    for i in range(1, reps + 1):
        for row in json.load(open(f"{out}/ablation-{layout}-{i}.json"))["rows"]:
            med.setdefault((row["case"], row["system"], row["unit"]), {}).setdefault(layout, []).append(row["median"])
summary = []
print(f"{'case':<16} {'configuration':<18} {'padded':>14} {'unpadded':>14} {'ratio':>7}")
for (case, system, unit), v in sorted(med.items()):
    p, u = statistics.median(v["padded"]), statistics.median(v["unpadded"])
    summary.append({"case": case, "system": system, "unit": unit, "padded": p, "unpadded": u, "ratio": p / u})
    print(f"{case:<16} {system:<18} {p:>14.4g} {u:>14.4g} {p / u:>6.2f}x")
json.dump(summary, open(f"{out}/summary.json", "w"), indent=1)
print(f"(medians over {reps} runs of each layout; ratio = padded / unpadded, above 1: padding helps)")
EOF
