//! What a node has read of its group's table, and how long each record has waited.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use crate::config::ParticipantConfig;
use crate::group::LeaseMode;
use crate::record::{IntoHeads, LeaseRecord, LeaseState, Stored};
use crate::types::{Epoch, NodeId, PartitionId, Version};

use super::{
    LeaseView, MemberShare, MemberView, SeenLease, SeenMember, SessionSeen, YOUNG_HEARTBEATS,
};

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
    /// Whether `leases` holds only the rows of this node's stripe, read instead of the whole
    /// table when it started ([`Reading::Stripe`](super::Reading::Stripe)): how many rows
    /// the table has, and what the others hold, are then unknown.
    pub partial: bool,
    /// Whether the store's change notices reach this node: a released row then wakes it,
    /// whether or not it reads the table every scan.
    pub notified: bool,
    /// How the group renews its leases (from its group record).
    pub lease_mode: LeaseMode,
    /// How long a record reserved for a restarting node is left to it, from first sight
    /// (from the group record: [`crate::GroupRecord::restart_window`]).
    pub restart_window: std::time::Duration,
    /// With session leases, when this node's session became its own: the reply to its first
    /// write of its member record. A record naming this node that it does not hold may be a
    /// previous process's under the same name, which renewed it through the same session
    /// until then.
    pub own_session_since: Option<Instant>,
    /// Leases this process held and lost (ran out, changed behind its back, or written
    /// released without a known outcome), and takes of its whose outcome stayed unknown, with
    /// the epoch and session written ([`session_tag`](super::session_tag)) and the deadline the lease had or
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
        self.partial = false;
        self.leases.merge(now, records);
    }

    /// Folds in this node's stripe, read row by row at its start instead of the whole table
    /// (see [`Observed::observe_rows`]): a reading of those rows alone, received by `now`.
    pub fn observe_stripe(
        &mut self,
        now: Instant,
        rows: Vec<(PartitionId, Option<Stored<PartitionId, LeaseRecord>>)>,
    ) {
        self.listed_at = Some(now);
        self.partial = true;
        self.observe_rows(now, rows);
    }

    /// When the others may take `seen`, a row reserved for a node restarting in place: the
    /// group's restart window after this node first saw it.
    pub fn reservation_ends(&self, seen: &SeenLease) -> Instant {
        seen.first_seen() + self.restart_window
    }

    /// Folds in rows read one by one, the replies received by `now`: a row whose version
    /// the view already shows keeps its `first_seen`, a changed one is seen from `now`, and a
    /// row read as missing is left out until a listing shows it again. The time of the last
    /// listing stays: these rows say nothing about the others.
    pub fn observe_rows(
        &mut self,
        now: Instant,
        rows: Vec<(PartitionId, Option<Stored<PartitionId, LeaseRecord>>)>,
    ) {
        for (partition, stored) in rows {
            match stored {
                Some(stored) => {
                    let same = self
                        .leases
                        .get(partition)
                        .is_some_and(|seen| seen.version == stored.version);
                    if !same {
                        self.leases
                            .insert(partition, &stored.value, stored.version, now);
                    }
                }
                None => self.leases.forget(partition),
            }
        }
    }

    /// Replaces the member view with a listing received at `now`, setting the operator's
    /// record apart.
    pub fn observe_members(&mut self, now: Instant, records: impl IntoHeads) {
        self.observe_members_sent(now, now, records);
    }

    /// [`Observed::observe_members`] for a listing sent at `sent`: with session leases, a
    /// lease whose holder the listing leaves out is waited on only from a listing sent after
    /// the lease was first seen ([`MemberView::absent_wait_from`]).
    pub fn observe_members_sent(&mut self, sent: Instant, now: Instant, records: impl IntoHeads) {
        let records = records.into_heads();
        let operator = records.iter().position(|m| m.key.is_operator());
        self.operator_mark = operator.map(|i| records[i].version.clone());
        self.members
            .merge(sent, now, records, operator, &self.corrupt_members);
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
            return Some(seen.first_seen());
        }
        let Some(owner) = &seen.owner else {
            return Some(seen.first_seen());
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
                    Some(_) if config.controls.take_ended_sessions => {
                        return Some(seen.first_seen())
                    }
                    Some((from, _)) => Some(from),
                    None => Some(member.first_seen),
                },
                None => self.members.absent_wait_from(owner, seen.first_seen()),
            }
        };
        session.map(|since| since.max(seen.first_seen()))
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
    pub(super) fn live_others<'a>(
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
