//! Leader election: of every process running this program on one `leader.db`, one leads at
//! a time. Leading is holding partition 0 of a group of one partition; the leader's work runs
//! only while the lease is held and carries its fencing token, so that what it writes to can
//! refuse a deposed leader that has not noticed yet (a paused process, a slow network).
//!
//!     cargo run -p leasehold-process --example leader -- candidate-1
//!     cargo run -p leasehold-process --example leader -- candidate-2   # in another shell

use std::time::Duration;

use leasehold::{Epoch, NodeId, ParticipantConfig, PartitionId};
use leasehold_process::Process;

/// The one partition: whoever holds it leads.
const LEADERSHIP: PartitionId = PartitionId(0);

/// The leader's work: here a line a second, each stamped with the token. A real leader
/// passes the token with every write (a conditional update, a header the service checks).
async fn lead(name: &str, token: Epoch) {
    loop {
        println!("{name} works as leader (token {token})");
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let name = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "candidate-1".into());
    let config = ParticipantConfig::new(NodeId::new(name.clone())?, 1);
    let process = Process::new("sqlite:leader.db", config)?.create_records();
    let Some(mut running) = process.start().await? else {
        return Ok(()); // asked to stop before the store answered
    };
    // ANCHOR: election
    let participant = running.participant().clone();
    let reason = loop {
        let lease = tokio::select! {
            reason = running.wait() => break reason,
            lease = participant.acquired(LEADERSHIP) => match lease {
                Some(lease) => lease,
                None => break running.wait().await, // the participant stopped
            },
        };
        println!("{name} leads (token {})", lease.epoch());
        tokio::select! {
            reason = running.wait() => break reason,
            _ = lease.lost() => println!("{name} no longer leads"),
            _ = lead(&name, lease.epoch()) => {}
        }
    };
    // ANCHOR_END: election
    println!("{name} stops: {reason}");
    running.stop().await;
    reason.into_result()
}
