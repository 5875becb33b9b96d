//! Diagnostic: the semi-open curves of `bench servers` alone, up to saturation, every server
//! with stage pools of 2. `semi_open [--quick] [--json FILE]`.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opts = ochre_bench::Options::new(args.iter().any(|a| a == "--quick"));
    let report = ochre_bench::servers::run_semi_open(&opts);
    println!("{}", report.table());
    if let Some(file) = args.iter().position(|a| a == "--json").and_then(|i| args.get(i + 1)) {
        let json = serde_json::to_string_pretty(&report).expect("a report serializes");
        std::fs::write(file, json).expect("the JSON file is writable");
    }
}
