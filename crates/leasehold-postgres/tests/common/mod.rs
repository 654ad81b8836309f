//! What the integration tests share: finding the test server, and a harness for the suite.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::testing::{Harness, Listed, Malformed};
use leasehold::{GroupName, LeaseStore, NodeId, PartitionId, RecordKey, StoreError};
use leasehold_postgres::{PostgresOptions, PostgresStore};

const URL_VAR: &str = "LEASEHOLD_TEST_POSTGRES_URL";
const CA_VAR: &str = "LEASEHOLD_TEST_POSTGRES_CA";
const OTHER_CA_VAR: &str = "LEASEHOLD_TEST_OTHER_CA";

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

/// The test server's TLS settings: its URL with `sslmode=require`, the authority that signed
/// its certificate, and one that did not. `None` (after saying why) when the test should skip;
/// panics instead when `LEASEHOLD_REQUIRE_SERVICES=1`.
pub fn tls() -> Option<(String, PathBuf, PathBuf)> {
    let url = url()?;
    let ca = std::env::var(CA_VAR).ok().filter(|v| !v.trim().is_empty());
    let other = std::env::var(OTHER_CA_VAR)
        .ok()
        .filter(|v| !v.trim().is_empty());
    let (Some(ca), Some(other)) = (ca, other) else {
        let reason = format!("{CA_VAR} or {OTHER_CA_VAR} is not set");
        if std::env::var("LEASEHOLD_REQUIRE_SERVICES").as_deref() == Ok("1") {
            panic!("{reason}, and LEASEHOLD_REQUIRE_SERVICES=1 requires the TLS server");
        }
        println!("skipped: {reason} (set {CA_VAR} or run scripts/test.sh)");
        return None;
    };
    let separator = if url.contains('?') { '&' } else { '?' };
    let tls_url = format!("{url}{separator}sslmode=require");
    Some((tls_url, PathBuf::from(ca), PathBuf::from(other)))
}

/// The request timeout of [`test_options`].
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Options for the server at `url` with timeouts short enough for tests that stop it.
pub fn test_options(url: &str) -> PostgresOptions {
    PostgresOptions::from_url(url)
        .expect("the test URL")
        .with_env()
        .expect("the PG variables")
        .connect_timeout(Duration::from_secs(2))
        .statement_timeout(Duration::from_secs(2))
        .request_timeout(REQUEST_TIMEOUT)
        .reconnect_delay(Duration::from_millis(50), Duration::from_millis(500))
}

pub async fn store(url: &str) -> PostgresStore {
    PostgresStore::connect(test_options(url))
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

    /// A harness whose store connects with `options`, and whose own client to `plain_url`.
    pub async fn with(options: PostgresOptions, plain_url: &str) -> Self {
        PostgresHarness {
            store: PostgresStore::connect(options)
                .await
                .expect("connect to the test server"),
            client: raw_client(plain_url).await,
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
        // The store's default table prefix.
        let table = "leasehold_leases";
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

    /// Rows as `psql` could leave them: everything the table's constraints still allow.
    async fn write_malformed(&self, group: &GroupName) -> Result<Vec<Malformed>, StoreError> {
        let lease = |partition: i64, values: &str| {
            format!(
                "INSERT INTO leasehold_leases (grp, partition, owner, epoch, state, prohibited, \
                 load, note, written_at_unix_ms, version) VALUES ($1, {partition}, {values})"
            )
        };
        let version = "nextval('leasehold_version')";
        let member = |node: &str, values: &str| {
            format!(
                "INSERT INTO leasehold_members (grp, node, weight, draining, load, heartbeat, \
                 written_at_unix_ms, version) VALUES ($1, '{node}', {values})"
            )
        };
        let bad_member = |node: &str| {
            Malformed::new(
                Listed::Members,
                RecordKey::Member(NodeId::new(node).expect("a valid name")),
                "",
            )
        };
        let cases = [
            (
                lease(
                    10,
                    &format!("'n1', 1, 'held', '{{NULL}}', NULL, NULL, NULL, {version}"),
                ),
                Malformed::lease(10, "a NULL element in prohibited"),
            ),
            (
                lease(
                    11,
                    &format!("NULL, -1, 'released', '{{}}', NULL, NULL, NULL, {version}"),
                ),
                Malformed::lease(11, "a negative epoch"),
            ),
            (
                lease(
                    12,
                    &format!("'', 1, 'held', '{{}}', NULL, NULL, NULL, {version}"),
                ),
                Malformed::lease(12, "an empty owner"),
            ),
            (
                lease(13, "NULL, 0, 'released', '{}', NULL, NULL, NULL, -7"),
                Malformed::lease(13, "a negative version"),
            ),
            (
                lease(
                    14,
                    &format!("NULL, 0, 'released', '{{}}', NULL, NULL, -1, {version}"),
                ),
                Malformed::lease(14, "a negative write time"),
            ),
            (
                lease(
                    4_294_967_296,
                    &format!("NULL, 0, 'released', '{{}}', NULL, NULL, NULL, {version}"),
                ),
                Malformed::new(
                    Listed::Leases,
                    RecordKey::Stored("lease 4294967296".to_owned()),
                    "a partition beyond u32",
                ),
            ),
            (
                member(
                    "bad-weight",
                    &format!("4294967296, false, NULL, 0, NULL, {version}"),
                ),
                Malformed {
                    damage: "a weight beyond u32".to_owned(),
                    ..bad_member("bad-weight")
                },
            ),
            (
                member(
                    "bad-heartbeat",
                    &format!("1, false, NULL, -1, NULL, {version}"),
                ),
                Malformed {
                    damage: "a negative heartbeat".to_owned(),
                    ..bad_member("bad-heartbeat")
                },
            ),
            (
                member("bad name", &format!("1, false, NULL, 0, NULL, {version}")),
                Malformed::new(
                    Listed::Members,
                    RecordKey::Stored("member bad name".to_owned()),
                    "a name that is not a node name",
                ),
            ),
        ];
        let mut malformed = Vec::new();
        for (statement, damage) in cases {
            self.client
                .execute(&statement, &[&group.as_str()])
                .await
                .map_err(|e| StoreError::unavailable("write a malformed row", e))?;
            malformed.push(damage);
        }
        Ok(malformed)
    }
}
