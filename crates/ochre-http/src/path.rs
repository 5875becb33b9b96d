//! From a request target to a path under the root, refusing anything that could leave it.
//!
//! The target's path is percent-decoded *before* it is split into segments, so an encoded dot
//! or slash (`%2e%2e`, `%2f`) is judged like a plain one. Empty and `.` segments are dropped; a
//! `..` segment is refused outright (403) rather than resolved, and so is a NUL byte (400).
//! Symbolic links are checked later, on the real file: its canonical path must lie under the
//! canonical root (`cache`).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Why a target cannot name a file under the root.
#[derive(Debug, PartialEq, Eq)]
pub enum TargetError {
    /// Malformed: not origin- or absolute-form, bad percent-encoding, NUL byte (400).
    Malformed,
    /// Would leave the root (403).
    Outside,
}

/// A decoded target: the relative path and whether the target named a directory (`/` at end).
#[derive(Debug, PartialEq, Eq)]
pub struct Target {
    /// Relative to the root; empty for the root itself.
    pub path: PathBuf,
    /// The target ended with `/`.
    pub dir: bool,
    /// The decoded path as sent, for logs (always starts with `/`; may hold any byte but NUL).
    pub decoded: String,
}

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

impl Target {
    /// Where a directory named without its trailing slash is redirected (`301 Location`): the
    /// normalized path re-encoded, with a `/` at the end. Built from the decoded segments, so
    /// it starts with exactly one `/` (never `//host/`, a protocol-relative address: an open
    /// redirect) and every byte outside RFC 3986's `pchar` (`%`, `?`, `#`, space, CR, LF,
    /// non-ASCII) is percent-encoded: nothing in it can end the header or change its meaning.
    pub fn directory_location(&self) -> String {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        let pchar = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@".contains(&b);
        let mut out = String::with_capacity(self.decoded.len() + 2);
        for segment in self.path.iter() {
            out.push('/');
            for &b in segment.as_bytes() {
                if pchar(b) {
                    out.push(char::from(b));
                } else {
                    out.push('%');
                    out.push(char::from(HEX[usize::from(b >> 4)]));
                    out.push(char::from(HEX[usize::from(b & 15)]));
                }
            }
        }
        out.push('/');
        out
    }
}

/// Decodes and checks a request target.
pub fn decode_target(target: &str) -> Result<Target, TargetError> {
    let mut t = target;
    // Absolute form: scheme://authority/path
    if let Some(rest) = t.strip_prefix("http://").or_else(|| t.strip_prefix("https://")) {
        t = rest.find('/').map_or("/", |i| &rest[i..]);
    }
    let t = t.split(['?', '#']).next().unwrap_or("");
    if !t.starts_with('/') {
        return Err(TargetError::Malformed);
    }
    let raw = t.as_bytes();
    let mut bytes = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        if raw[i] == b'%' {
            let hi = raw.get(i + 1).copied().and_then(hex);
            let lo = raw.get(i + 2).copied().and_then(hex);
            match (hi, lo) {
                (Some(h), Some(l)) => bytes.push(h * 16 + l),
                _ => return Err(TargetError::Malformed),
            }
            i += 3;
        } else {
            bytes.push(raw[i]);
            i += 1;
        }
    }
    if bytes.contains(&0) {
        return Err(TargetError::Malformed);
    }
    let dir = bytes.ends_with(b"/");
    let mut path = PathBuf::new();
    for seg in bytes.split(|&b| b == b'/') {
        match seg {
            b"" | b"." => {}
            b".." => return Err(TargetError::Outside),
            s => path.push(OsStr::from_bytes(s)),
        }
    }
    let decoded = String::from_utf8_lossy(&bytes).into_owned();
    Ok(Target { path, dir, decoded })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(t: &str) -> (String, bool) {
        let d = decode_target(t).unwrap();
        (d.path.to_string_lossy().into_owned(), d.dir)
    }

    #[test]
    fn plain_and_encoded_paths() {
        assert_eq!(ok("/"), ("".into(), true));
        assert_eq!(ok("/a/b.html"), ("a/b.html".into(), false));
        assert_eq!(ok("/a//./b/?x=1#f"), ("a/b".into(), true));
        assert_eq!(ok("/hello%20world.txt"), ("hello world.txt".into(), false));
        assert_eq!(ok("http://example.com/x/y"), ("x/y".into(), false));
        assert_eq!(ok("http://example.com"), ("".into(), true));
    }

    #[test]
    fn escapes_and_bad_encodings_are_refused() {
        for t in ["/../etc/passwd", "/a/../../b", "/%2e%2e/secret", "/a/%2E%2E/%2e%2E/x", "/..%2fx"]
        {
            assert_eq!(decode_target(t), Err(TargetError::Outside), "{t}");
        }
        for t in ["/a%00b", "/%zz", "/%4", "relative", "*", ""] {
            assert_eq!(decode_target(t), Err(TargetError::Malformed), "{t}");
        }
    }

    #[test]
    fn directory_redirects_are_local_and_encoded() {
        let loc = |t: &str| decode_target(t).unwrap().directory_location();
        assert_eq!(loc("/dir"), "/dir/");
        assert_eq!(loc("//sub"), "/sub/", "never protocol-relative");
        assert_eq!(loc("///evil.com//x"), "/evil.com/x/");
        assert_eq!(loc("/%2F%2Fevil.com"), "/evil.com/", "an encoded slash too");
        assert_eq!(loc("http://h//sub"), "/sub/");
        assert_eq!(loc("/a/./b"), "/a/b/");
        assert_eq!(loc("/with%20space"), "/with%20space/");
        assert_eq!(loc("/100%25"), "/100%25/");
        assert_eq!(loc("/q%3Fx=1"), "/q%3Fx=1/", "an encoded '?' stays in the path");
        assert_eq!(loc("/f%23frag"), "/f%23frag/");
        assert_eq!(loc("/x%0D%0ASet-Cookie:%20a"), "/x%0D%0ASet-Cookie:%20a/");
        assert_eq!(loc("/caf%C3%A9?q"), "/caf%C3%A9/", "non-ASCII bytes, and no query");
        assert_eq!(loc("/"), "/");
    }

    #[test]
    fn an_encoded_slash_is_a_separator_after_decoding() {
        assert_eq!(ok("/a%2Fb"), ("a/b".into(), false));
    }
}
