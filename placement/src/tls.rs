//! Which certificate authorities the client trusts: the operator's CA bundle (`ca_file`) and
//! nothing else when one is given, else Mozilla's roots (webpki-roots), never the system store,
//! so a host's trust store does not change whom vgpud believes is Placement.

use std::path::Path;

use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};

use crate::Error;

/// The TLS settings for a client trusting `ca_file` (PEM, one or more certificates) or, with
/// none, the webpki roots.
pub(crate) fn config(ca_file: Option<&Path>) -> Result<TlsConfig, Error> {
    let roots = match ca_file {
        Some(path) => RootCerts::new_with_certs(&bundle(path)?),
        None => RootCerts::WebPki,
    };
    Ok(TlsConfig::builder().root_certs(roots).build())
}

/// The certificates in the PEM file at `path`; an unreadable file, a malformed PEM or one with
/// no certificate is an error naming the file.
fn bundle(path: &Path) -> Result<Vec<Certificate<'static>>, Error> {
    let pem = std::fs::read(path)
        .map_err(|e| Error::Config(format!("cannot read ca_file {}: {e}", path.display())))?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&pem) {
        match item {
            Ok(PemItem::Certificate(cert)) => certs.push(cert),
            Ok(_) => {} // keys or CRLs in a bundle are not roots
            Err(e) => {
                return Err(Error::Config(format!(
                    "ca_file {} is not a PEM bundle: {e}",
                    path.display()
                )));
            }
        }
    }
    if certs.is_empty() {
        return Err(Error::Config(format!(
            "ca_file {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certs)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_ca_file_is_a_config_error_naming_it() {
        let err = config(Some(Path::new("/nonexistent/ca.pem"))).unwrap_err();
        assert!(
            matches!(&err, Error::Config(m) if m.contains("/nonexistent/ca.pem")),
            "{err:?}"
        );
    }

    #[test]
    fn a_file_without_certificates_is_refused() {
        let dir = std::env::temp_dir().join(format!("placement-tls-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("empty.pem");
        std::fs::write(&path, "not a certificate\n").unwrap();
        let err = config(Some(&path)).unwrap_err();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            matches!(&err, Error::Config(m) if m.contains("no PEM certificate")),
            "{err:?}"
        );
    }

    #[test]
    fn no_ca_file_trusts_the_webpki_roots() {
        assert!(matches!(
            config(None).unwrap().root_certs(),
            RootCerts::WebPki
        ));
    }
}
