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
