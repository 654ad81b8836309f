//! What a node balancing by load hands off, and to whom: first what it took from a member
//! that came back, then its part of a transport plan that every node computes alike from the
//! same view, so that donors acting at once do not fill one receiver past its share.

use std::collections::BTreeMap;

use crate::clock::SeededRng;
use crate::config::ParticipantConfig;
use crate::types::{NodeId, PartitionId};

use super::{Kept, LoadView, NodeLoad, Shedding, NEARLY_EMPTY};

/// Decides which of the partitions this node keeps (`keep`, with their estimated loads) to
/// hand off, and to whom, within `budget` moves that count against the churn budget.
/// `prohibited` says whether a member must never take a partition.
pub fn shed(
    view: &LoadView,
    config: &ParticipantConfig,
    keep: &[Kept],
    budget: u32,
    prohibited: impl Fn(PartitionId, &NodeId) -> bool,
    rng: &mut SeededRng,
) -> Shedding {
    let band = config.load_band;
    let Some(me) = view.get(&config.node) else {
        return Shedding::default();
    };
    let returned = give_back(view, config, me, keep, budget, &prohibited);
    if !returned.moves.is_empty() {
        return returned;
    }
    let spillover = |load: f64| me.max_load.map_or(0.0, |max| (load - max).max(0.0));
    let starving = view.starving(band);
    if view.excess(me, band, starving) <= 0.0 || keep.len() <= 1 {
        return Shedding {
            spillover: spillover(me.load),
            ..Shedding::default()
        };
    }
    let over_ceiling = me.max_load.is_some_and(|max| me.load > max);
    let transport = Transport::of(view, me, band, starving);
    let mut candidates: Vec<&Kept> = keep.iter().collect();
    // Hottest first: the fewest moves for the load moved.
    candidates.sort_by(|a, b| {
        b.load
            .total_cmp(&a.load)
            .then_with(|| a.partition.cmp(&b.partition))
    });
    let mut giver = Giver {
        config,
        budget,
        prohibited: &prohibited,
        candidates,
        load: me.load,
        // The donor stays at or above its share over the band (no swapping roles with the
        // receiver), unless it is above its ceiling.
        floor: if over_ceiling { 0.0 } else { me.fair / band },
        budgeted: 0,
        moves: Vec::new(),
    };
    // A node out of the band or above its ceiling may fall back on any receiver's whole
    // room below; one within the band (giving only because a member is starving) only on the
    // room of a receiver it claims a part of, and then by lot, one chance in as many as
    // there are such claimants: the plan splits a room among many donors a little above
    // their shares, whose claims each fit no partition, and were each to give one partition
    // into the whole room, a dozen would land on the receiver at once and push it out of the
    // band on the other side. By lot rather than, say, the first claimant alone, whose
    // partitions may all be too large for the room, so that the same one is not asked
    // every scan.
    let out_of_band = over_ceiling || me.load > me.fair * band;
    let drawn: Vec<&NodeId> = if out_of_band {
        Vec::new()
    } else {
        transport.drawn(rng)
    };
    for (receiver, claim) in &transport.claims {
        giver.give(receiver, *claim, room_of(receiver, receiver.fair), false);
    }
    // If the plan's claims fit none of this node's partitions (coarse partitions), one
    // partition into the whole room of one receiver — above its share over the band if this
    // node is above its ceiling — each donor starting with a different receiver.
    if giver.moves.is_empty() {
        let mut others: Vec<&NodeLoad> = view
            .nodes
            .iter()
            .filter(|n| !n.draining && !n.young && n.node != me.node)
            .filter(|n| transport.pressing || n.load < n.fair / band)
            .filter(|n| out_of_band || drawn.contains(&&n.node))
            .collect();
        others.sort_by(|a, b| {
            a.ratio()
                .total_cmp(&b.ratio())
                .then_with(|| a.node.cmp(&b.node))
        });
        let rotation = transport.rank % others.len().max(1);
        for receiver in others.iter().cycle().skip(rotation).take(others.len()) {
            let ceiling = if over_ceiling {
                receiver.fair * band
            } else {
                receiver.fair
            };
            let room = room_of(receiver, ceiling);
            giver.give(receiver, room, room, true);
            if !giver.moves.is_empty() {
                break;
            }
        }
    }
    Shedding {
        spillover: spillover(giver.load),
        moves: giver.moves,
        budgeted: giver.budgeted,
    }
}

/// Placement that remembers: a member that went away and came back under its name gets back
/// what this node took from it meanwhile (within the churn window), outside the budget: warm
/// caches and local state are worth more than an even spread, which the transport plan then
/// refines. While it has only just come back (returning), all of it, whatever the band
/// says: the fleet was balanced with it holding them, and judging each give-back by shares
/// that its absence shifted leaves some with whoever took them, to be evened out by moves
/// among the others that are never undone. Later, while it is below its share over the
/// band, whatever that leaves this node; after that, up to its fair share, and only while
/// each give-back leaves it less loaded (for its capacity) than this node was before
/// giving: so a partition never goes back and forth between two members, as the reverse
/// move would need the opposite; those moves count against the budget.
fn give_back(
    view: &LoadView,
    config: &ParticipantConfig,
    me: &NodeLoad,
    keep: &[Kept],
    budget: u32,
    prohibited: &impl Fn(PartitionId, &NodeId) -> bool,
) -> Shedding {
    let band = config.load_band;
    let mut result = Shedding::default();
    let mut left = me.load;
    let mut received: BTreeMap<&NodeId, f64> = BTreeMap::new();
    for kept in keep {
        let Some(home) = kept.home.as_ref().and_then(|h| view.get(h)) else {
            continue;
        };
        let home_load = home.load + received.get(&home.node).copied().unwrap_or(0.0);
        let after = home_load + kept.load;
        let starving = home_load < home.fair / band;
        let improves = home.fair > 0.0
            && me.fair > 0.0
            && after <= home.fair
            && after / home.fair < left / me.fair;
        if home.node != me.node
            && !home.draining
            && kept.recent
            && (home.returning || starving || improves)
            && (starving || home.returning || result.budgeted < budget)
            && home.max_load.is_none_or(|max| after <= max)
            && !prohibited(kept.partition, &home.node)
            && (home.returning || left - kept.load >= me.fair / band)
            && result.moves.len() + 1 < keep.len()
            // No more at once than one scan of the receiver's takes.
            && (result.moves.len() as u32) < config.max_acquires_per_scan
        {
            if !starving && !home.returning {
                result.budgeted += 1;
            }
            left -= kept.load;
            *received.entry(&home.node).or_insert(0.0) += kept.load;
            result.moves.push((kept.partition, home.node.clone()));
        }
    }
    result
}

/// How much more load `n` may take below `ceiling` (and its own ceiling, if it has one).
fn room_of(n: &NodeLoad, ceiling: f64) -> f64 {
    let ceiling = n.max_load.map_or(ceiling, |max| ceiling.min(max));
    ceiling - n.load
}

/// The same transport plan on every node: donors, most in excess first, take in turn the
/// rooms of receivers, emptiest first, so that donors acting at once do not fill one
/// receiver past its share. This node's part is its claims.
struct Transport<'v> {
    /// The receivers with room, emptiest first.
    receivers: Vec<(&'v NodeLoad, f64)>,
    /// This node's claims: a receiver and how much of its room.
    claims: Vec<(&'v NodeLoad, f64)>,
    /// Of each receiver, how many donors within the band claim a part of its room.
    claimants: Vec<usize>,
    /// The receivers this node claims a part of, by index.
    mine: Vec<usize>,
    /// This node's place among the donors.
    rank: usize,
    /// Whether any donor is out of the band or above its ceiling: when only a starving
    /// member calls for moves, only starving members receive, as a member a little below
    /// its share is no reason to spend the churn budget.
    pressing: bool,
}

impl<'v> Transport<'v> {
    fn of(view: &'v LoadView, me: &NodeLoad, band: f64, starving: bool) -> Transport<'v> {
        let mut donors: Vec<(&NodeLoad, f64)> = view
            .nodes
            .iter()
            .filter(|n| !n.draining)
            .map(|n| (n, view.excess(n, band, starving)))
            .filter(|(_, excess)| *excess > 0.0)
            .collect();
        donors.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.node.cmp(&b.0.node)));
        let rank = donors
            .iter()
            .position(|(n, _)| n.node == me.node)
            .unwrap_or(0);
        let pressing = donors
            .iter()
            .any(|(n, _)| n.load > n.fair * band || n.max_load.is_some_and(|max| n.load > max));
        let mut receivers: Vec<(&NodeLoad, f64)> = view
            .nodes
            .iter()
            .filter(|n| !n.draining && !n.young)
            .filter(|n| pressing || n.load < n.fair / band)
            .map(|n| (n, room_of(n, n.fair)))
            .filter(|(_, room)| *room > 0.0)
            .collect();
        receivers.sort_by(|a, b| {
            a.0.ratio()
                .total_cmp(&b.0.ratio())
                .then_with(|| a.0.node.cmp(&b.0.node))
        });
        let mut transport = Transport {
            claimants: vec![0; receivers.len()],
            receivers,
            claims: Vec::new(),
            mine: Vec::new(),
            rank,
            pressing,
        };
        let mut rooms: Vec<f64> = transport.receivers.iter().map(|(_, room)| *room).collect();
        let mut next = 0;
        for (donor, excess) in &donors {
            let mut excess = *excess;
            while excess > 0.0 && next < rooms.len() {
                let receiver = transport.receivers[next].0;
                if receiver.node == donor.node {
                    next += 1;
                    continue;
                }
                let amount = excess.min(rooms[next]);
                if donor.node == me.node {
                    transport.claims.push((receiver, amount));
                    transport.mine.push(next);
                }
                let out_of_band = donor.load > donor.fair * band
                    || donor.max_load.is_some_and(|max| donor.load > max);
                if !out_of_band {
                    transport.claimants[next] += 1;
                }
                excess -= amount;
                rooms[next] -= amount;
                if rooms[next] <= 0.0 {
                    next += 1;
                }
            }
        }
        transport
    }

    /// The receivers this node claims a part of that it may fall back on, by lot: one
    /// chance in as many as there are claimants within the band.
    fn drawn(&self, rng: &mut SeededRng) -> Vec<&'v NodeId> {
        self.mine
            .iter()
            .filter(|&&i| rng.below(self.claimants[i].max(1)) == 0)
            .map(|&i| &self.receivers[i].0.node)
            .collect()
    }
}

/// This node's partitions as it hands them off, one receiver at a time.
struct Giver<'a, F> {
    config: &'a ParticipantConfig,
    /// Moves left in the churn budget.
    budget: u32,
    prohibited: &'a F,
    /// What it still keeps, hottest first.
    candidates: Vec<&'a Kept>,
    /// Its load after the moves so far.
    load: f64,
    /// The load it does not give below.
    floor: f64,
    /// How many of the moves count against the budget.
    budgeted: u32,
    moves: Vec<(PartitionId, NodeId)>,
}

impl<F: Fn(PartitionId, &NodeId) -> bool> Giver<'_, F> {
    /// Gives `receiver` partitions up to `claim` (one only if `once`), each the one going
    /// back to the member that held it before, if it has `room` for it (the claims of
    /// donors giving it back what it had add up to about what it had), else the hottest
    /// that fits the claim. Moves to a member nearly empty are not charged to the budget.
    fn give(&mut self, receiver: &NodeLoad, claim: f64, room: f64, once: bool) {
        let exempt = receiver.load < receiver.fair * NEARLY_EMPTY;
        let mut given = 0.0;
        while self.candidates.len() > 1
            && (exempt || self.budgeted < self.budget)
            && (self.moves.len() as u32) < self.config.max_acquires_per_scan
        {
            let fits = |c: &&Kept, limit: f64| {
                c.load <= limit - given
                    && self.load - c.load >= self.floor
                    && !(self.prohibited)(c.partition, &receiver.node)
            };
            let pick = self
                .candidates
                .iter()
                .position(|c| fits(c, room) && c.home.as_ref() == Some(&receiver.node))
                .or_else(|| self.candidates.iter().position(|c| fits(c, claim)));
            let Some(index) = pick else { break };
            let taken = self.candidates.remove(index);
            given += taken.load;
            self.load -= taken.load;
            self.moves.push((taken.partition, receiver.node.clone()));
            if !exempt {
                self.budgeted += 1;
            }
            if once {
                break;
            }
        }
    }
}
