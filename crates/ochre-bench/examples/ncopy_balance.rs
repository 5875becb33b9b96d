//! Diagnostic: the N-COPY balancing case of `bench servers` alone (load-aware balancing
//! against `SO_REUSEPORT` hashing, one copy's CPU busy). `ncopy_balance [REPS] [--quick]`.

fn main() {
    let mut args = std::env::args().skip(1);
    let mut opts = ochre_bench::Options::new(std::env::args().any(|a| a == "--quick"));
    if let Some(reps) = args.next().and_then(|a| a.parse().ok()) {
        opts.reps = reps;
    }
    println!("{}", ochre_bench::servers::run_ncopy(&opts).table());
}
