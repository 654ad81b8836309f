//! Deciding, apart from doing: a pure function from (now, observed table, holdings, config) to
//! a [`Plan`]. It reads no clock, touches no store and spawns nothing, so it is tested
//! exhaustively here and driven at scale by the simulator; the participant's runner executes
//! what it returns. [`ScanSchedule`] decides the same way when the runner reads the table.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use crate::clock::SeededRng;
use crate::config::ParticipantConfig;
use crate::group::LeaseMode;
use crate::record::{LeaseRecord, LeaseState, MemberRecord, Stored};
use crate::types::{Epoch, NodeId, PartitionId, Version};

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

/// This node's view of its group's table, built from successive scans.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The lease table, one row per partition.
    pub leases: LeaseView,
    /// Member records by node. The operator's record ([`NodeId::operator`]) is not a member
    /// and is kept apart, in `operator_mark`.
    pub members: MemberView,
    /// The version of the operator's record in the last member listing: operator commands
    /// rewrite it after changing a lease record.
    pub operator_mark: Option<Version>,
    /// When the lease table was last read into `leases`.
    pub listed_at: Option<Instant>,
    /// Whether the store's change notices reach this node: a released row then wakes it,
    /// whether or not it reads the table every scan.
    pub notified: bool,
    /// How the group renews its leases (from its group record).
    pub lease_mode: LeaseMode,
    /// With session leases, when this node's session became its own: the reply to its first
    /// write of its member record. A record naming this node that it does not hold may be a
    /// previous process's under the same name, which renewed it through the same session
    /// until then.
    pub own_session_since: Option<Instant>,
    /// Leases this process held and lost (ran out, changed behind its back, or written
    /// released without a known outcome), and takes of its whose outcome stayed unknown, with
    /// the epoch and session written ([`session_tag`]) and the deadline the lease had or
    /// would have had. A record that still names this node under that epoch and session was
    /// taken by nobody since, and no work runs under it after the deadline: with session
    /// leases it is released then, not `acquire_after` later. The session matters: another
    /// process under the same name, taking the same partition from the same record, writes
    /// the same epoch.
    pub lost: BTreeMap<PartitionId, (Epoch, Option<std::num::NonZeroU32>, Instant)>,
    /// Nodes whose member record the last member listing could not decode. Such a member is
    /// present, not absent: with session leases its record is its session, which may well
    /// be renewing, so nothing it holds is taken until its record can be read again (or an
    /// operator removes it).
    pub corrupt_members: BTreeSet<NodeId>,
}

impl Observed {
    /// Replaces the lease view with a listing received at `now` (the instant the reply
    /// arrived, which is after every write it reflects), keeping `first_seen` for records
    /// whose version did not change.
    pub fn observe_leases(&mut self, now: Instant, records: Vec<Stored<PartitionId, LeaseRecord>>) {
        self.listed_at = Some(now);
        self.leases.merge(now, records);
    }

    /// Replaces the member view with a listing received at `now`, setting the operator's
    /// record apart.
    pub fn observe_members(&mut self, now: Instant, records: Vec<Stored<NodeId, MemberRecord>>) {
        self.observe_members_sent(now, now, records);
    }

    /// [`Observed::observe_members`] for a listing sent at `sent`: with session leases, a
    /// lease whose holder the listing leaves out is waited on only from a listing sent after
    /// the lease was first seen ([`MemberView::absent_wait_from`]).
    pub fn observe_members_sent(
        &mut self,
        sent: Instant,
        now: Instant,
        records: Vec<Stored<NodeId, MemberRecord>>,
    ) {
        let operator = records.iter().position(|m| m.key.is_operator());
        self.operator_mark = operator.map(|i| records[i].version.clone());
        self.members.merge(sent, now, records, operator);
    }

    /// The instant from which a held row's `acquire_after` wait runs: when its version was
    /// first seen, and, with session leases, no earlier than when its holder's last renewal
    /// of its session was first seen ([`SeenMember::first_seen`]), or its session first seen
    /// gone. Another node's take changes the session's version but not its renewal, so it
    /// neither restarts the wait on the holder's other leases nor makes a dead holder look
    /// alive; the take's transaction compares the latest version, which any renewal changes.
    /// `None` while the wait cannot start: a session whose start this node does not know, or
    /// a holder whose member record cannot be read ([`Observed::corrupt_members`]).
    pub fn held_since(&self, seen: &SeenLease, config: &ParticipantConfig) -> Option<Instant> {
        if self.lease_mode != LeaseMode::Session {
            return Some(seen.first_seen);
        }
        let Some(owner) = &seen.owner else {
            return Some(seen.first_seen);
        };
        let session = if *owner == config.node {
            self.own_session_since
        } else if self.corrupt_members.contains(owner) {
            None
        } else {
            match self.members.get(owner) {
                // Taken under a session that has ended (its process restarted under the same
                // name, say): whatever the new one renews, the old one renewed nothing since
                // the new one was first seen.
                Some(member) => match member.ended_at(seen.session) {
                    Some(_) if config.unsafe_take_ended_sessions => return Some(seen.first_seen),
                    Some((from, _)) => Some(from),
                    None => Some(member.first_seen),
                },
                None => self.members.absent_wait_from(owner, seen.first_seen),
            }
        };
        session.map(|since| since.max(seen.first_seen))
    }

    /// With session leases, the ended session a take of `seen` relies on, whole: the take
    /// reads the lease record again and goes ahead only if it still names that session
    /// ([`SeenLease::session`] keeps 32 bits of it).
    pub fn ended_session(&self, seen: &SeenLease, config: &ParticipantConfig) -> Option<u64> {
        if self.lease_mode != LeaseMode::Session || seen.state != LeaseState::Held {
            return None;
        }
        let owner = seen.owner.as_ref().filter(|owner| **owner != config.node)?;
        let member = self.members.get(owner)?;
        member.ended_at(seen.session).map(|(_, id)| id)
    }

    /// With session leases, the session a take of `seen` must change in the same write: its
    /// holder's, as this node has seen it unchanged, when the holder is another node whose
    /// session is there. A holder whose session is gone can no longer renew anything.
    pub fn session_to_bump(
        &self,
        seen: &SeenLease,
        config: &ParticipantConfig,
    ) -> Option<SessionSeen> {
        if self.lease_mode != LeaseMode::Session || seen.state != LeaseState::Held {
            return None;
        }
        let owner = seen.owner.as_ref().filter(|owner| **owner != config.node)?;
        let member = self.members.get(owner)?;
        if member.ended_at(seen.session).is_some() {
            // The session the lease was taken under has ended, and no session ever comes
            // back: nothing can renew the lease, so its record alone is compared (see
            // `Acquisition::ended_session`).
            return None;
        }
        Some(SessionSeen {
            node: owner.clone(),
            heartbeat: member.heartbeat,
            written_at_unix_ms: member.written_at_unix_ms,
            session: member.session_id,
        })
    }

    /// The live members as the planner counts them at `now`: this node as `config` and
    /// `draining` say, the others as their records do.
    pub fn membership(
        &self,
        now: Instant,
        config: &ParticipantConfig,
        draining: bool,
    ) -> Vec<MemberShare> {
        let mut members: Vec<MemberShare> =
            self.live_others(now, config).map(MemberShare::of).collect();
        members.push(MemberShare {
            node: config.node.clone(),
            weight: config.weight,
            draining,
        });
        members
    }

    /// Whether [`Observed::membership`] would return exactly `expected`. A settled node asks
    /// this every scan, of a thousand members in a large fleet: it builds nothing.
    pub fn membership_is(
        &self,
        now: Instant,
        config: &ParticipantConfig,
        draining: bool,
        expected: &[MemberShare],
    ) -> bool {
        let Some((own, others)) = expected.split_last() else {
            return false;
        };
        let mut live = self.live_others(now, config);
        own.node == config.node
            && own.weight == config.weight
            && own.draining == draining
            && others.iter().all(|member| {
                live.next().is_some_and(|seen| {
                    member.node == seen.node
                        && member.weight == seen.weight
                        && member.draining == seen.draining
                })
            })
            && live.next().is_none()
    }

    /// The members other than `config.node` whose record changed within its member timeout
    /// before `now`, in name order.
    ///
    /// A record this node has never seen change may be a dead node's: the others have long
    /// stopped counting it, but a node that has just joined would count it for a whole member
    /// timeout, take less than the others leave for it, and let the rest bounce between them.
    /// So such a record counts only if its node holds a lease, or registered so recently
    /// (at most [`YOUNG_HEARTBEATS`] heartbeats) that it may not hold one yet. A live node it
    /// leaves out is counted as soon as its next heartbeat is seen.
    fn live_others<'a>(
        &'a self,
        now: Instant,
        config: &'a ParticipantConfig,
    ) -> impl Iterator<Item = &'a SeenMember> + 'a {
        let silent_since = now.checked_sub(config.member_timeout());
        self.members
            .others(&config.node)
            .filter(move |seen| silent_since.is_none_or(|at| at < seen.first_seen))
            .filter(move |seen| {
                seen.seen_changing
                    || seen.heartbeat <= YOUNG_HEARTBEATS
                    || self.leases.tally().owner(&seen.node).held > 0
            })
    }
}

/// Puts a listing in key order, keeping the first of any repeated key: a store's listing is
/// ordered already, and a view is merged with it side by side.
pub(crate) fn in_key_order<K: Ord, T>(records: &mut Vec<Stored<K, T>>) {
    if !records.is_sorted_by(|a, b| a.key < b.key) {
        records.sort_by(|a, b| a.key.cmp(&b.key));
        records.dedup_by(|later, earlier| later.key == earlier.key);
    }
}

/// A lease this node holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    /// The fencing token of this tenure.
    pub epoch: Epoch,
    /// The version of this node's last successful write of the record.
    pub version: Version,
    /// The record as last written.
    pub record: LeaseRecord,
    /// When the lease ends unless renewed: the send time of the last successful write plus
    /// the lease validity, on this node's clock.
    pub valid_until: Instant,
    /// When this tenure began, on this node's clock.
    pub acquired_at: Instant,
    /// Whether this node is giving the lease up, waiting for the work in flight under it:
    /// it no longer counts towards what the node holds, and is not released again.
    pub handing_off: bool,
    /// Until when the lease is not handed off for balance: this tenure took back a record
    /// this node had released, which nobody took meanwhile. The others may be unable to
    /// take it (one whose configuration excludes it, which this node cannot know) or only
    /// slow; each time it comes back the wait doubles, so a partition nobody else can take
    /// moves ever more rarely instead of every scan. Draining ignores it.
    pub keep_until: Option<Instant>,
    /// When the reply to this node's last write of the record arrived; `None` while a write
    /// of it is in flight or its outcome is unknown. A listing sent after it must show the
    /// record exactly as this node wrote it ([`Holding::contradicted_by`]).
    pub settled_at: Option<Instant>,
}

impl Holding {
    /// Whether a lease listing sent at `sent` shows that this lease is no longer this
    /// node's: the record (`None`: missing, or unreadable) is gone, names another owner,
    /// epoch or session, is not held, or has a version this node did not write. Only a
    /// listing sent after the reply to this node's last write of the record can tell: an
    /// earlier one may not show that write yet, and one racing a write of it may show it
    /// without this node knowing its version.
    ///
    /// With session leases this is what bounds any change made behind a holder's back — an
    /// operator deleting or re-creating records, a writer that left the holder's session
    /// alone — to one listing: a holder never writes its lease records to renew them, so no
    /// renewal would notice. Renewing per partition, every renewal is that check.
    pub fn contradicted_by(
        &self,
        node: &NodeId,
        sent: Instant,
        stored: Option<(&LeaseRecord, &Version)>,
    ) -> bool {
        if self.settled_at.is_none_or(|settled| settled > sent) {
            return false;
        }
        let Some((record, version)) = stored else {
            return true;
        };
        record.owner.as_ref() != Some(node)
            || record.state != LeaseState::Held
            || record.epoch != self.epoch
            || record.session != self.record.session
            || *version != self.version
    }
}

/// One compare-and-set that would take a partition.
#[derive(Debug, Clone, PartialEq)]
pub struct Acquisition {
    /// The partition to take.
    pub partition: PartitionId,
    /// The version observed, which must still be current for the write to succeed.
    pub expected: Version,
    /// With session leases, the holder's session as this node waited on it: the take
    /// changes the session in the same transaction, conditional on its version, and only
    /// while the session still shows the renewal waited on. The holder's next renewal then
    /// fails, and it re-reads what it holds.
    pub session: Option<SessionSeen>,
    /// The record to write: owner = this node, state held, and an epoch above any seen on the
    /// partition and the group's floor ([`LeaseView::next_epoch`]).
    pub record: LeaseRecord,
    /// With session leases, the ended session the lease was taken under, when the take
    /// relies on that session having ended ([`Observed::ended_session`]): the record is read
    /// again first, and written only if it still names that very session.
    pub ended_session: Option<u64>,
}

/// A holder's session as a taker waited on it: the renewal it last showed, which any later
/// renewal replaces (a new heartbeat count and write stamp).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSeen {
    /// The holder.
    pub node: NodeId,
    /// The heartbeat count of the renewal waited on.
    pub heartbeat: u64,
    /// The write stamp of the renewal waited on.
    pub written_at_unix_ms: Option<u64>,
    /// The session of the renewal waited on: stamps alone may repeat across processes.
    pub session: Option<u64>,
}

impl SessionSeen {
    /// Whether `record` still shows the renewal waited on.
    pub fn shows(&self, record: &MemberRecord) -> bool {
        record.heartbeat == self.heartbeat
            && record.written_at_unix_ms == self.written_at_unix_ms
            && record.session == self.session
    }
}

/// What the runner should do now.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Plan {
    /// Leases whose validity has run out: stop serving them now.
    pub drop: Vec<PartitionId>,
    /// Leases still valid and serving, to renew at the heartbeat (leases being handed off
    /// are renewed too, apart from these, while they wait for their work in flight).
    pub renew: Vec<PartitionId>,
    /// Leases to hand off cooperatively: stop work, then write them released.
    pub release: Vec<PartitionId>,
    /// Of `release`, those handed back to the node that held them before this one, a live
    /// member below its target (it came back under its name): written released naming it,
    /// so that it takes them first.
    pub return_to: BTreeMap<PartitionId, NodeId>,
    /// Partitions to take now.
    pub acquire: Vec<Acquisition>,
    /// How many partitions this node should hold.
    pub target: u32,
    /// How many members were counted live, this node included.
    pub live_members: usize,
    /// The next instant at which a wanted partition becomes takeable, if any: the runner
    /// sets a timer for it instead of waiting for the next scan.
    pub wake_at: Option<Instant>,
    /// Partitions in the view that some node could take now (released, or left unrenewed
    /// for `acquire_after`), whether or not this node may: while any remain, the table is
    /// worth reading again.
    pub takeable: u32,
    /// Records in the view that still name this node as holder although it does not hold
    /// them: a lease that ran out during a pause, a write whose reply was lost, a previous
    /// process under the same name. They become takeable after `acquire_after`, and this
    /// node may be the only one watching them.
    pub disowned: u32,
    /// How many of `acquire` lie outside this node's [`Stripe`]: rows other nodes take
    /// first, which a view not read just now may show free when they are not.
    pub off_stripe: u32,
    /// Of `release`, how many hand off load to balance it and count against the churn
    /// budget ([`ParticipantConfig::churn_budget`]).
    pub shed: u32,
    /// This node's load and fair share of the fleet's, when the application reports load.
    pub load: Option<(f64, f64)>,
    /// Load above this node's [`ParticipantConfig::max_load`] that no member has room for.
    pub load_spillover: f64,
    /// With session leases, records that name this node although it does not hold them,
    /// whose wait has run out (see [`Observed::held_since`]): whatever wrote them — a
    /// previous process under this name, a lease that ran out here, a write whose reply was
    /// lost — has stopped. This node's session would keep them alive for ever, so it writes
    /// them released, each on the version seen.
    pub clear: Vec<(PartitionId, Version)>,
}

impl Plan {
    /// Whether this node has nothing to do until something changes: at its target, with no
    /// hand-off, take or timer pending and no partition left free in its view. A settled
    /// node need not read the lease table again until the membership changes (see
    /// [`ParticipantConfig::relist_after`]).
    pub fn settled(&self) -> bool {
        self.acquire.is_empty()
            && self.release.is_empty()
            && self.clear.is_empty()
            && self.wake_at.is_none()
            && self.takeable == 0
            && self.disowned == 0
            && self.renew.len() == self.target as usize
    }
}

/// Everything the planner reads.
#[derive(Debug)]
pub struct PlanInput<'a> {
    /// The current instant on this node's clock.
    pub now: Instant,
    /// This node's configuration.
    pub config: &'a ParticipantConfig,
    /// This node's view of the table.
    pub observed: &'a Observed,
    /// The leases this node holds.
    pub holdings: &'a BTreeMap<PartitionId, Holding>,
    /// Whether this node has been asked to drain.
    pub draining: bool,
    /// How many more partitions this node may move to balance load within the current
    /// churn window ([`ParticipantConfig::churn_budget`]).
    pub load_moves_left: u32,
}

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
