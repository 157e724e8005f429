//! Raw connections for the attackers: held open, fed a few bytes, read with a deadline.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// `n` unix connections that connect and say nothing (those the kernel refuses are skipped).
pub fn silent_unix(socket: &Path, n: usize) -> Vec<UnixStream> {
    (0..n)
        .filter_map(|_| UnixStream::connect(socket).ok())
        .collect()
}

/// `n` TCP connections to `port` on loopback that say nothing (refused ones are skipped).
pub fn silent_tcp(port: u16, n: usize) -> Vec<TcpStream> {
    (0..n)
        .filter_map(|_| TcpStream::connect(("127.0.0.1", port)).ok())
        .collect()
}

/// `n` TLS connections to `port` on loopback that finish their handshake (trusting `cert`) and
/// then say nothing; those the daemon closes or refuses are skipped.
pub fn silent_tls(port: u16, cert: &Path, n: usize) -> anyhow::Result<Vec<TlsConn>> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, ServerName};
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(cert)? {
        roots.add(c?)?;
    }
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let config = std::sync::Arc::new(config);
    let name = ServerName::try_from("127.0.0.1")?;
    let mut held = Vec::new();
    let mut failed_in_a_row = 0;
    for _ in 0..n {
        // A daemon that stopped handshaking (out of fds) would cost 2 s per attempt.
        if failed_in_a_row == 5 {
            break;
        }
        let Ok(mut tcp) = TcpStream::connect(("127.0.0.1", port)) else {
            failed_in_a_row += 1;
            continue;
        };
        tcp.set_read_timeout(Some(Duration::from_secs(2)))?;
        let mut tls = rustls::ClientConnection::new(config.clone(), name.clone())?;
        let mut ok = true;
        while tls.is_handshaking() && ok {
            ok = tls.complete_io(&mut tcp).is_ok();
        }
        if ok {
            held.push((tls, tcp));
            failed_in_a_row = 0;
        } else {
            failed_in_a_row += 1;
        }
    }
    Ok(held)
}

/// A client TLS connection and its socket.
pub type TlsConn = (rustls::ClientConnection, TcpStream);

/// What a connection saw within `wait`: the bytes it got and whether the daemon closed it.
#[derive(Debug)]
pub struct Seen {
    /// Bytes the daemon sent.
    pub bytes: Vec<u8>,
    /// The daemon closed the connection (EOF or reset) in time.
    pub closed: bool,
    /// When it closed (or `wait` when it did not).
    pub after: Duration,
}

impl Seen {
    /// The answer's status code, if an HTTP answer came.
    pub fn status(&self) -> Option<u16> {
        let text = String::from_utf8_lossy(&self.bytes);
        text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
    }

    /// The answer's body (after the head), as JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        let at = self.bytes.windows(4).position(|w| w == b"\r\n\r\n")?;
        serde_json::from_slice(&self.bytes[at + 4..]).ok()
    }
}

/// Reads from `s` until the daemon closes it or `wait` passes.
pub fn watch<S: Read + SetTimeout>(s: &mut S, wait: Duration) -> Seen {
    let started = Instant::now();
    let mut bytes = Vec::new();
    loop {
        let left = wait.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Seen {
                bytes,
                closed: false,
                after: wait,
            };
        }
        let _ = s.set_timeout(left.max(Duration::from_millis(1)));
        let mut buf = [0u8; 4096];
        match s.read(&mut buf) {
            Ok(0) => {
                return Seen {
                    bytes,
                    closed: true,
                    after: started.elapsed(),
                };
            }
            Ok(n) => bytes.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => {
                return Seen {
                    bytes,
                    closed: true,
                    after: started.elapsed(),
                };
            }
        }
    }
}

/// Sends `bytes` on a new unix connection and watches the answer for `wait`.
pub fn send_unix(socket: &Path, bytes: &[u8], wait: Duration) -> std::io::Result<Seen> {
    let mut s = UnixStream::connect(socket)?;
    s.write_all(bytes)?;
    Ok(watch(&mut s, wait))
}

/// A read timeout on either kind of stream.
pub trait SetTimeout {
    /// Sets the read timeout.
    fn set_timeout(&self, t: Duration) -> std::io::Result<()>;
}

impl SetTimeout for UnixStream {
    fn set_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(t))
    }
}

impl SetTimeout for TcpStream {
    fn set_timeout(&self, t: Duration) -> std::io::Result<()> {
        self.set_read_timeout(Some(t))
    }
}
