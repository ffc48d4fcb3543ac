//! The TLS server setup every Tandem listener uses (the web console, SIP over TLS, the
//! collector): rustls with the ring provider, its safe default protocol versions (TLS 1.2 and
//! 1.3), one certificate chain with its key read from PEM files, and no client certificates
//! unless a client CA is given ([`server_config_with_clients`], the collector's mutual TLS);
//! and the client side of the same ([`client_config`]: trust a CA file, offer a certificate).
//!
//! Never: reads a key from anywhere but the named file, or accepts a key that does not match the
//! certificate (the error names the file and says so).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;
use std::sync::Arc;

/// A server configuration from `cert` (the chain, leaf first) and `key`. The error names the
/// file at fault and what is wrong with it.
pub fn server_config(cert: &Path, key: &Path) -> Result<rustls::ServerConfig, String> {
    server_config_with_clients(cert, key, None)
}

/// [`server_config`], and with `client_ca` the clients may present a certificate, which is
/// then checked against the CA certificates in that file (a client without one is still
/// served: the caller decides what an unauthenticated client may do; the collector asks it for
/// a token instead).
pub fn server_config_with_clients(
    cert: &Path,
    key: &Path,
    client_ca: Option<&Path>,
) -> Result<rustls::ServerConfig, String> {
    let at = |p: &Path, e: String| format!("{}: {e}", p.display());
    let (certs, key_der) = chain(cert, key)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(ca) => {
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                roots(ca)?.into(),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| at(ca, e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    builder.with_single_cert(certs, key_der).map_err(|e| {
        at(
            key,
            format!("does not match the certificate or is unusable: {e}"),
        )
    })
}

/// A client configuration (the same provider and versions) that trusts the CA certificates of
/// `ca` and, with `client` (a chain and its key), offers that certificate: how a sensor reaches
/// its collector.
pub fn client_config(
    ca: &Path,
    client: Option<(&Path, &Path)>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots(ca)?);
    match client {
        None => Ok(builder.with_no_client_auth()),
        Some((cert, key)) => {
            let (certs, key_der) = chain(cert, key)?;
            builder
                .with_client_auth_cert(certs, key_der)
                .map_err(|e| format!("{}: does not match the certificate: {e}", key.display()))
        }
    }
}

/// The certificates of `ca` as trust anchors; the error names the file.
pub fn roots(ca: &Path) -> Result<rustls::RootCertStore, String> {
    let at = |e: String| format!("{}: {e}", ca.display());
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).map_err(|e| at(e.to_string()))? {
        let c = c.map_err(|e| at(e.to_string()))?;
        roots
            .add(c)
            .map_err(|e| at(format!("not a usable CA certificate: {e}")))?;
    }
    if roots.is_empty() {
        return Err(at("no certificate in the file".into()));
    }
    Ok(roots)
}

/// A certificate chain (leaf first) and its private key.
type Chain = (Vec<CertificateDer<'static>>, PrivateKeyDer<'static>);

fn chain(cert: &Path, key: &Path) -> Result<Chain, String> {
    let at = |p: &Path, e: String| format!("{}: {e}", p.display());
    let certs = CertificateDer::pem_file_iter(cert)
        .map_err(|e| at(cert, e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| at(cert, e.to_string()))?;
    if certs.is_empty() {
        return Err(at(cert, "no certificate in the file".into()));
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| at(key, e.to_string()))?;
    Ok((certs, key_der))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_matching_pair_loads_and_a_wrong_key_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let a = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let b = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let (cert, key, other_key) = (
            dir.path().join("c.pem"),
            dir.path().join("k.pem"),
            dir.path().join("o.pem"),
        );
        std::fs::write(&cert, a.cert.pem()).unwrap();
        std::fs::write(&key, a.signing_key.serialize_pem()).unwrap();
        std::fs::write(&other_key, b.signing_key.serialize_pem()).unwrap();
        assert!(server_config(&cert, &key).is_ok());
        let e = server_config(&cert, &other_key).unwrap_err();
        assert!(e.contains("o.pem") && e.contains("does not match"), "{e}");
        let e = server_config(&key, &key).unwrap_err();
        assert!(e.contains("no certificate"), "{e}");
    }
}
