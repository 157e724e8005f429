//! The TCP listener: TLS only (rustls with the ring provider), every request authenticated by a
//! client certificate (checked against a CA and an allow-list of subjects) or a bearer token.
//!
//! A TCP listener without any way to authenticate is refused at start: nothing is anonymous on
//! the network. A client that speaks plain HTTP to the port gets a plain `400` telling it to use
//! HTTPS, and the connection is closed; nothing is served.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

use super::auth::{self, Credentials, TlsPeer, TokenFile};
use super::conn_limits::{ConnLimits, PeerKey};
use super::serve::{Listen, serve};
use super::unix::serve_with_grace;
use crate::error::ApiError;

/// How the TLS listener identifies itself and its clients (the `[api.tcp]` section of
/// vgpud.toml).
#[derive(Debug, Clone)]
pub struct TlsOptions {
    /// The server's certificate chain (PEM).
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    /// CA certificates that sign client certificates (PEM); none: no client certificates.
    pub client_ca: Option<PathBuf>,
    /// Subjects allowed among the CA's certificates (`CN=nova-compute`); empty: all of them.
    pub allowed_subjects: Vec<String>,
    /// Bearer tokens (see [`TokenFile`]); none: no tokens.
    pub tokens_file: Option<PathBuf>,
}

impl From<&agent::config::TcpConfig> for TlsOptions {
    fn from(c: &agent::config::TcpConfig) -> Self {
        TlsOptions {
            cert: c.cert.clone(),
            key: c.key.clone(),
            client_ca: c.client_ca.clone(),
            allowed_subjects: c.allowed_subjects.clone(),
            tokens_file: c.tokens_file.clone(),
        }
    }
}

/// Serves `router` over TLS on `addr` until `shutdown` resolves.
pub async fn serve_tls(
    router: Router,
    addr: SocketAddr,
    options: TlsOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| ApiError::listener(format!("binding {addr}"), e))?;
    serve_tls_listener(router, listener, options, shutdown).await
}

/// Serves `router` over TLS on a bound listener (tests bind port 0) until `shutdown` resolves.
pub async fn serve_tls_listener(
    router: Router,
    listener: TcpListener,
    options: TlsOptions,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    serve_tls_listener_limited(router, listener, options, ConnLimits::default(), shutdown).await
}

/// [`serve_tls_listener`] with the transport limits `limits`.
pub async fn serve_tls_listener_limited(
    router: Router,
    listener: TcpListener,
    options: TlsOptions,
    limits: ConnLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ApiError> {
    let (config, credentials) = load(&options)?;
    let local = listener
        .local_addr()
        .map_err(|e| ApiError::listener("reading the listener's address".into(), e))?;
    tracing::info!(%local, certificates = credentials.certificates, tokens = credentials.tokens.is_some(), "REST API listening (TLS)");
    let credentials = Arc::new(credentials);
    let app = router.layer(middleware::from_fn(move |info, req, next| {
        authenticate(credentials.clone(), info, req, next)
    }));
    let tls = TlsListener {
        inner: listener,
        acceptor: TlsAcceptor::from(Arc::new(config)),
        handshake_timeout: limits.tls_handshake_timeout,
    };
    serve_with_grace(shutdown, move |signal| serve(tls, app, limits, signal))
        .await
        .map_err(|e| ApiError::listener(format!("serving on {local}"), e))
}

fn load(options: &TlsOptions) -> Result<(rustls::ServerConfig, Credentials), ApiError> {
    if options.client_ca.is_none() && options.tokens_file.is_none() {
        return Err(ApiError::TlsConfig(
            "the TCP listener needs client_ca or tokens_file: nothing is served anonymously over the network".into(),
        ));
    }
    if options.client_ca.is_none() && !options.allowed_subjects.is_empty() {
        return Err(ApiError::TlsConfig(
            "allowed_subjects needs client_ca to check the certificates against".into(),
        ));
    }
    let tokens = options
        .tokens_file
        .as_deref()
        .map(TokenFile::load)
        .transpose()
        .map_err(ApiError::TlsConfig)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = match &options.client_ca {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in read_certs(ca)? {
                roots
                    .add(cert)
                    .map_err(|e| ApiError::TlsConfig(format!("{}: {e}", ca.display())))?;
            }
            let builder =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            // With tokens too, a client may come without a certificate and show a token instead.
            let builder = if tokens.is_some() {
                builder.allow_unauthenticated()
            } else {
                builder
            };
            builder
                .build()
                .map_err(|e| ApiError::TlsConfig(format!("client CA {}: {e}", ca.display())))?
        }
        None => WebPkiClientVerifier::no_client_auth(),
    };
    let key = PrivateKeyDer::from_pem_file(&options.key)
        .map_err(|e| ApiError::TlsConfig(format!("server key {}: {e}", options.key.display())))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ApiError::TlsConfig(e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(read_certs(&options.cert)?, key)
        .map_err(|e| {
            ApiError::TlsConfig(format!(
                "server certificate {}: {e}",
                options.cert.display()
            ))
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let credentials = Credentials {
        tokens,
        allowed_subjects: options.allowed_subjects.clone(),
        certificates: options.client_ca.is_some(),
    };
    Ok((config, credentials))
}

fn read_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, ApiError> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| ApiError::TlsConfig(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(ApiError::TlsConfig(format!(
            "{} holds no certificate",
            path.display()
        )));
    }
    Ok(certs)
}

async fn authenticate(
    credentials: Arc<Credentials>,
    ConnectInfo(peer): ConnectInfo<TlsPeer>,
    mut req: Request,
    next: Next,
) -> Response {
    let caller = auth::authorization(&req).and_then(|a| credentials.authenticate(&peer, a));
    match caller {
        Ok(caller) => {
            tracing::debug!(%caller, peer = %peer.addr, "API request");
            req.extensions_mut().insert(caller);
            next.run(req).await
        }
        Err(e) => {
            tracing::debug!(peer = %peer.addr, error = %e, "API request refused");
            let mut response = e.into_response();
            response.headers_mut().insert(
                axum::http::header::WWW_AUTHENTICATE,
                axum::http::HeaderValue::from_static("Bearer realm=\"vgpud\""),
            );
            response
        }
    }
}

/// The TLS listener: each peer counts against its IP address; handshakes run in each
/// connection's own task under their own deadline, so one slow client holds up nobody else.
struct TlsListener {
    inner: TcpListener,
    acceptor: TlsAcceptor,
    handshake_timeout: Duration,
}

impl Listen for TlsListener {
    type Raw = (TcpStream, SocketAddr);
    type Io = TlsStream<TcpStream>;
    type Peer = ConnectInfo<TlsPeer>;
    // A handshake takes a few round trips: a client is not evicted in the middle of them.
    const EVICT_MIN_AGE: Duration = Duration::from_millis(50);

    async fn accept(&self) -> std::io::Result<((TcpStream, SocketAddr), PeerKey)> {
        let (stream, addr) = self.inner.accept().await?;
        Ok(((stream, addr), PeerKey::Ip(addr.ip())))
    }

    async fn open(
        &self,
        (stream, addr): (TcpStream, SocketAddr),
    ) -> std::io::Result<(TlsStream<TcpStream>, ConnectInfo<TlsPeer>)> {
        let handshake = handshake(stream, addr, self.acceptor.clone());
        match tokio::time::timeout(self.handshake_timeout, handshake).await {
            Ok(Ok((tls, peer))) => Ok((tls, ConnectInfo(peer))),
            Ok(Err(e)) => {
                tracing::debug!(peer = %addr, error = %e, "TLS handshake failed");
                Err(e)
            }
            Err(_) => {
                tracing::debug!(peer = %addr, "TLS handshake timed out");
                Err(std::io::Error::from(std::io::ErrorKind::TimedOut))
            }
        }
    }

    fn refuse(&self, _raw: (TcpStream, SocketAddr)) {
        // Nothing can be said before a handshake: the connection is closed at once.
    }
}

/// The first byte of a TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

async fn handshake(
    mut stream: TcpStream,
    addr: SocketAddr,
    acceptor: TlsAcceptor,
) -> std::io::Result<(TlsStream<TcpStream>, TlsPeer)> {
    let mut first = [0u8; 1];
    let n = stream.peek(&mut first).await?;
    if n == 1 && first[0] != TLS_HANDSHAKE {
        let body = "{\"code\":\"tls_required\",\"message\":\"this port speaks HTTPS only\",\"details\":{}}";
        let reply = format!(
            "HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = stream.write_all(reply.as_bytes()).await;
        let _ = stream.shutdown().await;
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "plain text on the TLS port",
        ));
    }
    let tls = acceptor.accept(stream).await?;
    let subject = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .and_then(|c| subject_of(c.as_ref()));
    Ok((tls, TlsPeer { addr, subject }))
}

/// The subject of a DER certificate: its (attribute, value) pairs and its display form. Every
/// attribute is kept, repeated ones too: a value that is no string (a BMPString, say) stands as
/// `#` and its DER in hex (RFC 4514's form), so it can never be dropped and leave a subject that
/// passes a rule its real attributes would not.
fn subject_of(der: &[u8]) -> Option<(Vec<(String, String)>, String)> {
    let (_, cert) = x509_parser::parse_x509_certificate(der).ok()?;
    let registry = x509_parser::objects::oid_registry();
    let pairs = cert
        .subject()
        .iter_attributes()
        .map(|a| {
            let name = x509_parser::objects::oid2abbrev(a.attr_type(), registry)
                .map(str::to_owned)
                .unwrap_or_else(|_| a.attr_type().to_id_string());
            let value = match a.as_str() {
                Ok(v) => v.to_owned(),
                Err(_) => format!("#{}", hex(a.attr_value().data)),
            };
            (name, value)
        })
        .collect();
    Some((pairs, cert.subject().to_string()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
