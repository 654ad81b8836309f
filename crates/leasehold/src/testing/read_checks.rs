//! Checks of reading several lease records in one call ([`LeaseStore::get_leases`]), which
//! a starting node uses to read its stripe and a node to read back what it holds.

use std::sync::Arc;

use crate::store::{LeaseStore, PutMode};
use crate::types::PartitionId;

use super::checks::{create, held_by};
use super::unique_group;

/// A batched read answers exactly what a get per partition would, in the order asked:
/// records written and updated, `None` for partitions without one, a partition asked twice
/// answered twice, more partitions than one group of reads, and nothing for nothing.
pub async fn batched_reads_answer_as_gets_do(store: Arc<dyn LeaseStore>) {
    let group = unique_group("conf-batch-read");
    for partition in (0..70).filter(|p| p % 5 != 0) {
        let version = create(&*store, &group, partition).await;
        if partition % 3 == 0 {
            let record = held_by("n1", u64::from(partition));
            store
                .put_lease(
                    &group,
                    PartitionId(partition),
                    &record,
                    PutMode::Update(version),
                )
                .await
                .unwrap_or_else(|e| panic!("update {partition}: {e}"));
        }
    }
    let mut asked: Vec<PartitionId> = (0..75).rev().map(PartitionId).collect();
    asked.extend([PartitionId(7), PartitionId(1_000_000), PartitionId(7)]);
    let read = store
        .get_leases(&group, &asked)
        .await
        .expect("batched read");
    let partitions: Vec<PartitionId> = read.iter().map(|(partition, _)| *partition).collect();
    assert_eq!(
        partitions, asked,
        "one answer per partition asked, in order"
    );
    for (partition, record) in &read {
        let single = store.get_lease(&group, *partition).await.expect("get");
        assert_eq!(record, &single, "partition {partition}: as a get reads it");
    }
    let found = read.iter().filter(|(_, record)| record.is_some()).count();
    assert_eq!(found, 56 + 2, "56 records, partition 7 twice");
    let none = store.get_leases(&group, &[]).await.expect("empty read");
    assert!(none.is_empty(), "{none:?}");
}
