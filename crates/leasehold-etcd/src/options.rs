//! How to reach an etcd cluster.

use std::fmt;
use std::time::Duration;

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
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            request_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(3),
            keep_alive: (Duration::from_secs(5), Duration::from_secs(3)),
            credentials: None,
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
    pub(crate) fn connect_options(&self) -> etcd_client::ConnectOptions {
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
        options
    }
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
}
