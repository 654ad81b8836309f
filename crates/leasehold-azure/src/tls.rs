//! HTTPS for the Table service: rustls on the ring crypto provider, the server checked
//! against the system's trusted roots, or only against a given CA file.

use std::path::Path;

use leasehold::StoreError;

/// Sets up the TLS of `builder`: the system's roots, or only the authorities in the PEM file
/// at `ca_file`.
///
/// The crypto provider is named here rather than taken from the process default, so the
/// store works whichever other rustls users share the process, and installs none for them.
#[cfg(feature = "rustls")]
pub(crate) fn configure(
    builder: reqwest::ClientBuilder,
    ca_file: Option<&Path>,
) -> Result<reqwest::ClientBuilder, StoreError> {
    use std::sync::Arc;

    use rustls_platform_verifier::BuilderVerifierExt;

    let invalid = |error: rustls::Error| StoreError::Invalid(format!("TLS settings: {error}"));
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let versions = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(invalid)?;
    let mut config = match ca_file {
        Some(path) => versions
            .with_root_certificates(roots_from(path)?)
            .with_no_client_auth(),
        None => versions
            .with_platform_verifier()
            .map_err(invalid)?
            .with_no_client_auth(),
    };
    // The Table service is spoken in HTTP/1.1, which is all this client is built for.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(builder.tls_backend_preconfigured(config))
}

/// Every certificate of the PEM file at `path`; at least one is required.
#[cfg(feature = "rustls")]
fn roots_from(path: &Path) -> Result<rustls::RootCertStore, StoreError> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;

    let shown = path.display();
    let unreadable = |error: rustls::pki_types::pem::Error| {
        StoreError::Invalid(format!("cannot read CA file {shown}: {error}"))
    };
    let mut roots = rustls::RootCertStore::empty();
    for certificate in CertificateDer::pem_file_iter(path).map_err(unreadable)? {
        roots
            .add(certificate.map_err(unreadable)?)
            .map_err(|error| StoreError::Invalid(format!("CA file {shown}: {error}")))?;
    }
    if roots.is_empty() {
        return Err(StoreError::Invalid(format!(
            "CA file {shown} holds no PEM certificate"
        )));
    }
    Ok(roots)
}

/// Without HTTPS in the build, a CA file cannot be honoured: say so rather than ignore it.
#[cfg(not(feature = "rustls"))]
pub(crate) fn configure(
    builder: reqwest::ClientBuilder,
    ca_file: Option<&Path>,
) -> Result<reqwest::ClientBuilder, StoreError> {
    match ca_file {
        None => Ok(builder),
        Some(path) => Err(StoreError::Invalid(format!(
            "CA file {} given, but this build has no HTTPS: enable leasehold-azure's rustls feature",
            path.display()
        ))),
    }
}
