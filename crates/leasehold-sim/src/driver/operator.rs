//! Operator commands on lease records: kicks, taking a partition offline and back online,
//! prohibiting a node from a partition and allowing it again. They go straight to the store,
//! as the command-line tool's would, and nudge settled nodes as it does.

use std::sync::Arc;

use leasehold::{admin, NodeId, PartitionId};
use tokio::time::Instant;

use super::Director;

/// What the operator changed and has not undone yet.
#[derive(Debug, Default)]
pub(super) struct OperatorChanges {
    offline: Option<PartitionId>,
    prohibited: Option<(PartitionId, NodeId)>,
    /// The node whose own exclusion list names a partition.
    excluding: Option<usize>,
}

#[derive(Debug)]
enum Command {
    Kick(PartitionId),
    Offline(PartitionId),
    Online(PartitionId),
    Prohibit(PartitionId, NodeId),
    Allow(PartitionId, NodeId),
    /// Sets a node's own exclusion list, as a SIGHUP after editing `--exclude-file` would.
    Exclude(usize, PartitionId),
    /// Empties a node's exclusion list.
    Include(usize),
}

impl Command {
    fn partition(&self) -> PartitionId {
        match self {
            Command::Kick(p) | Command::Offline(p) | Command::Online(p) => *p,
            Command::Prohibit(p, _) | Command::Allow(p, _) | Command::Exclude(_, p) => *p,
            Command::Include(_) => PartitionId(0),
        }
    }
}

impl OperatorChanges {
    /// The partition taken offline and not brought back yet, if any.
    pub(super) fn offline(&self) -> Option<PartitionId> {
        self.offline
    }
}

impl OperatorChanges {
    /// The partition someone is prohibited from, if any.
    pub(super) fn prohibited_partition(&self) -> Option<PartitionId> {
        self.prohibited.as_ref().map(|(p, _)| *p)
    }
}

impl Director {
    /// Runs one operator command. At most one partition is offline and one prohibition in
    /// force at a time, so the fleet always has partitions to serve and nodes to serve them.
    pub(super) async fn operate(&mut self) {
        let world = Arc::clone(&self.world);
        let partition = PartitionId(self.rng.below(world.config.partitions as usize) as u32);
        let node = {
            let state = world.lock();
            let active: Vec<NodeId> = state
                .nodes
                .values()
                .filter(|s| s.is_active())
                .map(|s| s.name.clone())
                .collect();
            (!active.is_empty()).then(|| active[self.rng.below(active.len())].clone())
        };
        let mut options = vec![Command::Kick(partition)];
        options.push(match self.operator.offline {
            Some(offline) => Command::Online(offline),
            None => Command::Offline(partition),
        });
        match (&self.operator.prohibited, node) {
            (Some((p, n)), _) => options.push(Command::Allow(*p, n.clone())),
            (None, Some(node)) => options.push(Command::Prohibit(partition, node)),
            (None, None) => {}
        }
        match self.operator.excluding {
            Some(index) => options.push(Command::Include(index)),
            None => {
                if let Some((index, held)) = self.exclusion_candidate() {
                    options.push(Command::Exclude(index, held.unwrap_or(partition)));
                }
            }
        }
        let command = options.swap_remove(self.rng.below(options.len()));
        self.run_command(command).await;
    }

    /// Brings back whatever the operator left offline or prohibited, when the faults stop.
    pub(super) async fn undo_operator_changes(&mut self) {
        if let Some(partition) = self.operator.offline {
            self.run_command(Command::Online(partition)).await;
        }
        if let Some((partition, node)) = self.operator.prohibited.clone() {
            self.run_command(Command::Allow(partition, node)).await;
        }
        if let Some(index) = self.operator.excluding {
            self.run_command(Command::Include(index)).await;
        }
    }

    /// A running node to give an exclusion, with a partition it holds if any: excluding
    /// what a node holds is what exercises the hand-off.
    fn exclusion_candidate(&mut self) -> Option<(usize, Option<PartitionId>)> {
        let state = self.world.lock();
        let running: Vec<(usize, Vec<PartitionId>)> = state
            .nodes
            .iter()
            .filter(|(_, slot)| slot.is_active())
            .filter_map(|(index, slot)| Some((*index, slot.process()?.participant.owned())))
            .collect();
        drop(state);
        // A node that holds something, when there is one (a mis-set restart the group
        // record refused holds nothing).
        let holding: Vec<&(usize, Vec<PartitionId>)> = running
            .iter()
            .filter(|(_, held)| !held.is_empty())
            .collect();
        let (index, held) = if holding.is_empty() {
            running.get(self.rng.below(running.len().max(1)))?.clone()
        } else {
            holding[self.rng.below(holding.len())].clone()
        };
        let partition = (!held.is_empty()).then(|| held[self.rng.below(held.len())]);
        Some((index, partition))
    }

    async fn run_command(&mut self, command: Command) {
        let world = Arc::clone(&self.world);
        let operator = super::blind::OperatorStore {
            store: world.store.clone(),
            blind: world.config.unsafe_session_operator,
            latency: std::time::Duration::ZERO,
        };
        let store: &dyn leasehold::LeaseStore = &operator;
        let group = &world.group;
        let (result, text) = match &command {
            Command::Exclude(index, partition) => {
                return self.set_exclusion(*index, Some(*partition));
            }
            Command::Include(index) => return self.set_exclusion(*index, None),
            Command::Kick(p) => (admin::kick(store, group, *p).await, format!("kick p{p}")),
            Command::Offline(p) => (
                admin::offline(store, group, *p).await,
                format!("offline p{p}"),
            ),
            Command::Online(p) => (
                admin::online(store, group, *p).await,
                format!("online p{p}"),
            ),
            Command::Prohibit(p, n) => (
                admin::prohibit(store, group, *p, n).await,
                format!("prohibit {n} from p{p}"),
            ),
            Command::Allow(p, n) => (
                admin::allow(store, group, *p, n).await,
                format!("allow {n} on p{p}"),
            ),
        };
        let mut state = world.lock();
        if let Err(error) = result {
            world.event(&mut state, format!("operator: {text} refused: {error}"));
            return;
        }
        state.recorder.operator_changed(command.partition());
        match command {
            Command::Kick(_) => {}
            Command::Offline(p) => self.operator.offline = Some(p),
            Command::Online(_) => self.operator.offline = None,
            Command::Prohibit(p, n) => self.operator.prohibited = Some((p, n)),
            Command::Allow(..) => self.operator.prohibited = None,
            Command::Exclude(..) | Command::Include(_) => {}
        }
        world.event(&mut state, format!("operator: {text}"));
        state.recorder.disturbed(Instant::now());
        state.counts.operator += 1;
    }

    /// Sets or empties node `index`'s exclusion list through its running process, and
    /// records it in its slot so that a restart keeps it. The list is the name's, as the
    /// exclude file a replacement process starts with: a second process under the name (see
    /// `Director::twin`) gets it too.
    fn set_exclusion(&mut self, index: usize, excluded: Option<PartitionId>) {
        let world = Arc::clone(&self.world);
        let mut state = world.lock();
        let Some(name) = state.nodes.get(&index).map(|slot| slot.name.clone()) else {
            return;
        };
        let now = Instant::now();
        for slot in state.nodes.values_mut().filter(|slot| slot.name == name) {
            if let Some(process) = slot.process() {
                let list = excluded.into_iter().collect();
                if let Err(error) = process.participant.set_excluded(list) {
                    let text = format!("operator: exclusion on {name} refused: {error}");
                    world.event(&mut state, text);
                    return;
                }
            }
            slot.excluded = excluded.map(|partition| (partition, now));
        }
        self.operator.excluding = excluded.map(|_| index);
        let text = match excluded {
            Some(partition) => format!("operator: n{index} excludes p{partition}"),
            None => format!("operator: n{index} excludes nothing"),
        };
        world.event(&mut state, text);
        state.recorder.disturbed(now);
        state.counts.operator += 1;
    }
}
