//! How to reach an etcd cluster.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Certificate, Identity, TlsOptions};
use leasehold::StoreError;

/// Connection settings for [`EtcdStore::connect`](crate::EtcdStore::connect).
///
/// Every field has a default suited to a lease protocol whose heartbeat is a second or more:
/// a call that cannot finish within `request_timeout` fails with
/// [`StoreError::Timeout`](leasehold::StoreError::Timeout) instead of holding the caller.
#[derive(Clone)]
pub struct EtcdOptions {
    /// Limit on each request, from sending to the full reply.
    pub request_timeout: Duration,
    /// Limit on opening a connection to one endpoint.
    pub connect_timeout: Duration,
    /// How often an idle connection is probed, and how long a probe may go unanswered before
    /// the connection counts as dead; it is what ends a watch whose server vanished silently.
    pub keep_alive: (Duration, Duration),
    /// User name and password, for clusters with authentication enabled.
    pub credentials: Option<EtcdCredentials>,
    /// PEM file of the certificate authorities that TLS connections trust. Setting it (or a
    /// client certificate) turns TLS on: endpoints without a scheme then use `https`. An
    /// `https://` endpoint with no CA file trusts the Mozilla roots. The server's certificate
    /// must name the endpoint's host or address.
    pub ca_file: Option<PathBuf>,
    /// PEM files of a client certificate and its private key, for clusters that require
    /// client certificates (`--client-cert-auth`).
    pub client_certificate: Option<(PathBuf, PathBuf)>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            keep_alive: (Duration::from_secs(5), Duration::from_secs(3)),
            credentials: None,
            ca_file: None,
            client_certificate: None,
        }
    }
}

impl fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("request_timeout", &self.request_timeout)
            .field("connect_timeout", &self.connect_timeout)
            .field("keep_alive", &self.keep_alive)
            .field("credentials", &self.credentials)
            .field("ca_file", &self.ca_file)
            .field("client_certificate", &self.client_certificate)
            .finish()
    }
}

/// A user name and password for etcd authentication. `Debug` never shows the password.
#[derive(Clone)]
pub struct EtcdCredentials {
    /// The etcd user.
    pub user: String,
    /// The user's password.
    pub password: String,
}

impl fmt::Debug for EtcdCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCredentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

impl EtcdOptions {
    /// The client's settings for `endpoints`; fails if a file cannot be read, or if TLS is
    /// asked for while an endpoint says `http://`.
    pub(crate) fn connect_options(
        &self,
        endpoints: &[String],
    ) -> Result<etcd_client::ConnectOptions, StoreError> {
        let (interval, timeout) = self.keep_alive;
        let mut options = etcd_client::ConnectOptions::new()
            .with_timeout(self.request_timeout)
            .with_connect_timeout(self.connect_timeout)
            .with_keep_alive(interval, timeout)
            .with_keep_alive_while_idle(true)
            // Without a leader a write cannot commit; failing at once lets the caller back off
            // instead of waiting out the whole timeout.
            .with_require_leader(true);
        if let Some(credentials) = &self.credentials {
            options = options
                .with_user(credentials.user.clone(), credentials.password.clone())
                .with_auto_token_refresh(true);
        }
        if let Some(tls) = self.tls(endpoints)? {
            options = options.with_tls(tls);
        }
        Ok(options)
    }

    /// The TLS settings, or `None` for plain connections.
    fn tls(&self, endpoints: &[String]) -> Result<Option<TlsOptions>, StoreError> {
        let https = endpoints.iter().any(|e| e.starts_with("https://"));
        if self.ca_file.is_none() && self.client_certificate.is_none() && !https {
            return Ok(None);
        }
        // A plain endpoint among TLS ones would send the credentials unencrypted.
        if let Some(plain) = endpoints.iter().find(|e| e.starts_with("http://")) {
            return Err(StoreError::Invalid(format!(
                "endpoint {plain} is plain http, but TLS is configured"
            )));
        }
        let mut tls = TlsOptions::new();
        tls = match &self.ca_file {
            Some(path) => tls.ca_certificate(Certificate::from_pem(read_pem(path)?)),
            None => tls.with_webpki_roots(),
        };
        if let Some((certificate, key)) = &self.client_certificate {
            tls = tls.identity(Identity::from_pem(read_pem(certificate)?, read_pem(key)?));
        }
        Ok(Some(tls))
    }
}

/// The contents of a PEM file, checked to hold at least one PEM block.
fn read_pem(path: &Path) -> Result<Vec<u8>, StoreError> {
    let contents = std::fs::read(path)
        .map_err(|e| StoreError::Invalid(format!("cannot read {}: {e}", path.display())))?;
    if !contents.windows(11).any(|w| w == b"-----BEGIN ") {
        return Err(StoreError::Invalid(format!(
            "{} holds no PEM block",
            path.display()
        )));
    }
    Ok(contents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_password() {
        let options = EtcdOptions {
            credentials: Some(EtcdCredentials {
                user: "leases".to_owned(),
                password: "hunter2".to_owned(),
            }),
            ..EtcdOptions::default()
        };
        let shown = format!("{options:?}");
        assert!(shown.contains("leases"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    #[test]
    fn tls_settings_are_checked() {
        let plain = EtcdOptions::default();
        let endpoints = ["127.0.0.1:2379".to_owned()];
        assert!(plain.tls(&endpoints).unwrap().is_none());
        let https = ["https://etcd.internal:2379".to_owned()];
        assert!(plain.tls(&https).unwrap().is_some());
        let missing = EtcdOptions {
            ca_file: Some("/nonexistent/leasehold-ca.pem".into()),
            ..EtcdOptions::default()
        };
        let error = missing.tls(&endpoints).unwrap_err().to_string();
        assert!(error.contains("leasehold-ca.pem"), "{error}");
        let mixed = ["http://127.0.0.1:2379".to_owned()];
        let error = missing.tls(&mixed).unwrap_err().to_string();
        assert!(error.contains("plain http"), "{error}");
    }
}
