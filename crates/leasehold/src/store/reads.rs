//! Reading several lease records in one call ([`LeaseStore::get_leases`]). A node reads its
//! own stripe when it starts, every lease it holds when its session changed under it, and
//! the rows a hand-off names: one get at a time, each waits its turn behind whatever else
//! the store connection carries, and 164 of them can outlast a store call's timeout. Sent
//! together, in groups, they cost about one round trip per group, and a store that reads
//! many rows in one request (PostgreSQL's `= ANY`) makes each group a single request.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use super::LeaseStore;
use crate::error::StoreError;
use crate::record::StoredLease;
use crate::types::{GroupName, PartitionId};

/// Records read in one group: by the default [`LeaseStore::get_leases`], gets in flight at
/// once; by [`TimeoutStore`](super::TimeoutStore), the partitions of each bounded call.
/// Enough to hide the round trips, few enough that a node reading back a large share does
/// not flood its store.
pub const READS_PER_GROUP: usize = 32;

/// The lease records of `partitions` read with [`LeaseStore::get_lease`],
/// [`READS_PER_GROUP`] at a time: what [`LeaseStore::get_leases`] does unless a store
/// overrides it.
pub(crate) async fn get_each<S: LeaseStore + ?Sized>(
    store: &S,
    group: &GroupName,
    partitions: &[PartitionId],
) -> Result<Vec<(PartitionId, Option<StoredLease>)>, StoreError> {
    let mut rows = Vec::with_capacity(partitions.len());
    for chunk in partitions.chunks(READS_PER_GROUP) {
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

/// Puts the records a store read in one request (`found`, in any order) in the order of
/// `partitions`, `None` for each one not found: for stores that override
/// [`LeaseStore::get_leases`]. A record that could not be decoded fails the whole read with
/// its error, the first in the order asked, as a sequence of gets would.
///
/// ```
/// use leasehold::reads::in_order_asked;
/// use leasehold::{PartitionId, StoreError};
///
/// let asked = [PartitionId(3), PartitionId(1), PartitionId(2)];
/// let found = vec![(PartitionId(1), Ok("one")), (PartitionId(3), Ok("three"))];
/// let rows = in_order_asked(&asked, found).unwrap();
/// assert_eq!(
///     rows,
///     vec![(PartitionId(3), Some("three")), (PartitionId(1), Some("one")), (PartitionId(2), None)]
/// );
/// ```
pub fn in_order_asked<T>(
    partitions: &[PartitionId],
    found: Vec<(PartitionId, Result<T, StoreError>)>,
) -> Result<Vec<(PartitionId, Option<T>)>, StoreError>
where
    T: Clone,
{
    let mut by_partition: std::collections::HashMap<PartitionId, Result<T, StoreError>> =
        found.into_iter().collect();
    let failed = partitions
        .iter()
        .find(|partition| matches!(by_partition.get(partition), Some(Err(_))));
    if let Some(Err(error)) = failed.and_then(|partition| by_partition.remove(partition)) {
        return Err(error);
    }
    // Cloned, not moved: a partition asked twice gets its record twice.
    let rows = partitions
        .iter()
        .map(|partition| match by_partition.get(partition) {
            Some(Ok(record)) => (*partition, Some(record.clone())),
            _ => (*partition, None),
        })
        .collect();
    Ok(rows)
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
        let rows = get_each(&*store, &group, &asked).await.unwrap();
        let got: Vec<(u32, bool)> = rows.iter().map(|(p, r)| (p.0, r.is_some())).collect();
        let expected: Vec<(u32, bool)> = (0..100).rev().map(|p| (p, p % 3 != 0)).collect();
        assert_eq!(got, expected);
        assert!(rows
            .iter()
            .all(|(p, r)| r.as_ref().is_none_or(|stored| stored.key == *p)));
    }

    /// A store's rows come back in its own order: the answer follows the order asked, and a
    /// read that found two unreadable records fails with the one asked first.
    #[test]
    fn rows_found_are_put_in_the_order_asked() {
        let corrupt = |p: u32| StoreError::Corrupt {
            key: crate::RecordKey::Lease(PartitionId(p)),
            reason: "damaged".to_owned(),
        };
        let found = vec![
            (PartitionId(9), Ok(9)),
            (PartitionId(5), Err(corrupt(5))),
            (PartitionId(4), Ok(4)),
            (PartitionId(2), Err(corrupt(2))),
        ];
        let asked = [PartitionId(4), PartitionId(2), PartitionId(5)];
        match in_order_asked(&asked, found) {
            Err(StoreError::Corrupt { key, .. }) => {
                assert_eq!(key, crate::RecordKey::Lease(PartitionId(2)))
            }
            other => panic!("expected partition 2's error, got {other:?}"),
        }
        let found = vec![(PartitionId(9), Ok(9)), (PartitionId(4), Ok(4))];
        let asked = [
            PartitionId(4),
            PartitionId(7),
            PartitionId(9),
            PartitionId(4),
        ];
        let rows = in_order_asked(&asked, found).unwrap();
        let expected = [(4, Some(4)), (7, None), (9, Some(9)), (4, Some(4))];
        let expected: Vec<_> = expected.map(|(p, r)| (PartitionId(p), r)).to_vec();
        assert_eq!(rows, expected);
    }
}
