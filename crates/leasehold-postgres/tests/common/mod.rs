//! What the integration tests share: finding the test server, and a harness for the suite.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use leasehold::testing::{service_env, Harness, Listed, Malformed, CONFORMANCE_CALL_TIMEOUT};
use leasehold::{GroupName, LeaseStore, NodeId, PartitionId, RecordKey, StoreError};
use leasehold_postgres::{PostgresOptions, PostgresStore};

const URL_VAR: &str = "LEASEHOLD_TEST_POSTGRES_URL";
const CA_VAR: &str = "LEASEHOLD_TEST_POSTGRES_CA";
const OTHER_CA_VAR: &str = "LEASEHOLD_TEST_OTHER_CA";

/// The test server's URL; `None` when the test is to skip ([`service_env`]).
pub fn url() -> Option<String> {
    service_env(URL_VAR, "the PostgreSQL server")
}

/// The test server's TLS settings: its URL with `sslmode=require`, the authority that signed
/// its certificate, and one that did not; `None` when the test is to skip ([`service_env`]).
pub fn tls() -> Option<(String, PathBuf, PathBuf)> {
    let url = url()?;
    let ca = service_env(CA_VAR, "the PostgreSQL server's TLS authority")?;
    let other = service_env(OTHER_CA_VAR, "a second TLS authority")?;
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

/// Options for the conformance suite, which never stops the server. A statement ends on the
/// server a little before the client gives up on it.
pub fn conformance_options(url: &str) -> PostgresOptions {
    test_options(url)
        .statement_timeout(CONFORMANCE_CALL_TIMEOUT - Duration::from_secs(5))
        .request_timeout(CONFORMANCE_CALL_TIMEOUT)
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

/// Drops every object of the layout under `prefix`, which a test created for itself.
pub async fn drop_layout(client: &tokio_postgres::Client, prefix: &str) {
    client
        .batch_execute(&format!(
            "DROP TABLE {prefix}_schema, {prefix}_leases, {prefix}_members, {prefix}_groups;
             DROP SEQUENCE {prefix}_version;
             DROP FUNCTION {prefix}_lease_changed, {prefix}_member_changed;"
        ))
        .await
        .expect("drop the test's layout");
}

/// The conformance harness: corrupts a record by giving it a state no release writes, and
/// writes malformed rows with a client of its own.
pub struct PostgresHarness {
    pub store: PostgresStore,
    pub client: tokio_postgres::Client,
    /// The store's table prefix.
    pub prefix: String,
    /// Whether the layout's `NOT NULL` constraints were dropped, so that the malformed rows
    /// may also hold NULLs where the store always writes a value.
    pub nulls: bool,
}

impl PostgresHarness {
    pub async fn new(url: &str) -> PostgresHarness {
        PostgresHarness::with(conformance_options(url), url).await
    }

    /// A harness whose store connects with `options` (the default table prefix), and whose
    /// own client to `plain_url`.
    pub async fn with(options: PostgresOptions, plain_url: &str) -> Self {
        PostgresHarness {
            store: PostgresStore::connect(options)
                .await
                .expect("connect to the test server"),
            client: raw_client(plain_url).await,
            prefix: "leasehold".to_owned(),
            nulls: false,
        }
    }

    /// Inserts a row into `<prefix>_<table>` for `group` with `values` for `columns`.
    async fn insert(
        &self,
        group: &GroupName,
        table: &str,
        columns: &str,
        values: &str,
    ) -> Result<(), StoreError> {
        let statement = format!(
            "INSERT INTO {}_{table} (grp, {columns}) VALUES ($1, {values})",
            self.prefix
        );
        self.client
            .execute(&statement, &[&group.as_str()])
            .await
            .map_err(|e| StoreError::unavailable("write a malformed row", e))?;
        Ok(())
    }
}

const LEASE_COLUMNS: &str = "partition, owner, epoch, state, prohibited, load, note, \
     written_at_unix_ms, version, previous_owner, handed_to, session";
const MEMBER_COLUMNS: &str = "node, weight, draining, load, heartbeat, written_at_unix_ms, \
     lease_validity_ns, acquire_after_ns, version, capacity, max_load, max_partitions, address, \
     metadata, session";

fn member(node: &str, damage: &str) -> Malformed {
    let node = NodeId::new(node).expect("a valid name");
    Malformed::new(Listed::Members, RecordKey::Member(node), damage)
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
        let table = format!("{}_leases", self.prefix);
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

    /// Rows as `psql` could leave them: everything the table's constraints allow, and NULLs
    /// where they were dropped.
    async fn corrupt_group(&self, group: &GroupName) -> Result<(), StoreError> {
        let table = format!("{}_groups", self.prefix);
        let updated = self
            .client
            .execute(
                &format!("UPDATE {table} SET record = '{{not json' WHERE grp = $1"),
                &[&group.as_str()],
            )
            .await
            .map_err(|e| StoreError::unavailable("corrupt the group record", e))?;
        assert_eq!(updated, 1, "the record to corrupt exists");
        Ok(())
    }

    async fn write_malformed(&self, group: &GroupName) -> Result<Vec<Malformed>, StoreError> {
        let version = format!("nextval('{}_version')", self.prefix);
        let released = |partition: u64, column: usize, value: &str| {
            let mut values = [
                partition.to_string(),
                "NULL".to_owned(),
                "0".to_owned(),
                "'released'".to_owned(),
                "'{}'".to_owned(),
                "NULL".to_owned(),
                "NULL".to_owned(),
                "NULL".to_owned(),
                version.clone(),
                "NULL".to_owned(),
                "NULL".to_owned(),
                "NULL".to_owned(),
            ];
            values[column] = value.to_owned();
            values.join(", ")
        };
        let healthy = |node: &str, column: usize, value: &str| {
            let mut values = [
                format!("'{node}'"),
                "1".to_owned(),
                "false".to_owned(),
                "NULL".to_owned(),
                "0".to_owned(),
                "NULL".to_owned(),
                "NULL".to_owned(),
                "NULL".to_owned(),
                version.clone(),
                "NULL".to_owned(),
                "NULL".to_owned(),
                "NULL".to_owned(),
                "NULL".to_owned(),
                "NULL".to_owned(),
                "NULL".to_owned(),
            ];
            values[column] = value.to_owned();
            values.join(", ")
        };
        let mut leases = vec![
            (
                released(10, 4, "'{NULL}'"),
                Malformed::lease(10, "a NULL element in prohibited"),
            ),
            (
                released(11, 2, "-1"),
                Malformed::lease(11, "a negative epoch"),
            ),
            (
                released(12, 1, "''"),
                Malformed::lease(12, "an empty owner"),
            ),
            (
                released(13, 8, "-7"),
                Malformed::lease(13, "a negative version"),
            ),
            (
                released(14, 7, "-1"),
                Malformed::lease(14, "a negative write time"),
            ),
            (
                released(15, 9, "'has space'"),
                Malformed::lease(15, "not a node name as the previous owner"),
            ),
            (
                released(16, 10, "'n1,n2'"),
                Malformed::lease(16, "not a node name as the node handed to"),
            ),
            (
                released(4_294_967_296, 0, "4294967296"),
                Malformed::new(
                    Listed::Leases,
                    RecordKey::Stored("lease 4294967296".to_owned()),
                    "a partition beyond u32",
                ),
            ),
        ];
        let mut members = vec![
            (
                healthy("bad-weight", 1, "4294967296"),
                member("bad-weight", "a weight beyond u32"),
            ),
            (
                healthy("bad-heartbeat", 4, "-1"),
                member("bad-heartbeat", "a negative heartbeat"),
            ),
            (
                healthy("bad-validity", 6, "-1"),
                member("bad-validity", "a negative lease_validity_ns"),
            ),
            (
                healthy("bad-after", 7, "-30000000000"),
                member("bad-after", "a negative acquire_after_ns"),
            ),
            (
                healthy("bad-cap", 11, "-1"),
                member("bad-cap", "a negative partition cap"),
            ),
            (
                healthy("big-cap", 11, "4294967296"),
                member("big-cap", "a partition cap beyond u32"),
            ),
            (
                healthy("bad-metadata", 13, "'{not json'"),
                member("bad-metadata", "metadata that is not JSON"),
            ),
            (
                healthy("bad-labels", 13, r#"'{"zone": 1}'"#),
                member("bad-labels", "a number as a metadata value"),
            ),
            (
                healthy("bad name", 0, "'bad name'"),
                Malformed::new(
                    Listed::Members,
                    RecordKey::Stored("member bad name".to_owned()),
                    "a name that is not a node name",
                ),
            ),
        ];
        if self.nulls {
            for (partition, (column, name)) in (20_u32..).zip([
                (3, "state"),
                (2, "epoch"),
                (4, "prohibited"),
                (8, "version"),
            ]) {
                let damage = format!("NULL {name}");
                leases.push((
                    released(u64::from(partition), column, "NULL"),
                    Malformed::lease(partition, damage),
                ));
            }
            for (column, name) in [(1, "weight"), (2, "draining"), (4, "heartbeat")] {
                let node = format!("null-{name}");
                members.push((
                    healthy(&node, column, "NULL"),
                    member(&node, &format!("NULL {name}")),
                ));
            }
        }
        let mut malformed = Vec::new();
        for (values, damage) in leases {
            self.insert(group, "leases", LEASE_COLUMNS, &values).await?;
            malformed.push(damage);
        }
        for (values, damage) in members {
            self.insert(group, "members", MEMBER_COLUMNS, &values)
                .await?;
            malformed.push(damage);
        }
        Ok(malformed)
    }
}
