//! Reading several lease records at once. A node re-reads every lease it holds when its
//! session changed under it, and reads the rows a hand-off names: one get at a time, each
//! waits its turn behind whatever else the store connection carries, and 164 of them can
//! outlast a store call's timeout. Sent together, in groups, they cost about one round trip
//! per group.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use crate::error::StoreError;
use crate::record::StoredLease;
use crate::store::LeaseStore;
use crate::types::{GroupName, PartitionId};

/// Reads in flight at once: enough to hide the round trips, few enough that a node reading
/// back a large share does not flood its store.
const READS_IN_FLIGHT: usize = 32;

/// Each of `partitions`' lease records, `None` for one that is missing, in the order given.
/// Fails with the first error, as a sequence of gets would.
pub(super) async fn read_leases(
    store: &dyn LeaseStore,
    group: &GroupName,
    partitions: &[PartitionId],
) -> Result<Vec<(PartitionId, Option<StoredLease>)>, StoreError> {
    let mut rows = Vec::with_capacity(partitions.len());
    for chunk in partitions.chunks(READS_IN_FLIGHT) {
        let replies = join_in_order(chunk.iter().map(|p| store.get_lease(group, *p))).await;
        for (partition, reply) in chunk.iter().zip(replies) {
            rows.push((*partition, reply?));
        }
    }
    Ok(rows)
}

/// Runs `futures` together and returns their outputs in order. Each is polled in turn at
/// every wake-up, always in the same order, so a simulated run replays exactly.
async fn join_in_order<F: Future>(futures: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    outputs
        .into_iter()
        .map(|output| output.expect("every future is ready"))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::memory::MemoryStore;
    use crate::record::LeaseRecord;
    use crate::store::PutMode;

    /// Fails if the reads come back out of order, lose a record, invent one for a missing
    /// partition, or stop at the first group.
    #[tokio::test]
    async fn every_record_comes_back_in_the_order_asked() {
        let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
        let group = GroupName::new("reads").unwrap();
        for p in (0..100).filter(|p| p % 3 != 0) {
            store
                .put_lease(
                    &group,
                    PartitionId(p),
                    &LeaseRecord::released(),
                    PutMode::Create,
                )
                .await
                .unwrap();
        }
        let asked: Vec<PartitionId> = (0..100).rev().map(PartitionId).collect();
        let rows = read_leases(&*store, &group, &asked).await.unwrap();
        let got: Vec<(u32, bool)> = rows.iter().map(|(p, r)| (p.0, r.is_some())).collect();
        let expected: Vec<(u32, bool)> = (0..100).rev().map(|p| (p, p % 3 != 0)).collect();
        assert_eq!(got, expected);
        assert!(rows
            .iter()
            .all(|(p, r)| r.as_ref().is_none_or(|stored| stored.key == *p)));
    }
}
