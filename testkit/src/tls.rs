//! Files for a daemon's TLS listener: a self-signed certificate and secrets vgpud accepts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Writes a file only its owner may read, as vgpud wants for keys and tokens files.
pub fn write_secret(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

/// A self-signed leaf certificate for 127.0.0.1 (`CN=localhost`) and its key (mode 0600), made
/// by openssl in `dir`.
pub fn self_signed_cert(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let made = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "ec", "-pkeyopt"])
        .arg("ec_paramgen_curve:prime256v1")
        .args(["-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1"])
        // A leaf, not a CA: webpki (rustls clients) refuses a CA certificate as a server's.
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(made.success(), "openssl req");
    let text = std::fs::read_to_string(&key).unwrap();
    write_secret(&key, &text);
    (cert, key)
}

/// A test certificate authority and a server certificate it signed, as PEM files.
pub struct TestCa {
    /// The CA's certificate: what a client's `ca_file` names.
    pub ca_cert: PathBuf,
    /// The server's certificate (`CN=localhost`, SAN 127.0.0.1 and localhost).
    pub cert: PathBuf,
    /// The server's key (mode 0600).
    pub key: PathBuf,
}

/// A CA made with rcgen and a leaf for 127.0.0.1 signed by it, in `dir`: unlike
/// [`self_signed_cert`], the server's certificate is not itself the trust anchor, as in a
/// cloud with a private CA.
pub fn test_ca(dir: &Path) -> TestCa {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair,
        KeyUsagePurpose, SanType,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "vgpud test CA");
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let mut leaf = CertificateParams::new(vec!["localhost".to_owned()]).unwrap();
    leaf.subject_alt_names
        .push(SanType::IpAddress(std::net::Ipv4Addr::LOCALHOST.into()));
    leaf.distinguished_name
        .push(DnType::CommonName, "localhost");
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_cert = leaf.signed_by(&leaf_key, &ca).unwrap();
    let made = TestCa {
        ca_cert: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server-key.pem"),
    };
    std::fs::write(&made.ca_cert, ca.pem()).unwrap();
    std::fs::write(&made.cert, leaf_cert.pem()).unwrap();
    write_secret(&made.key, &leaf_key.serialize_pem());
    made
}
