//! Connections that come back after the server does.
//!
//! A [`Slot`] holds at most one connection. When it is missing or closed, the next caller
//! opens a new one; if that fails, callers fail at once with [`StoreError::Unavailable`]
//! until a delay has passed that doubles with each failure, so a server that is down costs
//! one quick refusal per call, not a pile of waiting connection attempts.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use leasehold::backoff::Backoff;
use leasehold::StoreError;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_postgres::config::SslMode;
use tokio_postgres::{Client, Config};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::map_error;
use crate::options::PostgresOptions;
use crate::schema::{self, Names};
use crate::statements::Statements;

/// Where and how to connect: the settings and the TLS connector they use.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) config: Config,
    /// Used only when `config` requires TLS; with `sslmode=disable` the connection stays plain.
    pub(crate) tls: MakeRustlsConnect,
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Target")
            .field("encrypted", &self.encrypted())
            .finish_non_exhaustive()
    }
}

impl Target {
    /// The settings `options` name, completed with the store's own, and the TLS they ask for;
    /// the server cancels a statement after `statement_timeout`.
    pub(crate) fn new(
        options: &PostgresOptions,
        statement_timeout: Duration,
    ) -> Result<Target, StoreError> {
        let mut config = options.config.clone();
        if config.get_hosts().is_empty() {
            config.host("localhost");
        }
        let statement_ms = statement_timeout.as_millis();
        config
            .connect_timeout(options.connect_timeout)
            // Unacknowledged data for this long means the peer is gone: the kernel then closes
            // the connection and the next call opens a new one instead of timing out forever.
            .tcp_user_timeout(options.request_timeout)
            .keepalives(true)
            .keepalives_idle(Duration::from_secs(10))
            .options(format!("-c statement_timeout={statement_ms}"))
            .application_name("leasehold");
        // A plain connection never reads the CA file, so a CA file given for later use does
        // not stop a plain connection from opening.
        let ca_file = match config.get_ssl_mode() {
            SslMode::Require => options.ca_file.as_deref(),
            _ => None,
        };
        let tls = crate::tls::connector(ca_file)?;
        Ok(Target { config, tls })
    }

    /// Whether connections use TLS.
    pub(crate) fn encrypted(&self) -> bool {
        self.config.get_ssl_mode() == SslMode::Require
    }
}

/// One open connection with its prepared statements.
#[derive(Debug)]
pub(crate) struct Session {
    pub(crate) client: Client,
    pub(crate) statements: Statements,
    driver: JoinHandle<()>,
}

impl Drop for Session {
    fn drop(&mut self) {
        self.driver.abort();
    }
}

impl Session {
    /// Opens a connection, checks the schema and prepares the statements, all within the
    /// connect timeout.
    pub(crate) async fn open(
        target: &Target,
        names: &Names,
        options: &PostgresOptions,
    ) -> Result<Session, StoreError> {
        let limit = options.connect_timeout;
        let opening = async {
            let action = if target.encrypted() {
                "connect to PostgreSQL over TLS"
            } else {
                "connect to PostgreSQL"
            };
            let fail = |e| map_error(action, options.statement_timeout, e);
            let connecting = target.config.connect(target.tls.clone());
            let (mut client, connection) = connecting.await.map_err(fail)?;
            let driver = tokio::spawn(async move {
                if let Err(error) = connection.await {
                    tracing::debug!(%error, "PostgreSQL connection ended");
                }
            });
            // If anything below fails, dropping the half-built session stops the driver.
            let half_built = DriverGuard(Some(driver));
            schema::ensure(&mut client, names, options.statement_timeout).await?;
            let statements = Statements::prepare(&client, names, options.statement_timeout).await?;
            Ok(Session {
                client,
                statements,
                driver: half_built.release(),
            })
        };
        tokio::time::timeout(limit, opening)
            .await
            .unwrap_or(Err(StoreError::Timeout(limit)))
    }

    fn usable(&self) -> bool {
        !self.client.is_closed()
    }
}

struct DriverGuard(Option<JoinHandle<()>>);

impl DriverGuard {
    fn release(mut self) -> JoinHandle<()> {
        self.0.take().expect("released once")
    }
}

impl Drop for DriverGuard {
    fn drop(&mut self) {
        if let Some(driver) = self.0.take() {
            driver.abort();
        }
    }
}

/// At most one connection, reopened with bounded exponential back-off.
#[derive(Debug)]
pub(crate) struct Slot {
    session: Option<Arc<Session>>,
    retry_at: Option<Instant>,
    retries: Backoff,
}

impl Slot {
    pub(crate) fn new(first: Option<Session>, options: &PostgresOptions) -> Slot {
        Slot {
            session: first.map(Arc::new),
            retry_at: None,
            retries: Backoff::new(options.min_reconnect_delay, options.max_reconnect_delay),
        }
    }

    /// The open connection, opening a new one if needed and allowed now.
    pub(crate) async fn session(
        &mut self,
        target: &Target,
        names: &Names,
        options: &PostgresOptions,
    ) -> Result<&mut Arc<Session>, StoreError> {
        if !self.session.as_ref().is_some_and(|s| s.usable()) {
            self.session = None;
            if let Some(retry_at) = self.retry_at {
                let now = Instant::now();
                if now < retry_at {
                    return Err(StoreError::Unavailable {
                        message: format!(
                            "PostgreSQL unreachable; next connection attempt in {:?}",
                            retry_at - now
                        ),
                        source: None,
                    });
                }
            }
            match Session::open(target, names, options).await {
                Ok(session) => {
                    self.retry_at = None;
                    self.retries.succeeded();
                    self.session = Some(Arc::new(session));
                }
                Err(error) => {
                    self.retry_at = Some(Instant::now() + self.retries.failed());
                    return Err(error);
                }
            }
        }
        Ok(self.session.as_mut().expect("a usable session is present"))
    }
}
