//! The store server's own counts of the rows the fleet wrote and read, where the store has
//! them: PostgreSQL's `pg_stat_user_tables` for the store's tables.

use leasehold_process::StoreUrl;
use serde::Serialize;

/// Rows the server counted over a stretch of the run, per second.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ServerRows {
    /// How long the stretch lasted.
    pub seconds: f64,
    /// Rows inserted per second.
    pub inserted: f64,
    /// Rows updated per second.
    pub updated: f64,
    /// Rows deleted per second.
    pub deleted: f64,
    /// Rows read per second.
    pub read: f64,
}

/// A connection that reads the server's counts.
pub struct ServerCounts {
    #[cfg(feature = "postgres")]
    store: leasehold_postgres::PostgresStore,
}

/// One reading: rows inserted, updated, deleted and read so far.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reading([u64; 4]);

impl ServerCounts {
    /// A reader for `url`'s server, if it is one that counts (PostgreSQL) and answers.
    pub async fn open(url: &StoreUrl) -> Option<ServerCounts> {
        match url {
            #[cfg(feature = "postgres")]
            StoreUrl::Postgres(options) => {
                let options = options.as_ref().clone().with_env().ok()?;
                let store = leasehold_postgres::PostgresStore::connect(options)
                    .await
                    .ok()?;
                Some(ServerCounts { store })
            }
            _ => None,
        }
    }

    /// The counts now; `None` if the server did not answer.
    pub async fn read(&self) -> Option<Reading> {
        #[cfg(feature = "postgres")]
        {
            let c = self.store.table_statistics().await.ok()?;
            Some(Reading([c.inserted, c.updated, c.deleted, c.read]))
        }
        #[cfg(not(feature = "postgres"))]
        None
    }
}

impl Reading {
    /// The rows per second from `earlier` to this reading, `seconds` apart.
    pub fn rate_since(&self, earlier: &Reading, seconds: f64) -> ServerRows {
        let per_second = |index: usize| {
            let count = self.0[index].saturating_sub(earlier.0[index]);
            if seconds > 0.0 {
                count as f64 / seconds
            } else {
                0.0
            }
        };
        ServerRows {
            seconds,
            inserted: per_second(0),
            updated: per_second(1),
            deleted: per_second(2),
            read: per_second(3),
        }
    }
}
