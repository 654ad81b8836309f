//! Deciding, apart from doing: a pure function from (now, observed table, holdings, config) to
//! a [`Plan`]. It reads no clock, touches no store and spawns nothing, so it is tested
//! exhaustively here and driven at scale by the simulator; the participant's runner executes
//! what it returns. [`ScanSchedule`] decides the same way when the runner reads the table.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use crate::clock::SeededRng;
use crate::config::ParticipantConfig;
use crate::group::LeaseMode;
use crate::record::{LeaseRecord, LeaseState};
use crate::types::{NodeId, PartitionId, Version};

pub mod load;
mod members;
mod schedule;
mod shares;
pub mod tally;
mod view;
pub use members::{session_tag, MemberView, PreviousSession, SeenMember};
pub use schedule::{Reading, ScanSchedule, Takes};
pub use shares::{fair_targets, MemberShare, Stripe};
pub use view::{LeaseView, SeenLease};
mod holding;
mod observed;
mod plan;
pub use holding::Holding;
pub(crate) use observed::in_key_order;
pub use observed::Observed;
pub use plan::{Acquisition, Plan, PlanInput, SessionSeen};

/// Decides what to drop, renew, release and acquire. `rng` only orders equally good
/// candidates, so nodes starting together do not all race for the same rows.
pub fn plan(input: &PlanInput<'_>, rng: &mut SeededRng) -> Plan {
    let (clear, clear_at) = clearable(input.now, input.config, input.observed, input.holdings);
    let mut plan = plan_holdings(input, rng);
    plan.clear = clear;
    // Only this node frees its own stale records, so it keeps a timer for the next one.
    if let Some(at) = clear_at {
        plan.wake_at = Some(plan.wake_at.map_or(at, |wake| wake.min(at)));
    }
    plan
}

fn plan_holdings(input: &PlanInput<'_>, rng: &mut SeededRng) -> Plan {
    let PlanInput {
        now,
        config,
        observed,
        holdings,
        draining,
        load_moves_left,
    } = *input;
    let mut plan = Plan::default();
    for (partition, holding) in holdings {
        if holding.valid_until <= now {
            plan.drop.push(*partition);
        } else if holding.handing_off {
            // Already on its way out.
        } else if config.excludes(*partition) {
            // Excluded while held: handed off whatever the target, as in a drain.
            plan.release.push(*partition);
        } else {
            plan.renew.push(*partition);
        }
    }

    let members = observed.membership(now, config, draining);
    let available = observed
        .leases
        .iter()
        .filter(|seen| seen.state != LeaseState::Offline)
        .count() as u32;
    let cap = config.max_partitions_per_node;
    let targets = fair_targets(available.min(config.partitions), &members, cap);
    plan.target = targets.get(&config.node).copied().unwrap_or(0);
    plan.live_members = members.len();

    // Balancing by load, when the application reports it; by count otherwise, and always
    // while draining, which empties the node whatever the loads.
    let loads = if draining {
        None
    } else {
        load::LoadView::of(now, config, observed, holdings, &plan.renew, draining)
    };
    if let Some(view) = &loads {
        let keep: Vec<load::Kept> = plan
            .renew
            .iter()
            .map(|p| {
                let holding = &holdings[p];
                load::Kept {
                    partition: *p,
                    load: view.estimate(holding.record.load),
                    home: holding.record.previous_owner.clone(),
                    recent: now.saturating_duration_since(holding.acquired_at)
                        < config.churn_window,
                }
            })
            .collect();
        let shedding = load::shed(
            view,
            config,
            &keep,
            load_moves_left,
            |p, node| observed.leases.prohibited(p).contains(node),
            rng,
        );
        let own = view.get(&config.node);
        plan.load = own.map(|me| (me.load, me.fair));
        plan.target = plan.renew.len() as u32;
        plan.load_spillover = shedding.spillover;
        if !shedding.moves.is_empty() {
            plan.shed = shedding.budgeted;
            for (partition, to) in shedding.moves {
                plan.renew.retain(|p| *p != partition);
                plan.release.push(partition);
                plan.return_to.insert(partition, to);
            }
            plan.release.sort();
            plan.target = plan.renew.len() as u32;
            return plan;
        }
    }

    // Placement that remembers, by count: a member nearly empty (it came back under its
    // name) gets back what it held before from whoever took it meanwhile, up to what it
    // lacks, even from a node not above its own target: that node then takes a free
    // partition or a surplus elsewhere, and the returning member finds its warm state.
    if loads.is_none() && !draining {
        // Only towards a member nearly empty (below half its target): one that has just come
        // back. A member merely short of its share is filled by the surplus below, without
        // taking partitions from nodes at their own target.
        let mut lacking: BTreeMap<&NodeId, u32> =
            deficits_of_others(observed, &targets, &config.node)
                .into_iter()
                .filter(|(member, lack)| lack * 2 > targets[*member])
                .collect();
        let mut homecoming = Vec::new();
        for partition in &plan.renew {
            let holding = &holdings[partition];
            let Some(home) = holding.record.previous_owner.as_ref() else {
                continue;
            };
            if holding.keep_until.is_some_and(|until| now < until) {
                continue;
            }
            // At most what the member takes in one scan: see the surplus below.
            if homecoming.len() as u32 >= config.max_acquires_per_scan {
                break;
            }
            if let Some(lack) = lacking.get_mut(home).filter(|lack| **lack > 0) {
                if !holding.record.prohibited.contains(home) {
                    *lack -= 1;
                    homecoming.push((*partition, home.clone()));
                }
            }
        }
        if !homecoming.is_empty() {
            for (partition, home) in homecoming {
                plan.renew.retain(|p| *p != partition);
                plan.release.push(partition);
                plan.return_to.insert(partition, home);
            }
            plan.release.sort();
            return plan;
        }
    }

    let held = plan.renew.len() as u32;
    if loads.is_none() && held > plan.target {
        // Hand off only what other live members lack: a lease nobody else needs stays
        // served here (for example one rescued as an orphan).
        let deficits = deficits_of_others(observed, &targets, &config.node);
        let mut wanted_elsewhere: u32 = deficits.values().sum();
        // A draining node whose group balances by load hands everything off at once: the
        // others hold what their loads call for, not their counts, and are all below their
        // shares of the load once this node's is gone.
        let by_load = observed.leases.tally().known > 0.0;
        if draining && by_load && members.iter().any(|m| m.node != config.node && !m.draining) {
            wanted_elsewhere = held;
        }
        // No more at once than the takers can take in one scan (`max_acquires_per_scan`
        // each): a partition released beyond that would wait unserved for a later scan of
        // theirs, while here it is still served until the next plan releases it.
        let takers = members
            .iter()
            .filter(|m| m.node != config.node && !m.draining)
            .count()
            .max(1) as u32;
        let per_scan = config.max_acquires_per_scan.saturating_mul(takers);
        let count = (held - plan.target).min(wanted_elsewhere).min(per_scan);
        let movable: Vec<PartitionId> = plan
            .renew
            .iter()
            .copied()
            .filter(|p| draining || holdings[p].keep_until.is_none_or(|until| until <= now))
            .collect();
        let surplus = surplus(&movable, holdings, &deficits, count as usize);
        if draining && by_load {
            plan.return_to
                .extend(directions(now, config, observed, holdings, &surplus));
        }
        for partition in &surplus {
            if let Some(home) = holdings[partition]
                .record
                .previous_owner
                .as_ref()
                .filter(|home| deficits.contains_key(home))
            {
                plan.return_to
                    .entry(*partition)
                    .or_insert_with(|| home.clone());
            }
        }
        plan.renew.retain(|p| !surplus.contains(p));
        plan.release.extend(surplus);
        plan.release.sort();
        return plan;
    }

    let own_load = plan.load.map_or(0.0, |(load, _)| load);
    let wanted = match &loads {
        // Any number while below the fair share: which ones fit is decided per partition,
        // below. A node at or above its share seeks nothing (whatever is left free while
        // every node is there weighs nothing, and is taken as an orphan).
        Some(_) if plan.load.is_some_and(|(load, fair)| load < fair) => {
            config.max_acquires_per_scan.min(cap_room(config, held)) as usize
        }
        Some(_) => 0,
        None => (plan.target - held).min(config.max_acquires_per_scan) as usize,
    };
    // Room beyond the target, for orphans only: see `ORPHAN_GRACE_SCANS`. A draining node
    // has none: it is being emptied, and would only hand a rescued partition straight on,
    // after its application had started serving it.
    let room = if draining {
        0
    } else {
        config
            .max_partitions_per_node
            .saturating_sub(held)
            .min(config.max_acquires_per_scan) as usize
    };
    if room == 0 {
        return plan;
    }
    let orphaned_after = config.scan_interval * ORPHAN_GRACE_SCANS;
    // A row counts as left free only for as long as a reading showed it free: a view planned
    // on between readings would otherwise make every row it once saw free look orphaned.
    let listed_at = observed.listed_at.unwrap_or(now).min(now);
    let stripe = Stripe::of(&config.node, &targets, config.partitions);
    // Candidates by kind, each split by whether they lie in this node's stripe; and, taken
    // before any, the free rows that name this node as the one they go back to.
    let (mut ready, mut orphans) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
    let mut home = Vec::new();
    // The other members short of their share: below their fair load, or their target.
    let needy_members = || -> BTreeSet<NodeId> {
        match &loads {
            Some(view) => view
                .nodes
                .iter()
                .filter(|n| n.node != config.node && !n.draining && n.load < n.fair)
                .map(|n| n.node.clone())
                .collect(),
            None => deficits_of_others(observed, &targets, &config.node)
                .into_keys()
                .cloned()
                .collect(),
        }
    };
    let mut needy: Option<BTreeSet<NodeId>> = None;
    // By load, a node below its fair share but within the band takes free partitions that
    // fit, yet waits on no lease of a member that keeps renewing its member record: those
    // leases are renewed before they could expire, and a timer on them would keep the node
    // from ever settling — re-reading the whole table every scan, where half a fleet
    // balanced by load sits a little below its shares. It still waits on the leases of
    // members that missed a heartbeat or are gone: those are the ones that expire. (A node
    // settled reads the table again as soon as a member misses one.) Only where change
    // notices reach it: a partition handed to it then wakes it; a node that polls must read
    // the table every scan to see one.
    let seeking = plan
        .load
        .is_none_or(|(load, fair)| load < fair / config.load_band);
    let expiring: Option<BTreeSet<&NodeId>> =
        (observed.notified && !seeking && wanted > 0).then(|| {
            let missed_since = now.checked_sub(config.heartbeat + config.heartbeat / 20);
            observed
                .leases
                .tally()
                .owners()
                .filter(|owner| {
                    observed
                        .members
                        .get(owner)
                        .is_none_or(|m| missed_since.is_some_and(|at| m.first_seen <= at))
                })
                .collect()
        });
    let waits_on = |seen: &SeenLease| {
        expiring.as_ref().is_none_or(|expiring| {
            seen.state != LeaseState::Held
                || seen.owner.as_ref().is_none_or(|o| expiring.contains(o))
        })
    };
    let session = observed.lease_mode == LeaseMode::Session;
    for seen in observed.leases.iter() {
        let partition = &seen.partition;
        let mut ready_at = match seen.state {
            LeaseState::Offline => continue,
            LeaseState::Released => seen.first_seen,
            LeaseState::Held => seen.first_seen + config.acquire_after,
        };
        // A session can only make the wait longer: the cheap bound first, the lookup of the
        // holder's session only where that bound has passed.
        if session && seen.state == LeaseState::Held && ready_at <= now {
            if seen.owner.as_ref() == Some(&config.node) {
                // This node's own records are released, never taken (see `clearable`).
                continue;
            }
            ready_at = match observed.held_since(seen, config) {
                Some(since) => since + config.acquire_after,
                None => continue,
            };
        }
        // The common case in a settled fleet, decided with one comparison of names: a live
        // lease, and no share left to fill that would need a timer for it.
        if ready_at > now && wanted == 0 {
            if seen.owner.as_ref() == Some(&config.node)
                && !holdings.contains_key(partition)
                && partition.0 < config.partitions
            {
                plan.disowned += 1;
            }
            continue;
        }
        if holdings.contains_key(partition) || partition.0 >= config.partitions {
            continue;
        }
        if ready_at <= now {
            plan.takeable += 1;
        }
        if observed.leases.is_prohibited(seen, &config.node) || config.excludes(*partition) {
            continue;
        }
        let abandoned = ready_at <= now && abandoned_by_live_owner(seen, &members);
        let elsewhere = usize::from(!stripe.contains(*partition));
        if ready_at <= now && seen.owner.as_ref() == Some(&config.node) {
            home.push(seen);
        } else if ready_at + orphaned_after <= listed_at || abandoned {
            orphans[elsewhere].push(seen);
        } else if ready_at <= now {
            // A row released towards another member that is short of its share (handed
            // back, or handed over for balance) is that member's to take, for half a scan:
            // it hears of it at once, by a notice or its next scan. Should it not take it
            // (it excludes the partition, say), the others do, within the hand-off bound.
            let directed_until = ready_at + config.scan_interval / 2;
            let directed = seen.state == LeaseState::Released
                && now < directed_until
                && seen
                    .owner
                    .as_ref()
                    .is_some_and(|to| needy.get_or_insert_with(needy_members).contains(to));
            if !directed {
                ready[elsewhere].push(seen);
            } else if wanted > 0 {
                plan.wake_at = Some(
                    plan.wake_at
                        .map_or(directed_until, |w| w.min(directed_until)),
                );
            }
        } else if wanted > 0 && waits_on(seen) {
            plan.wake_at = Some(plan.wake_at.map_or(ready_at, |w| w.min(ready_at)));
        }
    }
    // Up to the target from everything takeable, orphans first; beyond it, up to the cap,
    // only orphans. Within each kind, this node's stripe first, at random within each.
    let [orphans_here, orphans_elsewhere] = &mut orphans;
    let [ready_here, ready_elsewhere] = &mut ready;
    // By load, what is handed to this node by name is taken whatever its share: the giver
    // saw room for it here.
    let wanted = if loads.is_some() {
        wanted.max(home.len().min(room))
    } else {
        wanted
    };
    let mut chosen = Vec::new();
    let mut taking = own_load;
    for (kind, candidates) in [
        &mut home,
        orphans_here,
        orphans_elsewhere,
        ready_here,
        ready_elsewhere,
    ]
    .into_iter()
    .enumerate()
    {
        let missing = wanted - chosen.len();
        let drawn = draw(candidates, missing, rng);
        match &loads {
            // Orphans (kinds 1 and 2) are taken whatever they weigh: every partition must
            // be served, and a node with room sheds the excess later.
            Some(view) if kind != 1 && kind != 2 => {
                for seen in drawn {
                    let add = view.estimate(seen.load().map(f64::from));
                    if load::fits(view, config, taking, add, kind == 0) {
                        taking += add;
                        chosen.push(seen);
                    }
                }
            }
            _ => {
                if let Some(view) = &loads {
                    taking += drawn
                        .iter()
                        .map(|seen| view.estimate(seen.load().map(f64::from)))
                        .sum::<f64>();
                }
                chosen.extend(drawn);
            }
        }
    }
    let mut extra = room.saturating_sub(chosen.len());
    for candidates in &mut orphans {
        let rescued = draw(candidates, extra, rng);
        extra -= rescued.len();
        chosen.extend(rescued);
    }
    for seen in chosen {
        let partition = seen.partition;
        plan.off_stripe += u32::from(!stripe.contains(partition));
        // A new tenure: its load is reported by its first renewal, and an operator's note
        // on the last one no longer applies.
        let record = LeaseRecord {
            owner: Some(config.node.clone()),
            epoch: if config.unsafe_reuse_epoch {
                seen.epoch
            } else {
                observed.leases.next_epoch(seen)
            },
            state: LeaseState::Held,
            prohibited: observed.leases.prohibited(partition).to_vec(),
            // Who held it before this tenure (for a released row, who gave it up, or whom it
            // was handed back to): the node it returns to if that one comes back.
            previous_owner: observed
                .leases
                .last_holder(seen)
                .filter(|owner| **owner != config.node)
                .cloned(),
            // The partition's load as last reported, until this tenure's first renewal
            // reports its own: the others balance on it meanwhile.
            load: seen.load().map(f64::from),
            ..LeaseRecord::default()
        };
        plan.acquire.push(Acquisition {
            partition,
            expected: seen.version.clone(),
            session: observed.session_to_bump(seen, config),
            ended_session: observed.ended_session(seen, config),
            record,
        });
    }
    plan.acquire.sort_by_key(|a| a.partition);
    if plan.acquire.len() >= wanted {
        plan.wake_at = None;
    }
    if loads.is_some() {
        // Balancing by load has no count to reach: the target is what this plan leaves held.
        plan.target = (plan.renew.len() + plan.acquire.len()) as u32;
    }
    plan
}

/// With session leases, the records naming this node that it does not hold and whose wait
/// has run out (see [`Plan::clear`]), and when the next of the others' runs out. Walks the
/// table only when the view shows more records naming this node than it holds.
fn clearable(
    now: Instant,
    config: &ParticipantConfig,
    observed: &Observed,
    holdings: &BTreeMap<PartitionId, Holding>,
) -> (Vec<(PartitionId, Version)>, Option<Instant>) {
    let mut clear = Vec::new();
    let mut next = None::<Instant>;
    if observed.lease_mode != LeaseMode::Session
        || observed.leases.tally().owner(&config.node).held as usize <= holdings.len()
    {
        return (clear, next);
    }
    let stale = observed.leases.iter().filter(|seen| {
        seen.state == LeaseState::Held
            && seen.owner.as_ref() == Some(&config.node)
            && !holdings.contains_key(&seen.partition)
    });
    for seen in stale {
        let ready_at = match observed.lost.get(&seen.partition) {
            Some((epoch, session, deadline))
                if *epoch == seen.epoch && *session == seen.session =>
            {
                *deadline
            }
            _ => match observed.held_since(seen, config) {
                Some(since) => since + config.acquire_after,
                None => continue,
            },
        };
        if ready_at <= now {
            clear.push((seen.partition, seen.version.clone()));
        } else {
            next = Some(next.map_or(ready_at, |at| at.min(ready_at)));
        }
    }
    (clear, next)
}

/// How many more partitions this node's cap lets it hold.
fn cap_room(config: &ParticipantConfig, held: u32) -> u32 {
    config.max_partitions_per_node.saturating_sub(held)
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

/// A held record, unchanged for `acquire_after`, that names a live member: its owner is
/// renewing its member record but not this lease, typically because it crashed and restarted
/// under the same name. The restarted process counts as live, so nobody else's target rises
/// for it, and it must itself wait out `acquire_after` from its own start: waiting for the
/// orphan grace as well would add both to the failover. Any node with room takes it now, and
/// hands it back cooperatively if the owner falls short of its share.
fn abandoned_by_live_owner(seen: &SeenLease, members: &[MemberShare]) -> bool {
    match (&seen.state, &seen.owner) {
        (LeaseState::Held, Some(owner)) => members.iter().any(|m| m.node == *owner),
        _ => false,
    }
}

/// What each other live member below its target lacks, counting what each holds in the
/// observed table.
fn deficits_of_others<'a>(
    observed: &Observed,
    targets: &'a BTreeMap<NodeId, u32>,
    node: &NodeId,
) -> BTreeMap<&'a NodeId, u32> {
    let tally = observed.leases.tally();
    targets
        .iter()
        .filter(|(member, _)| *member != node)
        .map(|(member, target)| (member, target.saturating_sub(tally.owner(member).held)))
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

/// The `count` leases to hand off. Leases nobody is prohibited from go first, so that any
/// node below its target can take them; among those, leases going back to the node that held
/// them before (a member below its target, in `deficits`: it came back), then the most
/// recently acquired, which have the least warm state to lose.
fn surplus(
    renew: &[PartitionId],
    holdings: &BTreeMap<PartitionId, Holding>,
    deficits: &BTreeMap<&NodeId, u32>,
    count: usize,
) -> Vec<PartitionId> {
    let mut candidates: Vec<(bool, bool, std::cmp::Reverse<Instant>, PartitionId)> = renew
        .iter()
        .map(|p| {
            let holding = &holdings[p];
            let restricted = !holding.record.prohibited.is_empty();
            let returns = holding
                .record
                .previous_owner
                .as_ref()
                .is_some_and(|home| deficits.contains_key(home));
            (
                restricted,
                !returns,
                std::cmp::Reverse(holding.acquired_at),
                *p,
            )
        })
        .collect();
    candidates.sort();
    let mut chosen: Vec<PartitionId> = candidates.into_iter().take(count).map(|c| c.3).collect();
    chosen.sort();
    chosen
}

#[cfg(test)]
mod tests;
