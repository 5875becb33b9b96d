#!/usr/bin/env bash
# Installs Miri (nightly toolchain component) if it can be; exits non-zero, with a message, if not.
set -u
if ! command -v rustup >/dev/null 2>&1; then
    echo "install-miri: rustup not found" >&2
    exit 1
fi
if ! cargo +nightly miri --version >/dev/null 2>&1; then
    echo "install-miri: installing the nightly toolchain's miri and rust-src components" >&2
    timeout 600 rustup toolchain install nightly --profile minimal --component miri,rust-src \
        >/dev/null 2>&1 || { echo "install-miri: could not install Miri" >&2; exit 1; }
fi
timeout 600 cargo +nightly miri setup >/dev/null 2>&1 || { echo "install-miri: miri setup failed" >&2; exit 1; }
cargo +nightly miri --version >/dev/null 2>&1
