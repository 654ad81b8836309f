//! How to reach an etcd cluster.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use etcd_client::{Certificate, Identity, TlsOptions};
use leasehold::store_url::{env_path, hosts_and_prefix, parse_hosts, split_scheme, PortRule};
use leasehold::store_url::{EnvError, UrlError, UrlPart};
use leasehold::StoreError;

/// The cluster, the key prefix and the connection settings of an
/// [`EtcdStore`](crate::EtcdStore).
///
/// Made from a URL, `etcd://HOST:PORT[,HOST:PORT…][/PREFIX]` or, over TLS,
/// `etcd+https://…`, or from a list of endpoints. Every time limit has a default suited to a
/// lease protocol whose heartbeat is a second or more: a call that cannot finish within the
/// request timeout fails with [`StoreError::Timeout`] instead of holding the caller.
///
/// TLS is on for `etcd+https://` URLs (or [`EtcdOptions::tls`]) and verifies the servers'
/// certificates against [`EtcdOptions::ca_file`], or the Mozilla roots when none is given; a
/// server's certificate must name the host or address it is reached at.
///
/// ```
/// use std::time::Duration;
/// use leasehold_etcd::EtcdOptions;
///
/// let options = EtcdOptions::from_url("etcd+https://etcd1:2379,etcd2:2379/apps/orders")?
///     .ca_file("/etc/leasehold/etcd-ca.pem")
///     .request_timeout(Duration::from_secs(2));
/// assert!(options.uses_tls());
/// assert_eq!(options.endpoints(), ["etcd1:2379", "etcd2:2379"]);
/// assert_eq!(options.to_string(), "etcd+https://etcd1:2379,etcd2:2379/apps/orders");
///
/// let plain = EtcdOptions::new(["127.0.0.1:2379"]).prefix("/apps/orders");
/// assert_eq!(plain.to_string(), "etcd://127.0.0.1:2379/apps/orders");
/// # Ok::<(), leasehold::store_url::UrlError>(())
/// ```
#[derive(Clone)]
pub struct EtcdOptions {
    endpoints: Vec<String>,
    prefix: String,
    tls: bool,
    request_timeout: Duration,
    connect_timeout: Duration,
    keep_alive: (Duration, Duration),
    credentials: Option<Credentials>,
    ca_file: Option<PathBuf>,
    client_certificate: Option<(PathBuf, PathBuf)>,
}

impl EtcdOptions {
    /// Where records go when the URL names no prefix.
    pub const DEFAULT_PREFIX: &'static str = "/leasehold";
    /// The environment variable naming the CA (PEM) that verifies the servers over TLS.
    pub const CA_VARIABLE: &'static str = "LEASEHOLD_ETCD_CA";
    /// The environment variable naming a client certificate (PEM), with
    /// [`EtcdOptions::KEY_VARIABLE`], for servers started with `--client-cert-auth`.
    pub const CERTIFICATE_VARIABLE: &'static str = "LEASEHOLD_ETCD_CERT";
    /// The environment variable naming the client certificate's private key (PEM).
    pub const KEY_VARIABLE: &'static str = "LEASEHOLD_ETCD_KEY";

    /// Options for the cluster at `endpoints` (each `HOST:PORT`), plain, with records under
    /// [`EtcdOptions::DEFAULT_PREFIX`] and the default time limits. The endpoints are checked
    /// when the store connects.
    ///
    /// Requests go to any endpoint that answers, so naming every member of the cluster lets
    /// the store ride out the loss of some of them.
    pub fn new<I, S>(endpoints: I) -> EtcdOptions
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        EtcdOptions {
            endpoints: endpoints
                .into_iter()
                .map(|e| e.as_ref().to_owned())
                .collect(),
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            tls: false,
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            keep_alive: (Duration::from_secs(5), Duration::from_secs(3)),
            credentials: None,
            ca_file: None,
            client_certificate: None,
        }
    }

    /// Reads `etcd://HOST:PORT[,HOST:PORT…][/PREFIX]`, or `etcd+https://…` for TLS, without
    /// connecting. The prefix defaults to [`EtcdOptions::DEFAULT_PREFIX`]; a trailing `/` is
    /// dropped.
    ///
    /// ```
    /// use leasehold::store_url::UrlPart;
    /// use leasehold_etcd::EtcdOptions;
    ///
    /// let error = EtcdOptions::from_url("etcd://nohost").unwrap_err();
    /// assert_eq!(error.part(), UrlPart::Port);
    /// assert!(error.to_string().contains("\"nohost\""));
    /// ```
    pub fn from_url(url: &str) -> Result<EtcdOptions, UrlError> {
        let (scheme, rest) = split_scheme(url)?;
        let tls = match scheme {
            "etcd" => false,
            "etcd+https" => true,
            other => {
                return Err(UrlError::new(
                    UrlPart::Scheme,
                    format!("scheme {other:?} is neither etcd nor etcd+https"),
                ))
            }
        };
        let (hosts, prefix) = hosts_and_prefix(rest, Self::DEFAULT_PREFIX)?;
        Ok(EtcdOptions::new(hosts.iter().map(ToString::to_string))
            .prefix(prefix)
            .tls(tls))
    }

    /// With TLS on, fills in what these options leave unset from the environment: the CA
    /// from [`EtcdOptions::CA_VARIABLE`] and a client certificate from
    /// [`EtcdOptions::CERTIFICATE_VARIABLE`] and [`EtcdOptions::KEY_VARIABLE`], which must be
    /// set together. Plain options read nothing.
    pub fn with_env(self) -> Result<EtcdOptions, EnvError> {
        self.with_variables(env_path)
    }

    /// [`EtcdOptions::with_env`] reading the variables through `variable`.
    fn with_variables(
        mut self,
        variable: impl Fn(&str) -> Option<PathBuf>,
    ) -> Result<EtcdOptions, EnvError> {
        if !self.tls {
            return Ok(self);
        }
        if self.ca_file.is_none() {
            self.ca_file = variable(Self::CA_VARIABLE);
        }
        if self.client_certificate.is_none() {
            let [certificate, key] = [Self::CERTIFICATE_VARIABLE, Self::KEY_VARIABLE];
            self.client_certificate = match (variable(certificate), variable(key)) {
                (Some(certificate), Some(key)) => Some((certificate, key)),
                (None, None) => None,
                (Some(_), None) => return Err(half_certificate(key, certificate)),
                (None, Some(_)) => return Err(half_certificate(certificate, key)),
            };
        }
        Ok(self)
    }

    /// The key under which every group is kept, such as `/apps/orders`. Default
    /// [`EtcdOptions::DEFAULT_PREFIX`].
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into().trim_end_matches('/').to_owned();
        self
    }

    /// Whether to connect over TLS. Default off; on for `etcd+https://` URLs.
    #[must_use]
    pub fn tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    /// Limit on each request, from sending to the full reply. Default 5 s.
    #[must_use]
    pub fn request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }

    /// Limit on opening a connection to one endpoint. Default 3 s.
    #[must_use]
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// How often an idle connection is probed, and how long a probe may go unanswered before
    /// the connection counts as dead; it is what ends a watch whose server vanished silently.
    /// Default 5 s and 3 s.
    #[must_use]
    pub fn keep_alive(mut self, interval: Duration, timeout: Duration) -> Self {
        self.keep_alive = (interval, timeout);
        self
    }

    /// A user name and password, for clusters with authentication enabled. Neither `Debug`
    /// nor `Display` shows the password.
    #[must_use]
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some(Credentials {
            user: user.into(),
            password: password.into(),
        });
        self
    }

    /// PEM file of the certificate authorities that TLS connections trust, instead of the
    /// Mozilla roots. Only with TLS on.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// PEM files of a client certificate and its private key, for clusters that require
    /// client certificates (`--client-cert-auth`). Only with TLS on.
    #[must_use]
    pub fn client_certificate(
        mut self,
        certificate: impl Into<PathBuf>,
        key: impl Into<PathBuf>,
    ) -> Self {
        self.client_certificate = Some((certificate.into(), key.into()));
        self
    }

    /// The endpoints, each `HOST:PORT`.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The key prefix in force.
    pub fn key_prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether connections use TLS.
    pub fn uses_tls(&self) -> bool {
        self.tls
    }

    /// The request timeout in force.
    pub fn request_timeout_limit(&self) -> Duration {
        self.request_timeout
    }

    /// The connect timeout in force.
    pub fn connect_timeout_limit(&self) -> Duration {
        self.connect_timeout
    }

    /// Checks the endpoints, the time limits and that TLS files come with TLS, naming the
    /// offending value.
    pub fn validate(&self) -> Result<(), StoreError> {
        parse_hosts(&self.endpoints.join(","), PortRule::Required)?;
        if self.request_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(StoreError::Invalid(
                "etcd request and connect timeouts must be greater than zero".to_owned(),
            ));
        }
        if !self.tls && (self.ca_file.is_some() || self.client_certificate.is_some()) {
            return Err(StoreError::Invalid(
                "a CA file or client certificate is set but TLS is off: use an etcd+https:// URL"
                    .to_owned(),
            ));
        }
        Ok(())
    }

    /// The client's settings; fails if a file cannot be read.
    pub(crate) fn connect_options(&self) -> Result<etcd_client::ConnectOptions, StoreError> {
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
        if self.tls {
            options = options.with_tls(self.tls_options()?);
        }
        Ok(options)
    }

    fn tls_options(&self) -> Result<TlsOptions, StoreError> {
        let mut tls = TlsOptions::new();
        tls = match &self.ca_file {
            Some(path) => tls.ca_certificate(Certificate::from_pem(read_pem(path)?)),
            None => tls.with_webpki_roots(),
        };
        if let Some((certificate, key)) = &self.client_certificate {
            tls = tls.identity(Identity::from_pem(read_pem(certificate)?, read_pem(key)?));
        }
        Ok(tls)
    }
}

fn half_certificate(missing: &str, set: &str) -> EnvError {
    EnvError::new(
        missing,
        format!("{set} is set but {missing} is not: set both for a client certificate, or neither"),
    )
}

/// The URL the options stand for; never the credentials.
impl fmt::Display for EtcdOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "etcd+https" } else { "etcd" };
        write!(f, "{scheme}://{}{}", self.endpoints.join(","), self.prefix)
    }
}

impl fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("endpoints", &self.endpoints)
            .field("prefix", &self.prefix)
            .field("tls", &self.tls)
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
struct Credentials {
    user: String,
    password: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
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
mod tests;
