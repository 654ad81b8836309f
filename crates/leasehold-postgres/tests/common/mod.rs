//! What the integration tests share: finding the test server, and a harness for the suite.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::testing::Harness;
use leasehold::{GroupName, LeaseStore, PartitionId, StoreError};
use leasehold_postgres::{PostgresOptions, PostgresStore};

const URL_VAR: &str = "LEASEHOLD_TEST_POSTGRES_URL";

/// The test server's URL, or `None` (after saying why) when the test should skip.
///
/// Panics instead when `LEASEHOLD_REQUIRE_SERVICES=1`, so CI cannot pass by skipping.
pub fn url() -> Option<String> {
    match std::env::var(URL_VAR) {
        Ok(url) if !url.trim().is_empty() => Some(url),
        _ => {
            let reason = format!("{URL_VAR} is not set");
            if std::env::var("LEASEHOLD_REQUIRE_SERVICES").as_deref() == Ok("1") {
                panic!("{reason}, and LEASEHOLD_REQUIRE_SERVICES=1 requires the PostgreSQL server");
            }
            println!("skipped: {reason} (set {URL_VAR} or run scripts/test.sh)");
            None
        }
    }
}

/// Options with timeouts short enough for tests that stop the server.
pub fn test_options() -> PostgresOptions {
    PostgresOptions {
        connect_timeout: Duration::from_secs(2),
        statement_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(3),
        min_reconnect_delay: Duration::from_millis(50),
        max_reconnect_delay: Duration::from_millis(500),
        ..PostgresOptions::default()
    }
}

pub async fn store(url: &str) -> PostgresStore {
    PostgresStore::connect_with(url, test_options())
        .await
        .expect("connect to the test server")
}

/// A plain client on the test server, for what the store itself would never do.
pub async fn raw_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .expect("raw connection");
    tokio::spawn(connection);
    client
}

/// The conformance harness: corrupts a record by giving it a state no release writes.
pub struct PostgresHarness {
    pub store: PostgresStore,
    pub client: tokio_postgres::Client,
}

impl PostgresHarness {
    pub async fn new(url: &str) -> PostgresHarness {
        PostgresHarness {
            store: store(url).await,
            client: raw_client(url).await,
        }
    }
}

#[async_trait]
impl Harness for PostgresHarness {
    fn store(&self) -> Arc<dyn LeaseStore> {
        Arc::new(self.store.clone())
    }

    async fn corrupt_lease(
        &self,
        group: &GroupName,
        partition: PartitionId,
    ) -> Result<(), StoreError> {
        let table = format!("{}_leases", test_options().table_prefix);
        let updated = self
            .client
            .execute(
                &format!("UPDATE {table} SET state = 'bogus' WHERE grp = $1 AND partition = $2"),
                &[&group.as_str(), &i64::from(partition.0)],
            )
            .await
            .map_err(|e| StoreError::unavailable("corrupt a record", e))?;
        assert_eq!(updated, 1, "the record to corrupt exists");
        Ok(())
    }
}
