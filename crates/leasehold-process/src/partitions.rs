//! The group's partition count at start-up: read from the lease table, or checked against
//! it, and the missing records built out while the group is still unused.

use std::fmt;

use anyhow::Context;
use leasehold::{admin, GroupName, LeaseStore};

/// What a process expects of its group's partition count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionCount {
    /// Whatever the table holds; a group without records is an error.
    FromTable,
    /// Exactly this many; a group without records is an error.
    Exactly(u32),
    /// Exactly this many, creating the records missing while the group is unused (every
    /// record still at epoch 0): nodes started together on a new table can each finish the
    /// build-out, but a group in use is never grown behind its users' back.
    CreateUpTo(u32),
}

/// A partition count the group does not have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CountMismatch {
    /// The group has no lease records, and creating them was not asked for.
    NoSuchGroup(GroupName),
    /// The group has `existing` partitions where `asked` were asked for (and it cannot grow:
    /// it is in use, or growing it was not asked for).
    Differs {
        /// The group.
        group: GroupName,
        /// The partitions it has.
        existing: u32,
        /// The partitions asked for.
        asked: u32,
    },
}

impl fmt::Display for CountMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CountMismatch::NoSuchGroup(group) => write!(
                f,
                "group {group} does not exist; give its partition count to create it, or run \
                 `leasehold init`"
            ),
            CountMismatch::Differs {
                group,
                existing,
                asked,
            } => write!(
                f,
                "group {group} has {existing} partitions, but {asked} were asked for"
            ),
        }
    }
}

impl std::error::Error for CountMismatch {}

/// The group's partition count, as `expected` says it must be; creates missing records if
/// it allows.
pub(crate) async fn partition_count(
    store: &dyn LeaseStore,
    group: &GroupName,
    expected: PartitionCount,
) -> anyhow::Result<u32> {
    let listing = store
        .list_leases(group)
        .await
        .with_context(|| format!("cannot list the leases of group {group}"))?;
    let existing = listing.partition_count();
    let (partitions, create) = match expected {
        PartitionCount::FromTable => {
            if existing == 0 {
                return Err(CountMismatch::NoSuchGroup(group.clone()).into());
            }
            return Ok(existing);
        }
        PartitionCount::Exactly(partitions) => (partitions, false),
        PartitionCount::CreateUpTo(partitions) => (partitions, true),
    };
    if existing == 0 && !create {
        anyhow::bail!("group {group} does not exist; create its {partitions} lease records first");
    }
    if existing > partitions
        || (existing < partitions && existing > 0 && (listing.in_use() || !create))
    {
        anyhow::bail!("group {group} has {existing} partitions, but {partitions} were asked for");
    }
    if listing.len() < partitions as usize {
        let outcome = admin::init_listed(store, group, partitions, &listing).await?;
        tracing::info!(%group, created = outcome.created, "created lease records");
    }
    Ok(partitions)
}

#[cfg(test)]
mod tests {
    use leasehold::MemoryStore;

    use super::*;

    #[tokio::test]
    async fn records_are_built_out_only_where_asked_and_only_while_unused() {
        let store = MemoryStore::new();
        let group: GroupName = "g".parse().unwrap();
        let error = partition_count(&store, &group, PartitionCount::FromTable)
            .await
            .unwrap_err();
        assert!(error.to_string().contains("does not exist"), "{error:#}");
        let error = partition_count(&store, &group, PartitionCount::Exactly(4))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("does not exist"), "{error:#}");

        let created = partition_count(&store, &group, PartitionCount::CreateUpTo(4)).await;
        assert_eq!(created.unwrap(), 4);
        let read = partition_count(&store, &group, PartitionCount::FromTable).await;
        assert_eq!(read.unwrap(), 4);
        let checked = partition_count(&store, &group, PartitionCount::Exactly(4)).await;
        assert_eq!(checked.unwrap(), 4);
        // Unused, it may still grow; asked for fewer, it refuses.
        let grown = partition_count(&store, &group, PartitionCount::CreateUpTo(6)).await;
        assert_eq!(grown.unwrap(), 6);
        for expected in [PartitionCount::Exactly(5), PartitionCount::CreateUpTo(5)] {
            let error = partition_count(&store, &group, expected).await.unwrap_err();
            assert!(error.to_string().contains("has 6 partitions"), "{error:#}");
        }
        let error = partition_count(&store, &group, PartitionCount::Exactly(8))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("has 6 partitions"), "{error:#}");
    }
}
