//! Deciding, apart from doing: a pure function from (now, observed table, holdings, config) to
//! a [`Plan`]. It reads no clock, touches no store and spawns nothing, so it is tested
//! exhaustively here and driven at scale by the simulator; the participant's runner executes
//! what it returns. [`ScanSchedule`] decides the same way when the runner reads the table.
//!
//! Each rule of a plan is a function in a file of its own (`renew`, `shed`, `give_back`,
//! `surplus`, `take`, `clear`); [`plan`] says in which order they apply.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::clock::SeededRng;
use crate::config::ParticipantConfig;
use crate::record::LeaseState;
use crate::types::{NodeId, PartitionId};

mod clear;
pub(crate) use clear::{lost_rows_named, prune_lost};
mod give_back;
pub mod load;
mod members;
mod renew;
mod schedule;
mod shares;
mod shed;
mod surplus;
mod take;
mod view;
pub use members::{session_tag, MemberView, PreviousSession, SeenMember, SessionSeen};
pub use schedule::{ListingCause, Reading, ScanCause, ScanSchedule, Takes};
pub use shares::{fair_targets, MemberShare, Stripe};
pub use view::{usable_load, LeaseView, LoadTally, OwnerTally, SeenLease};
mod holding;
mod observed;
mod plan;
pub use holding::Holding;
pub use observed::Observed;
pub use plan::{Acquisition, Plan, PlanInput};

/// Decides what to drop, renew, release and acquire. `rng` only orders equally good
/// candidates, so nodes starting together do not all race for the same rows.
///
/// Every holding is first renewed, dropped or released (`renew`); then the first of these
/// rules that hands anything off makes the plan, and the last takes when none does:
///
/// 1. shed load, when the group balances by load (`shed`, [`load::shed`]);
/// 2. give back to a member that came back under its name (`give_back`);
/// 3. release the surplus above this node's target (`surplus`);
/// 4. take what is free or expired (`take`).
///
/// With session leases, the records still naming this node that it no longer holds are
/// freed apart from these (`clear`).
pub fn plan(input: &PlanInput<'_>, rng: &mut SeededRng) -> Plan {
    let (clear, clear_at) =
        clear::clearable(input.now, input.config, input.observed, input.holdings);
    let mut plan = plan_holdings(input, rng);
    plan.clear = clear;
    // Only this node frees its own stale records, so it keeps a timer for the next one.
    if let Some(at) = clear_at {
        plan.wake_at = Some(plan.wake_at.map_or(at, |wake| wake.min(at)));
    }
    plan
}

fn plan_holdings(input: &PlanInput<'_>, rng: &mut SeededRng) -> Plan {
    let mut plan = Plan::default();
    renew::sort_holdings(input, &mut plan);
    let shares = Shares::of(input);
    plan.target = shares.target_of(&input.config.node);
    plan.live_members = shares.members.len();
    // Balancing by load, when the application reports it; by count otherwise, and always
    // while draining, which empties the node whatever the loads.
    // A view of one stripe cannot weigh the fleet's loads: by count until the table is read.
    let loads = if input.draining || input.observed.partial {
        None
    } else {
        load::LoadView::of(
            input.now,
            input.config,
            input.observed,
            input.holdings,
            &plan.renew,
            false,
        )
    };
    match &loads {
        Some(view) => {
            if shed::shed_load(input, view, &mut plan, rng) {
                return plan;
            }
        }
        None => {
            if !input.draining && give_back::give_back(input, &shares, &mut plan) {
                return plan;
            }
            if plan.renew.len() as u32 > plan.target {
                surplus::release_surplus(input, &shares, &mut plan);
                return plan;
            }
        }
    }
    take::take(input, &shares, loads.as_ref(), &mut plan, rng);
    plan
}

/// The live members, this node included, and their fair targets by count: what the rules
/// weigh their moves against.
struct Shares {
    /// The live members, this node last.
    members: Vec<MemberShare>,
    /// Each live member's target by count.
    targets: BTreeMap<NodeId, u32>,
}

impl Shares {
    /// The shares of every partition that is not offline, up to the group's count.
    fn of(input: &PlanInput<'_>) -> Shares {
        Shares::among(input.now, input.config, input.observed, input.draining)
    }

    /// The shares as a node sees them at `now` from `observed`, `draining` itself or not.
    fn among(
        now: Instant,
        config: &ParticipantConfig,
        observed: &Observed,
        draining: bool,
    ) -> Shares {
        let members = observed.membership(now, config, draining);
        let offline = |seen: &&SeenLease| seen.state == LeaseState::Offline;
        // A view of one stripe, or none yet, shows too few rows to count the table by: every
        // row not seen offline counts.
        let available = if observed.partial || observed.listed_at.is_none() {
            config
                .partitions
                .saturating_sub(observed.leases.iter().filter(offline).count() as u32)
        } else {
            observed.leases.iter().filter(|seen| !offline(seen)).count() as u32
        };
        let targets = fair_targets(
            available.min(config.partitions),
            &members,
            config.max_partitions_per_node,
        );
        Shares { members, targets }
    }

    /// The target of `node`, zero if it is not a live member.
    fn target_of(&self, node: &NodeId) -> u32 {
        self.targets.get(node).copied().unwrap_or(0)
    }

    /// What each live member other than `node` lacks (see [`deficits_of_others`]).
    fn deficits(&self, now: Instant, observed: &Observed, node: &NodeId) -> BTreeMap<&NodeId, u32> {
        deficits_of_others(now, observed, &self.targets, node)
    }

    /// How many members other than `node` take what it hands off: those not draining (at
    /// least one, to bound a hand-off by).
    fn takers(&self, node: &NodeId) -> u32 {
        self.members
            .iter()
            .filter(|m| m.node != *node && !m.draining)
            .count()
            .max(1) as u32
    }
}

/// The partitions of `config.node`'s own [`Stripe`] as it sees the membership at `now` in
/// `observed`: the rows a starting node reads instead of the whole table
/// ([`Reading::Stripe`]).
pub fn own_stripe(
    now: Instant,
    config: &ParticipantConfig,
    observed: &Observed,
    draining: bool,
) -> Vec<PartitionId> {
    let shares = Shares::among(now, config, observed, draining);
    Stripe::of(&config.node, &shares.targets, config.partitions).partitions()
}

/// Removes `count` items (or all there are) chosen uniformly at random, without shuffling
/// the rest: a starting node sees tens of thousands of candidates and wants sixteen.
fn draw<T>(items: &mut Vec<T>, count: usize, rng: &mut SeededRng) -> Vec<T> {
    let count = count.min(items.len());
    let len = items.len();
    for i in 0..count {
        let j = rng.below(len - i);
        items.swap(j, len - 1 - i);
    }
    items.split_off(len - count)
}

/// A partition left free this many scan intervals after it became takeable has no taker
/// below its target, typically because the nodes below target are prohibited from it. A
/// node at its target may then take it (up to its cap), and hands off an unrestricted
/// partition in exchange, so every partition stays served and the shares converge.
pub const ORPHAN_GRACE_SCANS: u32 = 2;

/// A member record showing at most this many heartbeats is young: its node may not have taken
/// anything yet, so it counts as live even before this node sees the record change (see
/// [`Observed::membership`]). Registering writes the first; a node that started with the rest
/// of its fleet shows two or three by the time the others first list it.
pub const YOUNG_HEARTBEATS: u64 = 3;

/// What each other live member below its target lacks, counting what each holds in the
/// observed table and what is reserved for it while its restart window lasts: a node
/// restarting in place takes those back at once, so a member that has just come back is
/// not short of them. Counted as lacking, it would be handed partitions it held before its
/// restart by the nodes that hold them now, and would hand them straight back.
fn deficits_of_others<'a>(
    now: Instant,
    observed: &Observed,
    targets: &'a BTreeMap<NodeId, u32>,
    node: &NodeId,
) -> BTreeMap<&'a NodeId, u32> {
    let tally = observed.leases.tally();
    let mut reserved: BTreeMap<&NodeId, u32> = BTreeMap::new();
    for seen in observed.leases.reserved() {
        if let Some(owner) = &seen.owner {
            if now < observed.reservation_ends(seen) {
                *reserved.entry(owner).or_default() += 1;
            }
        }
    }
    targets
        .iter()
        .filter(|(member, _)| *member != node)
        .map(|(member, target)| {
            let own = tally.owner(member).held + reserved.get(member).copied().unwrap_or(0);
            (member, target.saturating_sub(own))
        })
        .filter(|(_, lack)| *lack > 0)
        .collect()
}

/// Where a node that drains or leaves sends `leaving` (partitions it holds) in a group that
/// balances by load: each to a member with room for its load (see [`load::direct`]), rather
/// than to whoever scans first. Empty when the group balances by count.
pub(crate) fn directions(
    now: Instant,
    config: &ParticipantConfig,
    observed: &Observed,
    holdings: &BTreeMap<PartitionId, Holding>,
    leaving: &[PartitionId],
) -> BTreeMap<PartitionId, NodeId> {
    let Some(view) = load::LoadView::of(now, config, observed, holdings, leaving, true) else {
        return BTreeMap::new();
    };
    let leaving: Vec<load::Kept> = leaving
        .iter()
        .map(|p| load::Kept {
            partition: *p,
            load: view.estimate(holdings[p].record.load),
            home: holdings[p].record.previous_owner.clone(),
            recent: false,
        })
        .collect();
    load::direct(&view, config, &leaving, |p, node| {
        observed.leases.prohibited(p).contains(node)
    })
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests;
