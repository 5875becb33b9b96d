//! Serves a directory with one architecture until killed, for trying a server by hand:
//! `cargo run --release -p ochre-servers --example serve -- ARCH ROOT PORT [CPU,CPU..] [POOL]`.

use std::net::TcpListener;

use ochre_http::ServerConfig;
use ochre_servers::{start, Arch, Plan};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: serve ARCH ROOT PORT [CPUS] [POOL]");
        std::process::exit(2);
    }
    let Some(arch) = Arch::from_name(&args[1]) else {
        eprintln!("unknown architecture {}", args[1]);
        std::process::exit(2);
    };
    let cpus: Vec<usize> = args
        .get(4)
        .map(|s| s.split(',').filter_map(|c| c.parse().ok()).collect())
        .unwrap_or_default();
    let pool = args.get(5).and_then(|p| p.parse().ok()).unwrap_or(2);
    let listener = match TcpListener::bind(("127.0.0.1", args[3].parse().unwrap_or(8080))) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("bind: {e}");
            std::process::exit(1);
        }
    };
    let config = ServerConfig { root: args[2].clone().into(), ..ServerConfig::default() };
    match start(arch, config, listener, &Plan::new(cpus, pool)) {
        Ok(r) => {
            println!("{} on {}", arch.name(), r.addr());
            // `park` may return spuriously (the runtime's start-up can unpark this thread).
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            eprintln!("{e}");
            std::process::exit(1);
        }
    }
}
