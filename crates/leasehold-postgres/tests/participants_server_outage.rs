//! Participants on PostgreSQL while the server stops and starts again, renewing per partition
//! and by session. In a file of its own, both modes in one test, one after the other:
//! stopping the server would disturb any test running beside it.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use leasehold::testing::scenarios::store_outage_with_mode;
use leasehold::testing::unique_group;
use leasehold::LeaseMode;

async fn run_script(variable: &str) {
    let script = std::env::var(variable).unwrap_or_else(|_| panic!("{variable} is exported"));
    let status = tokio::process::Command::new("bash")
        .arg(&script)
        .status()
        .await;
    assert!(
        matches!(status, Ok(s) if s.success()),
        "{script}: {status:?}"
    );
}

/// Starts the server again if the test ends while it is stopped.
struct RestartIfStopped(Arc<AtomicBool>);

impl Drop for RestartIfStopped {
    fn drop(&mut self) {
        if self.0.load(Ordering::SeqCst) {
            if let Ok(script) = std::env::var("LEASEHOLD_TEST_POSTGRES_START") {
                let _ = std::process::Command::new("bash").arg(script).status();
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_participants_drop_leases_on_schedule_when_the_server_stops() {
    let Some(url) = common::url() else {
        return;
    };
    let store = Arc::new(common::store(&url).await);
    let stopped = Arc::new(AtomicBool::new(false));
    let _guard = RestartIfStopped(Arc::clone(&stopped));
    for mode in [LeaseMode::PerPartition, LeaseMode::Session] {
        store_outage_with_mode(
            store.clone(),
            unique_group("outage"),
            mode,
            async {
                stopped.store(true, Ordering::SeqCst);
                run_script("LEASEHOLD_TEST_POSTGRES_STOP").await;
            },
            async {
                run_script("LEASEHOLD_TEST_POSTGRES_START").await;
                stopped.store(false, Ordering::SeqCst);
            },
        )
        .await;
    }
}
