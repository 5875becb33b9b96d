//! Building responses: status lines, headers, error pages, the `Date` value.

use std::cell::RefCell;
use std::fmt::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// The reason phrase of a status code.
pub fn reason(code: u16) -> &'static str {
    match code {
        200 => "OK",
        206 => "Partial Content",
        301 => "Moved Permanently",
        304 => "Not Modified",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        416 => "Range Not Satisfiable",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Unknown",
    }
}

thread_local! {
    static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
}

/// Appends the current `Date` header value, formatted once per second per worker (no
/// allocation otherwise).
fn push_date(out: &mut String) {
    let now = SystemTime::now();
    let secs = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    DATE.with(|d| {
        let mut d = d.borrow_mut();
        if d.0 != secs {
            *d = (secs, httpdate::fmt_http_date(now));
        }
        out.push_str(&d.1);
    })
}

/// A response head under construction.
pub struct Head {
    buf: String,
}

impl Head {
    /// Starts a head with the status line and the headers every response carries.
    pub fn new(code: u16) -> Head {
        let mut buf = String::with_capacity(256);
        let _ = write!(buf, "HTTP/1.1 {code} {}\r\nServer: ochre\r\nDate: ", reason(code));
        push_date(&mut buf);
        buf.push_str("\r\n");
        Head { buf }
    }

    /// Adds a header.
    pub fn header(mut self, name: &str, value: impl std::fmt::Display) -> Head {
        let _ = write!(self.buf, "{name}: {value}\r\n");
        self
    }

    /// Ends the head: `Connection` as decided, then the blank line.
    pub fn finish(mut self, keep_alive: bool, http10: bool) -> Vec<u8> {
        if !keep_alive {
            self.buf.push_str("Connection: close\r\n");
        } else if http10 {
            self.buf.push_str("Connection: keep-alive\r\n");
        }
        self.buf.push_str("\r\n");
        self.buf.into_bytes()
    }
}

/// A small HTML body for an error status.
pub fn error_page(code: u16) -> Vec<u8> {
    format!(
        "<html><head><title>{code} {r}</title></head><body><h1>{code} {r}</h1></body></html>\n",
        r = reason(code)
    )
    .into_bytes()
}

/// A complete error response (head and, unless `head_only`, body).
pub fn error_response(code: u16, keep_alive: bool, http10: bool, head_only: bool) -> Vec<u8> {
    let body = error_page(code);
    let mut h = Head::new(code)
        .header("Content-Type", "text/html; charset=utf-8")
        .header("Content-Length", body.len());
    if code == 405 {
        h = h.header("Allow", "GET, HEAD");
    }
    if code == 503 {
        // Overloaded (connection cap, descriptor limit): a moment is enough to try again.
        h = h.header("Retry-After", 1);
    }
    let mut out = h.finish(keep_alive, http10);
    if !head_only {
        out.extend_from_slice(&body);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_responses_are_complete() {
        let r = String::from_utf8(error_response(405, false, false, false)).unwrap();
        assert!(r.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"));
        assert!(r.contains("\r\nAllow: GET, HEAD\r\n"));
        assert!(r.contains("\r\nConnection: close\r\n"));
        let body = error_page(405);
        assert!(r.contains(&format!("Content-Length: {}\r\n", body.len())));
        assert!(r.ends_with(std::str::from_utf8(&body).unwrap()));
        let head = String::from_utf8(error_response(404, true, true, true)).unwrap();
        assert!(head.contains("Connection: keep-alive\r\n") && head.ends_with("\r\n\r\n"));
        let mut date = String::new();
        push_date(&mut date);
        assert!(httpdate::parse_http_date(&date).is_ok());
    }
}
