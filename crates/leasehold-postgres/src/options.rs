//! Settings of a [`PostgresStore`](crate::PostgresStore).

use std::path::PathBuf;
use std::time::Duration;

use leasehold::StoreError;

/// Settings for [`PostgresStore::connect_with`](crate::PostgresStore::connect_with).
///
/// The defaults suit a lease protocol whose heartbeat is a second or more.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Limit on opening one connection, including the schema check that follows it.
    pub connect_timeout: Duration,
    /// Server-side limit on each statement (`statement_timeout`), so a statement stuck behind
    /// a lock is cancelled by the server rather than left running.
    pub statement_timeout: Duration,
    /// Client-side limit on each store call, from asking for a connection to the full reply.
    pub request_timeout: Duration,
    /// The first wait after a failed connection attempt; each further failure doubles it up
    /// to `max_reconnect_delay`. Calls made while waiting fail at once as
    /// [`StoreError::Unavailable`] instead of piling up on a server that is down.
    pub min_reconnect_delay: Duration,
    /// The longest wait between connection attempts.
    pub max_reconnect_delay: Duration,
    /// Prefix of every object the store creates: tables `<prefix>_leases`,
    /// `<prefix>_members` and `<prefix>_schema`, sequence `<prefix>_version`, notification
    /// channel `<prefix>_changes`. Lowercase letters, digits and `_`, at most 40 bytes.
    pub table_prefix: String,
    /// PEM file of the certificate authorities that TLS connections (`sslmode=require`,
    /// `verify-ca` or `verify-full`) trust; `None` trusts the Mozilla roots. Plain
    /// connections ignore it.
    pub ca_file: Option<PathBuf>,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            connect_timeout: Duration::from_secs(3),
            statement_timeout: Duration::from_secs(4),
            request_timeout: Duration::from_secs(5),
            min_reconnect_delay: Duration::from_millis(100),
            max_reconnect_delay: Duration::from_secs(5),
            table_prefix: "leasehold".to_owned(),
            ca_file: None,
        }
    }
}

impl PostgresOptions {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_prefixes_are_checked() {
        assert!(PostgresOptions::default().validate().is_ok());
        for bad in ["", "1abc", "Leases", "a-b", "a;drop", &"x".repeat(41)] {
            let options = PostgresOptions {
                table_prefix: bad.to_owned(),
                ..PostgresOptions::default()
            };
            assert!(options.validate().is_err(), "{bad:?} accepted");
        }
        let options = PostgresOptions {
            max_reconnect_delay: Duration::from_millis(1),
            ..PostgresOptions::default()
        };
        let error = options.validate().unwrap_err().to_string();
        assert!(error.contains("max_reconnect_delay"), "{error}");
    }
}
