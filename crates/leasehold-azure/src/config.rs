//! What an [`AzureTableStore`](crate::AzureTableStore) connects to.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use base64::Engine;
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
    pub fn from_env(name: &str) -> Result<AccountKey, StoreError> {
        let encoded = std::env::var(name).map_err(|_| {
            StoreError::Invalid(format!("environment variable {name} holds no account key"))
        })?;
        AccountKey::from_base64(&encoded)
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

/// Where and how to reach one table.
#[derive(Debug, Clone)]
pub struct AzureConfig {
    /// The storage account name, for example `mycompanyleases` or Azurite's `devstoreaccount1`.
    pub account: String,
    /// The account's shared key.
    pub key: AccountKey,
    /// The Table service endpoint: `https://<account>.table.core.windows.net`, or for Azurite
    /// `http://127.0.0.1:10002/devstoreaccount1` (path-style, the account in the path).
    pub endpoint: String,
    /// The table holding every group's records: 3 to 63 letters and digits, starting with a
    /// letter. Created if it does not exist.
    pub table: String,
    /// The most one store call may take, including reading the whole reply.
    pub call_timeout: Duration,
    /// The most establishing a connection may take.
    pub connect_timeout: Duration,
    /// For an `https://` endpoint whose certificate a private authority signed (an Azurite
    /// started with `--cert`, a proxy): the authorities to trust, as a PEM file, instead of
    /// the built-in roots. `None` trusts the built-in roots, which is right for Azure itself.
    pub ca_file: Option<PathBuf>,
}

impl AzureConfig {
    /// A configuration with the default timeouts (10 s per call, 3 s to connect).
    pub fn new(account: &str, key: AccountKey, endpoint: &str, table: &str) -> AzureConfig {
        AzureConfig {
            account: account.to_owned(),
            key,
            endpoint: endpoint.to_owned(),
            table: table.to_owned(),
            call_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(3),
            ca_file: None,
        }
    }

    /// Checks the names and timeouts, saying which value is wrong.
    pub fn validate(&self) -> Result<(), StoreError> {
        let table = &self.table;
        let table_ok = (3..=63).contains(&table.len())
            && table.starts_with(|c: char| c.is_ascii_alphabetic())
            && table.chars().all(|c| c.is_ascii_alphanumeric());
        if !table_ok {
            return Err(StoreError::Invalid(format!(
                "table name {table:?} must be 3 to 63 letters and digits, starting with a letter"
            )));
        }
        let account = &self.account;
        if account.is_empty() || !account.chars().all(|c| c.is_ascii_alphanumeric()) {
            return Err(StoreError::Invalid(format!(
                "account name {account:?} must be letters and digits"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_never_shows_in_debug_output() {
        let key = AccountKey::from_base64("c2VjcmV0LWtleQ==").unwrap();
        let config = AzureConfig::new("acct", key, "http://127.0.0.1:1/acct", "leases");
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("c2VjcmV0") && !shown.contains("secret"),
            "{shown}"
        );
        assert!(shown.contains("<redacted>"), "{shown}");
        assert!(AccountKey::from_base64("not base64!").is_err());
    }

    #[test]
    fn names_and_timeouts_are_validated() {
        let key = AccountKey::from_base64("a2V5").unwrap();
        let good = AzureConfig::new("acct", key, "http://127.0.0.1:1/acct", "leases");
        assert!(good.validate().is_ok());
        for table in ["ab", "1leases", "lease-s", &"x".repeat(64)] {
            let config = AzureConfig {
                table: table.to_owned(),
                ..good.clone()
            };
            assert!(config.validate().is_err(), "{table}");
        }
        let config = AzureConfig {
            call_timeout: Duration::ZERO,
            ..good.clone()
        };
        assert!(config.validate().is_err());
    }
}
