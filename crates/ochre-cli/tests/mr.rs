//! `ochre mr`: generated inputs run and verify; Hadoop Streaming's `gen | map | sort | reduce`
//! gives the in-memory result; bad inputs end with a message and a non-zero status.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use ochre_mr::apps::{self, Application};

fn ochre() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ochre"))
}

/// A fresh temporary directory for one test.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ochre-mr-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn gen(app: &str, out: &Path) {
    let st = ochre()
        .args(["mr", "gen", app, "--size", "small", "--seed", "7", "--out"])
        .arg(out)
        .status()
        .unwrap();
    assert!(st.success(), "gen {app}");
}

/// Runs `ochre mr APP --streaming ROLE` with `input` on stdin; returns stdout.
fn stream(app: &str, role: &str, input: &[u8]) -> Vec<u8> {
    let mut child = ochre()
        .args(["mr", app, "--streaming", role, "--workers", "2"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let data = input.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&data));
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap().unwrap();
    assert!(out.status.success(), "{app} {role}: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

/// Two pieces of `data` cut after a line end near its middle (two mappers' inputs).
fn halves(data: &[u8]) -> [&[u8]; 2] {
    let mut cut = data.len() / 2;
    while cut < data.len() && data[cut - 1] != b'\n' {
        cut += 1;
    }
    [&data[..cut], &data[cut..]]
}

/// `lines` sorted bytewise by `LC_ALL=C sort` (what Hadoop's shuffle does to keys), or by the
/// same order here where there is no `sort` command.
fn sort_lines(lines: &[u8]) -> Vec<u8> {
    let sorted = Command::new("sort")
        .env("LC_ALL", "C")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            let mut stdin = child.stdin.take().expect("piped");
            let data = lines.to_vec();
            let writer = std::thread::spawn(move || stdin.write_all(&data));
            let out = child.wait_with_output()?;
            writer.join().expect("writer")?;
            Ok(out)
        });
    match sorted {
        Ok(out) if out.status.success() => out.stdout,
        _ => {
            let mut v: Vec<&[u8]> =
                lines.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
            v.sort();
            let mut s = v.join(&b'\n');
            s.push(b'\n');
            s
        }
    }
}

/// The mappers' outputs, concatenated, sorted, reduced: `cat | sort | reduce`.
fn shuffle_and_reduce(app: &str, map_outputs: Vec<Vec<u8>>) -> Vec<(String, Vec<String>)> {
    let sorted = sort_lines(&map_outputs.concat());
    let reduced = String::from_utf8(stream(app, "reduce", &sorted)).unwrap();
    reduced
        .lines()
        .map(|l| {
            let mut parts = l.split('\t').map(str::to_string);
            let key = parts.next().unwrap();
            (key, parts.collect())
        })
        .collect()
}

fn counts(pairs: &[(String, Vec<String>)]) -> BTreeMap<String, u64> {
    pairs.iter().map(|(k, v)| (k.clone(), v[0].parse().unwrap())).collect()
}

#[test]
fn streaming_map_sort_reduce_gives_the_in_memory_result() {
    let dir = scratch("streaming");

    // Word Count, two mappers.
    let input = dir.join("text");
    gen("word-count", &input);
    let text = std::fs::read(&input).unwrap();
    let outs = halves(&text).iter().map(|h| stream("word-count", "map", h)).collect();
    let got = counts(&shuffle_and_reduce("word-count", outs));
    let want: BTreeMap<String, u64> = apps::word_count::sequential(&text)
        .into_iter()
        .map(|(w, c)| (String::from_utf8(w).unwrap(), c))
        .collect();
    assert!(want.len() > 1000);
    assert_eq!(got, want, "word-count");

    // String Match, two mappers.
    let input = dir.join("keys");
    gen("string-match", &input);
    let keys = std::fs::read(&input).unwrap();
    let outs = halves(&keys).iter().map(|h| stream("string-match", "map", h)).collect();
    let got = counts(&shuffle_and_reduce("string-match", outs));
    let m = apps::string_match::StringMatch::new(keys).sequential();
    let want: BTreeMap<String, u64> =
        apps::string_match::WORDS.iter().zip(m).map(|(w, n)| (w.to_string(), n)).collect();
    assert_eq!(got, want, "string-match");

    // Histogram, one mapper (a BMP is one record).
    let input = dir.join("image.bmp");
    gen("histogram", &input);
    let bmp = std::fs::read(&input).unwrap();
    let got = counts(&shuffle_and_reduce("histogram", vec![stream("histogram", "map", &bmp)]));
    let h = apps::histogram::Histogram::parse(bmp).unwrap().sequential();
    let want: BTreeMap<String, u64> = h
        .iter()
        .enumerate()
        .filter(|(_, &n)| n > 0)
        .map(|(k, &n)| (format!("{}{:03}", ["B", "G", "R"][k / 256], k % 256), n))
        .collect();
    assert_eq!(got, want, "histogram");

    // Reverse Index, two mappers, each given half of the files' paths.
    let tree = dir.join("html");
    gen("reverse-index", &tree);
    let index = apps::reverse_index::load_tree(&tree).unwrap();
    let paths: Vec<String> =
        index.names().iter().map(|n| tree.join(n).display().to_string()).collect();
    let list = paths.join("\n") + "\n";
    let outs = halves(list.as_bytes()).iter().map(|h| stream("reverse-index", "map", h)).collect();
    let got: BTreeMap<String, Vec<String>> =
        shuffle_and_reduce("reverse-index", outs).into_iter().collect();
    let want: BTreeMap<String, Vec<String>> = index
        .sequential()
        .into_iter()
        .map(|(link, files)| {
            let mut p: Vec<String> = files.iter().map(|&f| paths[f as usize].clone()).collect();
            p.sort();
            (String::from_utf8(link).unwrap(), p)
        })
        .collect();
    assert!(want.len() > 100);
    assert_eq!(got, want, "reverse-index");

    let _ = std::fs::remove_dir_all(&dir);
}

fn run(args: &[&str], input: &Path) -> Output {
    ochre().arg("mr").args(args).arg("--input").arg(input).output().unwrap()
}

#[test]
fn every_application_runs_its_generated_input_and_verifies() {
    let dir = scratch("verify");
    for app in apps::NAMES {
        let input = dir.join(app);
        gen(app, &input);
        let out = run(&[app, "--workers", "2", "--verify", "--json"], &input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{app}: {stderr}");
        let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(report["verified"], true, "{app}");
        assert!(report["phases"]["map_tasks"].as_u64().unwrap() > 0, "{app}");
        assert!(report["phases"]["map"].as_f64().unwrap() > 0.0, "{app}");
    }
    // The text report has the summary and the phases.
    let out =
        run(&["linear-regression", "--workers", "2", "--baseline"], &dir.join("linear-regression"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("y = ") && text.contains("phases: split"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bad_inputs_end_with_a_message_not_a_panic() {
    let dir = scratch("bad");
    let text = dir.join("text");
    std::fs::write(&text, "just some words\n").unwrap();
    let cases: Vec<(Vec<&str>, PathBuf, &str)> = vec![
        (vec!["histogram"], dir.join("missing.bmp"), "No such file"),
        (vec!["histogram"], text.clone(), "not a BMP"),
        (vec!["kmeans"], text.clone(), "KMNS"),
        (vec!["pca"], text.clone(), "PCAM"),
        (vec!["matrix-multiply"], text.clone(), "matrix_file_A"),
        (vec!["reverse-index"], text.clone(), "not a directory"),
    ];
    for (args, input, expect) in cases {
        let out = run(&args, &input);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} should fail");
        assert!(stderr.contains(expect) && !stderr.contains("panicked"), "{args:?}: {stderr}");
    }
    let mut child = ochre()
        .args(["mr", "word-count", "--streaming", "reduce"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"A\tone\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("line 1"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}
