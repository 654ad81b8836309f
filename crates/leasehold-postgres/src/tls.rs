//! TLS for connections whose URL asks for it, always verified against a trusted root.

use std::path::Path;
use std::sync::Arc;

use leasehold::StoreError;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use tokio_postgres_rustls::MakeRustlsConnect;

/// The TLS connector for a store: roots from `ca_file` when given, else the Mozilla roots.
///
/// The crypto provider is named here rather than taken from the process default, so the
/// store works whichever other rustls users share the process.
pub(crate) fn connector(ca_file: Option<&Path>) -> Result<MakeRustlsConnect, StoreError> {
    let roots = match ca_file {
        Some(path) => roots_from(path)?,
        None => RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
        },
    };
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StoreError::Invalid(format!("TLS settings: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

/// Every certificate of the PEM file at `path`; at least one is required.
fn roots_from(path: &Path) -> Result<RootCertStore, StoreError> {
    let unreadable = |e: rustls::pki_types::pem::Error| {
        StoreError::Invalid(format!("CA file {}: {e}", path.display()))
    };
    let mut roots = RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(path).map_err(unreadable)? {
        roots
            .add(certificate.map_err(unreadable)?)
            .map_err(|e| StoreError::Invalid(format!("CA file {}: {e}", path.display())))?;
    }
    if roots.is_empty() {
        return Err(StoreError::Invalid(format!(
            "CA file {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(result: Result<MakeRustlsConnect, StoreError>) -> StoreError {
        match result {
            Ok(_) => panic!("accepted"),
            Err(error) => error,
        }
    }

    #[test]
    fn a_missing_or_empty_ca_file_is_refused() {
        let missing = refusal(connector(Some(Path::new("/nonexistent/ca.pem"))));
        assert!(
            missing.to_string().contains("/nonexistent/ca.pem"),
            "{missing}"
        );
        let empty =
            std::env::temp_dir().join(format!("leasehold-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "not a certificate\n").unwrap();
        let refused = refusal(connector(Some(&empty)));
        std::fs::remove_file(&empty).unwrap();
        assert!(
            refused.to_string().contains("no PEM certificate"),
            "{refused}"
        );
        assert!(connector(None).is_ok());
    }
}
