//! Durations on the command line, as load tools write them: a number and a unit (`10s`,
//! `500ms`, `2m`, `1.5s`, `250us`); a bare number is seconds (what `ochre load --duration 10`
//! always meant). Negative, non-finite and too large values are refused with a message.

use std::time::Duration;

/// The units a duration may carry, and their length in seconds.
const UNITS: [(&str, f64); 7] = [
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
];

/// Parses `10s`, `500ms`, `2m`, `1.5`: a clap value parser.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number.parse().map_err(|_| {
        format!("`{text}` is not a duration (e.g. 10s, 500ms, 2m; a bare number is seconds)")
    })?;
    let scale = match unit.trim() {
        "" => 1.0,
        u => UNITS.iter().find(|(name, _)| *name == u).map(|(_, s)| *s).ok_or_else(|| {
            format!("`{text}`: unknown unit `{u}` (use ns, us, ms, s, m or h, e.g. 10s or 500ms)")
        })?,
    };
    Duration::try_from_secs_f64(value * scale).map_err(|_| format!("`{text}` is too long"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_with_units_and_bare_seconds() {
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse("250us"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("250µs"), Ok(Duration::from_micros(250)));
        assert_eq!(parse("7ns"), Ok(Duration::from_nanos(7)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("3 s"), Ok(Duration::from_secs(3)));
    }

    #[test]
    fn bad_durations_say_why() {
        for (bad, says) in [
            ("", "not a duration"),
            ("s", "not a duration"),
            ("-1s", "not a duration"),
            ("10 sec", "unknown unit `sec`"),
            ("10d", "unknown unit"),
            ("1.2.3s", "not a duration"),
            ("1e300h", "unknown unit"),
            ("99999999999999999999999h", "too long"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
