//! The nodes' fence logs read back as who held which partition when, and the figures of one
//! change of the fleet computed from them.
//!
//! Every node appends `<unix_ns> <node> <event> <partition> <epoch>` lines to one shared file
//! (see `leasehold node --fence-log`); a loss carries the instant serving stopped (for an
//! expiry, the deadline, written when a paused process resumes). The bench adds what no
//! node can write: the instant it killed one.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// What a fence-log line says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    /// The bench killed the node: every tenure of it ended at that instant. Ordered first so
    /// that at equal instants endings are applied before beginnings.
    Killed,
    /// The node handed the lease off.
    Released,
    /// The lease ran out unrenewed.
    Expired,
    /// A write by someone else ended it.
    Conflict,
    /// The node's lease loop stopped.
    Stopped,
    /// A loss of unknown kind (logs of older versions).
    Lost,
    /// The node took the lease.
    Acquired,
}

impl Kind {
    fn parse(word: &str) -> Option<Kind> {
        Some(match word {
            "acquired" => Kind::Acquired,
            "released" => Kind::Released,
            "expired" => Kind::Expired,
            "conflict" => Kind::Conflict,
            "stopped" => Kind::Stopped,
            "lost" => Kind::Lost,
            _ => return None,
        })
    }
}

/// One event of the fleet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Nanoseconds since the Unix epoch.
    pub at: u128,
    /// The node.
    pub node: String,
    /// What happened.
    pub kind: Kind,
    /// The partition (unused for [`Kind::Killed`]).
    pub partition: u32,
    /// The epoch of the tenure.
    pub epoch: u64,
}

impl Event {
    /// The bench killed `node` at `at`.
    pub fn killed(node: &str, at: u128) -> Event {
        Event {
            at,
            node: node.to_owned(),
            kind: Kind::Killed,
            partition: 0,
            epoch: 0,
        }
    }
}

/// Every complete line of a fence log, and how many lines were malformed (skipped).
pub fn parse(text: &str) -> (Vec<Event>, usize) {
    // A line still being written has no newline yet; leave it for the next read.
    let complete = text.rfind('\n').map_or("", |end| &text[..end]);
    let mut events = Vec::new();
    let mut malformed = 0;
    for line in complete.lines().filter(|l| !l.trim().is_empty()) {
        match parse_line(line) {
            Some(event) => events.push(event),
            None => malformed += 1,
        }
    }
    (events, malformed)
}

fn parse_line(line: &str) -> Option<Event> {
    let fields: Vec<&str> = line.split(' ').collect();
    let [at, node, kind, partition, epoch] = fields.as_slice() else {
        return None;
    };
    Some(Event {
        at: at.parse().ok()?,
        node: (*node).to_owned(),
        kind: Kind::parse(kind)?,
        partition: partition.parse().ok()?,
        epoch: epoch.parse().ok()?,
    })
}

/// Puts events in the order they happened; at one instant, endings before beginnings.
pub fn sort(events: &mut [Event]) {
    events.sort_by_key(|event| (event.at, event.kind));
}

/// Who holds each partition, replayed event by event.
struct Replay {
    holders: Vec<BTreeSet<String>>,
    last_holder: Vec<Option<String>>,
    /// Since when each partition has had no holder.
    unowned_since: Vec<Option<u128>>,
}

/// What applying one event did.
#[derive(Default)]
struct Applied {
    /// A partition got a holder after `since`.
    owned_after: Option<u128>,
    /// The acquirer is not the partition's last holder.
    moved: bool,
    /// Another node held the partition when it was acquired.
    double_owner: bool,
    /// Partitions the event left without a holder.
    emptied: Vec<u32>,
}

impl Replay {
    /// Each partition's holder, if exactly one node holds it.
    fn sole_holders(&self) -> Vec<Option<String>> {
        self.holders
            .iter()
            .map(|holders| match holders.len() {
                1 => holders.iter().next().cloned(),
                _ => None,
            })
            .collect()
    }

    fn new(partitions: u32) -> Replay {
        let count = partitions as usize;
        Replay {
            holders: vec![BTreeSet::new(); count],
            last_holder: vec![None; count],
            unowned_since: vec![Some(0); count],
        }
    }

    fn apply(&mut self, event: &Event) -> Applied {
        let mut applied = Applied::default();
        if event.kind == Kind::Killed {
            for (partition, holders) in (0u32..).zip(self.holders.iter_mut()) {
                if holders.remove(&event.node) && holders.is_empty() {
                    self.unowned_since[partition as usize] = Some(event.at);
                    applied.emptied.push(partition);
                }
            }
            return applied;
        }
        let Some(index) = usize::try_from(event.partition)
            .ok()
            .filter(|i| *i < self.holders.len())
        else {
            return applied;
        };
        if event.kind == Kind::Acquired {
            let holders = &mut self.holders[index];
            applied.double_owner = holders.iter().any(|holder| *holder != event.node);
            applied.moved = self.last_holder[index].as_deref() != Some(event.node.as_str());
            holders.insert(event.node.clone());
            self.last_holder[index] = Some(event.node.clone());
            applied.owned_after = self.unowned_since[index].take();
        } else if self.holders[index].remove(&event.node) && self.holders[index].is_empty() {
            self.unowned_since[index] = Some(event.at);
            applied.emptied.push(event.partition);
        }
        applied
    }

    fn unowned(&self) -> usize {
        self.holders.iter().filter(|h| h.is_empty()).count()
    }

    fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for holder in self.holders.iter().flatten() {
            *counts.entry(holder.clone()).or_insert(0) += 1;
        }
        counts
    }

    /// Every partition has exactly one holder, every holder is live, and the live nodes'
    /// counts are their even shares (each ⌊P/L⌋ or ⌈P/L⌉).
    fn settled(&self, live: &BTreeSet<String>) -> bool {
        if live.is_empty() || self.holders.iter().any(|h| h.len() != 1) {
            return false;
        }
        let counts = self.counts();
        let partitions = self.holders.len();
        let (low, high) = (partitions / live.len(), partitions.div_ceil(live.len()));
        counts.keys().all(|node| live.contains(node))
            && live.iter().all(|node| {
                let held = counts.get(node).copied().unwrap_or(0);
                (low..=high).contains(&held)
            })
    }
}

/// One change as the bench applied it.
#[derive(Debug, Clone)]
pub struct Window {
    /// When the change began (a signal sent, a process started).
    pub start: u128,
    /// For a pause, when the node was resumed: unowned gaps that begin before then belong
    /// to the change's first part, "every partition owned again".
    pub disruption_end: Option<u128>,
    /// The last instant looked at.
    pub end: u128,
    /// The nodes that should share the partitions once the change is over.
    pub live: BTreeSet<String>,
}

/// The figures of one change, from the fence logs.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Figures {
    /// Seconds from the change until the fleet settled (every partition held once, by the
    /// live nodes, at even shares, and staying so); `None` if it never did by the end.
    pub settled_s: Option<f64>,
    /// Seconds from the change until the last partition it left unowned was owned again
    /// (0 if it left none unowned).
    pub owned_again_s: f64,
    /// The integral of the number of unowned partitions over the change, in
    /// partition-seconds.
    pub unowned_partition_s: f64,
    /// Partitions that were unowned at some moment of the change.
    pub interrupted: usize,
    /// The longest any one partition went unowned, in seconds.
    pub longest_gap_s: f64,
    /// Acquisitions by a node other than the partition's previous holder.
    pub moves: usize,
    /// The fewest moves the change could have been made with (set by the caller).
    pub min_moves: usize,
    /// Leases that ended by running out rather than being handed off.
    pub expiries: usize,
    /// Acquisitions of a partition another node still held.
    pub double_owners: usize,
    /// Partitions held at the end by the node that held them when the change began: after
    /// a rolling restart, those that went back to their holder (warm caches, local state).
    pub same_holder: usize,
}

/// The figures of the change in `window`, from `events` (sorted, the whole run so far).
pub fn figures(events: &[Event], partitions: u32, window: &Window) -> Figures {
    let settled_at = settled_at(events, partitions, window);
    let stop = settled_at.unwrap_or(window.end);
    let disruption_end = window.disruption_end.unwrap_or(stop).min(stop);
    let mut replay = Replay::new(partitions);
    let mut figures = Figures {
        settled_s: settled_at.map(|at| seconds(at - window.start)),
        ..Figures::default()
    };
    let mut interrupted = BTreeSet::new();
    let mut holders_before: Option<Vec<Option<String>>> = None;
    let mut owned_again = window.start;
    // The integral of unowned partitions runs from the window's start, event to event.
    let mut clock = window.start;
    let mut entered = false;
    for event in events.iter().filter(|e| e.at <= stop) {
        if !entered && event.at >= window.start {
            entered = true;
            interrupted.extend(open_gaps(&replay));
            holders_before = Some(replay.sole_holders());
        }
        if entered {
            figures.unowned_partition_s += replay.unowned() as f64 * seconds(event.at - clock);
            clock = event.at;
        }
        let applied = replay.apply(event);
        if !entered {
            continue;
        }
        interrupted.extend(applied.emptied);
        match event.kind {
            Kind::Expired => figures.expiries += 1,
            Kind::Acquired => {
                figures.moves += usize::from(applied.moved);
                figures.double_owners += usize::from(applied.double_owner);
                if let Some(since) = applied.owned_after {
                    let began = since.max(window.start);
                    figures.longest_gap_s = figures.longest_gap_s.max(seconds(event.at - began));
                    if began <= disruption_end {
                        owned_again = owned_again.max(event.at);
                    }
                }
            }
            _ => {}
        }
    }
    if !entered {
        interrupted.extend(open_gaps(&replay));
    }
    let before = holders_before.unwrap_or_else(|| replay.sole_holders());
    figures.same_holder = before
        .iter()
        .zip(replay.sole_holders())
        .filter(|(before, after)| before.is_some() && **before == *after)
        .count();
    figures.unowned_partition_s += replay.unowned() as f64 * seconds(stop.saturating_sub(clock));
    for since in replay.unowned_since.iter().flatten() {
        // Still unowned at the end: the gap runs to it.
        let began = (*since).max(window.start);
        figures.longest_gap_s = figures
            .longest_gap_s
            .max(seconds(stop.saturating_sub(began)));
        if began <= disruption_end {
            owned_again = owned_again.max(stop);
        }
    }
    figures.interrupted = interrupted.len();
    figures.owned_again_s = seconds(owned_again - window.start);
    figures
}

fn open_gaps(replay: &Replay) -> Vec<u32> {
    (0u32..)
        .zip(&replay.holders)
        .filter(|(_, holders)| holders.is_empty())
        .map(|(partition, _)| partition)
        .collect()
}

/// The instant from which the fleet stayed settled up to the window's end, if it did.
pub fn settled_at(events: &[Event], partitions: u32, window: &Window) -> Option<u128> {
    let mut replay = Replay::new(partitions);
    let mut since = None;
    let mut started = false;
    for event in events.iter().filter(|e| e.at <= window.end) {
        if !started && event.at >= window.start {
            started = true;
            since = replay.settled(&window.live).then_some(window.start);
        }
        replay.apply(event);
        if started {
            match (since, replay.settled(&window.live)) {
                (None, true) => since = Some(event.at),
                (Some(_), false) => since = None,
                _ => {}
            }
        }
    }
    if !started {
        since = replay.settled(&window.live).then_some(window.start);
    }
    since
}

/// How many partitions each node holds at `at`.
pub fn counts_at(events: &[Event], partitions: u32, at: u128) -> BTreeMap<String, usize> {
    let mut replay = Replay::new(partitions);
    for event in events.iter().filter(|e| e.at <= at) {
        replay.apply(event);
    }
    replay.counts()
}

fn seconds(nanos: u128) -> f64 {
    nanos as f64 / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u128 = 1_000_000_000;

    fn event(at: u128, node: &str, kind: Kind, partition: u32) -> Event {
        Event {
            at,
            node: node.to_owned(),
            kind,
            partition,
            epoch: 1,
        }
    }

    fn window(start: u128, end: u128, live: &[&str]) -> Window {
        Window {
            start,
            disruption_end: None,
            end,
            live: live.iter().map(|n| (*n).to_owned()).collect(),
        }
    }

    #[test]
    fn lines_parse_and_bad_ones_are_counted() {
        let text = "5 a acquired 0 1\nnot a line\n6 a expired 0 1\n7 b released 1 2\n8 b acq";
        let (events, malformed) = parse(text);
        assert_eq!(malformed, 1);
        assert_eq!(events.len(), 3, "the unfinished last line waits");
        assert_eq!(events[1].kind, Kind::Expired);
    }

    #[test]
    fn a_crash_is_timed_from_the_kill_to_the_takeover() {
        // Two partitions: a holds 0, b holds 1; a is killed at 10 s, b takes 0 at 13 s.
        let mut events = vec![
            event(S, "a", Kind::Acquired, 0),
            event(S, "b", Kind::Acquired, 1),
            Event::killed("a", 10 * S),
            event(13 * S, "b", Kind::Acquired, 0),
        ];
        sort(&mut events);
        let window = window(10 * S, 20 * S, &["b"]);
        let figures = figures(&events, 2, &window);
        assert_eq!(figures.settled_s, Some(3.0));
        assert_eq!(figures.owned_again_s, 3.0);
        assert_eq!(figures.unowned_partition_s, 3.0);
        assert_eq!(figures.interrupted, 1);
        assert_eq!(figures.longest_gap_s, 3.0);
        assert_eq!(figures.moves, 1);
        assert_eq!(figures.double_owners, 0);
    }

    #[test]
    fn partitions_back_with_their_holder_after_a_restart_count_as_the_same_holder() {
        // a holds 0 and 1, b holds 2; a restarts: b takes 0 and 1, then a takes 0 back.
        let mut events = vec![
            event(S, "a", Kind::Acquired, 0),
            event(S, "a", Kind::Acquired, 1),
            event(S, "b", Kind::Acquired, 2),
            event(10 * S, "a", Kind::Released, 0),
            event(10 * S, "a", Kind::Released, 1),
            event(11 * S, "b", Kind::Acquired, 0),
            event(11 * S, "b", Kind::Acquired, 1),
            event(15 * S, "b", Kind::Released, 0),
            event(16 * S, "a", Kind::Acquired, 0),
        ];
        sort(&mut events);
        let figures = figures(&events, 3, &window(5 * S, 30 * S, &["a", "b"]));
        assert_eq!(
            figures.same_holder, 2,
            "0 came back to a, 2 never left b; 1 stayed with b"
        );
        assert_eq!(figures.moves, 3);
    }

    #[test]
    fn overlapping_tenures_are_double_owners() {
        let mut events = vec![
            event(S, "a", Kind::Acquired, 0),
            event(2 * S, "b", Kind::Acquired, 0),
            event(3 * S, "a", Kind::Expired, 0),
        ];
        sort(&mut events);
        let window = window(0, 5 * S, &["b"]);
        let figures = figures(&events, 1, &window);
        assert_eq!(figures.double_owners, 1);
        assert_eq!(figures.expiries, 1);
        assert_eq!(figures.settled_s, Some(3.0), "settled once a let go");
    }

    #[test]
    fn a_hand_off_counts_its_gap_and_one_move() {
        // Four partitions on a; b joins at 10 s and a hands 2 and 3 over, 5 ms each.
        let ms = S / 1000;
        let mut events: Vec<Event> = (0..4).map(|p| event(S, "a", Kind::Acquired, p)).collect();
        events.extend([
            event(10 * S + 100 * ms, "a", Kind::Released, 2),
            event(10 * S + 105 * ms, "b", Kind::Acquired, 2),
            event(10 * S + 200 * ms, "a", Kind::Released, 3),
            event(10 * S + 205 * ms, "b", Kind::Acquired, 3),
        ]);
        sort(&mut events);
        let window = window(10 * S, 12 * S, &["a", "b"]);
        let figures = figures(&events, 4, &window);
        assert_eq!(figures.settled_s, Some(0.205));
        assert_eq!(figures.moves, 2);
        assert_eq!(figures.interrupted, 2);
        assert!((figures.unowned_partition_s - 0.010).abs() < 1e-9);
        assert!((figures.longest_gap_s - 0.005).abs() < 1e-9);
        assert!((figures.owned_again_s - 0.205).abs() < 1e-9);
        assert_eq!(counts_at(&events, 4, 11 * S)["b"], 2);
    }

    #[test]
    fn a_cold_start_counts_every_partition_from_the_start() {
        let mut events = vec![
            event(2 * S, "a", Kind::Acquired, 0),
            event(3 * S, "b", Kind::Acquired, 1),
        ];
        sort(&mut events);
        let window = window(S, 10 * S, &["a", "b"]);
        let figures = figures(&events, 2, &window);
        assert_eq!(figures.settled_s, Some(2.0));
        assert_eq!(figures.unowned_partition_s, 3.0, "1 s of two, 1 s of one");
        assert_eq!(figures.interrupted, 2);
        assert_eq!(figures.moves, 2);
        assert_eq!(figures.longest_gap_s, 2.0);
    }

    #[test]
    fn a_fleet_that_never_settles_says_so() {
        let events = vec![event(2 * S, "a", Kind::Acquired, 0)];
        let window = window(S, 10 * S, &["a", "b"]);
        let figures = figures(&events, 2, &window);
        assert_eq!(figures.settled_s, None);
        assert_eq!(figures.longest_gap_s, 9.0, "partition 1 never owned");
        assert_eq!(
            figures.unowned_partition_s,
            2.0 + 8.0,
            "two unowned for 1 s, one for 8 s"
        );
    }
}
