//! Message framing and header validation of a request head (RFC 9110, RFC 9112), in one place.
//!
//! `httparse` checks the syntax it owns: the request line, token characters in field names, no
//! whitespace between a name and its colon, no obs-fold (a line starting with whitespace), no
//! control characters in values; each of those is a parse error, answered 400. This module checks
//! the rules that need the fields together, in one pass over them and without allocating:
//!
//! - **Content-Length** (RFC 9112 §6.2, §6.3): one field, its value one or more digits and nothing
//!   else (`+39`, `-1`, `0x5`, `5, 5` and an empty value are refused). A second field is refused
//!   even with the same value: servers that take the first and proxies that take the last would
//!   see different requests in the same bytes (request smuggling). A value too large for a `u64`
//!   reads as `u64::MAX`, above any body limit (413).
//! - **Transfer-Encoding** (§6.1, §6.3): refused, alone or with Content-Length. With
//!   Content-Length it is the classic smuggling ambiguity; in HTTP/1.0 it is faulty framing; alone
//!   in HTTP/1.1 it announces a chunked body the server would have to decode to find the next
//!   request, and a static server has no use for request bodies.
//! - **Host** (§3.2): required in HTTP/1.1, at most one, and its value `uri-host [ ":" port ]`
//!   (RFC 3986: a reg-name, an IPv4 address or a bracketed IP literal; an empty value is valid).
//!
//! Invariant: every violation is answered 400 (or 413) and the connection is closed, because
//! once the framing of one request is in doubt nothing after it on the connection can be trusted.

/// Why a request head is refused (each answered 400 and a close).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Violation {
    /// Two Content-Length fields, equal or not.
    DuplicateContentLength,
    /// A Content-Length value that is not one or more digits.
    BadContentLength,
    /// Transfer-Encoding alone (a body the server will not decode).
    TransferEncoding,
    /// Transfer-Encoding and Content-Length together.
    TransferEncodingWithContentLength,
    /// HTTP/1.1 without Host.
    MissingHost,
    /// Two Host fields.
    DuplicateHost,
    /// A Host value that is not `uri-host [ ":" port ]`.
    BadHost,
}

/// Checks the framing and Host fields of a parsed head; returns the body length to discard.
pub(crate) fn check(headers: &[httparse::Header<'_>], http10: bool) -> Result<u64, Violation> {
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding = false;
    let mut host = false;
    for h in headers {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            if content_length.is_some() {
                return Err(Violation::DuplicateContentLength);
            }
            content_length = Some(digits(trim(h.value)).ok_or(Violation::BadContentLength)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding = true;
        } else if name.eq_ignore_ascii_case(b"host") {
            if host {
                return Err(Violation::DuplicateHost);
            }
            if !valid_host(trim(h.value)) {
                return Err(Violation::BadHost);
            }
            host = true;
        }
    }
    if transfer_encoding {
        return Err(if content_length.is_some() {
            Violation::TransferEncodingWithContentLength
        } else {
            Violation::TransferEncoding
        });
    }
    if !http10 && !host {
        return Err(Violation::MissingHost);
    }
    Ok(content_length.unwrap_or(0))
}

/// Without optional whitespace (SP, HTAB) at either end.
fn trim(v: &[u8]) -> &[u8] {
    let ows = |b: &u8| *b == b' ' || *b == b'\t';
    let start = v.iter().position(|b| !ows(b)).unwrap_or(v.len());
    let end = v.iter().rposition(|b| !ows(b)).map_or(start, |i| i + 1);
    &v[start..end]
}

/// `1*DIGIT` as a number (`u64::MAX` if it does not fit), `None` for anything else.
fn digits(v: &[u8]) -> Option<u64> {
    if v.is_empty() || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0u64, |n, d| n.saturating_mul(10).saturating_add(u64::from(d - b'0'))))
}

/// RFC 3986 `unreserved / sub-delims`: the characters of a reg-name besides `%XX`.
fn reg_name_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b)
}

/// `uri-host [ ":" port ]` (RFC 9112 §3.2, RFC 3986 §3.2.2-3.2.3).
fn valid_host(v: &[u8]) -> bool {
    let rest = if let Some(literal) = v.strip_prefix(b"[") {
        // IP-literal: an IPv6 address or IPvFuture, in brackets.
        let Some(close) = literal.iter().position(|&b| b == b']') else { return false };
        let inside = &literal[..close];
        if inside.is_empty() || !inside.iter().all(|&b| reg_name_char(b) || b == b':') {
            return false;
        }
        &literal[close + 1..]
    } else {
        let end = v.iter().position(|&b| b == b':').unwrap_or(v.len());
        let (name, rest) = v.split_at(end);
        let mut i = 0;
        while i < name.len() {
            if name[i] == b'%' {
                let hex = |j: usize| name.get(j).is_some_and(u8::is_ascii_hexdigit);
                if !(hex(i + 1) && hex(i + 2)) {
                    return false;
                }
                i += 3;
            } else if reg_name_char(name[i]) {
                i += 1;
            } else {
                return false;
            }
        }
        rest
    };
    match rest.split_first() {
        None => true,
        Some((b':', port)) => port.iter().all(u8::is_ascii_digit),
        Some(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `head` with httparse as the server does, then checks it.
    fn judge(head: &str) -> Result<u64, Violation> {
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(head.as_bytes()) {
            Ok(httparse::Status::Complete(_)) => {}
            other => panic!("{head:?} does not parse: {other:?}"),
        }
        check(req.headers, req.version == Some(0))
    }

    #[test]
    fn content_length_is_one_field_of_digits() {
        use Violation::*;
        let cl =
            |v: &str| judge(&format!("GET / HTTP/1.1\r\nHost: h\r\nContent-Length: {v}\r\n\r\n"));
        assert_eq!(cl("0"), Ok(0));
        assert_eq!(cl("39"), Ok(39));
        assert_eq!(cl("  7  "), Ok(7), "optional whitespace around the value");
        assert_eq!(cl("99999999999999999999999"), Ok(u64::MAX));
        for bad in ["+39", "-1", "0x5", "5, 5", "5 5", "", "1e3", "٣"] {
            assert_eq!(cl(bad), Err(BadContentLength), "{bad:?}");
        }
        let two = "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 0\r\ncontent-LENGTH: 39\r\n\r\n";
        assert_eq!(judge(two), Err(DuplicateContentLength));
        let same = "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n";
        assert_eq!(judge(same), Err(DuplicateContentLength));
    }

    #[test]
    fn transfer_encoding_is_refused() {
        let te = "GET / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(judge(te), Err(Violation::TransferEncoding));
        let both =
            "GET / HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(judge(both), Err(Violation::TransferEncodingWithContentLength));
        let old = "GET / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(judge(old), Err(Violation::TransferEncoding));
    }

    #[test]
    fn host_rules() {
        use Violation::*;
        assert_eq!(judge("GET / HTTP/1.1\r\n\r\n"), Err(MissingHost));
        assert_eq!(judge("GET / HTTP/1.0\r\n\r\n"), Ok(0), "HTTP/1.0 may omit Host");
        assert_eq!(judge("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n"), Err(DuplicateHost));
        assert_eq!(judge("GET / HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n"), Err(DuplicateHost));
        let host = |v: &str| judge(&format!("GET / HTTP/1.1\r\nHost: {v}\r\n\r\n"));
        for good in [
            "example.com",
            "example.com:8080",
            "127.0.0.1:80",
            "[::1]",
            "[::1]:8080",
            "[v1.fe80::a+en1]",
            "xn--bcher-kva.example",
            "a%20b",
            "host:",
            "",
        ] {
            assert_eq!(host(good), Ok(0), "{good:?}");
        }
        for bad in
            ["a b/c", "a/b", "user@host", "x:8a", "x:80:80", "[::1", "[]", "[::1]x", "a%2", "h?q"]
        {
            assert_eq!(host(bad), Err(BadHost), "{bad:?}");
        }
    }

    #[test]
    fn httparse_refuses_what_this_module_leaves_to_it() {
        for head in [
            "GET / HTTP/1.1\r\nHost: h\r\nX: a\r\n folded\r\n\r\n",
            "GET / HTTP/1.1\r\nHost : h\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: h\r\nX(y): z\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: h\r\nX\u{1}: z\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: h\r\n: z\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: h\r\nX: a\u{0}b\r\n\r\n",
            "GET / HTTP/1.1\r\nHost: h\r\nX: a\rb\r\n\r\n",
        ] {
            let mut headers = [httparse::EMPTY_HEADER; 8];
            let r = httparse::Request::new(&mut headers).parse(head.as_bytes());
            assert!(r.is_err(), "{head:?} parsed: {r:?}");
        }
    }
}
