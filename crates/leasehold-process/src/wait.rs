//! How the wait for the store at start-up is going: shared with whatever reports on the
//! process while it waits (an HTTP `/readyz`, a line on standard output).

use std::sync::Mutex;

use tokio::sync::watch;

/// Failed attempts to reach the store at start-up, and why the latest failed.
#[derive(Debug)]
pub struct StoreWait {
    failures: watch::Sender<u64>,
    last_error: Mutex<Option<String>>,
}

impl Default for StoreWait {
    fn default() -> StoreWait {
        StoreWait {
            failures: watch::Sender::new(0),
            last_error: Mutex::default(),
        }
    }
}

impl StoreWait {
    /// Attempts to reach the store that failed so far.
    pub fn failures(&self) -> u64 {
        *self.failures.borrow()
    }

    /// Resolves once an attempt has failed: the moment a process waiting for its store
    /// should say where it can be asked why.
    pub async fn failed(&self) {
        // The sender is `self`: it cannot close while this waits.
        let _ = self.failures.subscribe().wait_for(|&count| count > 0).await;
    }

    /// Why the latest attempt failed, with its causes, if one did.
    pub fn last_error(&self) -> Option<String> {
        self.last_error
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Counts a failed attempt; returns how many have failed so far.
    pub(crate) fn record(&self, error: &anyhow::Error) -> u64 {
        *self.last_error.lock().unwrap_or_else(|e| e.into_inner()) = Some(format!("{error:#}"));
        self.failures.send_modify(|count| *count += 1);
        self.failures()
    }
}
