//! Trying again while the store cannot be reached: with jittered back-off, each failure
//! logged and counted, until the attempt succeeds, fails for good, or a stop is asked for.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use leasehold::admin::AdminError;
use leasehold::backoff::{Backoff, Jitter};
use leasehold::{LeaseStore, SeededRng, StoreError};

use crate::shutdown::Shutdown;
use crate::store_url::{self, StoreUrl};
use crate::wait::StoreWait;

/// The first pause after a failed attempt to reach the store.
pub const FIRST_RETRY: Duration = Duration::from_millis(100);
/// The longest pause between attempts to reach the store.
pub const MAX_RETRY: Duration = Duration::from_secs(5);

/// The pauses: equal jitter, so that a fleet restarted together with its store spreads its
/// attempts without any pause collapsing to nothing.
fn backoff() -> Backoff {
    Backoff::new(FIRST_RETRY, MAX_RETRY).jitter(Jitter::Equal)
}

/// Runs `attempt` until it succeeds or fails in a way that trying again cannot fix, pausing
/// after each transient failure and logging it; `None` as soon as a stop is asked for, even
/// in the middle of an attempt. An attempt running longer than `call_limit` several times
/// over counts as a timeout: each call in it has that limit, and a connection that hangs
/// must not silence the log.
pub(crate) async fn retrying<T, F, Fut>(
    shutdown: &mut Shutdown,
    wait: &StoreWait,
    call_limit: Duration,
    mut attempt: F,
) -> anyhow::Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<T>>,
{
    let attempt_limit = call_limit.saturating_mul(4);
    let mut backoff = backoff();
    let mut rng = SeededRng::from_entropy();
    loop {
        let bounded = tokio::time::timeout(attempt_limit, attempt());
        let error = tokio::select! {
            outcome = bounded => match outcome {
                Ok(Ok(value)) => return Ok(Some(value)),
                Ok(Err(error)) if is_transient(&error) => error,
                Ok(Err(error)) => return Err(error),
                Err(_) => anyhow::Error::new(StoreError::Timeout(attempt_limit))
                    .context("cannot reach the store"),
            },
            cause = shutdown.requested() => return Ok(stopped_waiting(&cause)),
        };
        let pause = backoff.failed_jittered(&mut rng);
        let failures = wait.record(&error);
        tracing::warn!(
            attempt = failures, error = format!("{error:#}"), retry_in = ?pause,
            "the store cannot be reached; trying again"
        );
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            cause = shutdown.requested() => return Ok(stopped_waiting(&cause)),
        }
    }
}

/// Opens the store `url` names, trying again with jittered back-off while it cannot be
/// reached, as [`Process::start`](crate::Process::start) does, reporting each failure in
/// `wait`; `None` if SIGTERM or SIGINT came first. For programs that read a store without
/// taking part in a group (a monitor, say).
pub async fn open_waiting(
    url: &StoreUrl,
    call_limit: Duration,
    wait: &StoreWait,
) -> anyhow::Result<Option<Arc<dyn LeaseStore>>> {
    let mut shutdown = Shutdown::on_signals()?;
    retrying(&mut shutdown, wait, call_limit, || {
        store_url::open(url, call_limit)
    })
    .await
}

fn stopped_waiting<T>(cause: &str) -> Option<T> {
    tracing::info!(
        signal = cause,
        "stopping before the store was reached; nothing was held"
    );
    None
}

/// Whether `error` is a store failure that may pass with time ([`StoreError::is_transient`]:
/// unreachable, throttled, timed out), wherever it sits among the causes. Anything else —
/// a malformed URL, a missing variable, a group that does not exist, a schema this build
/// does not know, a request the store refuses — is final.
pub fn is_transient(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        // `AdminError::Store` is transparent: its store error never shows up as a cause.
        let store = match cause.downcast_ref::<AdminError>() {
            Some(AdminError::Store(store)) => Some(store),
            _ => cause.downcast_ref::<StoreError>(),
        };
        store.is_some_and(StoreError::is_transient)
    })
}

#[cfg(test)]
mod tests {
    use leasehold::GroupName;

    use super::*;

    #[test]
    fn pauses_start_at_the_first_retry_and_stop_at_the_cap() {
        let mut rng = SeededRng::new(1);
        let mut backoff = backoff();
        let first = backoff.failed_jittered(&mut rng);
        assert!(
            first >= FIRST_RETRY / 2 && first <= FIRST_RETRY,
            "{first:?}"
        );
        let later: Vec<_> = (0..20).map(|_| backoff.failed_jittered(&mut rng)).collect();
        assert!(later.iter().all(|pause| *pause <= MAX_RETRY), "{later:?}");
        assert!(later[19] >= MAX_RETRY / 2, "{later:?}");
    }

    #[test]
    fn only_store_failures_that_may_pass_are_retried() {
        let unavailable = || StoreError::Unavailable {
            message: "connection refused".into(),
            source: None,
        };
        let group: GroupName = "g".parse().unwrap();
        let transient = [
            anyhow::Error::new(unavailable()).context("cannot open store zk://127.0.0.1:1/x"),
            anyhow::Error::new(StoreError::Timeout(Duration::from_secs(1))),
            anyhow::Error::new(AdminError::Store(StoreError::Throttled {
                message: "slow down".into(),
            })),
        ];
        for error in transient {
            assert!(is_transient(&error), "{error:#}");
        }
        let last = [
            anyhow::Error::new(StoreError::Invalid("schema version 9 is too new".into()))
                .context("cannot open store sqlite:x.db"),
            anyhow::Error::new(AdminError::NoSuchGroup(group)),
            anyhow::anyhow!("group g does not exist; pass --partitions N to create it"),
        ];
        for error in last {
            assert!(!is_transient(&error), "{error:#}");
        }
    }
}
