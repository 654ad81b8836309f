//! The PostgreSQL side: the state the events build, the fencing check that guards it, and
//! the log the checker reads.

use std::time::Duration;

use anyhow::{bail, Context};
use leasehold::{Epoch, PartitionId};
use tokio_postgres::{Client, NoTls};

use crate::event::Event;

/// How long to wait for PostgreSQL to accept a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest schema name accepted (PostgreSQL's identifier limit is 63 bytes).
const MAX_SCHEMA_BYTES: usize = 63;

/// What applying one event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The event was the order's next one and is now applied.
    Applied,
    /// The order is already past this event: a redelivery of one applied before.
    Duplicate,
    /// An earlier event of the order has not been applied yet; nothing was written.
    Gap {
        /// The order's last applied sequence number.
        last_seq: u32,
    },
    /// A newer tenure of the partition has written already: this writer's epoch is stale and
    /// nothing was written.
    Stale {
        /// The epoch recorded for the partition.
        stored: u64,
    },
}

/// A connection to the database, with the example's tables in `schema`.
pub struct Ledger {
    client: Client,
    /// Turns the sequence check off: the test's negative control for idempotency.
    unsafe_skip_sequence_check: bool,
    /// Turns the epoch check off: the test's negative control for fencing.
    unsafe_skip_epoch_check: bool,
}

/// Checks `schema` is a plain lower-case identifier, so it can be spliced into SQL.
fn check_schema(schema: &str) -> anyhow::Result<()> {
    let valid = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    if schema.is_empty()
        || schema.len() > MAX_SCHEMA_BYTES
        || !schema.chars().all(valid)
        || schema.starts_with(|c: char| c.is_ascii_digit())
    {
        bail!("schema {schema:?} must be 1 to {MAX_SCHEMA_BYTES} of a-z, 0-9 and '_', not starting with a digit");
    }
    Ok(())
}

fn to_i64(value: u64, what: &str) -> anyhow::Result<i64> {
    i64::try_from(value).with_context(|| format!("{what} {value} does not fit PostgreSQL's bigint"))
}

impl Ledger {
    /// Connects to `url` and creates the tables in `schema` if they are missing.
    pub async fn connect(url: &str, schema: &str) -> anyhow::Result<Ledger> {
        check_schema(schema)?;
        let (client, connection) =
            tokio::time::timeout(CONNECT_TIMEOUT, tokio_postgres::connect(url, NoTls))
                .await
                .context("PostgreSQL did not answer in time")?
                .context("cannot connect to PostgreSQL")?;
        // The connection future drives the socket; it ends when the client is dropped.
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "PostgreSQL connection ended");
            }
        });
        // Several consumers may start at once: a lost race on CREATE ... IF NOT EXISTS is a
        // unique violation, retried once the winner has committed.
        let setup = format!(
            "SET client_min_messages TO warning;
             CREATE SCHEMA IF NOT EXISTS {schema};
             SET search_path TO {schema};
             CREATE TABLE IF NOT EXISTS order_state (
                 order_id bigint PRIMARY KEY, last_seq bigint NOT NULL);
             CREATE TABLE IF NOT EXISTS partition_epoch (
                 partition bigint PRIMARY KEY, epoch bigint NOT NULL);
             CREATE TABLE IF NOT EXISTS apply_log (
                 id bigserial PRIMARY KEY, order_id bigint NOT NULL, seq bigint NOT NULL,
                 partition bigint NOT NULL, epoch bigint NOT NULL, consumer text NOT NULL,
                 applied_at timestamptz NOT NULL DEFAULT clock_timestamp());
             CREATE TABLE IF NOT EXISTS stale_refusals (
                 id bigserial PRIMARY KEY, partition bigint NOT NULL, epoch bigint NOT NULL,
                 stored_epoch bigint NOT NULL, consumer text NOT NULL,
                 refused_at timestamptz NOT NULL DEFAULT clock_timestamp());"
        );
        let mut attempts = 0;
        loop {
            match client.batch_execute(&setup).await {
                Ok(()) => break,
                Err(error) if attempts < 5 => {
                    attempts += 1;
                    tracing::debug!(%error, "creating the tables raced another consumer; retrying");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => return Err(error).context("cannot create the example's tables"),
            }
        }
        Ok(Ledger {
            client,
            unsafe_skip_sequence_check: false,
            unsafe_skip_epoch_check: false,
        })
    }

    /// Disables the checks named: for demonstrating what each one prevents, never otherwise.
    pub fn unsafe_disable_checks(&mut self, sequence: bool, epoch: bool) {
        self.unsafe_skip_sequence_check = sequence;
        self.unsafe_skip_epoch_check = epoch;
    }

    /// Applies `event` of `partition` under fencing token `epoch`, in one transaction: first
    /// the epoch check (the partition's recorded epoch may only stay or rise, so a writer
    /// whose tenure has been superseded writes nothing), then the order's sequence check.
    pub async fn apply(
        &mut self,
        partition: PartitionId,
        epoch: Epoch,
        event: Event,
        consumer: &str,
    ) -> anyhow::Result<Outcome> {
        let partition_number = i64::from(partition.0);
        let epoch_number = to_i64(epoch.0, "epoch")?;
        let transaction = self.client.transaction().await?;
        // The row lock taken here also serialises every transaction on the partition, so the
        // sequence check below cannot race another writer of the same orders.
        let fenced = transaction
            .query_opt(
                "INSERT INTO partition_epoch AS p (partition, epoch) VALUES ($1, $2)
                 ON CONFLICT (partition) DO UPDATE SET epoch = EXCLUDED.epoch
                     WHERE p.epoch <= EXCLUDED.epoch OR $3
                 RETURNING epoch",
                &[
                    &partition_number,
                    &epoch_number,
                    &self.unsafe_skip_epoch_check,
                ],
            )
            .await?;
        if fenced.is_none() {
            transaction.rollback().await?;
            let stored: i64 = self
                .client
                .query_one(
                    "SELECT epoch FROM partition_epoch WHERE partition = $1",
                    &[&partition_number],
                )
                .await?
                .get(0);
            self.client
                .execute(
                    "INSERT INTO stale_refusals (partition, epoch, stored_epoch, consumer)
                     VALUES ($1, $2, $3, $4)",
                    &[&partition_number, &epoch_number, &stored, &consumer],
                )
                .await?;
            return Ok(Outcome::Stale {
                stored: u64::try_from(stored).unwrap_or(0),
            });
        }
        let order = i64::from(event.order);
        let seq = i64::from(event.seq);
        let last_seq: i64 = transaction
            .query_opt(
                "SELECT last_seq FROM order_state WHERE order_id = $1 FOR UPDATE",
                &[&order],
            )
            .await?
            .map_or(0, |row| row.get(0));
        if !self.unsafe_skip_sequence_check {
            if seq <= last_seq {
                transaction.rollback().await?;
                return Ok(Outcome::Duplicate);
            }
            if seq > last_seq + 1 {
                transaction.rollback().await?;
                return Ok(Outcome::Gap {
                    last_seq: u32::try_from(last_seq).unwrap_or(u32::MAX),
                });
            }
        }
        transaction
            .execute(
                "INSERT INTO order_state (order_id, last_seq) VALUES ($1, $2)
                 ON CONFLICT (order_id) DO UPDATE SET last_seq = GREATEST(order_state.last_seq, $2)",
                &[&order, &seq],
            )
            .await?;
        transaction
            .execute(
                "INSERT INTO apply_log (order_id, seq, partition, epoch, consumer)
                 VALUES ($1, $2, $3, $4, $5)",
                &[&order, &seq, &partition_number, &epoch_number, &consumer],
            )
            .await?;
        transaction.commit().await?;
        Ok(Outcome::Applied)
    }

    /// Drops `schema` and every table in it.
    pub async fn drop_schema(&self, schema: &str) -> anyhow::Result<()> {
        check_schema(schema)?;
        self.client
            .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await?;
        Ok(())
    }

    /// Reads what the consumers wrote and judges it against `orders` orders of
    /// `events_per_order` events each.
    pub async fn check(&self, orders: u32, events_per_order: u32) -> anyhow::Result<Report> {
        let count = |sql: &'static str| async move {
            let row = self.client.query_one(sql, &[]).await?;
            anyhow::Ok(u64::try_from(row.get::<_, i64>(0)).unwrap_or(0))
        };
        let (orders_number, events_number) = (i64::from(orders), i64::from(events_per_order));
        let applied = count("SELECT count(*) FROM apply_log").await?;
        let duplicates = count(
            "SELECT coalesce(sum(n - 1), 0)::bigint FROM
                (SELECT count(*) AS n FROM apply_log GROUP BY order_id, seq HAVING count(*) > 1) d",
        )
        .await?;
        // An order's events are in sequence when the k-th one applied (in commit order of the
        // log's serial ids, which the partition's row lock makes the apply order) is seq k.
        let out_of_sequence = count(
            "SELECT count(*) FROM (SELECT seq, row_number() OVER
                (PARTITION BY order_id ORDER BY id) AS k FROM apply_log) o WHERE seq <> k",
        )
        .await?;
        let distinct_expected: i64 = self
            .client
            .query_one(
                "SELECT count(*) FROM (SELECT DISTINCT order_id, seq FROM apply_log
                    WHERE order_id >= 0 AND order_id < $1 AND seq >= 1 AND seq <= $2) e",
                &[&orders_number, &events_number],
            )
            .await?
            .get(0);
        let expected = u64::from(orders) * u64::from(events_per_order);
        let stale_refused = count("SELECT count(*) FROM stale_refusals").await?;
        let tenures = count("SELECT count(DISTINCT (partition, epoch)) FROM apply_log").await?;
        // Fencing: in apply order, a partition's epoch never goes back, so no write of a
        // superseded tenure landed after a newer tenure's.
        let epoch_regressions = count(
            "SELECT count(*) FROM (SELECT epoch, max(epoch) OVER (PARTITION BY partition
                ORDER BY id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before
                FROM apply_log) r WHERE epoch < before",
        )
        .await?;
        let span: f64 = self
            .client
            .query_one(
                "SELECT coalesce(extract(epoch FROM max(applied_at) - min(applied_at)), 0)::float8
                 FROM apply_log",
                &[],
            )
            .await?
            .get(0);
        Ok(Report {
            expected,
            applied,
            missing: expected.saturating_sub(u64::try_from(distinct_expected).unwrap_or(0)),
            duplicates,
            out_of_sequence,
            stale_refused,
            tenures,
            epoch_regressions,
            apply_span: Duration::from_secs_f64(span.max(0.0)),
        })
    }
}

/// What the checker found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Report {
    /// Events the producer published.
    pub expected: u64,
    /// Rows in the apply log.
    pub applied: u64,
    /// Published events never applied.
    pub missing: u64,
    /// Applications beyond the first of one event.
    pub duplicates: u64,
    /// Applications out of their order's sequence.
    pub out_of_sequence: u64,
    /// Writes the epoch check refused.
    pub stale_refused: u64,
    /// Distinct (partition, epoch) tenures that applied at least one event.
    pub tenures: u64,
    /// Applications under an epoch lower than one already applied on the same partition.
    pub epoch_regressions: u64,
    /// From the first application to the last.
    pub apply_span: Duration,
}

impl Report {
    /// Every event applied exactly once, in sequence.
    pub fn complete_and_exact(&self) -> bool {
        self.missing == 0
            && self.duplicates == 0
            && self.out_of_sequence == 0
            && self.epoch_regressions == 0
            && self.applied == self.expected
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "expected {} applied {} missing {} duplicates {} out_of_sequence {} \
             epoch_regressions {} stale_refused {} tenures {} apply_span {:.1}s",
            self.expected,
            self.applied,
            self.missing,
            self.duplicates,
            self.out_of_sequence,
            self.epoch_regressions,
            self.stale_refused,
            self.tenures,
            self.apply_span.as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_checked() {
        assert!(check_schema("pq_test_1").is_ok());
        for bad in ["", "1abc", "a;drop", "Upper", &"a".repeat(64)] {
            assert!(check_schema(bad).is_err(), "{bad:?}");
        }
    }
}
