//! The TLS listener over real TCP: client certificates against a CA and a subject allow-list,
//! bearer tokens from a file, plain HTTP refused, nothing anonymous.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod rest_common;

use std::net::SocketAddr;
use std::sync::Arc;

use api::rest::{self, RestOptions, TlsOptions};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair,
};
use rest_common::Reply;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const TOKEN: &str = "s3cr3t-t0ken-for-the-control-plane";

struct Pki {
    ca: CertifiedIssuer<'static, KeyPair>,
}

struct Leaf {
    cert: CertificateDer<'static>,
    key: PrivateKeyDer<'static>,
    cert_pem: String,
    key_pem: String,
}

impl Pki {
    fn new(name: &str) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        Pki {
            ca: CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap(),
        }
    }

    fn leaf(&self, cn: &str, sans: &[&str], usage: ExtendedKeyUsagePurpose) -> Leaf {
        let mut params =
            CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "Example");
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.ca).unwrap();
        Leaf {
            cert: cert.der().clone(),
            key: PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }
}

struct Server {
    addr: SocketAddr,
    ca: CertificateDer<'static>,
    _dir: tempfile::TempDir,
    service: agent::service::Service,
}

async fn start(pki: &Pki) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let server = pki.leaf("vgpud", &["localhost"], ExtendedKeyUsagePurpose::ServerAuth);
    let write = |name: &str, text: &str| {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    };
    let options = TlsOptions {
        cert: write("server.crt", &server.cert_pem),
        key: write("server.key", &server.key_pem),
        client_ca: Some(write("clients-ca.crt", &pki.ca.pem())),
        allowed_subjects: vec!["CN=nova-compute".into()],
        tokens_file: Some(write(
            "tokens",
            &format!("# control plane\ncontrol {TOKEN}\n"),
        )),
    };
    let state = dir.path().join("state");
    let (_sim, service) = testkit::service_async("dgx-a100", state).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let router = rest::router(service.clone(), RestOptions::default());
    tokio::spawn(async move {
        rest::serve_tls_listener(router, listener, options, std::future::pending())
            .await
            .unwrap();
    });
    Server {
        addr,
        ca: pki.ca.der().clone(),
        _dir: dir,
        service,
    }
}

async fn call(
    server: &Server,
    client: Option<&Leaf>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<serde_json::Value>,
) -> Option<Reply> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(server.ca.clone()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots);
    let config = match client {
        Some(leaf) => builder
            .with_client_auth_cert(vec![leaf.cert.clone()], leaf.key.clone_key())
            .unwrap(),
        None => builder.with_no_client_auth(),
    };
    let tcp = TcpStream::connect(server.addr).await.unwrap();
    let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .ok()?;
    let mut all: Vec<(&str, &str)> = headers.to_vec();
    let bytes = body.map(|b| {
        all.push(("content-type", "application/json"));
        serde_json::to_vec(&b).unwrap()
    });
    rest_common::try_send(tls, method, path, &all, bytes).await
}

fn alloc_body(consumer: &str) -> serde_json::Value {
    json!({"consumer": consumer, "request": {"type": "1g.10gb"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_needs_an_allowed_certificate_or_a_token() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let pki = Pki::new("vgpud test clients");
    let server = start(&pki).await;
    let nova = pki.leaf("nova-compute", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let intruder = pki.leaf("intruder", &[], ExtendedKeyUsagePurpose::ClientAuth);
    let stranger =
        Pki::new("someone else").leaf("nova-compute", &[], ExtendedKeyUsagePurpose::ClientAuth);

    // Nothing presented: 401, reading or writing.
    for (method, body) in [("GET", None), ("POST", Some(alloc_body("anon")))] {
        let path = if method == "GET" {
            "/v1/host"
        } else {
            "/v1/allocations"
        };
        let r = call(&server, None, method, path, &[], body).await.unwrap();
        assert_eq!(r.status, 401, "{method}: {}", r.text());
        assert_eq!(r.error_code(), "unauthenticated");
        assert!(r.header("www-authenticate").is_some());
    }

    // An allowed certificate.
    let r = call(&server, Some(&nova), "GET", "/v1/host", &[], None)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    let r = call(
        &server,
        Some(&nova),
        "POST",
        "/v1/allocations",
        &[],
        Some(alloc_body("nova")),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());

    // A certificate from the CA whose subject is not allowed: 403.
    let r = call(
        &server,
        Some(&intruder),
        "POST",
        "/v1/allocations",
        &[],
        Some(alloc_body("intruder")),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 403, "{}", r.text());
    assert_eq!(r.error_code(), "forbidden");
    let r = call(
        &server,
        Some(&intruder),
        "GET",
        "/v1/allocations",
        &[],
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.status, 403);

    // A certificate from another CA: the handshake fails, nothing is served.
    let r = call(&server, Some(&stranger), "GET", "/v1/host", &[], None).await;
    assert!(
        r.is_none(),
        "a certificate from another CA was served: {:?}",
        r.map(|r| r.status)
    );

    // Bearer tokens.
    let bearer = format!("Bearer {TOKEN}");
    let r = call(
        &server,
        None,
        "POST",
        "/v1/allocations",
        &[("authorization", &bearer)],
        Some(alloc_body("control")),
    )
    .await
    .unwrap();
    assert_eq!(r.status, 201, "{}", r.text());
    for bad in [
        format!("Bearer {TOKEN}x"),
        "Bearer ".into(),
        format!("Basic {TOKEN}"),
        TOKEN.into(),
    ] {
        let r = call(
            &server,
            None,
            "POST",
            "/v1/allocations",
            &[("authorization", &bad)],
            Some(alloc_body("bad")),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 401, "{bad}: {}", r.text());
        assert_eq!(r.error_code(), "unauthenticated");
    }

    // Only the two authenticated allocations exist.
    let consumers: Vec<String> = server
        .service
        .allocations()
        .into_iter()
        .map(|a| a.consumer)
        .collect();
    assert_eq!(consumers.len(), 2, "{consumers:?}");
    assert!(consumers.contains(&"nova".to_owned()) && consumers.contains(&"control".to_owned()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_on_the_tls_port_is_refused() {
    let pki = Pki::new("ca");
    let server = start(&pki).await;
    let mut tcp = TcpStream::connect(server.addr).await.unwrap();
    tcp.write_all(b"POST /v1/allocations HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tcp.read_to_end(&mut answer),
    )
    .await
    .unwrap()
    .unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert!(text.contains("HTTPS only"), "{text}");
    assert!(server.service.allocations().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tcp_listener_without_authentication_does_not_start() {
    let pki = Pki::new("ca");
    let server = pki.leaf("vgpud", &["localhost"], ExtendedKeyUsagePurpose::ServerAuth);
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("c"), dir.path().join("k"));
    std::fs::write(&cert, &server.cert_pem).unwrap();
    std::fs::write(&key, &server.key_pem).unwrap();
    let state = dir.path().join("state");
    let (_sim, service) = testkit::service_async("single-gpu", state).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let options = TlsOptions {
        cert,
        key,
        client_ca: None,
        allowed_subjects: vec![],
        tokens_file: None,
    };
    let err = rest::serve_tls_listener(
        rest::router(service, RestOptions::default()),
        listener,
        options,
        std::future::pending(),
    )
    .await
    .unwrap_err();
    assert!(err.to_string().contains("anonymously"), "{err}");
}
