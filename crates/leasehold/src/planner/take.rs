//! The rule that takes: when no other rule hands anything off, a node takes released rows
//! and leases left unrenewed for `acquire_after`, up to its target (by count) or while they
//! fit its fair share (by load), and beyond that, up to its cap, rows nobody else has taken
//! for the orphan grace ([`ORPHAN_GRACE_SCANS`]). Where nothing is takeable yet, it sets a
//! timer for the first row that will be.

use std::collections::BTreeSet;

use tokio::time::Instant;

use crate::clock::SeededRng;
use crate::config::ParticipantConfig;
use crate::group::LeaseMode;
use crate::record::{LeaseRecord, LeaseState};
use crate::types::NodeId;

use super::load::{self, LoadView};
use super::{
    draw, Acquisition, MemberShare, Plan, PlanInput, SeenLease, Shares, Stripe, ORPHAN_GRACE_SCANS,
};

/// Adds to [`Plan::acquire`] what this node takes now, sets [`Plan::wake_at`] for what it
/// waits on, and counts what it sees ([`Plan::takeable`], [`Plan::disowned`],
/// [`Plan::off_stripe`]).
pub(super) fn take(
    input: &PlanInput<'_>,
    shares: &Shares,
    loads: Option<&LoadView>,
    plan: &mut Plan,
    rng: &mut SeededRng,
) {
    let config = input.config;
    let held = plan.renew.len() as u32;
    let wanted = wanted(config, loads.is_some(), plan, held);
    // Room beyond the target, for orphans only: see `ORPHAN_GRACE_SCANS`. A draining node
    // has none: it is being emptied, and would only hand a rescued partition straight on,
    // after its application had started serving it.
    let room = if input.draining {
        0
    } else {
        config
            .max_partitions_per_node
            .saturating_sub(held)
            .min(config.max_acquires_per_scan) as usize
    };
    if room == 0 {
        return;
    }
    let stripe = Stripe::of(&config.node, &shares.targets, config.partitions);
    let mut candidates = Candidates::gather(input, shares, loads, &stripe, wanted, plan);
    // By load, what is handed to this node by name is taken whatever its share: the giver
    // saw room for it here.
    let wanted = if loads.is_some() {
        wanted.max(candidates.home.len().min(room))
    } else {
        wanted
    };
    let own_load = plan.load.map_or(0.0, |(load, _)| load);
    let chosen = candidates.choose(config, loads, own_load, wanted, room, rng);
    for seen in chosen {
        plan.off_stripe += u32::from(!stripe.contains(seen.partition));
        plan.acquire.push(acquisition(input, seen));
    }
    plan.acquire.sort_by_key(|a| a.partition);
    if plan.acquire.len() >= wanted {
        plan.wake_at = None;
    }
    if loads.is_some() {
        // Balancing by load has no count to reach: the target is what this plan leaves held.
        plan.target = (plan.renew.len() + plan.acquire.len()) as u32;
    }
}

/// How many partitions this node seeks, holding `held`. By count, up to its target. By load,
/// any number while below its fair share (which ones fit is decided per partition); none at
/// or above it: whatever is left free while every node is there weighs nothing, and is taken
/// as an orphan.
fn wanted(config: &ParticipantConfig, by_load: bool, plan: &Plan, held: u32) -> usize {
    if !by_load {
        return (plan.target - held).min(config.max_acquires_per_scan) as usize;
    }
    match plan.load {
        Some((load, fair)) if load < fair => config
            .max_acquires_per_scan
            .min(config.max_partitions_per_node.saturating_sub(held))
            as usize,
        _ => 0,
    }
}

/// The rows this node could take, by kind: rows that name it as the one they go back to,
/// orphans, and rows merely takeable; the last two each split into those in this node's
/// stripe (index 0) and elsewhere (index 1).
struct Candidates<'v> {
    home: Vec<&'v SeenLease>,
    orphans: [Vec<&'v SeenLease>; 2],
    ready: [Vec<&'v SeenLease>; 2],
}

impl<'v> Candidates<'v> {
    /// Sorts the rows of the view into candidates, counting on `plan` what is takeable or
    /// disowned, and setting its timer for the first row this node waits on while it still
    /// `wanted` some.
    fn gather(
        input: &PlanInput<'v>,
        shares: &Shares,
        loads: Option<&LoadView>,
        stripe: &Stripe,
        wanted: usize,
        plan: &mut Plan,
    ) -> Candidates<'v> {
        let PlanInput {
            now,
            config,
            observed,
            holdings,
            ..
        } = *input;
        let mut found = Candidates {
            home: Vec::new(),
            orphans: [Vec::new(), Vec::new()],
            ready: [Vec::new(), Vec::new()],
        };
        let orphaned_after = config.scan_interval * ORPHAN_GRACE_SCANS;
        // A row counts as left free only for as long as a reading showed it free: a view
        // planned on between readings would otherwise make every row it once saw free look
        // orphaned.
        let listed_at = observed.listed_at.unwrap_or(now).min(now);
        let mut needy: Option<BTreeSet<NodeId>> = None;
        let expiring = expiring_owners(input, plan, wanted);
        let waits_on = |seen: &SeenLease| {
            expiring.as_ref().is_none_or(|expiring| {
                seen.state != LeaseState::Held
                    || seen.owner.as_ref().is_none_or(|o| expiring.contains(o))
            })
        };
        for seen in observed.leases.iter() {
            let partition = &seen.partition;
            let Some(ready_at) = ready_at(input, seen) else {
                continue;
            };
            // The common case in a settled fleet, decided with one comparison of names: a
            // live lease, and no share left to fill that would need a timer for it.
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
            let abandoned = ready_at <= now && abandoned_by_live_owner(seen, &shares.members);
            let elsewhere = usize::from(!stripe.contains(*partition));
            if ready_at <= now && seen.owner.as_ref() == Some(&config.node) {
                found.home.push(seen);
            } else if ready_at + orphaned_after <= listed_at || abandoned {
                found.orphans[elsewhere].push(seen);
            } else if ready_at <= now {
                // A row released towards another member that is short of its share (handed
                // back, or handed over for balance) is that member's to take, for half a
                // scan: it hears of it at once, by a notice or its next scan. Should it not
                // take it (it excludes the partition, say), the others do, within the
                // hand-off bound.
                let directed_until = ready_at + config.scan_interval / 2;
                let directed = seen.state == LeaseState::Released
                    && now < directed_until
                    && seen.owner.as_ref().is_some_and(|to| {
                        needy
                            .get_or_insert_with(|| needy_members(input, shares, loads))
                            .contains(to)
                    });
                if !directed {
                    found.ready[elsewhere].push(seen);
                } else if wanted > 0 {
                    wake_at(plan, directed_until);
                }
            } else if waits_on(seen) {
                // Not ready yet, and this node wants rows (a row not ready while it wants
                // none was passed over at the top of the loop).
                wake_at(plan, ready_at);
            }
        }
        found
    }

    /// Draws up to `wanted` from everything takeable, orphans first; beyond it, up to
    /// `room`, only orphans. Within each kind, this node's stripe first, at random within
    /// each. By load, a row merely takeable is taken only if it fits ([`load::fits`]).
    fn choose(
        &mut self,
        config: &ParticipantConfig,
        loads: Option<&LoadView>,
        own_load: f64,
        wanted: usize,
        room: usize,
        rng: &mut SeededRng,
    ) -> Vec<&'v SeenLease> {
        let [orphans_here, orphans_elsewhere] = &mut self.orphans;
        let [ready_here, ready_elsewhere] = &mut self.ready;
        let mut chosen = Vec::new();
        let mut taking = own_load;
        for (kind, candidates) in [
            &mut self.home,
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
            match loads {
                // Orphans (kinds 1 and 2) are taken whatever they weigh: every partition
                // must be served, and a node with room sheds the excess later.
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
                    if let Some(view) = loads {
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
        for candidates in &mut self.orphans {
            let rescued = draw(candidates, extra, rng);
            extra -= rescued.len();
            chosen.extend(rescued);
        }
        chosen
    }
}

/// Moves the plan's timer earlier to `at`.
fn wake_at(plan: &mut Plan, at: Instant) {
    plan.wake_at = Some(plan.wake_at.map_or(at, |wake| wake.min(at)));
}

/// When `seen` becomes takeable: at once if released, after `acquire_after` unchanged if
/// held, and with session leases after `acquire_after` from the holder's last renewal seen.
/// `None` for a row never to take: offline, this node's own (released, never taken: see
/// [`super::clear`]), or held under a session it cannot judge yet.
fn ready_at(input: &PlanInput<'_>, seen: &SeenLease) -> Option<Instant> {
    let PlanInput {
        now,
        config,
        observed,
        ..
    } = *input;
    let ready_at = match seen.state {
        LeaseState::Offline => return None,
        // Reserved for a node restarting in place: its own at once, the others' once the
        // group's window has passed since they first saw it.
        LeaseState::Released
            if seen.owner.as_ref() != Some(&config.node)
                && !config.controls.ignore_reservations
                && observed.leases.is_reserved(seen) =>
        {
            observed.reservation_ends(seen)
        }
        LeaseState::Released => seen.first_seen(),
        LeaseState::Held => seen.first_seen() + config.acquire_after,
    };
    // A session can only make the wait longer: the cheap bound first, the lookup of the
    // holder's session only where that bound has passed.
    if observed.lease_mode == LeaseMode::Session
        && seen.state == LeaseState::Held
        && ready_at <= now
    {
        if seen.owner.as_ref() == Some(&config.node) {
            return None;
        }
        return observed
            .held_since(seen, config)
            .map(|since| since + config.acquire_after);
    }
    Some(ready_at)
}

/// The owners whose leases this node waits on, when it should wait only on some: by load, a
/// node below its fair share but within the band takes free partitions that fit, yet waits
/// on no lease of a member that keeps renewing its member record. Those leases are renewed
/// before they could expire, and a timer on them would keep the node from ever settling —
/// re-reading the whole table every scan, where half a fleet balanced by load sits a little
/// below its shares. It still waits on the leases of members that missed a heartbeat or are
/// gone: those are the ones that expire. (A node settled reads the table again as soon as a
/// member misses one.) Only where change notices reach it: a partition handed to it then
/// wakes it; a node that polls must read the table every scan to see one. `None`: it waits
/// on every lease.
fn expiring_owners<'o>(
    input: &PlanInput<'o>,
    plan: &Plan,
    wanted: usize,
) -> Option<BTreeSet<&'o NodeId>> {
    let PlanInput {
        now,
        config,
        observed,
        ..
    } = *input;
    let seeking = plan
        .load
        .is_none_or(|(load, fair)| load < fair / config.load_band);
    if !observed.notified || seeking || wanted == 0 {
        return None;
    }
    let missed_since = now.checked_sub(config.heartbeat + config.heartbeat / 20);
    Some(
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
            .collect(),
    )
}

/// The other members short of their share: below their fair load, or their target.
fn needy_members(
    input: &PlanInput<'_>,
    shares: &Shares,
    loads: Option<&LoadView>,
) -> BTreeSet<NodeId> {
    let config = input.config;
    match loads {
        Some(view) => view
            .nodes
            .iter()
            .filter(|n| n.node != config.node && !n.draining && n.load < n.fair)
            .map(|n| n.node.clone())
            .collect(),
        None => shares
            .deficits(input.now, input.observed, &config.node)
            .into_keys()
            .cloned()
            .collect(),
    }
}

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

/// The compare-and-set that takes `seen`: a new tenure under this node, at the next epoch.
fn acquisition(input: &PlanInput<'_>, seen: &SeenLease) -> Acquisition {
    let PlanInput {
        config, observed, ..
    } = *input;
    let partition = seen.partition;
    // A new tenure: its load is reported by its first renewal, and an operator's note on the
    // last one no longer applies.
    let record = LeaseRecord {
        owner: Some(config.node.clone()),
        epoch: if config.controls.reuse_epoch {
            seen.epoch
        } else {
            observed.leases.next_epoch(seen)
        },
        state: LeaseState::Held,
        prohibited: observed.leases.prohibited(partition).to_vec(),
        // Who held it before this tenure (for a released row, who gave it up, or whom it was
        // handed back to): the node it returns to if that one comes back.
        previous_owner: observed
            .leases
            .last_holder(seen)
            .filter(|owner| **owner != config.node)
            .cloned(),
        // The partition's load as last reported, until this tenure's first renewal reports
        // its own: the others balance on it meanwhile.
        load: seen.load().map(f64::from),
        ..LeaseRecord::default()
    };
    Acquisition {
        partition,
        expected: seen.version.clone(),
        session: observed.session_to_bump(seen, config),
        ended_session: observed.ended_session(seen, config),
        record,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::super::tests::{held_by, Fixture};
    use super::*;
    use crate::types::PartitionId;

    #[test]
    fn by_count_a_node_seeks_up_to_its_target_and_one_scan_of_takes() {
        let mut config = Fixture::new(1).config;
        config.max_acquires_per_scan = 2;
        let plan = Plan {
            target: 4,
            ..Plan::default()
        };
        assert_eq!(wanted(&config, false, &plan, 1), 2);
        assert_eq!(wanted(&config, false, &plan, 3), 1);
        assert_eq!(wanted(&config, false, &plan, 4), 0);
    }

    #[test]
    fn by_load_a_node_seeks_only_below_its_fair_share_and_within_its_cap() {
        let mut config = Fixture::new(1).config;
        config.max_acquires_per_scan = 8;
        config.max_partitions_per_node = 5;
        let below = Plan {
            load: Some((1.0, 2.0)),
            ..Plan::default()
        };
        assert_eq!(wanted(&config, true, &below, 0), 5);
        assert_eq!(wanted(&config, true, &below, 4), 1);
        let at_share = Plan {
            load: Some((2.0, 2.0)),
            ..Plan::default()
        };
        assert_eq!(wanted(&config, true, &at_share, 0), 0);
    }

    #[test]
    fn a_row_is_ready_at_once_if_released_and_after_acquire_after_if_held() {
        let mut fixture = Fixture::new(3);
        let start = fixture.start;
        fixture.set(1, held_by("other", 1), 50, start);
        let offline = LeaseRecord {
            state: LeaseState::Offline,
            ..LeaseRecord::released()
        };
        fixture.set(2, offline, 51, start);
        let input = fixture.input(start, false);
        let row = |p: u32| {
            input
                .observed
                .leases
                .iter()
                .find(|seen| seen.partition == PartitionId(p))
                .unwrap()
        };
        assert_eq!(ready_at(&input, row(0)), Some(start));
        assert_eq!(
            ready_at(&input, row(1)),
            Some(start + fixture.config.acquire_after)
        );
        assert_eq!(ready_at(&input, row(2)), None, "offline: never");
        let later = fixture.input(start + Duration::from_secs(3600), false);
        assert_eq!(
            ready_at(&later, row(1)),
            Some(start + fixture.config.acquire_after),
            "by partition, the wait runs from the version first seen"
        );
    }
}
