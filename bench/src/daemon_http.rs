//! A minimal HTTP/1.1 client over the daemon's unix socket: keep-alive connections, so that a
//! timed request measures the daemon's answer, not a connect and the client's own parsing.
//! Only what vgpud answers is understood (`Content-Length` or chunked bodies).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, bail};

/// One kept-alive connection.
pub struct Conn {
    stream: BufReader<UnixStream>,
}

/// A status and a body.
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// The body, de-chunked.
    pub body: Vec<u8>,
}

impl Answer {
    /// The body as JSON.
    pub fn json(&self) -> anyhow::Result<serde_json::Value> {
        serde_json::from_slice(&self.body).context("the answer is not JSON")
    }

    /// Fails with the body unless the status is 2xx.
    pub fn ok(self) -> anyhow::Result<Self> {
        if !(200..300).contains(&self.status) {
            bail!(
                "HTTP {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            );
        }
        Ok(self)
    }
}

impl Conn {
    /// Connects to `socket`.
    pub fn connect(socket: &Path) -> anyhow::Result<Self> {
        let s = UnixStream::connect(socket)
            .with_context(|| format!("connecting to {}", socket.display()))?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        Ok(Self {
            stream: BufReader::with_capacity(64 * 1024, s),
        })
    }

    /// One request on this connection; `close` asks the daemon to close it afterwards.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        body: Option<&str>,
        close: bool,
    ) -> anyhow::Result<Answer> {
        let body = body.unwrap_or("");
        let connection = if close { "close" } else { "keep-alive" };
        let head = format!(
            "{method} {path} HTTP/1.1\r\nHost: localhost\r\nConnection: {connection}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let s = self.stream.get_mut();
        s.write_all(head.as_bytes())?;
        s.write_all(body.as_bytes())?;
        self.read_answer()
            .with_context(|| format!("{method} {path}"))
    }

    fn read_answer(&mut self) -> anyhow::Result<Answer> {
        let mut line = String::new();
        self.stream.read_line(&mut line)?;
        let status: u16 = line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("bad status line {line:?}"))?;
        let (mut length, mut chunked) = (None, false);
        loop {
            line.clear();
            if self.stream.read_line(&mut line)? == 0 {
                bail!("the connection closed in the head");
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            let Some((name, value)) = l.split_once(':') else {
                continue;
            };
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            if name == "content-length" {
                length = Some(value.parse::<usize>()?);
            } else if name == "transfer-encoding" && value.eq_ignore_ascii_case("chunked") {
                chunked = true;
            }
        }
        let body = if chunked {
            self.read_chunked()?
        } else {
            let mut b = vec![0; length.unwrap_or(0)];
            self.stream.read_exact(&mut b)?;
            b
        };
        Ok(Answer { status, body })
    }

    fn read_chunked(&mut self) -> anyhow::Result<Vec<u8>> {
        let mut body = Vec::new();
        let mut line = String::new();
        loop {
            line.clear();
            self.stream.read_line(&mut line)?;
            let size = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                .with_context(|| format!("bad chunk size {line:?}"))?;
            let start = body.len();
            body.resize(start + size + 2, 0);
            self.stream.read_exact(&mut body[start..])?;
            body.truncate(start + size);
            if size == 0 {
                return Ok(body);
            }
        }
    }
}

/// One request on a fresh connection that is closed afterwards.
pub fn once(socket: &Path, method: &str, path: &str, body: Option<&str>) -> anyhow::Result<Answer> {
    Conn::connect(socket)?.request(method, path, body, true)
}
