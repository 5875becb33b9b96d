//! SWS against a real client: curl (installed by `scripts/install-peers.sh`; skipped, with a
//! message, where it is missing).

mod common;

use std::process::Command;

fn curl(args: &[&str]) -> Option<(String, String)> {
    let out = Command::new("curl").args(["-s", "--max-time", "10"]).args(args).output().ok()?;
    Some((
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn curl_gets_files_ranges_heads_and_reuses_connections() {
    if curl(&["--version"]).is_none() {
        eprintln!("curl is not installed (scripts/install-peers.sh installs it): skipping");
        return;
    }
    let root = std::env::temp_dir().join(format!("sws-curl-{}", std::process::id()));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "0123456789\n").unwrap();
    std::fs::write(root.join("b.json"), "{}\n").unwrap();
    let live = common::serve(&root);
    let base = format!("http://{}", live.addr);

    let (body, _) = curl(&[&format!("{base}/a.txt")]).unwrap();
    assert_eq!(body, "0123456789\n");
    let (head, _) = curl(&["-I", &format!("{base}/b.json")]).unwrap();
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("Content-Type: application/json"), "{head}");
    let (part, _) = curl(&["-r", "2-4", &format!("{base}/a.txt")]).unwrap();
    assert_eq!(part, "234");
    let (code, _) = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "--path-as-is",
        &format!("{base}/../etc/passwd"),
    ])
    .unwrap();
    assert_eq!(code, "403");
    let (both, log) = curl(&["-v", &format!("{base}/a.txt"), &format!("{base}/b.json")]).unwrap();
    assert_eq!(both, "0123456789\n{}\n");
    assert!(
        log.contains("Re-using existing connection") || log.contains("Reusing existing"),
        "{log}"
    );

    let report = live.stop();
    assert_eq!(report.total().panics, 0);
    std::fs::remove_dir_all(root).unwrap();
}
