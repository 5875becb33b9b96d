//! Compresses the debug information of the `ochre` binary (zlib, read by perf, gdb, addr2line
//! and Rust's own backtraces): the release profile keeps line tables for profiling the
//! benchmarks, and uncompressed the debug information made up most of the binary (20 MB of a
//! tool that serves files, 48 MB with the benchmarks, when the profile had `debug = 1`).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo::rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
