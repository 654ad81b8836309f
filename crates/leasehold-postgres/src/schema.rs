//! The tables the store keeps, created and versioned by the store itself.
//!
//! `<prefix>_schema` holds one row with the version of the layout below. A store creates the
//! layout when the row is missing, uses it when the version is one it knows, and refuses to
//! touch a newer one, so an old binary cannot damage tables a newer release has changed.

use leasehold::StoreError;
use tokio_postgres::{Client, GenericClient, Transaction};

use crate::error::map_error;

/// The layout version this release creates and understands.
pub const SCHEMA_VERSION: i32 = 6;

/// `MIGRATIONS[n]` takes a layout from version `n` to `n + 1`; version 0 is no layout.
const MIGRATIONS: [fn(&Names) -> String; SCHEMA_VERSION as usize] = [
    Names::layout_v1,
    Names::migrate_to_v2,
    Names::migrate_to_v3,
    Names::migrate_to_v4,
    Names::migrate_to_v5,
    Names::migrate_to_v6,
];

/// The names of the objects of one store, from its table prefix.
#[derive(Debug, Clone)]
pub(crate) struct Names {
    pub(crate) prefix: String,
    pub(crate) leases: String,
    pub(crate) members: String,
    pub(crate) groups: String,
    pub(crate) schema: String,
    pub(crate) sequence: String,
    pub(crate) channel: String,
}

impl Names {
    /// Names under `prefix`, which [`PostgresOptions::validate`](crate::PostgresOptions)
    /// has checked to be a plain lowercase identifier, safe to write into SQL.
    pub(crate) fn new(prefix: &str) -> Names {
        Names {
            prefix: prefix.to_owned(),
            leases: format!("{prefix}_leases"),
            members: format!("{prefix}_members"),
            groups: format!("{prefix}_groups"),
            schema: format!("{prefix}_schema"),
            sequence: format!("{prefix}_version"),
            channel: format!("{prefix}_changes"),
        }
    }

    /// Version 1. Versions come from one sequence, so a row deleted and created again never
    /// gets a version it had before. Triggers announce every change on the channel as
    /// `<group> lease <partition>` or `<group> member <node>`, whoever made it.
    fn layout_v1(&self) -> String {
        let Names {
            prefix,
            leases,
            members,
            sequence,
            channel,
            ..
        } = self;
        format!(
            "CREATE SEQUENCE {sequence};
             CREATE TABLE {leases} (
                 grp text NOT NULL,
                 partition bigint NOT NULL CHECK (partition >= 0),
                 owner text,
                 epoch bigint NOT NULL,
                 state text NOT NULL,
                 prohibited text[] NOT NULL DEFAULT '{{}}',
                 load double precision,
                 note text,
                 written_at_unix_ms bigint,
                 version bigint NOT NULL,
                 PRIMARY KEY (grp, partition));
             CREATE TABLE {members} (
                 grp text NOT NULL,
                 node text COLLATE \"C\" NOT NULL,
                 weight bigint NOT NULL,
                 draining boolean NOT NULL,
                 load double precision,
                 heartbeat bigint NOT NULL,
                 written_at_unix_ms bigint,
                 version bigint NOT NULL,
                 PRIMARY KEY (grp, node));
             CREATE FUNCTION {prefix}_lease_changed() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF TG_OP = 'DELETE' THEN
                     PERFORM pg_notify('{channel}', OLD.grp || ' lease ' || OLD.partition);
                 ELSE
                     PERFORM pg_notify('{channel}', NEW.grp || ' lease ' || NEW.partition);
                 END IF;
                 RETURN NULL;
             END $$;
             CREATE FUNCTION {prefix}_member_changed() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF TG_OP = 'DELETE' THEN
                     PERFORM pg_notify('{channel}', OLD.grp || ' member ' || OLD.node);
                 ELSE
                     PERFORM pg_notify('{channel}', NEW.grp || ' member ' || NEW.node);
                 END IF;
                 RETURN NULL;
             END $$;
             CREATE TRIGGER {prefix}_lease_changed AFTER INSERT OR UPDATE OR DELETE ON {leases}
                 FOR EACH ROW EXECUTE FUNCTION {prefix}_lease_changed();
             CREATE TRIGGER {prefix}_member_changed AFTER INSERT OR UPDATE OR DELETE ON {members}
                 FOR EACH ROW EXECUTE FUNCTION {prefix}_member_changed();"
        )
    }
}

impl Names {
    /// Version 2: notifications say what they know, `<group> lease <partition> <state>` and
    /// `<group> member <node> <insert|update|delete>`, so listeners can skip renewals and
    /// heartbeats.
    fn migrate_to_v2(&self) -> String {
        let Names {
            prefix, channel, ..
        } = self;
        format!(
            "CREATE OR REPLACE FUNCTION {prefix}_lease_changed() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF TG_OP = 'DELETE' THEN
                     PERFORM pg_notify('{channel}', OLD.grp || ' lease ' || OLD.partition);
                 ELSE
                     PERFORM pg_notify('{channel}', NEW.grp || ' lease ' || NEW.partition || ' ' || NEW.state);
                 END IF;
                 RETURN NULL;
             END $$;
             CREATE OR REPLACE FUNCTION {prefix}_member_changed() RETURNS trigger LANGUAGE plpgsql AS $$
             BEGIN
                 IF TG_OP = 'DELETE' THEN
                     PERFORM pg_notify('{channel}', OLD.grp || ' member ' || OLD.node || ' delete');
                 ELSE
                     PERFORM pg_notify('{channel}', NEW.grp || ' member ' || NEW.node || ' ' || lower(TG_OP));
                 END IF;
                 RETURN NULL;
             END $$;"
        )
    }

    /// Version 3: one group record per group, kept whole as the JSON text it was written as
    /// so that fields of newer versions survive, with a version from the same sequence; and
    /// the timings each member publishes, in whole nanoseconds, NULL in rows written before.
    /// Group records change rarely and nobody waits on them, so no trigger announces them.
    fn migrate_to_v3(&self) -> String {
        let Names {
            members, groups, ..
        } = self;
        format!(
            "CREATE TABLE {groups} (
                 grp text PRIMARY KEY,
                 record text NOT NULL,
                 version bigint NOT NULL);
             ALTER TABLE {members}
                 ADD COLUMN lease_validity_ns bigint,
                 ADD COLUMN acquire_after_ns bigint;"
        )
    }

    /// Version 4: the node that held a partition before, and what members publish about
    /// themselves for balancing and routing: capacity, maximum load, partition cap, address,
    /// and metadata as the text of a JSON object (NULL when empty), so that it reads back
    /// exactly as written. Every column is nullable, NULL in rows written before. The
    /// triggers send nothing from these columns, so they stay as they are.
    fn migrate_to_v4(&self) -> String {
        let Names {
            leases, members, ..
        } = self;
        format!(
            "ALTER TABLE {leases}
                 ADD COLUMN previous_owner text;
             ALTER TABLE {members}
                 ADD COLUMN capacity double precision,
                 ADD COLUMN max_load double precision,
                 ADD COLUMN max_partitions bigint,
                 ADD COLUMN address text,
                 ADD COLUMN metadata text;"
        )
    }

    /// Version 5: the node a released partition is handed to, NULL in rows written before
    /// (handed to no one). Nothing waits on it apart from the lease state the triggers
    /// already send, so they stay as they are.
    fn migrate_to_v5(&self) -> String {
        let Names { leases, .. } = self;
        format!("ALTER TABLE {leases} ADD COLUMN handed_to text;")
    }

    /// Version 6: the session a lease is held in, and the session of each member with the
    /// stamp of the session it replaced, NULL in rows written before (no session). A session is any `u64`, kept as the `bigint` of the
    /// same 64 bits, so one above `i64::MAX` reads as negative in `psql`. A member's new
    /// session is announced as the update of its row it is, and a lease's changes with its
    /// state, so the triggers stay as they are.
    fn migrate_to_v6(&self) -> String {
        let Names {
            leases, members, ..
        } = self;
        format!(
            "ALTER TABLE {leases} ADD COLUMN session bigint;
             ALTER TABLE {members} ADD COLUMN session bigint, ADD COLUMN replaced bigint;"
        )
    }
}

/// Creates the layout if it is missing, upgrades an older one in place, and refuses a newer.
///
/// Runs in one transaction under an advisory lock, so processes starting together create or
/// upgrade the tables once. A layout already current is seen without the lock: every
/// connection checks it when it opens, and a fleet restarting together opens hundreds at
/// once, which would otherwise wait on one another for a lock none of them needs.
pub(crate) async fn ensure(
    client: &mut Client,
    names: &Names,
    statement_timeout: std::time::Duration,
) -> Result<(), StoreError> {
    let fail = |e| map_error("prepare the schema", statement_timeout, e);
    if layout_version(client, names).await.map_err(fail)? == Some(Some(SCHEMA_VERSION)) {
        return Ok(());
    }
    let transaction = client.transaction().await.map_err(fail)?;
    transaction
        .execute(
            "SELECT pg_advisory_xact_lock(hashtext($1)::bigint)",
            &[&names.schema],
        )
        .await
        .map_err(fail)?;
    let version = recorded_version(&transaction, names).await.map_err(fail)?;
    let from = match version {
        None => 0,
        Some(SCHEMA_VERSION) => return transaction.commit().await.map_err(fail),
        Some(known @ 1..SCHEMA_VERSION) => known,
        Some(other) => {
            return Err(StoreError::Invalid(format!(
            "table {} says schema version {other}; this release knows only up to {SCHEMA_VERSION}",
            names.schema
        )))
        }
    };
    let mut steps: Vec<String> = MIGRATIONS
        .iter()
        .skip(usize::try_from(from).unwrap_or(MIGRATIONS.len()))
        .map(|migration| migration(names))
        .collect();
    steps.push(if version.is_none() {
        format!(
            "INSERT INTO {} (version) VALUES ({SCHEMA_VERSION})",
            names.schema
        )
    } else {
        format!("UPDATE {} SET version = {SCHEMA_VERSION}", names.schema)
    });
    for step in steps {
        transaction.batch_execute(&step).await.map_err(fail)?;
    }
    transaction.commit().await.map_err(fail)?;
    if from > 0 {
        tracing::info!(
            schema = %names.schema,
            from,
            to = SCHEMA_VERSION,
            "leasehold layout upgraded"
        );
    }
    Ok(())
}

/// The schema table's recorded version: `None` without the table, `Some(None)` while it is
/// empty. Reads what is committed, taking no lock.
async fn layout_version(
    client: &impl GenericClient,
    names: &Names,
) -> Result<Option<Option<i32>>, tokio_postgres::Error> {
    let exists: bool = client
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&names.schema])
        .await?
        .try_get(0)?;
    if !exists {
        return Ok(None);
    }
    let query = format!("SELECT version FROM {}", names.schema);
    let row = client.query_opt(&query, &[]).await?;
    row.map(|row| row.try_get(0)).transpose().map(Some)
}

/// The layout version the schema table records, creating the table (empty) if it is missing.
async fn recorded_version(
    transaction: &Transaction<'_>,
    names: &Names,
) -> Result<Option<i32>, tokio_postgres::Error> {
    if let Some(version) = layout_version(transaction, names).await? {
        return Ok(version);
    }
    let create = format!(
        "CREATE TABLE {} (
             singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
             version integer NOT NULL)",
        names.schema
    );
    transaction.batch_execute(&create).await?;
    Ok(None)
}
