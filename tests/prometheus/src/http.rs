//! A blocking HTTP/1.0 GET over loopback TCP, enough for the metrics listener and Prometheus'
//! HTTP API. HTTP/1.0 keeps the answer unchunked and the connection closed after it.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use anyhow::{Context, bail};

/// An answer: status, the `Content-Type` header and the body.
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The `Content-Type` header, empty when absent.
    pub content_type: String,
    /// The body as text.
    pub body: String,
}

/// `GET path` on `127.0.0.1:port` (`path` already percent-encoded).
pub fn get(port: u16, path: &str) -> anyhow::Result<Answer> {
    let mut s =
        TcpStream::connect(("127.0.0.1", port)).with_context(|| format!("connect :{port}"))?;
    let deadline = Some(Duration::from_secs(20));
    s.set_read_timeout(deadline)?;
    s.set_write_timeout(deadline)?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n")?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8(raw).context("answer is not UTF-8")?;
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!("no end of headers in {text:?}");
    };
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status line in {head:?}"))?;
    let content_type = lines
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.eq_ignore_ascii_case("content-type"))
        .map(|(_, v)| v.trim().to_owned())
        .unwrap_or_default();
    Ok(Answer {
        status,
        content_type,
        body: body.to_owned(),
    })
}

/// `text` percent-encoded for a query string (RFC 3986 unreserved characters stay).
pub fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len() * 3);
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promql_is_encoded_so_the_query_string_survives() {
        assert_eq!(
            encode(r#"up{job="vgpud"} == 0"#),
            "up%7Bjob%3D%22vgpud%22%7D%20%3D%3D%200"
        );
        assert_eq!(encode("a+b&c"), "a%2Bb%26c");
    }
}
