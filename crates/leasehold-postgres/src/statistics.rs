//! What the server counted for the store's own tables (`pg_stat_user_tables`): rows
//! inserted, updated, deleted and read, for measuring what a fleet costs the database.

use crate::store::PostgresStore;
use leasehold::StoreError;

/// The server's counts for the store's tables (leases, members, groups), since its
/// statistics were last reset. The server publishes them with a delay of up to a second or
/// so; compare two readings taken minutes apart.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TableStatistics {
    /// Rows inserted.
    pub inserted: u64,
    /// Rows updated (a compare-and-set that matched).
    pub updated: u64,
    /// Rows deleted.
    pub deleted: u64,
    /// Rows read by sequential scans and fetched through indexes.
    pub read: u64,
}

impl TableStatistics {
    /// What was counted between `earlier` and this reading.
    pub fn since(self, earlier: TableStatistics) -> TableStatistics {
        TableStatistics {
            inserted: self.inserted.saturating_sub(earlier.inserted),
            updated: self.updated.saturating_sub(earlier.updated),
            deleted: self.deleted.saturating_sub(earlier.deleted),
            read: self.read.saturating_sub(earlier.read),
        }
    }
}

impl PostgresStore {
    /// The server's counts for this store's tables ([`TableStatistics`]).
    pub async fn table_statistics(&self) -> Result<TableStatistics, StoreError> {
        let tables = self.table_names();
        let query =
            "SELECT coalesce(sum(n_tup_ins), 0)::bigint, coalesce(sum(n_tup_upd), 0)::bigint,
                    coalesce(sum(n_tup_del), 0)::bigint,
                    coalesce(sum(coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0)), 0)::bigint
             FROM pg_stat_user_tables WHERE relname = ANY($1)";
        let row = self
            .bounded(async {
                let session = self.session().await?;
                session
                    .client
                    .query_one(query, &[&tables])
                    .await
                    .map_err(self.fail("read the table statistics"))
            })
            .await?;
        let count = |index: usize| u64::try_from(row.get::<_, i64>(index)).unwrap_or(0);
        Ok(TableStatistics {
            inserted: count(0),
            updated: count(1),
            deleted: count(2),
            read: count(3),
        })
    }
}
