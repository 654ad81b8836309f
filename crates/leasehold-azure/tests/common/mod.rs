//! Finding the Azurite server the tests run against.

#![allow(dead_code)]

use std::time::Duration;

use leasehold_azure::{AccountKey, AzureConfig};

/// The Azurite account from `LEASEHOLD_TEST_AZURITE_ENDPOINT`, `..._ACCOUNT` and `..._KEY`, or
/// `None` after printing why the test is skipped. With `LEASEHOLD_REQUIRE_SERVICES=1` a
/// missing server fails the test instead.
pub fn azurite_config(table: &str) -> Option<AzureConfig> {
    let endpoint = std::env::var("LEASEHOLD_TEST_AZURITE_ENDPOINT").ok();
    let Some(endpoint) = endpoint.filter(|value| !value.is_empty()) else {
        assert!(
            std::env::var("LEASEHOLD_REQUIRE_SERVICES").as_deref() != Ok("1"),
            "LEASEHOLD_TEST_AZURITE_ENDPOINT is not set but LEASEHOLD_REQUIRE_SERVICES=1 requires the server"
        );
        println!(
            "skipped: no Azurite server (set LEASEHOLD_TEST_AZURITE_ENDPOINT or run scripts/test.sh)"
        );
        return None;
    };
    let account = std::env::var("LEASEHOLD_TEST_AZURITE_ACCOUNT")
        .expect("LEASEHOLD_TEST_AZURITE_ACCOUNT is set with the endpoint");
    let key = AccountKey::from_env("LEASEHOLD_TEST_AZURITE_KEY").expect("account key");
    let mut config = AzureConfig::new(&account, key, &endpoint, table);
    config.call_timeout = Duration::from_secs(5);
    Some(config)
}

/// The HTTPS Azurite (`LEASEHOLD_TEST_AZURITE_TLS_ENDPOINT`), trusting only the test authority
/// (`LEASEHOLD_TEST_AZURITE_CA`); `None` when the plain server is not configured either.
pub fn azurite_tls_config(table: &str) -> Option<AzureConfig> {
    let mut config = azurite_config(table)?;
    config.endpoint = std::env::var("LEASEHOLD_TEST_AZURITE_TLS_ENDPOINT")
        .expect("LEASEHOLD_TEST_AZURITE_TLS_ENDPOINT is set with the plain endpoint");
    config.ca_file = Some(
        std::env::var("LEASEHOLD_TEST_AZURITE_CA")
            .expect("LEASEHOLD_TEST_AZURITE_CA is set with the HTTPS endpoint")
            .into(),
    );
    Some(config)
}
