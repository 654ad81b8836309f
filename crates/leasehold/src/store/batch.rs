//! Building blocks for [`LeaseStore::put_leases`] in backends that write a batch in parts
//! (chunks of a transaction's size limit, or one record at a time).
//!
//! When a part fails transiently, the parts before it were applied and their results are
//! known. The caller (a participant renewing its leases) reads back only the writes whose
//! outcome is unknown, so those results are kept: the batch's answer is `Ok`, with the
//! transient error ([`StoreError::summarize`]) for each write of the failed part and of the
//! parts never tried. The outer `Err` is left for when nothing at all is known.

use std::future::Future;

use super::{LeaseStore, LeaseWrite};
use crate::error::StoreError;
use crate::types::{GroupName, Version};

/// One write's result in a batch.
pub type WriteResult = Result<Version, StoreError>;

/// Writes `writes` in parts of at most `part_size` (at least one) with `put_part`, which
/// returns one result per write of its part, or an error when the part's outcome is unknown.
/// A part that fails, or answers a transient error for any of its writes, ends the batch
/// (see the [module documentation](self)).
///
/// ```
/// use leasehold::batch::put_in_parts;
/// use leasehold::{LeaseRecord, LeaseWrite, PartitionId, PutMode, StoreError, Version};
///
/// # tokio_test_block_on(async {
/// let writes: Vec<LeaseWrite> = (0..4)
///     .map(|p| LeaseWrite {
///         partition: PartitionId(p),
///         record: LeaseRecord::released(),
///         mode: PutMode::Create,
///     })
///     .collect();
/// let mut parts = 0;
/// let results = put_in_parts(&writes, 2, |part| {
///     parts += 1;
///     let answer = if parts == 1 {
///         Ok(part.iter().map(|_| Ok(Version::from_number(7))).collect())
///     } else {
///         Err(StoreError::Unavailable { message: "connection reset".into(), source: None })
///     };
///     async move { answer }
/// })
/// .await
/// .unwrap();
/// assert!(results[0].is_ok() && results[1].is_ok());
/// assert!(results[2].as_ref().unwrap_err().is_transient());
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
/// # }
/// ```
pub async fn put_in_parts<'w, F, Fut>(
    writes: &'w [LeaseWrite],
    part_size: usize,
    mut put_part: F,
) -> Result<Vec<WriteResult>, StoreError>
where
    F: FnMut(&'w [LeaseWrite]) -> Fut,
    Fut: Future<Output = Result<Vec<WriteResult>, StoreError>>,
{
    let mut results: Vec<Option<WriteResult>> = Vec::with_capacity(writes.len());
    for part in writes.chunks(part_size.max(1)) {
        let failure = match put_part(part).await {
            Ok(answers) => {
                let failure = answers.iter().find_map(|answer| match answer {
                    Err(error) if error.is_transient() => Some(error.summarize()),
                    _ => None,
                });
                results.extend(answers.into_iter().map(Some));
                match failure {
                    None => continue,
                    Some(failure) => failure,
                }
            }
            Err(failure) => failure,
        };
        results.resize_with(writes.len(), || None);
        return cut_short(results, failure);
    }
    Ok(results.into_iter().flatten().collect())
}

/// Writes `writes` one record at a time with [`LeaseStore::put_lease`], stopping at the first
/// transient error (see [`put_in_parts`]): the default of [`LeaseStore::put_leases`], and the
/// fallback of backends whose transactions do not say which condition failed.
pub async fn put_one_by_one<S: LeaseStore + ?Sized>(
    store: &S,
    group: &GroupName,
    writes: &[LeaseWrite],
) -> Result<Vec<WriteResult>, StoreError> {
    put_in_parts(writes, 1, |part| async move {
        let write = &part[0];
        let result = store
            .put_lease(group, write.partition, &write.record, write.mode.clone())
            .await;
        Ok(vec![result])
    })
    .await
}

/// The answer to a batch that `failure` stopped, given what is known of each write (`None`:
/// unknown). Unknown writes get the summarized failure; if nothing is known but transient
/// errors, the batch's answer is the failure itself.
pub fn cut_short(
    results: Vec<Option<WriteResult>>,
    failure: StoreError,
) -> Result<Vec<WriteResult>, StoreError> {
    let transient = |result: &WriteResult| matches!(result, Err(error) if error.is_transient());
    if results.iter().flatten().all(transient) {
        return Err(failure);
    }
    let summary = failure.summarize();
    Ok(results
        .into_iter()
        .map(|result| result.unwrap_or_else(|| Err(summary.summarize())))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::LeaseRecord;
    use crate::store::PutMode;
    use crate::types::PartitionId;

    fn writes(count: u32) -> Vec<LeaseWrite> {
        (0..count)
            .map(|p| LeaseWrite {
                partition: PartitionId(p),
                record: LeaseRecord::released(),
                mode: PutMode::Create,
            })
            .collect()
    }

    fn reset() -> StoreError {
        StoreError::Unavailable {
            message: "connection reset".into(),
            source: None,
        }
    }

    /// Writes parts with `answer(part number, part)`, counting from zero.
    async fn run(
        count: u32,
        part_size: usize,
        answer: impl Fn(usize, &[LeaseWrite]) -> Result<Vec<WriteResult>, StoreError>,
    ) -> Result<Vec<WriteResult>, StoreError> {
        let mut part_number = 0;
        put_in_parts(&writes(count), part_size, |part| {
            let answer = answer(part_number, part);
            part_number += 1;
            async move { answer }
        })
        .await
    }

    fn applied(part: &[LeaseWrite]) -> Result<Vec<WriteResult>, StoreError> {
        Ok(part
            .iter()
            .map(|w| Ok(Version::from_number(u64::from(w.partition.0))))
            .collect())
    }

    #[tokio::test]
    async fn a_failed_second_part_keeps_the_first_parts_results() {
        let results = run(
            5,
            2,
            |n, part| if n == 1 { Err(reset()) } else { applied(part) },
        )
        .await
        .unwrap();
        assert_eq!(results.len(), 5);
        assert_eq!(results[0].as_ref().ok(), Some(&Version::from_number(0)));
        assert_eq!(results[1].as_ref().ok(), Some(&Version::from_number(1)));
        for unknown in &results[2..] {
            assert!(
                matches!(unknown, Err(StoreError::Unavailable { message, .. }) if message.contains("connection reset")),
                "{unknown:?}"
            );
        }
    }

    #[tokio::test]
    async fn a_transient_answer_inside_a_part_ends_the_batch_after_it() {
        let results = run(6, 3, |n, part| {
            assert_eq!(n, 0, "no part is tried after a transient answer");
            let mut answers = applied(part)?;
            answers[1] = Err(StoreError::Timeout(std::time::Duration::from_secs(1)));
            Ok(answers)
        })
        .await
        .unwrap();
        assert_eq!(results[0].as_ref().ok(), Some(&Version::from_number(0)));
        assert_eq!(results[2].as_ref().ok(), Some(&Version::from_number(2)));
        assert!(matches!(results[1], Err(StoreError::Timeout(_))));
        assert!(results[3..]
            .iter()
            .all(|r| matches!(r, Err(StoreError::Timeout(_)))));
    }

    #[tokio::test]
    async fn nothing_known_is_the_outer_error() {
        let first_fails = run(4, 2, |_, _| Err(reset())).await;
        assert!(matches!(first_fails, Err(StoreError::Unavailable { .. })));
        let all_transient = run(1, 1, |_, _| Ok(vec![Err(reset())])).await;
        assert!(matches!(all_transient, Err(StoreError::Unavailable { .. })));
    }

    #[tokio::test]
    async fn a_known_conflict_is_kept_even_when_nothing_was_applied() {
        let results = run(4, 2, |n, part| {
            if n == 0 {
                Ok(part
                    .iter()
                    .map(|w| {
                        Err(StoreError::AlreadyExists {
                            key: crate::RecordKey::Lease(w.partition),
                        })
                    })
                    .collect())
            } else {
                Err(reset())
            }
        })
        .await
        .unwrap();
        assert!(matches!(results[0], Err(StoreError::AlreadyExists { .. })));
        assert!(results[3].as_ref().unwrap_err().is_transient());
    }
}
