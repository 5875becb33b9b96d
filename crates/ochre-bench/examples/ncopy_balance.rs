//! Diagnostic: the N-COPY balancing case of `bench servers` alone (load-aware balancing
//! against `SO_REUSEPORT` hashing, one copy's CPU busy).
//! `ncopy_balance [REPS] [--quick] [ARCH..]` (architectures by name; all by default).

use ochre_servers::Arch;

fn main() {
    let mut opts = ochre_bench::Options::new(std::env::args().any(|a| a == "--quick"));
    if let Some(reps) = std::env::args().nth(1).and_then(|a| a.parse().ok()) {
        opts.reps = reps;
    }
    let mut archs: Vec<Arch> =
        std::env::args().skip(1).filter_map(|a| Arch::from_name(&a)).collect();
    if archs.is_empty() {
        archs = Arch::ALL.to_vec();
    }
    println!("{}", ochre_bench::servers::run_ncopy_of(&opts, &archs).table());
}
