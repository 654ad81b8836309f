//! The line on standard output that tells where a server of the process listens: printed
//! once, when the process is up or, while its store cannot be reached, at the first failed
//! attempt, so that the server can be asked why.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use leasehold_process::StoreWait;

/// The line on standard output that tells where a server of the process listens, printed
/// once. Scripts read it to find a port the system picked, and may use the server as soon
/// as it appears: so it is printed once the node is up, or, while the store cannot be
/// reached, at the first failed attempt (see [`announcing`]), so that the server can be
/// asked why.
#[derive(Debug)]
pub struct Announcement {
    line: String,
    said: AtomicBool,
}

impl Announcement {
    /// The announcement of `line`, not yet printed.
    pub fn new(line: String) -> Announcement {
        Announcement {
            line,
            said: AtomicBool::new(false),
        }
    }

    /// Prints the line, unless it was printed already.
    pub fn say(&self) -> anyhow::Result<()> {
        if self.said.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        crate::say(&self.line)
    }
}

/// Runs `work`, which reaches the store reporting failed attempts in `wait`, and makes
/// `announcement` at the first failure, if one comes before `work` ends.
pub async fn announcing<T>(
    wait: &StoreWait,
    announcement: &Announcement,
    work: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    tokio::pin!(work);
    tokio::select! {
        result = &mut work => result,
        () = wait.failed() => {
            announcement.say()?;
            work.await
        }
    }
}
