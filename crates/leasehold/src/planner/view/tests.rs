//! Tests of the lease view: rows folded in from listings and writes, what few rows carry
//! kept beside them, forgotten rows, epochs remembered across deletions, the kept sums.

use std::time::Duration;

use super::*;

fn node(name: &str) -> NodeId {
    NodeId::new(name).unwrap()
}

fn row(partition: u32, version: u64, prohibited: &[&str]) -> Stored<PartitionId, LeaseRecord> {
    Stored {
        key: PartitionId(partition),
        value: LeaseRecord {
            owner: Some(node("a")),
            epoch: Epoch(version),
            state: LeaseState::Held,
            prohibited: prohibited.iter().map(|n| node(n)).collect(),
            ..LeaseRecord::default()
        },
        version: Version::from_number(version),
    }
}

fn summary(view: &LeaseView) -> Vec<(u32, u64, Vec<String>)> {
    view.iter()
        .map(|seen| {
            let names = view.prohibited(seen.partition).iter();
            let names = names.map(|n| n.as_str().to_owned()).collect();
            (seen.partition.0, seen.version.as_number().unwrap(), names)
        })
        .collect()
}

/// Fails if a row handed from one node to another loses either name: the receiver is
/// whom the others leave it to, the node that released it is where it lived (and where
/// it goes back should that node return).
#[test]
fn a_handed_row_keeps_both_its_receiver_and_its_last_holder() {
    let t0 = Instant::now();
    let released = |handed_to: Option<&str>| Stored {
        key: PartitionId(0),
        value: LeaseRecord {
            previous_owner: Some(node("a")),
            handed_to: handed_to.map(node),
            ..LeaseRecord::released()
        },
        version: Version::from_number(2),
    };
    let mut view = LeaseView::default();
    view.merge(t0, vec![released(Some("b"))]);
    let seen = view.get(PartitionId(0)).unwrap();
    assert_eq!(seen.owner, Some(node("b")));
    assert_eq!(view.last_holder(seen), Some(&node("a")));
    // Given up to anyone: the one that released it is both.
    let mut view = LeaseView::default();
    view.merge(t0, vec![released(None)]);
    let seen = view.get(PartitionId(0)).unwrap();
    assert_eq!(seen.owner, Some(node("a")));
    assert_eq!(view.last_holder(seen), Some(&node("a")));
    // Taken: the name kept aside goes with the row it described.
    let mut view = LeaseView::default();
    view.merge(t0, vec![released(Some("b"))]);
    view.merge(t0, vec![row(0, 3, &[])]);
    assert!(view.aside.released_by.is_empty());
    let seen = view.get(PartitionId(0)).unwrap();
    assert_eq!(view.last_holder(seen), Some(&node("a")));
}

#[test]
fn a_row_stays_small() {
    // A simulated fleet of a thousand nodes on 65,536 partitions keeps 65 million rows:
    // a cache line each.
    assert!(std::mem::size_of::<SeenLease>() <= 64);
}

#[test]
fn prohibited_lists_follow_their_rows() {
    let t0 = Instant::now();
    let mut view = LeaseView::default();
    view.merge(
        t0,
        vec![row(0, 1, &["x"]), row(1, 1, &[]), row(2, 1, &["y"])],
    );
    let seen = view.get(PartitionId(0)).unwrap();
    assert!(view.is_prohibited(seen, &node("x")));
    assert!(!view.is_prohibited(seen, &node("y")));
    // In place: 0 loses its list, 1 gains one, 2 keeps its own.
    view.merge(
        t0,
        vec![row(0, 2, &[]), row(1, 2, &["z"]), row(2, 1, &["y"])],
    );
    assert_eq!(
        summary(&view),
        vec![
            (0, 2, vec![]),
            (1, 2, vec!["z".to_owned()]),
            (2, 1, vec!["y".to_owned()])
        ]
    );
    // Keys that no longer line up: 1 and 2 vanish, 3 appears; no list outlives its row.
    view.merge(t0, vec![row(0, 2, &[]), row(3, 1, &["w"])]);
    assert_eq!(
        summary(&view),
        vec![(0, 2, vec![]), (3, 1, vec!["w".to_owned()])]
    );
    assert!(view.prohibited(PartitionId(1)).is_empty());
    assert!(view.prohibited(PartitionId(2)).is_empty());
    // A shorter listing with the same leading keys.
    view.merge(t0, vec![row(0, 2, &[])]);
    assert_eq!(summary(&view), vec![(0, 2, vec![])]);
    assert!(view.prohibited(PartitionId(3)).is_empty());
    assert_eq!(view.aside.prohibited.len(), 0);
}

#[test]
fn a_forgotten_row_is_hidden_until_seen_again_and_waits_afresh() {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(30);
    let mut view = LeaseView::default();
    view.merge(t0, vec![row(0, 1, &[]), row(1, 1, &[])]);
    view.forget(PartitionId(1));
    assert_eq!(view.len(), 1);
    assert!(view.get(PartitionId(1)).is_none());
    // The same version again still counts as a new sighting.
    view.merge(t1, vec![row(0, 1, &[]), row(1, 1, &[])]);
    assert_eq!(view.get(PartitionId(0)).unwrap().first_seen(), t0);
    assert_eq!(view.get(PartitionId(1)).unwrap().first_seen(), t1);
    // So it does when the keys do not line up.
    view.forget(PartitionId(1));
    view.merge(
        t1 + t1.duration_since(t0),
        vec![row(1, 1, &[]), row(5, 1, &[])],
    );
    assert_eq!(
        view.get(PartitionId(1)).unwrap().first_seen(),
        t1 + Duration::from_secs(30)
    );
    assert_eq!(view.len(), 2);
}

#[test]
fn a_view_is_empty_until_a_listing_shows_a_row_and_once_every_row_is_forgotten() {
    let mut view = LeaseView::default();
    assert!(view.is_empty());
    view.merge(Instant::now(), vec![row(0, 1, &[]), row(1, 1, &[])]);
    assert!(!view.is_empty());
    view.forget(PartitionId(0));
    assert!(!view.is_empty());
    view.forget(PartitionId(1));
    assert!(view.is_empty());
}

/// Fails if a row left out of a listing is forgotten with its epoch: deleted, then
/// created again lower behind leasehold's back, it would be taken with a fencing token
/// issued before. Both ways a listing can leave a row out: past its end, and where its
/// keys stop lining up with the view's.
#[test]
fn a_row_deleted_and_created_again_lower_is_taken_above_its_old_epoch() {
    let t0 = Instant::now();
    let mut view = LeaseView::default();
    view.merge(t0, vec![row(0, 1, &[]), row(1, 7, &[])]);
    view.merge(t0, vec![row(0, 1, &[])]);
    view.merge(t0, vec![row(0, 1, &[]), row(1, 2, &[])]);
    let recreated = view.get(PartitionId(1)).unwrap();
    assert_eq!(view.next_epoch(recreated), Epoch(8));

    let mut view = LeaseView::default();
    view.merge(t0, vec![row(0, 7, &[]), row(1, 1, &[])]);
    view.merge(t0, vec![row(1, 1, &[])]);
    view.merge(t0, vec![row(0, 2, &[]), row(1, 1, &[])]);
    let recreated = view.get(PartitionId(0)).unwrap();
    assert_eq!(view.next_epoch(recreated), Epoch(8));
}

/// Fails if a listing that repeats a key is taken as ordered: the view would then hold
/// two rows for one partition.
#[test]
fn a_listing_that_repeats_a_key_keeps_its_first_record() {
    let t0 = Instant::now();
    let mut view = LeaseView::default();
    view.merge(
        t0,
        vec![
            row(0, 1, &[]),
            row(1, 5, &[]),
            row(1, 6, &[]),
            row(2, 1, &[]),
        ],
    );
    assert_eq!(
        summary(&view),
        vec![(0, 1, vec![]), (1, 5, vec![]), (2, 1, vec![])]
    );
}

#[test]
fn inserting_a_written_row_replaces_or_places_it_in_order() {
    let t0 = Instant::now();
    let mut view = LeaseView::default();
    view.merge(t0, vec![row(0, 1, &[]), row(4, 1, &[])]);
    let written = row(2, 7, &["x"]);
    view.insert(written.key, &written.value, written.version, t0);
    let replaced = row(4, 9, &[]);
    view.insert(replaced.key, &replaced.value, replaced.version, t0);
    assert_eq!(
        summary(&view),
        vec![(0, 1, vec![]), (2, 7, vec!["x".to_owned()]), (4, 9, vec![])]
    );
}

/// Fails if any released row counts as reserved while one is: every other node would leave
/// every free row for the group's restart window whenever one node restarts in place.
#[test]
fn only_a_row_reserved_for_its_owner_counts_as_reserved() {
    let mut reserved = LeaseRecord::released();
    reserved.reserve_for(&node("a"));
    let held = LeaseRecord {
        owner: Some(node("b")),
        state: LeaseState::Held,
        ..LeaseRecord::default()
    };
    let t0 = Instant::now();
    let mut view = LeaseView::default();
    for (p, record) in [reserved, LeaseRecord::released(), held].iter().enumerate() {
        view.insert(PartitionId(p as u32), record, Version::from_number(1), t0);
    }
    let marks: Vec<bool> = view.iter().map(|seen| view.is_reserved(seen)).collect();
    assert_eq!(marks, vec![true, false, false]);
    assert_eq!(view.reserved().count(), 1);
}

/// Fails if the sums kept as rows change are never made again from the rows: floating-point
/// additions and subtractions drift (a load of 1 is lost beside one of 1e17), and the drift
/// would stay for good.
#[test]
fn the_kept_sums_are_made_again_from_the_rows_after_enough_changes() {
    let t0 = Instant::now();
    let mut view = LeaseView::default();
    let mut version = 0;
    let mut set = |view: &mut LeaseView, partition: u32, load: f64| {
        version += 1;
        let record = LeaseRecord {
            owner: Some(node("a")),
            state: LeaseState::Held,
            load: Some(load),
            ..LeaseRecord::default()
        };
        view.insert(
            PartitionId(partition),
            &record,
            Version::from_number(version),
            t0,
        );
    };
    set(&mut view, 0, 1.0);
    set(&mut view, 1, 0.0);
    set(&mut view, 1, 1e17);
    set(&mut view, 1, 0.0);
    assert_eq!(view.tally().known, 0.0, "the 1 was lost beside 1e17");
    // Changes that add up exactly, until the sums are due to be made again.
    for _ in 0..1000 {
        set(&mut view, 1, 2.0);
        set(&mut view, 1, 0.0);
    }
    assert_eq!(view.tally().known, 1.0);
    assert_eq!(view.tally().reported, 2);
}

/// Fails if a row whose version did not change loses its first sighting where a listing's
/// keys stop lining up with the view's (a row deleted or created before it): its holder's
/// silence would be timed afresh, and a crashed node's lease taken over that much later.
#[test]
fn past_where_keys_stop_lining_up_unchanged_rows_keep_their_first_sighting() {
    let t0 = Instant::now();
    let t1 = t0 + Duration::from_secs(20);
    let mut view = LeaseView::default();
    view.merge(t0, (0..4).map(|p| row(p, 1, &[])).collect());
    // 0 deleted, 2 written, 5 created: the keys do not line up from the first.
    let listing = vec![
        row(1, 1, &[]),
        row(2, 2, &[]),
        row(3, 1, &[]),
        row(5, 1, &[]),
    ];
    view.merge(t1, listing);
    let seen: Vec<(u32, u64, Instant)> = view
        .iter()
        .map(|s| {
            (
                s.partition.0,
                s.version.as_number().unwrap(),
                s.first_seen(),
            )
        })
        .collect();
    assert_eq!(seen, vec![(1, 1, t0), (2, 2, t1), (3, 1, t0), (5, 1, t1)]);
}
