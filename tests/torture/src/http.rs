//! A blocking HTTP/1.1 client over a unix socket: one connection per request, with deadlines,
//! enough for the torture clients (`Content-Length` and chunked answers).

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

/// An answer: status and JSON body (`Null` when empty or not JSON).
#[derive(Debug, Clone)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body as JSON.
    pub body: Value,
}

/// Why no answer came.
#[derive(Debug)]
pub enum NoAnswer {
    /// Nothing listens (the daemon is down): the request was never sent.
    NotConnected(String),
    /// Sent, but the answer never came whole (killed mid-request, or garbage).
    Cut(String),
}

/// One request. `key` is sent as `Idempotency-Key`.
pub fn call(
    socket: &Path,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> Result<Answer, NoAnswer> {
    let fail = |what: &str, e: std::io::Error| NoAnswer::Cut(format!("{what}: {e}"));
    let mut stream =
        UnixStream::connect(socket).map_err(|e| NoAnswer::NotConnected(format!("connect: {e}")))?;
    let deadline = Some(Duration::from_secs(20));
    stream
        .set_read_timeout(deadline)
        .and_then(|()| stream.set_write_timeout(deadline))
        .map_err(|e| fail("deadline", e))?;
    let payload = body.map(|b| b.to_string()).unwrap_or_default();
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: vgpud\r\nConnection: close\r\n");
    if body.is_some() {
        head.push_str("Content-Type: application/json\r\n");
    }
    if let Some(k) = key {
        head.push_str(&format!("Idempotency-Key: {k}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", payload.len()));
    stream
        .write_all(head.as_bytes())
        .and_then(|()| stream.write_all(payload.as_bytes()))
        .map_err(|e| fail("send", e))?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).map_err(|e| fail("read", e))?;
    parse(&raw)
}

fn parse(raw: &[u8]) -> Result<Answer, NoAnswer> {
    let bad = |why: &str| NoAnswer::Cut(format!("{why}: {:?}", String::from_utf8_lossy(raw)));
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| bad("no end of headers"))?;
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad("no status line"))?;
    let chunked = lines.any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    let rest = &raw[split + 4..];
    let body = if chunked {
        dechunk(rest).ok_or_else(|| bad("bad chunks"))?
    } else {
        rest.to_vec()
    };
    let body = serde_json::from_slice(&body).unwrap_or(Value::Null);
    Ok(Answer { status, body })
}

fn dechunk(mut data: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let line_end = data.windows(2).position(|w| w == b"\r\n")?;
        let size_text = std::str::from_utf8(&data[..line_end]).ok()?;
        let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
        data = &data[line_end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(data.get(..size)?);
        data = data.get(size + 2..)?;
    }
}
