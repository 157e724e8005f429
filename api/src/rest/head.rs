//! The first request head of a connection, read and checked before hyper sees the connection.
//!
//! hyper answers a head it cannot parse (HTTP/0.9, a bad `Content-Length`, too many headers, a
//! huge path) with a status and an empty body, and offers no hook to change that. Reading the
//! first head here, under its own deadline and size bound, lets the daemon answer those with the
//! documented JSON error body, and refuse a declared body over the limit before a byte of it is
//! read. The bytes read are handed on to hyper unchanged ([`Prefixed`]). Later heads of a
//! kept-alive connection are hyper's (same bounds, under `idle_timeout`).

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::http::StatusCode;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};

use crate::error::ErrorBody;

/// Largest request head, bytes (request line and headers).
pub(super) const MAX_HEAD: usize = 16 * 1024;
/// Longest request target, bytes.
const MAX_TARGET: usize = 8 * 1024;
/// Most headers in a request (hyper's default too).
pub(super) const MAX_HEADERS: usize = 100;
/// Longest a refusal may take to write: a client that does not read it is not waited for.
const REPLY_TIMEOUT: Duration = Duration::from_secs(1);

/// A refusal written on the raw stream: status and the documented JSON body.
#[derive(Debug)]
pub(super) struct Refusal {
    pub status: StatusCode,
    pub body: ErrorBody,
}

impl Refusal {
    pub(super) fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Refusal {
        Refusal {
            status,
            body: ErrorBody {
                code: code.to_owned(),
                message: message.into(),
                details: serde_json::Map::new(),
            },
        }
    }

    fn bad(message: impl Into<String>) -> Refusal {
        Refusal::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// The whole HTTP/1.1 response; the connection closes after it.
    pub(super) fn to_bytes(&self) -> Vec<u8> {
        let body = serde_json::to_string(&self.body).unwrap_or_default();
        format!(
            "HTTP/1.1 {} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            self.status.as_u16(),
            self.status.canonical_reason().unwrap_or(""),
            body.len()
        )
        .into_bytes()
    }

    /// Writes the refusal (bounded in time) and closes the stream.
    pub(super) async fn send<S: AsyncWrite + Unpin>(&self, io: &mut S) {
        let bytes = self.to_bytes();
        let _ = tokio::time::timeout(REPLY_TIMEOUT, async {
            io.write_all(&bytes).await?;
            io.shutdown().await
        })
        .await;
    }
}

/// Why no first head came.
#[derive(Debug)]
pub(super) enum NoHead {
    /// The peer closed, or sent nothing in time: close without a word.
    Quiet,
    /// Answer this, then close.
    Refuse(Refusal),
}

/// Reads the first request head within `deadline`; returns every byte read (the head and
/// whatever of the body came with it).
pub(super) async fn read_first<S: AsyncRead + Unpin>(
    io: &mut S,
    deadline: Duration,
    max_body: usize,
) -> Result<Vec<u8>, NoHead> {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        loop {
            let mut chunk = [0u8; 4096];
            let n = io.read(&mut chunk).await.map_err(|_| NoHead::Quiet)?;
            if n == 0 {
                return Err(NoHead::Quiet);
            }
            buf.extend_from_slice(&chunk[..n]);
            if check(&buf, max_body)? {
                return Ok(());
            }
        }
    };
    match tokio::time::timeout(deadline, read).await {
        Ok(Ok(())) => Ok(buf),
        Ok(Err(e)) => Err(e),
        // Nothing at all: a silent connection gets no answer; a partial head is told why.
        Err(_) if buf.is_empty() => Err(NoHead::Quiet),
        Err(_) => Err(NoHead::Refuse(Refusal::new(
            StatusCode::REQUEST_TIMEOUT,
            "timeout",
            format!("the request head did not arrive within {deadline:?}"),
        ))),
    }
}

/// `true` when `buf` holds a whole, acceptable head; an error when it never can.
fn check(buf: &[u8], max_body: usize) -> Result<bool, NoHead> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    match req.parse(buf) {
        Ok(httparse::Status::Complete(_)) => validate(&req, max_body).map(|()| true),
        Ok(httparse::Status::Partial) => {
            let line_done = buf.windows(2).any(|w| w == b"\r\n");
            if !line_done && buf.len() > MAX_TARGET {
                return Err(NoHead::Refuse(too_long_target()));
            }
            if buf.len() > MAX_HEAD {
                return Err(NoHead::Refuse(Refusal::new(
                    StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                    "invalid_request",
                    format!("the request head is larger than {MAX_HEAD} bytes"),
                )));
            }
            Ok(false)
        }
        Err(httparse::Error::TooManyHeaders) => Err(NoHead::Refuse(Refusal::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "invalid_request",
            format!("the request has more than {MAX_HEADERS} headers"),
        ))),
        Err(e) => Err(NoHead::Refuse(Refusal::bad(format!(
            "malformed HTTP/1.1 request: {e}"
        )))),
    }
}

fn too_long_target() -> Refusal {
    Refusal::new(
        StatusCode::URI_TOO_LONG,
        "invalid_request",
        format!("the request target is longer than {MAX_TARGET} bytes"),
    )
}

fn validate(req: &httparse::Request<'_, '_>, max_body: usize) -> Result<(), NoHead> {
    if req.path.is_some_and(|p| p.len() > MAX_TARGET) {
        return Err(NoHead::Refuse(too_long_target()));
    }
    let value = |h: &httparse::Header<'_>| String::from_utf8_lossy(h.value).trim().to_owned();
    let lengths: Vec<String> = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("content-length"))
        .map(value)
        .collect();
    let chunked = req
        .headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
    if lengths.is_empty() {
        return Ok(());
    }
    if chunked {
        return Err(NoHead::Refuse(Refusal::bad(
            "Content-Length and Transfer-Encoding together",
        )));
    }
    let parsed: Option<Vec<u64>> = lengths
        .iter()
        .map(|l| {
            l.bytes()
                .all(|b| b.is_ascii_digit())
                .then(|| l.parse().ok())
                .flatten()
        })
        .collect();
    match parsed.as_deref() {
        Some([first, rest @ ..]) if rest.iter().all(|v| v == first) => {
            if *first > max_body as u64 {
                return Err(NoHead::Refuse(too_large(max_body)));
            }
            Ok(())
        }
        _ => Err(NoHead::Refuse(Refusal::bad(format!(
            "bad Content-Length {:?}",
            lengths.join(", ")
        )))),
    }
}

/// The 413 the router answers too (same code and details).
pub(super) fn too_large(limit: usize) -> Refusal {
    let mut r = Refusal::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload_too_large",
        format!("the request body is larger than the limit of {limit} bytes"),
    );
    r.body.details.insert("limit_bytes".into(), limit.into());
    r
}

/// A stream that first yields bytes already read from it.
pub(super) struct Prefixed<S> {
    prefix: Vec<u8>,
    pos: usize,
    inner: S,
}

impl<S> Prefixed<S> {
    pub(super) fn new(prefix: Vec<u8>, inner: S) -> Self {
        Prefixed {
            prefix,
            pos: 0,
            inner,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prefixed<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        if this.pos < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.pos);
            buf.put_slice(&this.prefix[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.prefix.len() {
                this.prefix = Vec::new();
                this.pos = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prefixed<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(raw: &str) -> Refusal {
        match check(raw.as_bytes(), 1024) {
            Err(NoHead::Refuse(r)) => r,
            other => panic!("{raw:?}: {other:?}"),
        }
    }

    #[test]
    fn good_heads_pass_and_partial_ones_wait() {
        let ok = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
        assert!(check(ok.as_bytes(), 1024).unwrap());
        let post = "POST /v1/allocations HTTP/1.1\r\nContent-Length: 10\r\n\r\n{";
        assert!(check(post.as_bytes(), 1024).unwrap());
        assert!(!check(b"GET /healthz HTTP/1.1\r\nHo", 1024).unwrap());
    }

    #[test]
    fn bad_heads_get_json_errors() {
        assert_eq!(refused("GET /\r\n\r\n").status, 400); // HTTP/0.9
        let two = "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n";
        assert_eq!(refused(two).status, 400);
        assert_eq!(
            refused("POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n").status,
            400
        );
        let big = "POST / HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n";
        let r = refused(big);
        assert_eq!(r.status, 413);
        assert_eq!(r.body.code, "payload_too_large");
        let path = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(10_000));
        assert_eq!(refused(&path).status, 414);
        let many: String = (0..200).map(|i| format!("X-{i}: v\r\n")).collect();
        assert_eq!(
            refused(&format!("GET / HTTP/1.1\r\n{many}\r\n")).status,
            431
        );
        let text = String::from_utf8(refused("GET /\r\n\r\n").to_bytes()).unwrap();
        assert!(text.contains("\"code\":\"invalid_request\""), "{text}");
    }
}
