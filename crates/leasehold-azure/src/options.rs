//! What an [`AzureTableStore`](crate::AzureTableStore) connects to.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
use leasehold::store_url::{env_path, parse_hosts, split_scheme, PortRule};
use leasehold::store_url::{EnvError, UrlError, UrlPart};
use leasehold::StoreError;

/// A storage account key, decoded. Its `Debug` output never shows the key.
#[derive(Clone)]
pub struct AccountKey(Vec<u8>);

impl AccountKey {
    /// Decodes a key as the Azure portal shows it (base64).
    pub fn from_base64(encoded: &str) -> Result<AccountKey, StoreError> {
        base64::engine::general_purpose::STANDARD
            .decode(encoded.trim())
            .map(AccountKey)
            .map_err(|_| StoreError::Invalid("the account key is not valid base64".to_owned()))
    }

    /// Reads and decodes the key from the environment variable `name`, so that it never
    /// appears on a command line.
    pub fn from_env(name: &str) -> Result<AccountKey, EnvError> {
        let encoded = std::env::var(name).unwrap_or_default();
        if encoded.is_empty() {
            return Err(EnvError::new(
                name,
                format!("environment variable {name} is not set: it must hold the account key"),
            ));
        }
        AccountKey::from_base64(&encoded).map_err(|_| {
            EnvError::new(
                name,
                format!("environment variable {name} does not hold a base64 account key"),
            )
        })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for AccountKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AccountKey(<redacted>)")
    }
}

/// The Table service endpoint, kept as its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Endpoint {
    /// Azure itself: `https://<account>.table.core.windows.net`.
    Azure,
    /// A path-style endpoint, `http(s)://<host>/<account>`, such as the Azurite emulator.
    PathStyle {
        /// Whether it speaks HTTPS.
        https: bool,
        /// `HOST[:PORT]`.
        host: String,
    },
}

/// The account, table, key and time limits of an [`AzureTableStore`](crate::AzureTableStore).
///
/// Made from a URL, `azure://ACCOUNT/TABLE` for Azure itself or
/// `azure+http://HOST:PORT/ACCOUNT/TABLE` (`azure+https://…`) for an endpoint with path-style
/// URLs such as the Azurite emulator, or with [`AzureOptions::new`]. The account key comes
/// from [`AzureOptions::key`] or, through [`AzureOptions::with_env`], from
/// `LEASEHOLD_AZURE_KEY`, never from the URL.
///
/// ```
/// use std::time::Duration;
/// use leasehold_azure::{AccountKey, AzureOptions};
///
/// let options = AzureOptions::from_url("azure+http://127.0.0.1:10002/devstoreaccount1/leases")?
///     .key(AccountKey::from_base64("c2VjcmV0LWtleQ==").unwrap())
///     .call_timeout(Duration::from_secs(5));
/// assert_eq!(options.endpoint_url(), "http://127.0.0.1:10002/devstoreaccount1");
/// assert_eq!(options.to_string(), "azure+http://127.0.0.1:10002/devstoreaccount1/leases");
///
/// let cloud = AzureOptions::new("mycompanyleases", "leases");
/// assert_eq!(cloud.endpoint_url(), "https://mycompanyleases.table.core.windows.net");
/// assert_eq!(cloud.to_string(), "azure://mycompanyleases/leases");
/// # Ok::<(), leasehold::store_url::UrlError>(())
/// ```
#[derive(Debug, Clone)]
pub struct AzureOptions {
    pub(crate) account: String,
    pub(crate) table: String,
    endpoint: Endpoint,
    pub(crate) key: Option<AccountKey>,
    pub(crate) call_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) idle_timeout: Duration,
    pub(crate) ca_file: Option<PathBuf>,
}

impl AzureOptions {
    /// The environment variable holding the account key (base64), read by
    /// [`AzureOptions::with_env`].
    pub const KEY_VARIABLE: &'static str = "LEASEHOLD_AZURE_KEY";
    /// The environment variable naming the CA (PEM) that verifies an HTTPS endpoint signed by
    /// a private authority, read by [`AzureOptions::with_env`].
    pub const CA_VARIABLE: &'static str = "LEASEHOLD_AZURE_CA";
    /// How long an unused connection is kept for the next call by default: 2 s, well under
    /// the 5 s after which Azurite (Node's HTTP server) closes one.
    pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(2);

    /// Options for `table` of `account` in Azure itself
    /// (`https://<account>.table.core.windows.net`), with no key yet and the default time
    /// limits (10 s per call, 3 s to connect). The names are checked when the store connects.
    pub fn new(account: &str, table: &str) -> AzureOptions {
        AzureOptions {
            account: account.to_owned(),
            table: table.to_owned(),
            endpoint: Endpoint::Azure,
            key: None,
            call_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            idle_timeout: Self::DEFAULT_IDLE_TIMEOUT,
            ca_file: None,
        }
    }

    /// Reads `azure://ACCOUNT/TABLE` or `azure+http(s)://HOST[:PORT]/ACCOUNT/TABLE` without
    /// connecting.
    ///
    /// ```
    /// use leasehold::store_url::UrlPart;
    /// use leasehold_azure::AzureOptions;
    ///
    /// let error = AzureOptions::from_url("azure://acme").unwrap_err();
    /// assert_eq!(error.part(), UrlPart::Table);
    /// ```
    pub fn from_url(url: &str) -> Result<AzureOptions, UrlError> {
        let (scheme, rest) = split_scheme(url)?;
        let (https, form) = match scheme {
            "azure" => (true, "azure://ACCOUNT/TABLE"),
            "azure+http" => (false, "azure+http://HOST:PORT/ACCOUNT/TABLE"),
            "azure+https" => (true, "azure+https://HOST:PORT/ACCOUNT/TABLE"),
            other => {
                return Err(UrlError::new(
                    UrlPart::Scheme,
                    format!("scheme {other:?} is not azure, azure+http or azure+https"),
                ))
            }
        };
        let segments: Vec<&str> = match rest.strip_prefix("//") {
            Some(rest) => rest.strip_suffix('/').unwrap_or(rest).split('/').collect(),
            None => return Err(UrlError::new(UrlPart::Account, format!("expected {form}"))),
        };
        let (endpoint, names) = match segments.split_first() {
            Some((host, names)) if scheme != "azure" => (path_style(host, https)?, names),
            _ => (Endpoint::Azure, segments.as_slice()),
        };
        let missing =
            |part, name| UrlError::new(part, format!("{name} is missing: expected {form}"));
        let (account, table) = match names {
            [account, table] => (*account, *table),
            [] | [""] => return Err(missing(UrlPart::Account, "account")),
            [_] => return Err(missing(UrlPart::Table, "table")),
            [_, _, extra @ ..] => {
                let extra = extra.join("/");
                return Err(UrlError::new(
                    UrlPart::Path,
                    format!("path goes on after the table (\"/{extra}\"): expected {form}"),
                ));
            }
        };
        check_account(account).map_err(|message| UrlError::new(UrlPart::Account, message))?;
        check_table(table).map_err(|message| UrlError::new(UrlPart::Table, message))?;
        let mut options = AzureOptions::new(account, table);
        options.endpoint = endpoint;
        Ok(options)
    }

    /// Fills in what these options leave unset from the environment: the account key from
    /// [`AzureOptions::KEY_VARIABLE`] (required when no key was set) and, for an HTTPS
    /// endpoint, the CA from [`AzureOptions::CA_VARIABLE`] if that is set.
    pub fn with_env(mut self) -> Result<AzureOptions, EnvError> {
        if self.key.is_none() {
            self.key = Some(AccountKey::from_env(Self::KEY_VARIABLE)?);
        }
        if self.ca_file.is_none() && self.uses_https() {
            self.ca_file = env_path(Self::CA_VARIABLE);
        }
        Ok(self)
    }

    /// The account's shared key.
    #[must_use]
    pub fn key(mut self, key: AccountKey) -> Self {
        self.key = Some(key);
        self
    }

    /// The most one store call may take, including reading the whole reply. Default 10 s.
    #[must_use]
    pub fn call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }

    /// The most establishing a connection may take. Default 3 s.
    #[must_use]
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// How long a connection with no call on it is kept for the next call. Default
    /// [`AzureOptions::DEFAULT_IDLE_TIMEOUT`]; zero opens a connection per call.
    ///
    /// It must stay below the time after which the endpoint closes an idle connection. A
    /// call sent on a connection the server is closing at that moment fails with a reset
    /// after the request may have been read, so a write's outcome is unknown and the
    /// participant must treat the lease as in doubt until it reads it back.
    #[must_use]
    pub fn idle_timeout(mut self, idle_timeout: Duration) -> Self {
        self.idle_timeout = idle_timeout;
        self
    }

    /// For an HTTPS endpoint whose certificate a private authority signed (an Azurite started
    /// with `--cert`, a proxy): the authorities to trust, as a PEM file, instead of the
    /// built-in roots, which are right for Azure itself.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// The Table service endpoint: `https://<account>.table.core.windows.net`, or
    /// `http(s)://<host>/<account>` for a path-style one.
    pub fn endpoint_url(&self) -> String {
        match &self.endpoint {
            Endpoint::Azure => format!("https://{}.table.core.windows.net", self.account),
            Endpoint::PathStyle { https, host } => {
                let transport = if *https { "https" } else { "http" };
                format!("{transport}://{host}/{}", self.account)
            }
        }
    }

    /// Whether the endpoint speaks HTTPS.
    pub fn uses_https(&self) -> bool {
        !matches!(self.endpoint, Endpoint::PathStyle { https: false, .. })
    }

    /// Checks the names, the key and the timeouts, saying which value is wrong.
    pub fn validate(&self) -> Result<(), StoreError> {
        check_table(&self.table).map_err(StoreError::Invalid)?;
        check_account(&self.account).map_err(StoreError::Invalid)?;
        if self.key.is_none() {
            return Err(StoreError::Invalid(format!(
                "no account key for {}: set {} or give one",
                self.account,
                Self::KEY_VARIABLE
            )));
        }
        if self.call_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(StoreError::Invalid(
                "Azure call and connect timeouts must be greater than zero".to_owned(),
            ));
        }
        Ok(())
    }
}

/// The URL the options stand for; never the key.
impl fmt::Display for AzureOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (account, table) = (&self.account, &self.table);
        match &self.endpoint {
            Endpoint::Azure => write!(f, "azure://{account}/{table}"),
            Endpoint::PathStyle { https, host } => {
                let transport = if *https { "https" } else { "http" };
                write!(f, "azure+{transport}://{host}/{account}/{table}")
            }
        }
    }
}

fn path_style(host: &str, https: bool) -> Result<Endpoint, UrlError> {
    if parse_hosts(host, PortRule::Optional)?.len() > 1 {
        return Err(UrlError::new(
            UrlPart::Host,
            format!("{host:?} names more than one host"),
        ));
    }
    Ok(Endpoint::PathStyle {
        https,
        host: host.to_owned(),
    })
}

/// Table names: 3 to 63 letters and digits, starting with a letter.
fn check_table(table: &str) -> Result<(), String> {
    let table_ok = (3..=63).contains(&table.len())
        && table.starts_with(|c: char| c.is_ascii_alphabetic())
        && table.chars().all(|c| c.is_ascii_alphanumeric());
    match table_ok {
        true => Ok(()),
        false => Err(format!(
            "table name {table:?} must be 3 to 63 letters and digits, starting with a letter"
        )),
    }
}

/// Account names: letters and digits.
fn check_account(account: &str) -> Result<(), String> {
    match !account.is_empty() && account.chars().all(|c| c.is_ascii_alphanumeric()) {
        true => Ok(()),
        false => Err(format!(
            "account name {account:?} must be letters and digits"
        )),
    }
}

#[cfg(test)]
mod tests;
