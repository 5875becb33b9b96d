//! Compresses the debug information of the `ochre` binary (zlib, read by perf, gdb, addr2line
//! and Rust's own backtraces): the release profile keeps line tables for profiling the
//! benchmarks, and uncompressed they made up nine tenths of the binary's size (20 MB of a
//! tool that serves files, 48 MB with the benchmarks).

fn main() {
    println!("cargo::rerun-if-changed=build.rs");
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo::rustc-link-arg-bins=-Wl,--compress-debug-sections=zlib");
    }
}
