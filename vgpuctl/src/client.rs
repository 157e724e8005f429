//! HTTP/1.1 over the unix socket: one connection per request (the socket is local and cheap).

use std::path::{Path, PathBuf};

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::net::UnixStream;

/// Why a call did not produce the answer the command needs.
#[derive(Debug)]
pub enum Failure {
    /// The socket cannot be reached (exit status 3).
    Connect(String),
    /// The server answered with an error (exit status 1).
    Server {
        /// HTTP status.
        status: StatusCode,
        /// The error's code.
        code: String,
        /// The error's message.
        message: String,
    },
    /// Anything else: a broken answer, a local file (exit status 1).
    Other(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Connect(m) | Failure::Other(m) => f.write_str(m),
            Failure::Server {
                status,
                code,
                message,
            } => write!(f, "{code} ({}): {message}", status.as_u16()),
        }
    }
}

/// A client of one socket.
pub struct Client {
    socket: PathBuf,
}

/// A successful answer.
pub struct Answer {
    /// Headers.
    pub headers: hyper::HeaderMap,
    /// The JSON body (`null` when empty).
    pub body: Value,
}

impl Client {
    /// A client of the socket at `socket`.
    pub fn new(socket: &Path) -> Self {
        Client {
            socket: socket.to_owned(),
        }
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Result<Response<Incoming>, Failure> {
        let stream = UnixStream::connect(&self.socket).await.map_err(|e| {
            Failure::Connect(format!(
                "cannot connect to {}: {e} (is vgpud running? --socket or VGPUCTL_SOCKET choose another socket)",
                self.socket.display()
            ))
        })?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| Failure::Connect(format!("{}: {e}", self.socket.display())))?;
        tokio::spawn(conn);
        let mut req = Request::builder()
            .method(method)
            .uri(path)
            .header("host", "vgpud");
        if body.is_some() {
            req = req.header("content-type", "application/json");
        }
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .map_err(|e| Failure::Other(format!("building the request: {e}")))?;
        sender
            .send_request(req)
            .await
            .map_err(|e| Failure::Connect(format!("{}: {e}", self.socket.display())))
    }

    /// One call; an error status becomes [`Failure::Server`].
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&Value>,
    ) -> Result<Answer, Failure> {
        let bytes = body
            .map(serde_json::to_vec)
            .transpose()
            .map_err(|e| Failure::Other(e.to_string()))?;
        let resp = self.send(method, path, headers, bytes).await?;
        let (parts, body) = resp.into_parts();
        let data = body
            .collect()
            .await
            .map_err(|e| Failure::Other(format!("reading the answer: {e}")))?
            .to_bytes();
        let json = if data.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&data)
                .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&data).into_owned()))
        };
        if !parts.status.is_success() {
            return Err(Failure::Server {
                status: parts.status,
                code: json["code"].as_str().unwrap_or("unknown").to_owned(),
                message: json["message"]
                    .as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| json.to_string()),
            });
        }
        Ok(Answer {
            headers: parts.headers,
            body: json,
        })
    }

    /// A GET returning JSON.
    pub async fn get(&self, path: &str) -> Result<Value, Failure> {
        Ok(self.call("GET", path, &[], None).await?.body)
    }

    /// Follows `/v1/events`, calling `each(name, data)` per event until it returns false.
    pub async fn events(&self, mut each: impl FnMut(&str, &Value) -> bool) -> Result<(), Failure> {
        let resp = self.send("GET", "/v1/events", &[], None).await?;
        if !resp.status().is_success() {
            return Err(Failure::Other(format!("events: HTTP {}", resp.status())));
        }
        let mut body = resp.into_body();
        let mut pending = String::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| Failure::Other(format!("event stream: {e}")))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            pending.push_str(&String::from_utf8_lossy(&data));
            while let Some(end) = pending.find("\n\n") {
                let block: String = pending.drain(..end + 2).collect();
                let mut name = "message";
                let mut payload = String::new();
                for line in block.lines() {
                    if let Some(n) = line.strip_prefix("event: ") {
                        name = n;
                    } else if let Some(d) = line.strip_prefix("data: ") {
                        payload.push_str(d);
                    }
                }
                if payload.is_empty() {
                    continue; // keep-alive comment
                }
                let value = serde_json::from_str(&payload).unwrap_or(Value::String(payload));
                if !each(name, &value) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }
}
