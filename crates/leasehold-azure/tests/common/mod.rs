//! Finding the Azurite server the tests run against.

#![allow(dead_code)]

use std::time::Duration;

use std::path::PathBuf;

use leasehold_azure::{AccountKey, AzureOptions};

/// Options for `table` of the Azurite account from `LEASEHOLD_TEST_AZURITE_ENDPOINT`,
/// `..._ACCOUNT` and `..._KEY`; `None` when the test is to skip
/// ([`leasehold::testing::service_env`]).
pub fn azurite_options(table: &str) -> Option<AzureOptions> {
    let endpoint =
        leasehold::testing::service_env("LEASEHOLD_TEST_AZURITE_ENDPOINT", "the Azurite server")?;
    let account = std::env::var("LEASEHOLD_TEST_AZURITE_ACCOUNT")
        .expect("LEASEHOLD_TEST_AZURITE_ACCOUNT is set with the endpoint");
    Some(options(&endpoint, &account, table))
}

/// Options for `table` of `account` at the path-style `endpoint`, `http(s)://HOST:PORT/ACCOUNT`.
fn options(endpoint: &str, account: &str, table: &str) -> AzureOptions {
    assert!(endpoint.ends_with(&format!("/{account}")), "{endpoint}");
    let key = AccountKey::from_env("LEASEHOLD_TEST_AZURITE_KEY").expect("account key");
    AzureOptions::from_url(&format!("azure+{endpoint}/{table}"))
        .expect("the test endpoint")
        .key(key)
        .call_timeout(Duration::from_secs(5))
}

/// The HTTPS Azurite (`LEASEHOLD_TEST_AZURITE_TLS_ENDPOINT`) with no CA of its own yet, and
/// the test authority that signed it (`LEASEHOLD_TEST_AZURITE_CA`); `None` when the plain
/// server is not configured either.
pub fn azurite_tls(table: &str) -> Option<(AzureOptions, PathBuf)> {
    azurite_options(table)?;
    let endpoint = std::env::var("LEASEHOLD_TEST_AZURITE_TLS_ENDPOINT")
        .expect("LEASEHOLD_TEST_AZURITE_TLS_ENDPOINT is set with the plain endpoint");
    let account = std::env::var("LEASEHOLD_TEST_AZURITE_ACCOUNT").expect("account");
    let ca = std::env::var("LEASEHOLD_TEST_AZURITE_CA")
        .expect("LEASEHOLD_TEST_AZURITE_CA is set with the HTTPS endpoint");
    Some((options(&endpoint, &account, table), ca.into()))
}

/// The HTTPS Azurite trusting only the test authority; see [`azurite_tls`].
pub fn azurite_tls_options(table: &str) -> Option<AzureOptions> {
    azurite_tls(table).map(|(options, ca)| options.ca_file(ca))
}
