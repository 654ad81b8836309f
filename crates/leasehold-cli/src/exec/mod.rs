//! `exec`: a node that runs a command under each lease it holds.
//!
//! The command starts only once the lease is held and a work permit is taken, with the
//! partition and its fencing token in its environment. It is stopped, SIGTERM then SIGKILL
//! after the grace, the moment the lease is being handed off or lost, or when so little
//! validity is left on an unrenewed lease; the hand-off waits for it under the permit. A
//! separate watchdog process kills it at the lease's deadline whatever happens to this
//! one, so a paused or killed `exec` cannot leave it working after another node may have
//! taken the partition.

mod supervisor;
pub mod watchdog;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use leasehold::PartitionId;

use crate::cli::{Cli, ExecArgs};
use crate::exclusions;
use crate::node_process;
use crate::Outcome;
use supervisor::{Ending, Spec, Supervisor};

/// The exit code when a lease ended under the command and no restart was asked for: 75,
/// EX_TEMPFAIL, "try again later".
pub const LEASE_ENDED: u8 = 75;

/// The longest grace by default.
const DEFAULT_GRACE: Duration = Duration::from_secs(10);

/// Runs `exec` until the command ends by itself, a lease ends without `--restart`, or a
/// termination signal; then stops the command, hands every lease off and returns the exit
/// code.
pub async fn run(cli: &Cli, args: &ExecArgs) -> anyhow::Result<Outcome> {
    let node = &args.node;
    anyhow::ensure!(
        node.clock_rate.is_none() && !node.unsafe_timings,
        "exec runs on real time with checked timings only"
    );
    let hold = args.hold.as_deref().map(exclusions::parse).transpose()?;
    if hold.as_ref().is_some_and(BTreeSet::is_empty) {
        anyhow::bail!("--hold names no partition");
    }
    let config = node_process::configure(&cli.group, node, 1);
    let grace = grace(args.grace, config.heartbeat, config.lease_validity)?;
    let (process, work) = node_process::prepare(cli, node, hold.clone(), None)?;
    let Some(mut running) = node_process::start(process, node).await? else {
        return Ok(Outcome::Success);
    };
    let count = running.partitions();
    if let Some(beyond) = hold.iter().flatten().find(|partition| partition.0 >= count) {
        running.stop().await;
        anyhow::bail!(
            "--hold names partition {beyond}, but the partitions of group {} are 0 to {}",
            cli.group,
            count - 1
        );
    }
    let partitions = hold.unwrap_or_else(|| (0..count).map(PartitionId).collect());
    let spec = Arc::new(Spec {
        command: args.command.clone(),
        grace,
        restart: args.restart,
        tick: (config.heartbeat / 4).clamp(Duration::from_millis(10), Duration::from_secs(1)),
        group: cli.group.clone(),
    });
    let beside = work.start(&running);
    let mut supervisor = Supervisor::start(running.participant(), partitions, spec);
    let ending = tokio::select! {
        reason = running.wait() => Err(reason),
        ending = supervisor.ended() => Ok(ending),
    };
    // The leases are handed off while the commands stop: each hand-off waits for its
    // command's permit.
    tokio::join!(supervisor.stop(), node_process::stop(running, beside));
    match ending {
        Err(reason) => reason.into_result().map(|()| Outcome::Success),
        Ok(Ok(Ending::Exited(code))) => Ok(Outcome::Exit(code)),
        Ok(Ok(Ending::LeaseEnded(partition))) => {
            tracing::warn!(%partition, "the lease ended under the command; exiting (--restart would wait for it instead)");
            Ok(Outcome::Exit(LEASE_ENDED))
        }
        Ok(Ok(Ending::Stopped)) => anyhow::bail!("the lease loop stopped"),
        Ok(Err(error)) => Err(error),
    }
}

/// The grace asked for, checked against the timings, or the default: a grace as long as
/// the validity left just before a routine renewal would stop the command every heartbeat.
fn grace(
    asked: Option<Duration>,
    heartbeat: Duration,
    validity: Duration,
) -> anyhow::Result<Duration> {
    let room = validity.saturating_sub(heartbeat);
    match asked {
        Some(grace) if grace.is_zero() || grace >= room => anyhow::bail!(
            "--grace = {grace:?} must be more than zero and less than the validity less the \
             heartbeat ({validity:?} - {heartbeat:?} = {room:?})"
        ),
        Some(grace) => Ok(grace),
        None => Ok(DEFAULT_GRACE.min(room / 2)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grace_fits_between_renewals() {
        let ms = Duration::from_millis;
        assert_eq!(grace(None, ms(10_000), ms(30_000)).unwrap(), ms(10_000));
        assert_eq!(grace(None, ms(200), ms(800)).unwrap(), ms(300));
        assert_eq!(grace(Some(ms(500)), ms(200), ms(800)).unwrap(), ms(500));
        let error = grace(Some(ms(600)), ms(200), ms(800)).unwrap_err();
        assert!(error.to_string().contains("--grace = 600ms"), "{error}");
        assert!(grace(Some(ms(0)), ms(200), ms(800)).is_err());
    }
}
