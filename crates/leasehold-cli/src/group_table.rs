//! A group's table in an opened store: what every command that reads or changes records
//! opens first.

use std::sync::Arc;

use anyhow::Context;
use leasehold::admin::AdminError;
use leasehold::{GroupName, LeaseStore, Listing, StoredLease, TimeoutStore};

use crate::cli::Cli;
use leasehold_process::store_url;

/// A group's table in an opened store, every call bounded by `--timeout`.
pub struct GroupTable {
    /// The store.
    pub store: Arc<dyn LeaseStore>,
    /// The group.
    pub group: GroupName,
}

impl GroupTable {
    /// Opens `--store` for the group named by `--group`.
    pub async fn open(cli: &Cli) -> anyhow::Result<GroupTable> {
        let store = store_url::open(&cli.store_url()?, cli.timeout).await?;
        Ok(GroupTable {
            store: Arc::new(TimeoutStore::new(store, cli.timeout)),
            group: cli.group.clone(),
        })
    }

    /// Opens `--store` for the group named by `--group`, trying again with back-off while the
    /// store cannot be reached, for a long-running command; `None` if SIGTERM or SIGINT came
    /// first.
    pub async fn open_waiting(cli: &Cli) -> anyhow::Result<Option<GroupTable>> {
        let wait = leasehold_process::StoreWait::default();
        let opened = leasehold_process::open_waiting(&cli.store_url()?, cli.timeout, &wait).await?;
        Ok(opened.map(|store| GroupTable {
            store: Arc::new(TimeoutStore::new(store, cli.timeout)),
            group: cli.group.clone(),
        }))
    }

    /// Every lease record of the group.
    pub async fn leases(&self) -> anyhow::Result<Listing<StoredLease>> {
        self.store
            .list_leases(&self.group)
            .await
            .with_context(|| format!("cannot list the leases of group {}", self.group))
    }

    /// Turns "no such partition" into "no such group" when the group has no records at
    /// all, and otherwise says which partitions exist.
    pub async fn explain(&self, error: AdminError) -> anyhow::Error {
        let is_partition = match &error {
            AdminError::NoSuchPartition { .. } => true,
            AdminError::NoSuchNode { .. } => false,
            _ => return error.into(),
        };
        match self.leases().await.map(|listing| listing.partition_count()) {
            Ok(0) => AdminError::NoSuchGroup(self.group.clone()).into(),
            Ok(count) if is_partition => {
                anyhow::anyhow!("{error}; it has partitions 0 to {}", count - 1)
            }
            _ => error.into(),
        }
    }
}
