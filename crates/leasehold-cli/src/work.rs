//! The work a `leasehold node` does under its leases when asked to, written to a work log so
//! that tests and operators can check, from outside, that no two nodes ever worked on one
//! partition at once.
//!
//! Without a unit length, every interval writes one `work` line per partition held. With
//! one, every interval starts a unit on each held partition that has none running: the unit
//! takes a work permit, writes `work`, holds the permit for the unit's length, then writes
//! `done` and drops the permit. If the permit runs out first (as after a pause longer than
//! the lease), the unit stops and writes `abandoned`, stamped when the permit ended. Every
//! other line is stamped first and written only if the permit or lease was still valid at
//! the stamp, so no line claims work the node was not entitled to at that instant.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use leasehold::{Participant, PartitionId, WorkPermit};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

use crate::append_log::{unix_ns, AppendLog};

/// The background worker of one node.
pub struct Worker {
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Worker {
    /// Starts working every `interval`, in units of `unit` if given.
    pub fn start(
        participant: Participant,
        log: AppendLog,
        interval: Duration,
        unit: Option<Duration>,
    ) -> Worker {
        let (stop, stopped) = watch::channel(false);
        let log = Arc::new(log);
        let task = tokio::spawn(run(participant, log, interval, unit, stopped));
        Worker { stop, task }
    }

    /// Starts no more work and waits for the units in flight to end.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.task.await;
    }
}

async fn run(
    participant: Participant,
    log: Arc<AppendLog>,
    interval: Duration,
    unit: Option<Duration>,
    mut stopped: watch::Receiver<bool>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let running: Arc<Mutex<BTreeSet<PartitionId>>> = Arc::default();
    let mut units = JoinSet::new();
    loop {
        tokio::select! {
            _ = ticker.tick() => {}
            _ = stopped.changed() => break,
        }
        while units.try_join_next().is_some() {}
        for partition in participant.owned() {
            match unit {
                None => write_work_line(&participant, &log, partition),
                Some(length) => {
                    if !running
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(partition)
                    {
                        continue;
                    }
                    let Some(permit) = participant.permit(partition) else {
                        running
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&partition);
                        continue;
                    };
                    let (node, log, running) = (
                        participant.node().to_string(),
                        Arc::clone(&log),
                        Arc::clone(&running),
                    );
                    units.spawn(async move {
                        work_unit(&node, &log, permit, length).await;
                        running
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .remove(&partition);
                    });
                }
            }
        }
    }
    while units.join_next().await.is_some() {}
}

/// One `work` line for `partition`, if this node still holds it at the line's stamp.
fn write_work_line(participant: &Participant, log: &AppendLog, partition: PartitionId) {
    let Some(guard) = participant.lease(partition) else {
        return;
    };
    let line = format!(
        "{} {} work {partition} {}\n",
        unix_ns(SystemTime::now()),
        participant.node(),
        guard.epoch()
    );
    // Checked again after stamping, right before the write: a process paused past its
    // deadline must not write under an epoch that has moved on.
    if guard.is_valid() {
        log.append_or_warn(&line);
    }
}

/// Holds `permit` for `length`, logging its start and its end. A permit that ends first
/// ends the unit: it stops at once, and its `abandoned` line is stamped when the permit
/// ended, at its deadline or at the loss that came before it, not when this task next ran,
/// which a loaded machine can put well after another node's take.
async fn work_unit(node: &str, log: &AppendLog, permit: WorkPermit, length: Duration) {
    let (partition, epoch) = (permit.partition(), permit.epoch());
    let started = format!(
        "{} {node} work {partition} {epoch}\n",
        unix_ns(SystemTime::now())
    );
    if !permit.is_valid() {
        return;
    }
    log.append_or_warn(&started);
    let ran_out = tokio::select! {
        () = tokio::time::sleep(length) => false,
        () = permit.lost() => true,
    };
    let (now, wall) = (tokio::time::Instant::now(), SystemTime::now());
    let line = if !ran_out && permit.is_valid() {
        format!("{} {node} done {partition} {epoch}\n", unix_ns(wall))
    } else {
        let past_deadline = now.saturating_duration_since(permit.valid_until());
        let ended = wall.checked_sub(past_deadline).unwrap_or(wall);
        format!("{} {node} abandoned {partition} {epoch}\n", unix_ns(ended))
    };
    log.append_or_warn(&line);
    drop(permit);
}
