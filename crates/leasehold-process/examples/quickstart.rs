//! The README's quick start, as it is printed there: a server holding its share of 64
//! partitions in `leasehold.db` until SIGTERM or Ctrl-C.

use leasehold::{Callbacks, LeaseGuard, Loss, NodeId, ParticipantConfig};
use leasehold_process::Process;

struct Server;

impl Callbacks for Server {
    fn on_acquired(&self, lease: &LeaseGuard) {
        println!("serving {} (token {})", lease.partition(), lease.epoch());
    }
    fn on_lost(&self, loss: &Loss) {
        println!("stopped serving {} ({:?})", loss.partition, loss.reason);
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let name = std::env::args().nth(1).unwrap_or_else(|| "server-1".into());
    let config = ParticipantConfig::new(NodeId::new(name)?, 64);
    let process = Process::new("sqlite:leasehold.db", config)?
        .create_records() // the 64 lease records, on a new table
        .callbacks(Server);
    process.run().await?.into_result()
}
