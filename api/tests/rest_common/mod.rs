//! Shared set-up for the REST tests: a simulated host, an engine and service over it, the
//! router served on a real unix socket in a temp dir, and a small HTTP/1.1 client.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent::service::Service;
use api::rest::RestOptions;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use sim::{Profile, SimHost};
use testkit::RestServer;
use tokio::net::UnixStream;

pub const A100: &str = "0000:07:00.0";
pub const T4: &str = "0000:41:00.0";

/// A served router over a simulated host.
pub struct Rig {
    pub dir: tempfile::TempDir,
    pub sim: SimHost,
    pub service: Service,
    pub socket: PathBuf,
    server: RestServer,
}

use testkit::service_on_profile;

impl Rig {
    pub async fn start(profile: &str) -> Rig {
        Self::start_with(profile, RestOptions::default()).await
    }

    pub async fn start_with(profile: &str, options: RestOptions) -> Rig {
        let profile = Profile::builtin(profile_static(profile)).unwrap();
        Self::start_profile(profile, options).await
    }

    /// A server on any profile (a file's, not only a built-in one).
    pub async fn start_profile(profile: Profile, options: RestOptions) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().join("state");
        let (sim, service) =
            tokio::task::spawn_blocking(move || service_on_profile(profile, &state))
                .await
                .unwrap();
        let socket = dir.path().join("api.sock");
        let server = RestServer::start(service.clone(), options, &socket).await;
        Rig {
            dir,
            sim,
            service,
            socket,
            server,
        }
    }

    /// Stops the server and waits for it (the socket file goes).
    pub async fn stop(&mut self) {
        self.server.stop().await;
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.call("GET", path, &[], None).await
    }

    pub async fn post(&self, path: &str, json: serde_json::Value) -> Reply {
        self.send_json("POST", path, &json).await
    }

    pub async fn send_json(&self, method: &str, path: &str, json: &serde_json::Value) -> Reply {
        let body = serde_json::to_vec(json).unwrap();
        self.call(
            method,
            path,
            &[("content-type", "application/json")],
            Some(body),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Reply {
        self.call("DELETE", path, &[], None).await
    }

    pub async fn call(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> Reply {
        request_unix(&self.socket, method, path, headers, body).await
    }

    /// Everything a client can observe of the state, for before/after comparisons.
    pub async fn snapshot(&self) -> serde_json::Value {
        let slices = self.get("/v1/slices").await.json();
        let allocations = self.get("/v1/allocations").await.json();
        let mut host = self.get("/v1/host").await.json();
        // Free memory is live telemetry, not state.
        for n in host["numa_nodes"].as_array_mut().unwrap() {
            n["memory_free_mib"] = serde_json::Value::Null;
        }
        let layouts = self.get("/v1/layouts").await.json();
        serde_json::json!({"slices": slices, "allocations": allocations, "host": host, "layouts": layouts})
    }
}

fn profile_static(p: &str) -> &'static str {
    Profile::builtin_names()
        .iter()
        .find(|n| **n == p)
        .copied()
        .unwrap()
}

/// An HTTP answer.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: hyper::HeaderMap,
    pub body: Bytes,
}

impl Reply {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "not JSON ({e}): {} {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    }

    /// Asserts the JSON error shape and returns the code.
    pub fn error_code(&self) -> String {
        let v = self.json();
        let obj = v
            .as_object()
            .unwrap_or_else(|| panic!("not an object: {v}"));
        assert!(obj["message"].is_string(), "{v}");
        assert!(obj["details"].is_object(), "{v}");
        assert_eq!(obj.len(), 3, "{v}");
        obj["code"].as_str().unwrap().to_owned()
    }
}

pub async fn request_unix(
    socket: &Path,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Reply {
    let stream = UnixStream::connect(socket).await.unwrap();
    match body {
        // The server may answer 413 from the Content-Length alone and close while a client is
        // still writing; hyper's client then reports the broken pipe, not the answer.
        Some(b) if b.len() > OVERSIZED => send_oversized(stream, method, path, headers, b).await,
        body => send(stream, method, path, headers, body).await,
    }
}

/// Bodies above this may be refused before they are read (the server's default limit).
const OVERSIZED: usize = 1 << 20;

/// One request on a raw connection: the body is written while the answer is read, a write the
/// server cuts short is ignored, and the answer is parsed from what arrives.
async fn send_oversized(
    stream: UnixStream,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nhost: vgpud\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let (mut rd, mut wr) = stream.into_split();
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(head.as_bytes()).await;
        let _ = wr.write_all(&body).await;
    });
    let mut raw = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let reply = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if let Some(reply) = parse_reply(&raw) {
                return reply;
            }
            let n = rd.read(&mut chunk).await.unwrap();
            assert!(n > 0, "the server closed without a whole answer: {raw:?}");
            raw.extend_from_slice(&chunk[..n]);
        }
    })
    .await
    .expect("an answer within 30 s");
    writer.abort();
    reply
}

/// A whole HTTP/1.1 answer with a Content-Length body, once all of it is in `raw`.
fn parse_reply(raw: &[u8]) -> Option<Reply> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let mut parsed = [httparse::EMPTY_HEADER; 32];
    let mut resp = httparse::Response::new(&mut parsed);
    resp.parse(&raw[..end]).ok()?;
    let mut headers = hyper::HeaderMap::new();
    for h in resp.headers.iter() {
        headers.append(
            hyper::header::HeaderName::from_bytes(h.name.as_bytes()).ok()?,
            hyper::header::HeaderValue::from_bytes(h.value).ok()?,
        );
    }
    let len: usize = headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse().ok())
        .unwrap_or(0);
    let body = raw.get(end..end + len)?;
    Some(Reply {
        status: StatusCode::from_u16(resp.code?).ok()?,
        headers,
        body: Bytes::copy_from_slice(body),
    })
}

/// Like [`send`], but a connection the server drops is `None` instead of a panic.
pub async fn try_send<S>(
    stream: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Option<Reply>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .ok()?;
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "vgpud");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .ok()?;
    let resp = sender.send_request(req).await.ok()?;
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    Some(Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    })
}

pub async fn send<S>(
    stream: S,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<Vec<u8>>,
) -> Reply
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", "vgpud");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Full::new(Bytes::from(body.unwrap_or_default())))
        .unwrap();
    let resp = sender.send_request(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let body = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        body,
    }
}
