//! `node`: one participant as a long-lived process, stopped gracefully by SIGTERM or SIGINT.
//!
//! Everything that needs no store (flags, URL, files) is checked first and fails at once;
//! then the store is reached, trying again with back-off for as long as it is unreachable,
//! so that a fleet restarted together with its store waits for it instead of exiting
//! ([`leasehold_process::Process`] runs the life cycle).

use crate::cli::{Cli, NodeArgs};
use crate::node_process;
use crate::Outcome;

/// Runs `node` until a termination signal, then releases its leases and returns; fails if
/// the lease loop stopped by itself, so that a supervisor restarts the process.
pub async fn run(cli: &Cli, args: &NodeArgs) -> anyhow::Result<Outcome> {
    let (process, work) = node_process::prepare(cli, args, None, None)?;
    let Some(mut running) = node_process::start(process, args).await? else {
        return Ok(Outcome::Success);
    };
    let beside = work.start(&running);
    let reason = running.wait().await;
    node_process::stop(running, beside).await;
    reason.into_result()?;
    Ok(Outcome::Success)
}
