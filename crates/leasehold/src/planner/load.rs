//! Balancing by load: when the application reports each partition's load
//! ([`crate::Callbacks::load`]), every node reads the same table — partition loads, member
//! capacities and ceilings — and decides alone what to hand off and what to take, so that
//! each node's load converges to within [`ParticipantConfig::load_band`] of its fair share
//! with no leader and no forced stealing. A fleet that reports no load balances by count.
//!
//! A node hands off only to a member with room (below its fair share, or below the band
//! and its ceiling when shedding for [`ParticipantConfig::max_load`]), naming it in the
//! released record so that it takes the partition first; each overloaded node claims a part
//! of each receiver's room in proportion to its own excess, so that several donors do not
//! fill one receiver past its share. Moves are limited by the churn budget, apart from those
//! that fill a member that is nearly empty (it joined or came back).

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::config::ParticipantConfig;
use crate::record::LeaseState;
use crate::types::{NodeId, PartitionId};

use super::{usable_load, OwnerTally};
use super::{Holding, Observed};

mod shed;
pub use shed::shed;

/// A member below this fraction of its fair share is being filled after a join or a
/// restart: moves towards it are structural, not noise, and not charged to the churn
/// budget.
pub const NEARLY_EMPTY: f64 = 0.5;

/// One live member's load as this node sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeLoad {
    /// The member.
    pub node: NodeId,
    /// The load of the partitions it holds (estimated for those that report none).
    pub load: f64,
    /// Its fair share of the fleet's load: the total in proportion to its capacity, zero
    /// while it drains.
    pub fair: f64,
    /// The load above which it sheds, if it publishes one.
    pub max_load: Option<f64>,
    /// Whether it is draining.
    pub draining: bool,
    /// Whether it registered only a few heartbeats ago ([`super::YOUNG_HEARTBEATS`]): a
    /// node that came back is handed back what it held first, and receives other partitions
    /// for balance only once that is done.
    pub young: bool,
    /// Whether it registered within a few heartbeats plus four scans: while it is, every
    /// holder hands back what it took from it while it was away, whatever the band.
    pub returning: bool,
}

impl NodeLoad {
    /// Its load over its fair share (1 is exactly fair; infinite for load on a member with
    /// no share).
    pub fn ratio(&self) -> f64 {
        if self.fair > 0.0 {
            self.load / self.fair
        } else if self.load > 0.0 {
            f64::INFINITY
        } else {
            1.0
        }
    }
}

/// The fleet's load as one node sees it, when any is reported.
#[derive(Debug, Clone)]
pub struct LoadView {
    /// Every live member, this node included, in name order.
    pub nodes: Vec<NodeLoad>,
    /// The load of every partition that is not offline, estimated where unreported.
    pub total: f64,
    /// The estimate used for a partition that reports no load: the mean of those that do.
    pub mean_partition: f64,
}

impl LoadView {
    /// The load view of this node (`config`) with `holdings` (only those it keeps: `keep`),
    /// or `None` when no partition reports a load above zero: the fleet balances by count.
    pub fn of(
        now: Instant,
        config: &ParticipantConfig,
        observed: &Observed,
        holdings: &BTreeMap<PartitionId, Holding>,
        keep: &[PartitionId],
        draining: bool,
    ) -> Option<LoadView> {
        // Time for every holder to hand back what it took from a member while it was away:
        // a few heartbeats plus four scans.
        let per_heartbeat = config.heartbeat.max(std::time::Duration::from_millis(1));
        let returning_heartbeats = super::YOUNG_HEARTBEATS
            + (4 * config.scan_interval.as_millis() / per_heartbeat.as_millis()) as u64;
        let mut live: BTreeMap<&NodeId, (NodeLoad, u32)> = observed
            .live_others(now, config)
            // Each live member with the load it reports and the count of its partitions that
            // report none (estimated below, once the mean is known); `fair` holds the
            // capacity until then.
            .map(|m| {
                let capacity = m.capacity.unwrap_or(f64::from(m.weight));
                let node = NodeLoad {
                    node: m.node.clone(),
                    load: 0.0,
                    fair: if m.draining { 0.0 } else { capacity },
                    max_load: m.max_load,
                    draining: m.draining,
                    young: m.heartbeat <= super::YOUNG_HEARTBEATS,
                    returning: m.heartbeat <= returning_heartbeats,
                };
                (&m.node, (node, 0))
            })
            .collect();
        // The table's sums, kept as rows change (walking 65,536 rows on every plan of every
        // node is what a large fleet cannot afford), less the rows of partitions beyond the
        // group's, left from a larger table: few or none, at the end.
        let tally = observed.leases.tally();
        let (mut known, mut reported, mut unknown) = (tally.known, tally.reported, tally.unknown);
        let mut beyond: BTreeMap<&NodeId, OwnerTally> = BTreeMap::new();
        for seen in observed.leases.from(PartitionId(config.partitions)) {
            if seen.state == LeaseState::Offline {
                continue;
            }
            let load = usable_load(seen);
            match load {
                Some(load) => {
                    known -= load;
                    reported = reported.saturating_sub(1);
                }
                None => unknown = unknown.saturating_sub(1),
            }
            if let (LeaseState::Held, Some(owner)) = (seen.state, &seen.owner) {
                let entry = beyond.entry(owner).or_default();
                match load {
                    Some(load) => entry.load += load,
                    None => entry.unreported += 1,
                }
            }
        }
        for (node, entry) in live.iter_mut() {
            let held = tally.owner(node);
            let less = beyond.get(node).copied().unwrap_or_default();
            entry.0.load = (held.load - less.load).max(0.0);
            entry.1 = held.unreported.saturating_sub(less.unreported);
        }
        if known <= 0.0 || reported == 0 {
            return None;
        }
        let mean_partition = known / f64::from(reported);
        let total = known + f64::from(unknown) * mean_partition;
        // This node's own load from what it keeps, as last written: fresher than its rows in
        // a view read a scan ago.
        let own = keep
            .iter()
            .map(|p| {
                holdings[p]
                    .record
                    .load
                    .filter(|l| l.is_finite() && *l >= 0.0)
                    .unwrap_or(mean_partition)
            })
            .sum::<f64>();
        let mut nodes: Vec<NodeLoad> = live
            .into_values()
            .map(|(mut node, unknown)| {
                node.load += f64::from(unknown) * mean_partition;
                node
            })
            .collect();
        let own_capacity = config.capacity.unwrap_or(f64::from(config.weight));
        let at = nodes.partition_point(|n| n.node < config.node);
        nodes.insert(
            at,
            NodeLoad {
                node: config.node.clone(),
                load: own,
                fair: if draining { 0.0 } else { own_capacity },
                max_load: config.max_load,
                draining,
                young: false,
                returning: false,
            },
        );
        let capacity: f64 = nodes.iter().map(|n| n.fair).sum();
        if capacity <= 0.0 {
            return None;
        }
        for node in &mut nodes {
            node.fair = total * node.fair / capacity;
        }
        Some(LoadView {
            nodes,
            total,
            mean_partition,
        })
    }

    /// The estimated load of a partition reporting `load`.
    pub fn estimate(&self, load: Option<f64>) -> f64 {
        load.filter(|l| l.is_finite() && *l >= 0.0)
            .unwrap_or(self.mean_partition)
    }

    /// The member named `node`.
    pub fn get(&self, node: &NodeId) -> Option<&NodeLoad> {
        self.nodes
            .binary_search_by(|n| n.node.cmp(node))
            .ok()
            .map(|i| &self.nodes[i])
    }

    /// Whether any serving member is below its fair share by more than the band: then every
    /// member above its share gives, not only those above the band. A member that has only
    /// just come back is left out: it is being handed back what it held, and filling it from
    /// everyone's share meanwhile would move partitions among the others for nothing.
    fn starving(&self, band: f64) -> bool {
        self.nodes
            .iter()
            .any(|n| !n.draining && !n.young && n.load < n.fair / band)
    }

    /// How far `node` is above where it should be: above its fair share if it is out of the
    /// band (or a member is starving), above its ceiling if it has one and exceeds it.
    fn excess(&self, node: &NodeLoad, band: f64, starving: bool) -> f64 {
        let mut excess: f64 = 0.0;
        if node.load > node.fair * band || (starving && node.load > node.fair) {
            excess = node.load - node.fair;
        }
        if let Some(max) = node.max_load {
            excess = excess.max(node.load - max);
        }
        excess.max(0.0)
    }
}

/// A partition this node keeps, as [`shed`] weighs it.
#[derive(Debug, Clone, PartialEq)]
pub struct Kept {
    /// The partition.
    pub partition: PartitionId,
    /// Its load, estimated if unreported.
    pub load: f64,
    /// The member that held it before this node.
    pub home: Option<NodeId>,
    /// Whether this node took it recently (within the churn window): a partition it may
    /// have taken only because its holder went away.
    pub recent: bool,
}

/// What this node hands off to balance load.
#[derive(Debug, Default, PartialEq)]
pub struct Shedding {
    /// Partitions to release, each with the member it goes to.
    pub moves: Vec<(PartitionId, NodeId)>,
    /// How many of `moves` count against the churn budget.
    pub budgeted: u32,
    /// Load above this node's `max_load` that no member has room for: it stays here.
    pub spillover: f64,
}

/// Where a draining node sends each partition it hands off (`leaving`, with their
/// estimated loads): hottest first, each to the partition's previous holder if it stays
/// within the band with it, else to the member it leaves least loaded for its capacity. The
/// released records name their receivers, so the load spreads as balance would leave it
/// rather than to whoever scans first, who would then have to shed what it took too much
/// of — moves that are never undone when the node comes back.
pub fn direct(
    view: &LoadView,
    config: &ParticipantConfig,
    leaving: &[Kept],
    prohibited: impl Fn(PartitionId, &NodeId) -> bool,
) -> Vec<(PartitionId, NodeId)> {
    let mut receivers: Vec<(&NodeLoad, f64)> = view
        .nodes
        .iter()
        .filter(|n| n.node != config.node && !n.draining && n.fair > 0.0)
        .map(|n| (n, n.load))
        .collect();
    let mut leaving: Vec<&Kept> = leaving.iter().collect();
    leaving.sort_by(|a, b| {
        b.load
            .total_cmp(&a.load)
            .then_with(|| a.partition.cmp(&b.partition))
    });
    let mut moves = Vec::with_capacity(leaving.len());
    for kept in leaving {
        let allowed = |n: &NodeLoad, load: f64| {
            !prohibited(kept.partition, &n.node)
                && n.max_load.is_none_or(|max| load + kept.load <= max)
        };
        let home = receivers.iter().position(|(n, load)| {
            kept.home.as_ref() == Some(&n.node)
                && allowed(n, *load)
                && load + kept.load <= n.fair * config.load_band
        });
        let best = home.or_else(|| {
            receivers
                .iter()
                .enumerate()
                .filter(|(_, (n, load))| allowed(n, *load))
                .min_by(|(_, (a, la)), (_, (b, lb))| {
                    ((la + kept.load) / a.fair)
                        .total_cmp(&((lb + kept.load) / b.fair))
                        .then_with(|| a.node.cmp(&b.node))
                })
                .map(|(i, _)| i)
        });
        if let Some(i) = best {
            receivers[i].1 += kept.load;
            moves.push((kept.partition, receivers[i].0.node.clone()));
        }
    }
    moves
}

/// Whether this node, carrying `load` (what it keeps plus what it has chosen to take so
/// far), should take one more partition of load `add`: if the partition keeps it within the
/// band and under its ceiling; while it is below its fair share, whatever the partition
/// weighs (while any partition is free some member is below its share, so every free
/// partition is taken at once, a hot one by whoever has room first, who sheds the excess
/// later); and a partition handed to it by name, always (the giver judged it had room). A free partition too hot for anyone's band waits for the orphan grace
/// and then goes to whoever takes it first, rather than to the first node below its share.
pub fn fits(
    view: &LoadView,
    config: &ParticipantConfig,
    load: f64,
    add: f64,
    directed: bool,
) -> bool {
    let Some(me) = view.get(&config.node) else {
        return false;
    };
    let ceiling = config.max_load.unwrap_or(f64::INFINITY);
    if load + add > ceiling && load > 0.0 {
        return false;
    }
    directed || load < me.fair || load + add <= me.fair * config.load_band
}

#[cfg(test)]
mod tests;
