//! The member records as this node last read them. Every node reads every member record
//! every scan, so in a fleet of a thousand nodes this view is read and rewritten a thousand
//! rows at a time, by each node, every few seconds: it is a flat sorted vector of what the
//! planner reads, walked front to back.

use std::num::NonZeroU32;

use tokio::time::Instant;

use crate::record::{IntoHeads, MemberRecord, StoredMemberHead};
use crate::types::{NodeId, Version};

/// A member record as this node last saw it: the parts planning reads, its version, and
/// since when it has looked exactly so.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenMember {
    /// The member.
    pub node: NodeId,
    /// The record's version.
    pub version: Version,
    /// The local instant at which the member's last write of its own was first seen (a new
    /// heartbeat counter or write stamp): a member whose record stops changing so for the
    /// member timeout no longer counts as live. A version changed by others only — an
    /// operator's drain, a session changed by another node's take — does not move it.
    pub first_seen: Instant,
    /// The member's heartbeat counter.
    pub heartbeat: u64,
    /// The stamp of the member's last write of its own.
    pub written_at_unix_ms: Option<u64>,
    /// Its relative capacity.
    pub weight: u32,
    /// Whether it is handing its partitions off.
    pub draining: bool,
    /// Its capacity for load, as published ([`crate::MemberRecord::capacity`]).
    pub capacity: Option<f64>,
    /// The load above which it sheds partitions, as published.
    pub max_load: Option<f64>,
    /// Whether this node has seen the record change: proof that its writer was alive while
    /// this node watched, which a record first seen in a listing does not give.
    pub seen_changing: bool,
    /// With session leases, the session the record shows ([`session_tag`]).
    pub session: Option<NonZeroU32>,
    /// The same, whole ([`MemberRecord::session`]).
    pub session_id: Option<u64>,
    /// The local instant at which `session` was first seen: every renewal of any earlier
    /// session was made before it.
    pub session_since: Instant,
    /// The last write of the session this one replaced, as the record names it
    /// ([`MemberRecord::replaced`]).
    pub replaced: Option<u64>,
    /// The session this view showed before `session`, with the last renewal of it seen.
    /// Boxed: most members never change session, and every scan walks these rows.
    pub previous: Option<Box<PreviousSession>>,
}

/// A member's session as this view last saw it before the member moved to another.
#[derive(Debug, Clone, PartialEq)]
pub struct PreviousSession {
    /// The session ([`session_tag`]).
    pub session: Option<NonZeroU32>,
    /// The same, whole.
    pub id: Option<u64>,
    /// The stamp of the last renewal of it seen.
    pub stamp: Option<u64>,
    /// When that renewal was first seen.
    pub renewed_at: Instant,
}

impl SeenMember {
    /// Whether a lease taken under session `lease` is known to this view to be under a
    /// session that has ended, and if so, from when it is waited on and the ended session's
    /// whole identity (which the take checks against the lease record).
    ///
    /// Known only when this view saw the member's record show that very session and then
    /// another: sessions under one name follow one another and none comes back, so the one
    /// seen second began after the first ended. A record showing another session is no
    /// proof by itself: a view that has not read the member since the lease was written
    /// shows an older session than the lease's.
    ///
    /// The wait runs from the last renewal of the ended session this view saw, if the next
    /// session replaced that very renewal (nothing renewed it after), and otherwise from when
    /// the next session was first seen.
    pub fn ended_at(&self, lease: Option<NonZeroU32>) -> Option<(Instant, u64)> {
        let lease = lease?;
        if self.session == Some(lease) {
            return None;
        }
        let previous = self.previous.as_ref()?;
        let id = previous.id.filter(|_| previous.session == Some(lease))?;
        let last_seen = previous
            .stamp
            .map(|stamp| crate::record::replaced_mark(id, stamp));
        let from = if last_seen.is_some() && last_seen == self.replaced {
            previous.renewed_at
        } else {
            self.session_since
        };
        Some((from, id))
    }
}

/// A session identity ([`MemberRecord::session`], [`crate::LeaseRecord::session`]) folded to
/// 32 bits, as views keep it: rows stay small, and two identities whose tags differ differ.
/// Equal tags are taken for one session, which can only make a taker wait longer.
pub fn session_tag(session: Option<u64>) -> Option<NonZeroU32> {
    session.and_then(|id| NonZeroU32::new((id ^ (id >> 32)) as u32))
}

impl SeenMember {
    /// A member seen first at `now`, as its stored record says.
    pub fn new(now: Instant, stored: impl Into<StoredMemberHead>) -> SeenMember {
        let stored = stored.into();
        SeenMember {
            node: stored.key,
            version: stored.version,
            first_seen: now,
            heartbeat: stored.value.heartbeat,
            written_at_unix_ms: stored.value.written_at_unix_ms,
            weight: stored.value.weight,
            draining: stored.value.draining,
            capacity: stored.value.capacity,
            max_load: stored.value.max_load,
            seen_changing: false,
            session: session_tag(stored.value.session),
            session_id: stored.value.session,
            session_since: now,
            replaced: stored.value.replaced,
            previous: None,
        }
    }

    /// Folds in the same member's record as listed at `now`: a new write of the member's
    /// own is first seen `now`. The name already held is kept.
    fn update(&mut self, now: Instant, stored: &StoredMemberHead) {
        if self.version != stored.version {
            self.version = stored.version.clone();
            let new_session = stored.value.session != self.session_id;
            if new_session {
                self.previous = Some(Box::new(PreviousSession {
                    session: self.session,
                    id: self.session_id,
                    stamp: self.written_at_unix_ms,
                    renewed_at: self.first_seen,
                }));
                self.session = session_tag(stored.value.session);
                self.session_id = stored.value.session;
                self.session_since = now;
            }
            self.replaced = stored.value.replaced;
            if self.heartbeat != stored.value.heartbeat
                || self.written_at_unix_ms != stored.value.written_at_unix_ms
                || new_session
            {
                self.first_seen = now;
                self.seen_changing = true;
            }
            self.heartbeat = stored.value.heartbeat;
            self.written_at_unix_ms = stored.value.written_at_unix_ms;
            self.weight = stored.value.weight;
            self.draining = stored.value.draining;
            self.capacity = stored.value.capacity;
            self.max_load = stored.value.max_load;
        }
    }
}

/// This node's view of its group's member records, in name order.
#[derive(Debug, Clone, Default)]
pub struct MemberView {
    rows: Vec<SeenMember>,
    /// Members whose record this view showed and then no longer did, with the instant of
    /// the first listing that left each out: in a group with session leases, a lease whose
    /// holder's session is gone is waited on from then ([`MemberView::absent_since`]).
    gone: std::collections::BTreeMap<NodeId, Instant>,
    /// When the first listing was merged.
    first_listed: Option<Instant>,
    /// Members whose record the latest listing showed but could not decode, and that the
    /// view has no row for (it never read them): present, not gone, until a listing shows
    /// them absent.
    unread: std::collections::BTreeSet<NodeId>,
    /// The latest listings, oldest first: when each was sent and when its reply arrived
    /// ([`MemberView::absent_wait_from`]).
    listings: std::collections::VecDeque<(Instant, Instant)>,
}

/// How many listings [`MemberView`] remembers the times of.
const LISTINGS_KEPT: usize = 64;

impl MemberView {
    /// How many members the view shows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether the view shows no member.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The members, in name order.
    pub fn iter(&self) -> std::slice::Iter<'_, SeenMember> {
        self.rows.iter()
    }

    /// The members other than `node`, in name order, found without comparing `node` with
    /// each.
    pub fn others<'a>(&'a self, node: &NodeId) -> impl Iterator<Item = &'a SeenMember> + 'a {
        let (before, after) = match self.position(node) {
            Ok(index) => (&self.rows[..index], &self.rows[index + 1..]),
            Err(index) => self.rows.split_at(index),
        };
        before.iter().chain(after)
    }

    /// The member named `node`, if the view shows it.
    pub fn get(&self, node: &NodeId) -> Option<&SeenMember> {
        self.position(node).ok().map(|index| &self.rows[index])
    }

    /// The member named `node`, to change, if the view shows it.
    pub fn get_mut(&mut self, node: &NodeId) -> Option<&mut SeenMember> {
        self.position(node).ok().map(|index| &mut self.rows[index])
    }

    /// Adds `member`, or replaces the row of the same name.
    pub fn insert(&mut self, member: SeenMember) {
        match self.position(&member.node) {
            Ok(index) => self.rows[index] = member,
            Err(index) => self.rows.insert(index, member),
        }
    }

    /// Removes the member named `node`, if the view shows it: its record was deleted before
    /// `now`.
    pub fn remove(&mut self, node: &NodeId, now: Instant) {
        if let Ok(index) = self.position(node) {
            let row = self.rows.remove(index);
            self.gone.insert(row.node, now);
        }
    }

    /// Since when the record of `node`, which the view does not show, has been left out of
    /// every listing: the first listing without it after one with it, or the view's first
    /// listing if none ever showed it. Every write its node made to it was made before then.
    /// `None` before any listing.
    pub fn absent_since(&self, node: &NodeId) -> Option<Instant> {
        self.gone.get(node).copied().or(self.first_listed)
    }

    /// From when a lease record of `node`, first seen at `lease_seen`, is waited on while
    /// this view does not show `node`: the arrival of the first listing *sent* after
    /// `lease_seen` that left `node` out. The session the record was written under existed
    /// when it was written, before `lease_seen`, and a session once deleted never comes back;
    /// so that listing proves it gone. An absence seen only before then proves nothing
    /// about it: the node may have come back, taken the lease and be renewing it, unseen
    /// by a view whose later listings failed. `None` while no such listing has arrived.
    pub fn absent_wait_from(&self, node: &NodeId, lease_seen: Instant) -> Option<Instant> {
        let since = self.absent_since(node)?;
        self.listings
            .iter()
            .find(|(sent, arrived)| *sent > lease_seen && *arrived >= since)
            .map(|(_, arrived)| *arrived)
    }

    /// Keeps members whose record `unreadable` names (a listing at `now` showed them but
    /// could not decode them) and that the view has no row for (it never read them) from
    /// counting as gone: such a member is gone from the first listing that shows it absent,
    /// not from before. Members the view has a row for keep it ([`MemberView::merge`]).
    fn track_unreadable(&mut self, now: Instant, unreadable: &std::collections::BTreeSet<NodeId>) {
        for node in unreadable {
            if self.position(node).is_err() {
                self.unread.insert(node.clone());
                self.gone.remove(node);
            }
        }
        if !self.unread.is_subset(unreadable) {
            let departed: Vec<NodeId> = self.unread.difference(unreadable).cloned().collect();
            for node in departed {
                self.unread.remove(&node);
                if self.position(&node).is_err() {
                    self.gone.insert(node, now);
                }
            }
        }
    }

    /// Forgets when members left before `before`: for a decision made at `before` or later,
    /// an absence that began that long ago is no different from one that began at the view's
    /// first listing, so the view keeps only recent departures.
    pub fn forget_departures_before(&mut self, before: Instant) {
        self.gone.retain(|_, left| *left >= before);
    }

    fn position(&self, node: &NodeId) -> Result<usize, usize> {
        self.rows.binary_search_by(|row| row.node.cmp(node))
    }

    /// Replaces the view with a listing received at `now`, leaving out the record at index
    /// `skip`, and keeping `first_seen` for members whose version did not change.
    ///
    /// A member the listing names as unreadable (`unreadable`) keeps its row as it was: its
    /// record is there, so it has not left, and it must not count as gone from now — once it
    /// is deleted, a lease it holds is waited on from the listing that shows it absent.
    pub(crate) fn merge(
        &mut self,
        sent: Instant,
        now: Instant,
        records: impl IntoHeads,
        skip: Option<usize>,
        unreadable: &std::collections::BTreeSet<NodeId>,
    ) {
        self.merge_rows(sent, now, records.into_heads(), skip, unreadable);
        self.track_unreadable(now, unreadable);
    }

    fn merge_rows(
        &mut self,
        sent: Instant,
        now: Instant,
        mut records: Vec<StoredMemberHead>,
        skip: Option<usize>,
        unreadable: &std::collections::BTreeSet<NodeId>,
    ) {
        self.first_listed.get_or_insert(now);
        if self.listings.len() == LISTINGS_KEPT {
            self.listings.pop_front();
        }
        self.listings.push_back((sent, now));
        // Usually the listing holds the view's members in the view's order: each is then
        // updated where it stands, its name compared by identity where the names share their
        // allocation (as the in-memory store's do), without the order check that compares
        // the text of every name.
        let lined_up = {
            let mut names = records.iter().enumerate();
            let mut next = || names.find(|(i, _)| Some(*i) != skip).map(|(_, m)| &m.key);
            self.rows.len() + usize::from(skip.is_some()) == records.len()
                && self.rows.iter().all(|row| next() == Some(&row.node))
        };
        if lined_up {
            // Read in place: a record is a few hundred bytes, and moving each out of the
            // listing costs more than the update.
            let listed = records.iter().enumerate();
            let listed = listed.filter_map(|(i, stored)| (Some(i) != skip).then_some(stored));
            for (row, stored) in self.rows.iter_mut().zip(listed) {
                row.update(now, stored);
            }
            return;
        }
        let gone = &mut self.gone;
        if let Some(index) = skip {
            records.remove(index);
        }
        crate::record::in_key_order(&mut records);
        let mut old = std::mem::take(&mut self.rows).into_iter().peekable();
        self.rows.reserve_exact(records.len());
        for stored in records {
            while let Some(left) = old.next_if(|row| row.node < stored.key) {
                if unreadable.contains(&left.node) {
                    self.rows.push(left);
                } else {
                    gone.insert(left.node, now);
                }
            }
            let row = match old.next_if(|row| row.node == stored.key) {
                Some(mut row) => {
                    row.update(now, &stored);
                    row
                }
                None => {
                    gone.remove(&stored.key);
                    SeenMember::new(now, stored)
                }
            };
            self.rows.push(row);
        }
        for left in old {
            if unreadable.contains(&left.node) {
                self.rows.push(left);
            } else {
                gone.insert(left.node, now);
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use super::*;
    use crate::record::Stored;

    fn listing(names: &[&str]) -> Vec<Stored<NodeId, MemberRecord>> {
        names
            .iter()
            .map(|name| Stored {
                key: NodeId::new(name).unwrap(),
                value: MemberRecord::default(),
                version: Version::from_number(1),
            })
            .collect()
    }

    /// A member is seen changing, and its `first_seen` moves, when its heartbeat count, its
    /// write stamp or its session changes: any one of them.
    #[test]
    fn a_member_is_seen_changing_when_any_mark_of_a_renewal_changes() {
        let start = Instant::now();
        let record = |version: u64, heartbeat: u64, stamp: u64, session: u64| Stored {
            key: NodeId::new("a").unwrap(),
            value: MemberRecord {
                heartbeat,
                written_at_unix_ms: Some(stamp),
                session: Some(session),
                ..MemberRecord::default()
            },
            version: Version::from_number(version),
        };
        let mut member = SeenMember::new(start, record(1, 1, 100, 7));
        let mut at = start;
        for (changed, what) in [
            (record(2, 2, 100, 7), "the heartbeat alone"),
            (record(3, 2, 101, 7), "the stamp alone"),
            (record(4, 2, 101, 8), "the session alone"),
        ] {
            at += Duration::from_secs(1);
            member.update(at, &(&changed).into());
            assert_eq!(member.first_seen, at, "{what}");
        }
        // Written again as it was (another node's take changing the session's version).
        member.update(at + Duration::from_secs(1), &(&record(5, 2, 101, 8)).into());
        assert_eq!(member.first_seen, at, "no mark of a renewal changed");
    }

    /// A session still shows the renewal a taker waited on only while its heartbeat count,
    /// its write stamp and its identity are all as seen: a change to any one is a renewal
    /// (or a new session), and the take must not be made.
    #[test]
    fn a_session_shows_the_renewal_waited_on_only_while_every_mark_is_as_seen() {
        let seen = SessionSeen {
            node: NodeId::new("a").unwrap(),
            heartbeat: 4,
            written_at_unix_ms: Some(100),
            session: Some(7),
        };
        let record = MemberRecord {
            heartbeat: 4,
            written_at_unix_ms: Some(100),
            session: Some(7),
            ..MemberRecord::default()
        };
        assert!(seen.shows(&record));
        for changed in [
            MemberRecord {
                heartbeat: 5,
                ..record.clone()
            },
            MemberRecord {
                written_at_unix_ms: Some(101),
                ..record.clone()
            },
            MemberRecord {
                session: Some(8),
                ..record.clone()
            },
        ] {
            assert!(!seen.shows(&changed), "{changed:?}");
        }
    }

    #[test]
    fn a_view_is_empty_until_a_listing_shows_a_member() {
        let mut view = MemberView::default();
        assert!(view.is_empty());
        view.merge(
            Instant::now(),
            Instant::now(),
            listing(&["a"]),
            None,
            &BTreeSet::new(),
        );
        assert!(!view.is_empty());
    }

    #[test]
    fn others_leave_out_only_the_named_member() {
        let mut view = MemberView::default();
        view.merge(
            Instant::now(),
            Instant::now(),
            listing(&["a", "c", "e"]),
            None,
            &BTreeSet::new(),
        );
        let others = |name: &str| -> Vec<String> {
            let node = NodeId::new(name).unwrap();
            view.others(&node).map(|m| m.node.to_string()).collect()
        };
        assert_eq!(others("c"), ["a", "e"]);
        assert_eq!(others("a"), ["c", "e"]);
        assert_eq!(others("e"), ["a", "c"]);
        assert_eq!(others("b"), ["a", "c", "e"], "a name not in the view");
    }

    /// Fails if a member whose record a listing could not decode counts as gone from that
    /// listing: once its record is then deleted, what it held would be waited on from when
    /// it became unreadable — while it may have been renewing all along — instead of from
    /// the listing that shows it absent.
    #[test]
    fn an_unreadable_member_is_not_gone_until_its_record_is() {
        let mut view = MemberView::default();
        let start = Instant::now();
        let (later, latest) = (
            start + Duration::from_secs(5),
            start + Duration::from_secs(50),
        );
        let a = NodeId::new("a").unwrap();
        view.merge(start, start, listing(&["a", "b"]), None, &BTreeSet::new());
        let unreadable = BTreeSet::from([a.clone()]);
        view.merge(later, later, listing(&["b"]), None, &unreadable);
        assert!(view.get(&a).is_some(), "still a member");
        view.merge(latest, latest, listing(&["b"]), None, &BTreeSet::new());
        assert_eq!(view.absent_since(&a), Some(latest));

        // A member this view never could read: present while unreadable, gone from the
        // first listing without it.
        let c = NodeId::new("c").unwrap();
        let unreadable = BTreeSet::from([c.clone()]);
        let (read, deleted) = (
            latest + Duration::from_secs(5),
            latest + Duration::from_secs(9),
        );
        view.merge(read, read, listing(&["b"]), None, &unreadable);
        assert_eq!(view.absent_since(&c), Some(start), "never listed readable");
        view.merge(deleted, deleted, listing(&["b"]), None, &BTreeSet::new());
        assert_eq!(view.absent_since(&c), Some(deleted));
    }

    #[test]
    fn a_member_left_out_is_absent_from_the_first_listing_without_it() {
        let mut view = MemberView::default();
        let start = Instant::now();
        let later = start + std::time::Duration::from_secs(5);
        let node = |name: &str| NodeId::new(name).unwrap();
        assert_eq!(view.absent_since(&node("z")), None, "nothing listed yet");
        view.merge(
            start,
            start,
            listing(&["a", "b", "c"]),
            None,
            &BTreeSet::new(),
        );
        assert_eq!(view.absent_since(&node("z")), Some(start), "never listed");
        view.merge(later, later, listing(&["b"]), None, &BTreeSet::new());
        assert_eq!(view.absent_since(&node("a")), Some(later));
        assert_eq!(
            view.absent_since(&node("c")),
            Some(later),
            "last in name order"
        );
        view.merge(
            later + later.duration_since(start),
            later + later.duration_since(start),
            listing(&["b"]),
            None,
            &BTreeSet::new(),
        );
        assert_eq!(view.absent_since(&node("a")), Some(later), "from the first");
        view.merge(later, later, listing(&["a", "b"]), None, &BTreeSet::new());
        assert!(view.get(&node("a")).is_some(), "back");
        view.remove(&node("a"), start + std::time::Duration::from_secs(9));
        assert_eq!(
            view.absent_since(&node("a")),
            Some(start + std::time::Duration::from_secs(9)),
            "deleted by this node"
        );
        view.forget_departures_before(later + std::time::Duration::from_secs(10));
        assert_eq!(
            view.absent_since(&node("a")),
            Some(start),
            "an old departure"
        );
    }

    #[test]
    fn the_skipped_record_is_left_out_whichever_way_the_listing_is_merged() {
        let mut view = MemberView::default();
        let now = Instant::now();
        view.merge(
            now,
            now,
            listing(&["a", "b", "x"]),
            Some(2),
            &BTreeSet::new(),
        );
        assert_eq!(view.len(), 2);
        // Lined up with the view once the skipped record is left out.
        view.merge(
            now,
            now,
            listing(&["a", "x", "b"]),
            Some(1),
            &BTreeSet::new(),
        );
        // Not lined up, and out of order.
        view.merge(
            now,
            now,
            listing(&["d", "x", "a"]),
            Some(1),
            &BTreeSet::new(),
        );
        let names: Vec<String> = view.iter().map(|m| m.node.to_string()).collect();
        assert_eq!(names, ["a", "d"]);
    }
}
