//! `exec`'s runs of the command: one task per partition it may hold, each run under a work
//! permit (so that a hand-off waits for the command to stop) and under a watchdog process
//! (so that the command dies at the lease's deadline even if this process is paused).

use std::collections::BTreeSet;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use leasehold::{GroupName, LeaseGuard, Participant, PartitionId, WorkPermit};
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::watch;
use tokio::task::JoinSet;

use super::watchdog::{code_of, monotonic_ns};

/// What every run of the command shares.
pub struct Spec {
    /// The command and its arguments.
    pub command: Vec<String>,
    /// SIGTERM to SIGKILL; also the validity left at which an unrenewed lease stops the run.
    pub grace: Duration,
    /// Whether a run stopped because its lease ended starts again when the lease is back.
    pub restart: bool,
    /// How often the watchdog hears the lease's deadline.
    pub tick: Duration,
    /// The group, for the command's environment.
    pub group: GroupName,
}

/// How a partition's runs came to an end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The command ended by itself, with this exit code (128 + the signal if one ended it).
    Exited(u8),
    /// The lease on this partition ended under the command, and no restart was asked for.
    LeaseEnded(PartitionId),
    /// A stop was asked for, or the node stopped.
    Stopped,
}

/// Why one run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cause {
    Itself,
    Lease,
    Stopped,
}

/// The tasks running the command, one per partition.
pub struct Supervisor {
    stop: watch::Sender<bool>,
    tasks: JoinSet<anyhow::Result<Ending>>,
}

impl Supervisor {
    /// Starts a task for each of `partitions`: it waits for the lease, runs the command
    /// under it, and stops the command when the lease is handed off or lost.
    pub fn start(
        participant: &Participant,
        partitions: BTreeSet<PartitionId>,
        spec: Arc<Spec>,
    ) -> Supervisor {
        let (stop, stopped) = watch::channel(false);
        let mut tasks = JoinSet::new();
        for partition in partitions {
            tasks.spawn(hold(
                participant.clone(),
                partition,
                Arc::clone(&spec),
                stopped.clone(),
            ));
        }
        Supervisor { stop, tasks }
    }

    /// The first way a partition's runs ended by themselves: the command exited, or a lease
    /// ended without a restart. Never resolves while every task runs on.
    pub async fn ended(&mut self) -> anyhow::Result<Ending> {
        loop {
            match self.tasks.join_next().await {
                Some(Ok(ending)) => return ending,
                Some(Err(error)) => anyhow::bail!("a run of the command failed: {error}"),
                None => std::future::pending::<()>().await,
            }
        }
    }

    /// Stops every run (SIGTERM, then SIGKILL after the grace) and waits for them to end.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        while let Some(ended) = self.tasks.join_next().await {
            if let Ok(Err(error)) = ended {
                tracing::error!(error = format!("{error:#}"), "a run of the command failed");
            }
        }
    }
}

/// Runs the command each time this node holds `partition`, until it ends by itself, its
/// lease ends without a restart, or a stop.
async fn hold(
    participant: Participant,
    partition: PartitionId,
    spec: Arc<Spec>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<Ending> {
    loop {
        let lease = tokio::select! {
            lease = participant.acquired(partition) => lease,
            _ = stopping_asked(&mut stop) => None,
        };
        let Some(lease) = lease else {
            return Ok(Ending::Stopped);
        };
        // A lease that is not open to new work, or so close to its deadline that the command
        // would be stopped at once, is waited out: it is renewed, or it ends.
        let permit = lease
            .permit()
            .filter(|permit| permit.remaining() > spec.grace);
        let Some(permit) = permit else {
            tokio::select! {
                _ = tokio::time::sleep(spec.tick) => continue,
                _ = stopping_asked(&mut stop) => return Ok(Ending::Stopped),
            }
        };
        let (code, cause) = run_once(&participant, &lease, &permit, &spec, &mut stop).await?;
        // The hand-off, if one waits, goes on only now that the command has ended.
        drop(permit);
        match cause {
            Cause::Itself => return Ok(Ending::Exited(code)),
            Cause::Stopped => return Ok(Ending::Stopped),
            Cause::Lease if spec.restart => {}
            Cause::Lease => return Ok(Ending::LeaseEnded(partition)),
        }
    }
}

/// The deadline of the permit on CLOCK_MONOTONIC. The clock is read before the time left,
/// so a delay between the two makes the deadline earlier, never later.
fn deadline_ns(permit: &WorkPermit) -> u64 {
    let now = monotonic_ns();
    let left = u64::try_from(permit.remaining().as_nanos()).unwrap_or(u64::MAX);
    now.saturating_add(left)
}

/// One run of the command under its watchdog; returns its exit code and why it ended.
async fn run_once(
    participant: &Participant,
    lease: &LeaseGuard,
    permit: &WorkPermit,
    spec: &Spec,
    stop: &mut watch::Receiver<bool>,
) -> anyhow::Result<(u8, Cause)> {
    let (partition, epoch) = (permit.partition(), permit.epoch());
    let exe = std::env::current_exe().context("cannot find the leasehold binary")?;
    let mut last_deadline = deadline_ns(permit);
    let mut watchdog = tokio::process::Command::new(exe)
        .arg("exec-watchdog")
        .arg(format!("--until-ns={last_deadline}"))
        .arg(format!("--grace-ns={}", spec.grace.as_nanos()))
        .arg("--")
        .args(&spec.command)
        .env("LEASEHOLD_PARTITION", partition.0.to_string())
        .env("LEASEHOLD_EPOCH", epoch.0.to_string())
        .env("LEASEHOLD_NODE", participant.node().as_str())
        .env("LEASEHOLD_GROUP", spec.group.as_str())
        .stdin(Stdio::piped())
        .spawn()
        .context("cannot start the command's watchdog")?;
    tracing::info!(%partition, %epoch, pid = watchdog.id(), "command started");
    let mut orders = watchdog.stdin.take();
    let mut ticker = tokio::time::interval(spec.tick);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stopping = None;
    loop {
        tokio::select! {
            status = watchdog.wait() => {
                let code = code_of(status.context("cannot wait for the command")?);
                // Past the deadline the watchdog kills the command; a command that ended then
                // ended with its lease, whatever its status.
                let cause = stopping.unwrap_or(if monotonic_ns() >= last_deadline {
                    Cause::Lease
                } else {
                    Cause::Itself
                });
                tracing::info!(%partition, %epoch, code, why = ?cause, "command ended");
                return Ok((code, cause));
            }
            _ = lease.lost(), if stopping.is_none() => {
                tracing::info!(%partition, %epoch, "lease handed off or lost: stopping the command");
                stopping = Some(Cause::Lease);
                orders = None;
            }
            _ = stopping_asked(stop), if stopping.is_none() => {
                stopping = Some(Cause::Stopped);
                orders = None;
            }
            _ = ticker.tick() => {
                last_deadline = deadline_ns(permit);
                if stopping.is_none() && permit.remaining() <= spec.grace {
                    tracing::warn!(%partition, %epoch, left = ?permit.remaining(), "lease unrenewed: stopping the command");
                    stopping = Some(Cause::Lease);
                    orders = None;
                }
                if let Some(pipe) = &mut orders {
                    tell(pipe, last_deadline, spec.tick).await;
                }
            }
        }
    }
}

/// Sends the deadline. A line this short is written whole or not at all; one that cannot be
/// written within `limit` (a watchdog that stopped reading) is skipped, which leaves it the
/// earlier deadline it has.
async fn tell(pipe: &mut ChildStdin, deadline: u64, limit: Duration) {
    let line = format!("until {deadline}\n");
    let _ = tokio::time::timeout(limit, pipe.write_all(line.as_bytes())).await;
}

/// Resolves once a stop is asked for (or the supervisor is gone).
async fn stopping_asked(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`; it is dropped here, not held in a task.
    let _ = stop.wait_for(|stop| *stop).await.map(|_| ());
}
