//! Where a [`PostgresStore`](crate::PostgresStore) connects, and its settings.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use leasehold::store_url::{EnvError, UrlError};
use leasehold::StoreError;
use tokio_postgres::config::{Host, SslMode};
use tokio_postgres::Config;

/// The server, the database and the settings of a [`PostgresStore`](crate::PostgresStore).
///
/// Made from a URL, `postgres://USER[:PASSWORD]@HOST[:PORT][,HOST[:PORT]…]/DATABASE[?…]`
/// (or `postgresql://`), completed from the standard `PG…` variables by
/// [`PostgresOptions::with_env`], or from [`PostgresOptions::default`] and the environment
/// alone, as libpq does. The defaults suit a lease protocol whose heartbeat is a second or
/// more.
///
/// `sslmode=require` (or `verify-ca`, `verify-full`) connects over TLS and verifies the
/// server's certificate and host name against [`PostgresOptions::ca_file`], or the Mozilla
/// roots when none is given; a server that fails verification is refused, never used
/// unencrypted. `sslmode=prefer` (the default) and `disable` connect without TLS: `prefer`
/// would let whoever sits on the network path choose plain anyway.
///
/// `Display` shows the URL without the password; so does `Debug`.
///
/// ```
/// use std::time::Duration;
/// use leasehold_postgres::PostgresOptions;
///
/// let options = PostgresOptions::from_url("postgres://app:s3cret@db:5432/leases?sslmode=require")?
///     .ca_file("/etc/leasehold/db-ca.pem")
///     .request_timeout(Duration::from_secs(2));
/// assert_eq!(options.to_string(), "postgres://app:***@db:5432/leases?sslmode=require");
/// # Ok::<(), leasehold::store_url::UrlError>(())
/// ```
#[derive(Clone)]
pub struct PostgresOptions {
    /// The connection settings the URL named; the rest is filled in when connecting.
    pub(crate) config: Config,
    pub(crate) connect_timeout: Duration,
    pub(crate) statement_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) listing_timeout: Duration,
    pub(crate) min_reconnect_delay: Duration,
    pub(crate) max_reconnect_delay: Duration,
    pub(crate) table_prefix: String,
    pub(crate) ca_file: Option<PathBuf>,
}

impl Default for PostgresOptions {
    /// No server named yet: [`PostgresOptions::with_env`] or, failing that, `localhost`.
    fn default() -> Self {
        PostgresOptions {
            config: Config::new(),
            connect_timeout: Duration::from_secs(3),
            statement_timeout: Duration::from_secs(4),
            request_timeout: Duration::from_secs(5),
            listing_timeout: Duration::from_secs(120),
            min_reconnect_delay: Duration::from_millis(100),
            max_reconnect_delay: Duration::from_secs(5),
            table_prefix: "leasehold".to_owned(),
            ca_file: None,
        }
    }
}

impl PostgresOptions {
    /// libpq's variable naming the CA (PEM) that verifies the server over TLS.
    pub const CA_VARIABLE: &'static str = "PGSSLROOTCERT";

    /// Reads `postgres://USER[:PASSWORD]@HOST[:PORT][,…]/DATABASE[?SETTING=VALUE&…]`, or
    /// `postgresql://…`, without connecting. Parts left out are filled in by
    /// [`PostgresOptions::with_env`], and the host otherwise defaults to `localhost`.
    ///
    /// ```
    /// use leasehold::store_url::UrlPart;
    /// use leasehold_postgres::PostgresOptions;
    ///
    /// let error = PostgresOptions::from_url("postgres://u:secret@db:notaport/app").unwrap_err();
    /// assert_eq!(error.part(), UrlPart::Port);
    /// assert!(!error.to_string().contains("secret"));
    /// ```
    pub fn from_url(url: &str) -> Result<PostgresOptions, UrlError> {
        let config = crate::url::parse(url)?;
        Ok(PostgresOptions {
            config,
            ..PostgresOptions::default()
        })
    }

    /// Fills in what these options leave out from libpq's variables: the hosts from
    /// `PGHOST`, the port from `PGPORT`, the user from `PGUSER` (or `USER`), the password from
    /// `PGPASSWORD`, the database from `PGDATABASE` and the CA file from `PGSSLROOTCERT`.
    pub fn with_env(self) -> Result<PostgresOptions, EnvError> {
        self.with_variables(|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
    }

    /// [`PostgresOptions::with_env`] reading the variables through `variable`.
    pub(crate) fn with_variables(
        mut self,
        variable: impl Fn(&str) -> Option<String>,
    ) -> Result<PostgresOptions, EnvError> {
        let config = &mut self.config;
        if config.get_hosts().is_empty() {
            if let Some(hosts) = variable("PGHOST") {
                for host in hosts.split(',') {
                    config.host(host);
                }
            }
        }
        if config.get_ports().is_empty() {
            if let Some(port) = variable("PGPORT") {
                let port = port.parse().map_err(|_| {
                    EnvError::new("PGPORT", format!("PGPORT holds {port:?}, not a port"))
                })?;
                config.port(port);
            }
        }
        if config.get_user().is_none() {
            if let Some(user) = variable("PGUSER").or_else(|| variable("USER")) {
                config.user(user);
            }
        }
        if config.get_password().is_none() {
            if let Some(password) = variable("PGPASSWORD") {
                config.password(password);
            }
        }
        if config.get_dbname().is_none() {
            if let Some(dbname) = variable("PGDATABASE") {
                config.dbname(dbname);
            }
        }
        if self.ca_file.is_none() {
            self.ca_file = variable(Self::CA_VARIABLE).map(PathBuf::from);
        }
        Ok(self)
    }

    /// Limit on opening one connection, including the schema check that follows it.
    /// Default 3 s.
    #[must_use]
    pub fn connect_timeout(mut self, connect_timeout: Duration) -> Self {
        self.connect_timeout = connect_timeout;
        self
    }

    /// Server-side limit on each statement (`statement_timeout`), so a statement stuck behind
    /// a lock is cancelled by the server rather than left running. Default 4 s.
    #[must_use]
    pub fn statement_timeout(mut self, statement_timeout: Duration) -> Self {
        self.statement_timeout = statement_timeout;
        self
    }

    /// Client-side limit on each store call, from asking for a connection to the full reply.
    /// Default 5 s.
    #[must_use]
    pub fn request_timeout(mut self, request_timeout: Duration) -> Self {
        self.request_timeout = request_timeout;
        self
    }

    /// Limit on one listing of a group's lease table, client side and server side alike,
    /// instead of `request_timeout` and `statement_timeout`. Default 120 s.
    ///
    /// A listing is the one call whose work grows with the table, and the caller sets its
    /// own limit on it: a participant allows `store_timeout` for every 4,096 partitions
    /// ([`ParticipantConfig::listing_timeout`]), 80 s at 65,536. A listing cut off sooner
    /// is abandoned by its caller after the server has done most of the work, and a fleet
    /// retrying such listings keeps a busy server busier. Listings run on a connection of
    /// their own, opened at the first, one at a time: reads of single records and of the
    /// member records never wait behind one, and a listing whose caller gave up while
    /// waiting its turn is never sent.
    ///
    /// [`ParticipantConfig::listing_timeout`]: leasehold::ParticipantConfig::listing_timeout
    #[must_use]
    pub fn listing_timeout(mut self, listing_timeout: Duration) -> Self {
        self.listing_timeout = listing_timeout;
        self
    }

    /// The first wait after a failed connection attempt; each further failure doubles it up
    /// to `max`. Calls made while waiting fail at once as [`StoreError::Unavailable`] instead
    /// of piling up on a server that is down. Default 100 ms up to 5 s.
    #[must_use]
    pub fn reconnect_delay(mut self, min: Duration, max: Duration) -> Self {
        self.min_reconnect_delay = min;
        self.max_reconnect_delay = max;
        self
    }

    /// Prefix of every object the store creates: tables `<prefix>_leases`,
    /// `<prefix>_members` and `<prefix>_schema`, sequence `<prefix>_version`, notification
    /// channel `<prefix>_changes`. Lowercase letters, digits and `_`, at most 40 bytes.
    /// Default `leasehold`.
    #[must_use]
    pub fn table_prefix(mut self, table_prefix: impl Into<String>) -> Self {
        self.table_prefix = table_prefix.into();
        self
    }

    /// PEM file of the certificate authorities that TLS connections trust, instead of the
    /// Mozilla roots. Plain connections ignore it.
    #[must_use]
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_file = Some(path.into());
        self
    }

    /// The request timeout in force.
    pub fn request_timeout_limit(&self) -> Duration {
        self.request_timeout
    }

    /// Whether connections use TLS (`sslmode=require`, `verify-ca` or `verify-full`).
    pub fn uses_tls(&self) -> bool {
        self.config.get_ssl_mode() == SslMode::Require
    }

    /// Checks the settings, naming the offending value.
    pub fn validate(&self) -> Result<(), StoreError> {
        let prefix = &self.table_prefix;
        let valid_start = prefix
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
        let valid_rest = prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid_start || !valid_rest || prefix.len() > 40 {
            return Err(StoreError::Invalid(format!(
                "table prefix {prefix:?} must be 1 to 40 lowercase letters, digits or '_', \
                 not starting with a digit"
            )));
        }
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("statement_timeout", self.statement_timeout),
            ("request_timeout", self.request_timeout),
            ("listing_timeout", self.listing_timeout),
            ("min_reconnect_delay", self.min_reconnect_delay),
        ] {
            if value.is_zero() {
                return Err(StoreError::Invalid(format!("{name} must not be zero")));
            }
        }
        if self.max_reconnect_delay < self.min_reconnect_delay {
            return Err(StoreError::Invalid(format!(
                "max_reconnect_delay {:?} is below min_reconnect_delay {:?}",
                self.max_reconnect_delay, self.min_reconnect_delay
            )));
        }
        Ok(())
    }
}

/// The URL the options stand for, the password shown as `***`.
impl fmt::Display for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let config = &self.config;
        f.write_str("postgres://")?;
        match (config.get_user(), config.get_password()) {
            (Some(user), Some(_)) => write!(f, "{user}:***@")?,
            (Some(user), None) => write!(f, "{user}@")?,
            (None, Some(_)) => f.write_str(":***@")?,
            (None, None) => {}
        }
        let ports = config.get_ports();
        let mut query = Vec::new();
        let mut separator = "";
        for (index, host) in config.get_hosts().iter().enumerate() {
            match host {
                Host::Tcp(name) if name.contains(':') => write!(f, "{separator}[{name}]")?,
                Host::Tcp(name) => write!(f, "{separator}{name}")?,
                Host::Unix(path) => {
                    query.push(format!("host={}", path.display()));
                    continue;
                }
            }
            if let Some(port) = ports.get(index).or(ports.first()) {
                write!(f, ":{port}")?;
            }
            separator = ",";
        }
        write!(f, "/{}", config.get_dbname().unwrap_or_default())?;
        if self.uses_tls() {
            query.push("sslmode=require".to_owned());
        }
        if !query.is_empty() {
            write!(f, "?{}", query.join("&"))?;
        }
        Ok(())
    }
}

impl fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("server", &format_args!("{self}"))
            .field("connect_timeout", &self.connect_timeout)
            .field("statement_timeout", &self.statement_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("listing_timeout", &self.listing_timeout)
            .field("min_reconnect_delay", &self.min_reconnect_delay)
            .field("max_reconnect_delay", &self.max_reconnect_delay)
            .field("table_prefix", &self.table_prefix)
            .field("ca_file", &self.ca_file)
            .finish()
    }
}

#[cfg(test)]
mod tests;
