#!/usr/bin/env bash
# Checks that the workspace's `rust-version` is true: no locked dependency built on this
# platform (Linux, without --cfg loom) asks for a newer Rust. Run by CI; skipped with a message
# where python3 is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v python3 >/dev/null; then
    echo "python3 is not installed: skipping the rust-version check."
    exit 0
fi

cargo metadata --format-version 1 --locked --filter-platform "$(rustc -vV | sed -n 's/^host: //p')" |
    python3 -c '
import json, sys

def version(v):
    return tuple(int(x) for x in v.split(".")) + (0,) * (3 - len(v.split(".")))

meta = json.load(sys.stdin)
built = {node["id"] for node in meta["resolve"]["nodes"]}
ours = [p for p in meta["packages"] if p["source"] is None]
declared = {p["rust_version"] for p in ours}
if len(declared) != 1 or None in declared:
    sys.exit(f"the workspace crates declare different rust-versions: {sorted(map(str, declared))}")
declared = declared.pop()
needs = [(version(p["rust_version"]), p["name"], p["version"], p["rust_version"])
         for p in meta["packages"]
         if p["source"] is not None and p["id"] in built and p.get("rust_version")]
top = max(needs)
newer = [f"{n} {v} (rust-version {r})" for key, n, v, r in needs if key > version(declared)]
if newer:
    sys.exit(f"rust-version = {declared} is false: " + ", ".join(newer) + " need more")
print(f"rust-version = {declared} holds (the highest locked dependency: {top[1]} {top[2]}, {top[3]})")
'
