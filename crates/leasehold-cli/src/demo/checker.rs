//! Watches every demo node's notifications: records each acquisition and checks, at the
//! moment a node acquires, that no other node still holds the partition and that the epoch
//! moved forward.

use std::sync::{Arc, Mutex, RwLock};

use leasehold::{Callbacks, LeaseGuard, Loss, Participant, PartitionId};
use tokio::time::Instant;

/// One acquisition seen by the checker.
#[derive(Debug, Clone, Copy)]
pub struct Acquisition {
    /// When the acquiring node's callback ran.
    pub at: Instant,
    /// The new epoch.
    pub epoch: u64,
}

#[derive(Debug, Default)]
struct History {
    /// Per partition, every acquisition in the order the callbacks ran.
    acquisitions: Vec<Vec<Acquisition>>,
    /// What went wrong, in words; empty when every check passed.
    violations: Vec<String>,
    /// The latest event, for the live view.
    last_event: Option<String>,
}

/// Shared by the callbacks of every demo node.
#[derive(Debug)]
pub struct Checker {
    nodes: RwLock<Vec<Participant>>,
    names: Vec<String>,
    history: Mutex<History>,
}

impl Checker {
    /// A checker for `partitions` partitions and nodes with these display names.
    pub fn new(partitions: u32, names: Vec<String>) -> Arc<Checker> {
        Arc::new(Checker {
            nodes: RwLock::new(Vec::new()),
            names,
            history: Mutex::new(History {
                acquisitions: vec![Vec::new(); partitions as usize],
                ..History::default()
            }),
        })
    }

    /// The callbacks for node `index`.
    pub fn callbacks(self: &Arc<Self>, index: usize) -> NodeCallbacks {
        NodeCallbacks {
            index,
            checker: Arc::clone(self),
        }
    }

    /// Makes node `participant` visible to the checks; nodes are registered in index order.
    pub fn register(&self, participant: Participant) {
        self.nodes
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .push(participant);
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        self.history.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The first acquisition of each of `partitions` at or after `since`; `None` for a
    /// partition not re-acquired yet.
    pub fn first_acquisitions_since(
        &self,
        partitions: &[PartitionId],
        since: Instant,
    ) -> Vec<Option<Acquisition>> {
        let history = self.history();
        partitions
            .iter()
            .map(|p| {
                history.acquisitions[p.0 as usize]
                    .iter()
                    .find(|a| a.at >= since)
                    .copied()
            })
            .collect()
    }

    /// The violations found so far.
    pub fn violations(&self) -> Vec<String> {
        self.history().violations.clone()
    }

    /// The highest epoch acquired, and the number of acquisitions.
    pub fn epochs(&self) -> (u64, usize) {
        let history = self.history();
        let all = history.acquisitions.iter().flatten();
        let max = all.clone().map(|a| a.epoch).max().unwrap_or(0);
        (max, all.count())
    }

    /// The latest event, in words.
    pub fn last_event(&self) -> Option<String> {
        self.history().last_event.clone()
    }

    fn acquired(&self, index: usize, lease: &LeaseGuard) {
        let partition = lease.partition();
        let epoch = lease.epoch().0;
        let holders: Vec<usize> = self
            .nodes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .enumerate()
            .filter(|(other, node)| *other != index && node.lease(partition).is_some())
            .map(|(other, _)| other)
            .collect();
        let mut history = self.history();
        let name = &self.names[index];
        for holder in holders {
            history.violations.push(format!(
                "partition {partition}: {name} acquired epoch {epoch} while {} still held it",
                self.names[holder]
            ));
        }
        let list = &mut history.acquisitions[partition.0 as usize];
        if let Some(previous) = list.last().filter(|a| a.epoch >= epoch) {
            let message = format!(
                "partition {partition}: {name} acquired epoch {epoch} after epoch {}",
                previous.epoch
            );
            history.violations.push(message);
        }
        history.acquisitions[partition.0 as usize].push(Acquisition {
            at: Instant::now(),
            epoch,
        });
        history.last_event = Some(format!("{name} acquired {partition} (epoch {epoch})"));
    }

    fn lost(&self, index: usize, loss: &Loss) {
        self.history().last_event = Some(format!(
            "{} {} {} (epoch {})",
            self.names[index],
            match loss.reason {
                leasehold::LossReason::Released => "released",
                _ => "lost",
            },
            loss.partition,
            loss.epoch
        ));
    }
}

/// The callbacks of one demo node.
pub struct NodeCallbacks {
    index: usize,
    checker: Arc<Checker>,
}

impl Callbacks for NodeCallbacks {
    fn on_acquired(&self, lease: &LeaseGuard) {
        self.checker.acquired(self.index, lease);
    }

    fn on_lost(&self, loss: &Loss) {
        self.checker.lost(self.index, loss);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leasehold::{admin, MemoryStore, NodeId, ParticipantConfig};

    use super::*;

    #[tokio::test]
    async fn an_acquisition_while_another_node_holds_is_reported() {
        let store = Arc::new(MemoryStore::new());
        let config = ParticipantConfig::fast(NodeId::new("a").unwrap(), 1);
        admin::init(&*store, &config.group, 1).await.unwrap();
        let checker = Checker::new(1, vec!["a".into(), "b".into()]);
        let holder = Participant::start(store, config, checker.callbacks(0)).unwrap();
        checker.register(holder.clone());
        let deadline = Instant::now() + Duration::from_secs(5);
        let lease = loop {
            if let Some(lease) = holder.lease(PartitionId(0)) {
                break lease;
            }
            assert!(Instant::now() < deadline, "the lone node never acquired");
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert!(checker.violations().is_empty());

        // Node b claims the same tenure while a still holds it.
        checker.callbacks(1).on_acquired(&lease);
        let violations = checker.violations();
        assert_eq!(violations.len(), 2, "{violations:?}");
        assert!(violations[0].contains("b acquired epoch 1 while a still held it"));
        assert!(violations[1].contains("after epoch 1"));
        holder.shutdown().await;
    }
}
