//! Tests of the planner: the fixture every rule's tests share, and fair targets.

use std::time::Duration;

use super::*;
use crate::record::{LeaseRecord, MemberRecord, Stored};
use crate::types::{Epoch, Version};

pub(super) fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn share(name: &str, weight: u32, draining: bool) -> MemberShare {
    MemberShare {
        node: node(name),
        weight,
        draining,
    }
}

fn targets(partitions: u32, members: &[MemberShare], cap: u32) -> Vec<u32> {
    fair_targets(partitions, members, cap)
        .into_values()
        .collect()
}

#[test]
fn fair_targets_apportion_exactly() {
    let three = [
        share("a", 1, false),
        share("b", 1, false),
        share("c", 1, false),
    ];
    assert_eq!(targets(64, &three, 64), vec![22, 21, 21]);
    let four = [three.to_vec(), vec![share("d", 1, false)]].concat();
    assert_eq!(targets(64, &four, 64), vec![16, 16, 16, 16]);
    assert_eq!(targets(2, &three, 64), vec![1, 1, 0]);
    // The partition left over goes to the largest remainder, not the largest share: 10 by
    // 2 to 5 is 2 6/7 and 7 1/7.
    let uneven = [share("a", 2, false), share("b", 5, false)];
    assert_eq!(targets(10, &uneven, 64), vec![3, 7]);
}

#[test]
fn fair_targets_respect_weight_drain_and_cap() {
    let weighted = [
        share("a", 2, false),
        share("b", 1, false),
        share("c", 1, false),
    ];
    assert_eq!(targets(64, &weighted, 64), vec![32, 16, 16]);
    let draining = [
        share("a", 1, false),
        share("b", 1, true),
        share("c", 1, false),
    ];
    assert_eq!(targets(64, &draining, 64), vec![32, 0, 32]);
    // The heavy node is capped; the others share what it cannot take.
    let capped = [
        share("a", 10, false),
        share("b", 1, false),
        share("c", 1, false),
    ];
    assert_eq!(targets(64, &capped, 24), vec![24, 20, 20]);
    // Not enough capacity: every node at its cap, the rest unowned.
    assert_eq!(targets(64, &three_equal(), 10), vec![10, 10, 10]);
}

fn three_equal() -> Vec<MemberShare> {
    vec![
        share("a", 1, false),
        share("b", 1, false),
        share("c", 1, false),
    ]
}

#[derive(Clone)]
pub(super) struct Fixture {
    pub(super) start: Instant,
    pub(super) config: ParticipantConfig,
    pub(super) observed: Observed,
    pub(super) holdings: BTreeMap<PartitionId, Holding>,
}

impl Fixture {
    pub(super) fn new(partitions: u32) -> Fixture {
        let start = Instant::now();
        let mut observed = Observed::default();
        let records = (0..partitions)
            .map(|p| Stored {
                key: PartitionId(p),
                value: LeaseRecord::released(),
                version: Version::from_number(u64::from(p) + 1),
            })
            .collect();
        observed.observe_leases(start, records);
        Fixture {
            start,
            config: ParticipantConfig::new(node("me"), partitions),
            observed,
            holdings: BTreeMap::new(),
        }
    }

    pub(super) fn set(&mut self, partition: u32, record: LeaseRecord, version: u64, seen: Instant) {
        self.observed.leases.insert(
            PartitionId(partition),
            &record,
            Version::from_number(version),
            seen,
        );
    }

    /// A live member `name` whose record was last seen changing at `seen`.
    pub(super) fn member(&mut self, name: &str, seen: Instant) {
        let record = Stored {
            key: node(name),
            value: MemberRecord::default(),
            version: Version::from_number(1),
        };
        self.observed.members.insert(SeenMember::new(seen, record));
    }

    pub(super) fn hold(&mut self, partition: u32, valid_until: Instant) {
        self.holdings.insert(
            PartitionId(partition),
            Holding {
                epoch: Epoch(1),
                version: Version::from_number(1000 + u64::from(partition)),
                record: LeaseRecord::default(),
                valid_until,
                acquired_at: self.start,
                handing_off: false,
                keep_until: None,
                settled_at: None,
            },
        );
    }

    /// The planner's input at `now`, on the view as it stands, with 100 load moves left.
    pub(super) fn input(&self, now: Instant, draining: bool) -> PlanInput<'_> {
        PlanInput {
            now,
            config: &self.config,
            observed: &self.observed,
            holdings: &self.holdings,
            draining,
            load_moves_left: 100,
        }
    }

    fn plan_at(&self, now: Instant) -> Plan {
        self.plan_with(now, false)
    }

    /// Plans on the view as if the table had just been read: `now` is its listing time.
    fn plan_with(&self, now: Instant, draining: bool) -> Plan {
        let mut observed = self.observed.clone();
        observed.listed_at = Some(now);
        self.plan_on(&observed, now, draining)
    }

    /// Plans on the view as it stands, last read when it was built.
    fn plan_on_view(&self, now: Instant) -> Plan {
        self.plan_on(&self.observed, now, false)
    }

    fn plan_on(&self, observed: &Observed, now: Instant, draining: bool) -> Plan {
        plan(
            &PlanInput {
                now,
                config: &self.config,
                observed,
                holdings: &self.holdings,
                draining,
                load_moves_left: 100,
            },
            &mut SeededRng::new(1),
        )
    }
}

pub(super) fn held_by(owner: &str, epoch: u64) -> LeaseRecord {
    LeaseRecord {
        owner: Some(node(owner)),
        epoch: Epoch(epoch),
        state: LeaseState::Held,
        ..LeaseRecord::default()
    }
}

/// A fixture where `me` holds `mine` and `other` holds `theirs`, each partition with the
/// given load, everyone renewing.
pub(super) fn loaded(mine: &[f64], theirs: &[f64]) -> Fixture {
    let partitions = (mine.len() + theirs.len()) as u32;
    let mut fixture = Fixture::new(partitions.max(4));
    fixture.config.partitions = partitions;
    let now = fixture.start;
    // A member some heartbeats old: settled, not one that has just come back.
    fixture.observed.members.insert(SeenMember::new(
        now,
        Stored {
            key: node("other"),
            value: MemberRecord {
                heartbeat: 10,
                ..MemberRecord::default()
            },
            version: Version::from_number(1),
        },
    ));
    for (i, load) in mine.iter().enumerate() {
        let record = LeaseRecord {
            load: Some(*load),
            ..held_by("me", 1)
        };
        fixture.set(i as u32, record.clone(), 500 + i as u64, now);
        fixture.hold(i as u32, now + Duration::from_secs(20));
        fixture
            .holdings
            .get_mut(&PartitionId(i as u32))
            .unwrap()
            .record = record;
    }
    for (j, load) in theirs.iter().enumerate() {
        let p = (mine.len() + j) as u32;
        let record = LeaseRecord {
            load: Some(*load),
            ..held_by("other", 1)
        };
        fixture.set(p, record, 900 + u64::from(p), now);
    }
    fixture
}

mod balance;
mod choose;
mod sessions;
mod shed;
mod take;
mod view;
