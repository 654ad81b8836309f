//! Balancing by load: hand-offs that fit, the band, the churn budget, give-backs, leaving nodes
//! directing their partitions.

use std::time::Duration;

use super::*;

fn plan_loaded(fixture: &Fixture, budget: u32) -> Plan {
    plan_loaded_with(fixture, fixture.start + Duration::from_secs(1), budget)
}

/// Plans at `now` on the fixture's view, read just then, with `budget` moves left.
fn plan_loaded_with(fixture: &Fixture, now: Instant, budget: u32) -> Plan {
    plan_loaded_as(fixture, now, budget, false)
}

/// [`plan_loaded_with`], for a node drained (`draining`) or not.
fn plan_loaded_as(fixture: &Fixture, now: Instant, budget: u32, draining: bool) -> Plan {
    let mut observed = fixture.observed.clone();
    observed.listed_at = Some(now);
    plan(
        &PlanInput {
            now,
            config: &fixture.config,
            observed: &observed,
            holdings: &fixture.holdings,
            draining,
            load_moves_left: budget,
        },
        &mut SeededRng::new(1),
    )
}

#[test]
fn an_overloaded_node_hands_the_load_that_fits_to_the_member_below_its_share() {
    // Total 11, fair 5.5 each: this node carries 7 (above 5.5 × 1.1), the other 4.
    let fixture = loaded(&[4.0, 1.0, 1.0, 1.0], &[1.0, 1.0, 1.0, 1.0]);
    let plan = plan_loaded(&fixture, 10);
    assert_eq!(plan.load, Some((7.0, 5.5)));
    // The hot partition would overshoot the other's share; one of load 1 fits its room of
    // 1.5, and this node is then at 6, inside the band.
    assert_eq!(plan.release.len(), 1, "{plan:?}");
    let moved = plan.release[0];
    assert_ne!(moved, PartitionId(0), "the hot partition stays");
    assert_eq!(plan.return_to.get(&moved), Some(&node("other")));
    assert_eq!(plan.shed, 1);
    assert!(plan.acquire.is_empty());
    // It renews the other three, and aims to hold them.
    let kept: Vec<PartitionId> = (0..4).map(PartitionId).filter(|p| *p != moved).collect();
    assert_eq!(plan.renew, kept);
    assert_eq!(plan.target, 3);
}

#[test]
fn a_node_within_the_band_keeps_what_it_holds() {
    // 6 against a fair 5.5: within 10%, so nothing moves, whatever the budget.
    let fixture = loaded(&[3.0, 1.0, 1.0, 1.0], &[2.0, 1.0, 1.0, 1.0]);
    let plan = plan_loaded(&fixture, 10);
    assert!(plan.release.is_empty(), "{plan:?}");
    assert_eq!(plan.target, 4);
    assert!(plan.settled(), "{plan:?}");
}

#[test]
fn the_churn_budget_stops_moves_for_balance() {
    let fixture = loaded(&[4.0, 1.0, 1.0, 1.0], &[1.0, 1.0, 1.0, 1.0]);
    let plan = plan_loaded(&fixture, 0);
    assert!(plan.release.is_empty(), "{plan:?}");
}

#[test]
fn a_nearly_empty_member_is_filled_outside_the_budget_with_its_old_partitions_first() {
    // The other came back with one light partition: below half its share. This node is
    // within nothing: it gives, budget or not, and first what the other held before.
    let mut fixture = loaded(&[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], &[1.0]);
    for p in [2u32, 5] {
        fixture
            .holdings
            .get_mut(&PartitionId(p))
            .unwrap()
            .record
            .previous_owner = Some(node("other"));
    }
    let mut plan = plan_loaded(&fixture, 0);
    // First what it held before, all of it, whatever the budget.
    assert_eq!(plan.release, [PartitionId(2), PartitionId(5)], "{plan:?}");
    assert_eq!(plan.return_to[&PartitionId(5)], node("other"));
    assert_eq!(plan.shed, 0, "filling a newcomer is not charged");
    // Without that history, it is filled up to its share (fair is 4: room for 3).
    for p in [2u32, 5] {
        fixture
            .holdings
            .get_mut(&PartitionId(p))
            .unwrap()
            .record
            .previous_owner = None;
    }
    plan = plan_loaded(&fixture, 0);
    assert_eq!(plan.release.len(), 3, "{plan:?}");
    assert_eq!(plan.shed, 0, "filling a newcomer is not charged");
}

#[test]
fn a_node_above_its_ceiling_sheds_its_hottest_movable_partition_and_reports_the_rest() {
    // Balanced (4 and 4), but this node may carry at most 3.5; the other may go up to its
    // share times the band, 6.
    let mut fixture = loaded(&[2.0, 0.5, 0.5, 1.0], &[2.0, 1.0, 1.0]);
    fixture.config.load_band = 1.5;
    fixture.config.max_load = Some(3.5);
    let plan = plan_loaded(&fixture, 10);
    assert_eq!(plan.release, vec![PartitionId(0)], "{plan:?}");
    assert_eq!(plan.load_spillover, 0.0);
    // With a ceiling of 0.5, the other has room for 2 only: the rest is reported, and stays.
    fixture.config.max_load = Some(0.5);
    let plan = plan_loaded(&fixture, 10);
    assert_eq!(plan.release, vec![PartitionId(0)], "{plan:?}");
    assert_eq!(plan.load_spillover, 1.5);
}

#[test]
fn by_load_a_node_takes_free_partitions_only_while_they_fit() {
    // This node carries 4, the other 1, and two free partitions weigh 3 each: fair 5.5.
    let mut fixture = loaded(&[4.0], &[1.0]);
    fixture.config.partitions = 4;
    for p in [2u32, 3] {
        let record = LeaseRecord {
            load: Some(3.0),
            ..LeaseRecord::released()
        };
        fixture.set(p, record, 300 + u64::from(p), fixture.start);
    }
    // Below its share, it takes one (to 7: over the band, but a node below its share takes
    // what is free, so that nothing waits); a second would make 10, and is left to the other.
    let plan = plan_loaded(&fixture, 10);
    assert_eq!(plan.acquire.len(), 1, "{plan:?}");
    assert_eq!(plan.acquire[0].record.load, Some(3.0));
    assert_eq!(plan.target, 2);
}

#[test]
fn by_load_a_partition_handed_to_a_member_is_left_to_it_for_half_a_scan() {
    // This node carries 2 and the other 3; a released row of load 3 names the other, which
    // is below its share (fair 4 each). A wide band leaves this node room for it.
    let mut fixture = loaded(&[2.0], &[3.0]);
    fixture.config.partitions = 3;
    fixture.config.load_band = 2.0;
    let record = LeaseRecord {
        load: Some(3.0),
        previous_owner: Some(node("other")),
        ..LeaseRecord::released()
    };
    fixture.set(2, record, 300, fixture.start);
    let first = plan_loaded(&fixture, 10);
    assert!(first.acquire.is_empty(), "{first:?}");
    let half_scan = fixture.start + fixture.config.scan_interval / 2;
    assert_eq!(first.wake_at, Some(half_scan));
    // Not taken by then: anyone with room takes it.
    let mut observed = fixture.observed.clone();
    observed.listed_at = Some(half_scan);
    let later = plan(
        &PlanInput {
            now: half_scan,
            config: &fixture.config,
            observed: &observed,
            holdings: &fixture.holdings,
            draining: false,
            load_moves_left: 10,
        },
        &mut SeededRng::new(1),
    );
    assert_eq!(later.acquire.len(), 1, "{later:?}");
}

#[test]
fn by_load_a_partition_handed_to_this_node_is_taken_whatever_its_share() {
    // This node carries 6 of a fair 5.5: within the band, seeking nothing. A row handed to
    // it by name (load 3, which would take it past the band) is taken all the same.
    let mut fixture = loaded(&[3.0, 3.0], &[5.0]);
    fixture.config.partitions = 4;
    let record = LeaseRecord {
        load: Some(3.0),
        previous_owner: Some(node("me")),
        ..LeaseRecord::released()
    };
    fixture.set(3, record, 300, fixture.start);
    let plan = plan_loaded(&fixture, 10);
    assert_eq!(plan.acquire.len(), 1, "{plan:?}");
    assert_eq!(plan.acquire[0].partition, PartitionId(3));
}

/// Fails if a node hands off more at once than the others can take in one scan: the rest
/// would wait unserved for their later scans instead of being served here meanwhile.
#[test]
fn a_surplus_is_handed_off_no_faster_than_the_others_take() {
    let mut fixture = Fixture::new(8);
    let far = fixture.start + Duration::from_secs(60);
    for p in 0..8 {
        fixture.hold(p, far);
    }
    fixture.member("b", fixture.start);
    fixture.config.max_acquires_per_scan = 2;
    let plan = fixture.plan_at(fixture.start + Duration::from_secs(1));
    assert_eq!(plan.target, 4);
    assert_eq!(plan.release.len(), 2, "{plan:?}");
}

/// A member of a hand-built load view.
pub(super) fn member_load(name: &str, load: f64, fair: f64, young: bool) -> load::NodeLoad {
    load::NodeLoad {
        node: node(name),
        load,
        fair,
        max_load: None,
        draining: false,
        young,
        returning: young,
    }
}

/// Receivers are served in order of their load over their fair share: the ratio, with a
/// member that has no share counted as infinitely loaded if it holds any load, and as fair
/// if it holds none.
#[test]
fn a_members_load_ratio_is_its_load_over_its_fair_share() {
    let ratio = |load, fair| member_load("m", load, fair, false).ratio();
    assert_eq!(ratio(1.0, 2.0), 0.5);
    assert_eq!(ratio(6.0, 2.0), 3.0);
    assert_eq!(
        ratio(3.0, 0.0),
        f64::INFINITY,
        "load on a member with no share"
    );
    assert_eq!(ratio(0.0, 0.0), 1.0, "no load and no share");
}

/// The load view `fixture`'s node builds at `now`, keeping everything it holds.
fn view_of(fixture: &Fixture, now: Instant) -> Option<load::LoadView> {
    let keep: Vec<PartitionId> = fixture.holdings.keys().copied().collect();
    load::LoadView::of(
        now,
        &fixture.config,
        &fixture.observed,
        &fixture.holdings,
        &keep,
        false,
    )
}

/// A load view of `nodes` (sorted by name, as the planner builds it).
pub(super) fn load_view(mut nodes: Vec<load::NodeLoad>) -> load::LoadView {
    nodes.sort_by(|a, b| a.node.cmp(&b.node));
    let total = nodes.iter().map(|n| n.fair).sum();
    load::LoadView {
        nodes,
        total,
        mean_partition: 1.0,
    }
}

/// A load view in which this node ("me", carrying `load`) drains, beside `others`.
fn leaving_view(load: f64, mut others: Vec<load::NodeLoad>) -> load::LoadView {
    others.push(load::NodeLoad {
        draining: true,
        ..member_load("me", load, 0.0, false)
    });
    load_view(others)
}

/// `count` partitions from `first` on, each of load `load`, taken within the churn window
/// from `home` (if any).
pub(super) fn kept(first: u32, count: u32, load: f64, home: Option<&str>) -> Vec<load::Kept> {
    (first..first + count)
        .map(|p| load::Kept {
            partition: PartitionId(p),
            load,
            home: home.map(node),
            recent: true,
        })
        .collect()
}

/// Fails if a member that has just come back is handed back only what the band allows: the
/// fleet was balanced with it holding them, and what stays with the taker is evened out by
/// moves among the others that are never undone.
#[test]
fn a_member_just_back_gets_back_all_it_held_whatever_the_band() {
    let config = ParticipantConfig::new(node("me"), 64);
    // It is back to 4.8 of a fair 5: within the band, not starving. Giving it this node's
    // partition of load 1 leaves it above its share and this node below the band.
    let mut keep = kept(0, 4, 1.0, None);
    keep.extend(kept(4, 1, 1.0, Some("back")));
    let young = load_view(vec![
        member_load("me", 5.0, 5.0, false),
        member_load("back", 4.8, 5.0, true),
    ]);
    let shed = load::shed(
        &young,
        &config,
        &keep,
        0,
        |_, _| false,
        &mut SeededRng::new(1),
    );
    assert_eq!(shed.moves, [(PartitionId(4), node("back"))]);
    assert_eq!(shed.budgeted, 0, "a homecoming is not charged");
    // Once it is no longer young, the band rules: nothing moves.
    let settled = load_view(vec![
        member_load("me", 5.0, 5.0, false),
        member_load("back", 4.8, 5.0, false),
    ]);
    let shed = load::shed(
        &settled,
        &config,
        &keep,
        10,
        |_, _| false,
        &mut SeededRng::new(1),
    );
    assert!(shed.moves.is_empty(), "{shed:?}");
}

/// Fails if every member a little above its share gives a partition into the whole room of
/// one member a little below the band (a dozen would land on it at once), or if only ever the
/// same one is asked (its partitions may all be too large for the room).
#[test]
fn donors_within_the_band_fill_a_starving_member_about_once_a_scan_not_each() {
    // Four members at 10.3 of a fair 10 (within the band); one at 8.8 (below 10 / 1.1).
    // The plan splits the room of 1.2 into claims of 0.3, which no partition of load 1.03 fits.
    let donors = ["d1", "d2", "d3", "d4"];
    let mut nodes: Vec<_> = donors
        .iter()
        .map(|d| member_load(d, 10.3, 10.0, false))
        .collect();
    nodes.push(member_load("r", 8.8, 10.0, false));
    let view = load_view(nodes);
    let keep = kept(0, 10, 1.03, None);
    let scans = 400;
    let mut given = [0usize; 4];
    for scan in 0..scans {
        for (i, d) in donors.iter().enumerate() {
            let config = ParticipantConfig::new(node(d), 64);
            let mut rng = SeededRng::new(scan * 4 + i as u64);
            let shed = load::shed(&view, &config, &keep, 10, |_, _| false, &mut rng);
            assert!(shed.moves.len() <= 1, "{shed:?}");
            for (_, to) in &shed.moves {
                assert_eq!(*to, node("r"));
            }
            given[i] += shed.moves.len();
        }
    }
    // One chance in four each: about one partition a scan in all, from each donor in turn.
    let total: usize = given.iter().sum();
    let per_scan = total as f64 / scans as f64;
    assert!(
        (0.8..1.2).contains(&per_scan),
        "{per_scan} a scan: {given:?}"
    );
    assert!(
        given.iter().all(|g| *g > 0),
        "every donor takes its turn: {given:?}"
    );
}

/// Total 9.8, fair 4.9 each: this node carries 5 (partition 4 held by "other" before), the
/// other 4.8, both within the band, the other registered `heartbeat` heartbeats ago. Giving
/// back a partition of load 1 leaves the other above its share: no balance move would make
/// it.
fn homecoming(heartbeat: u64) -> Fixture {
    let mut fixture = loaded(&[1.0, 1.0, 1.0, 1.0, 1.0], &[1.0, 1.0, 1.0, 1.0, 0.8]);
    fixture
        .holdings
        .get_mut(&PartitionId(4))
        .unwrap()
        .record
        .previous_owner = Some(node("other"));
    registered(&mut fixture, heartbeat);
    fixture
}

/// "other" as seen at the fixture's start, `heartbeat` heartbeats after it registered.
fn registered(fixture: &mut Fixture, heartbeat: u64) {
    fixture.observed.members.insert(SeenMember::new(
        fixture.start,
        Stored {
            key: node("other"),
            value: MemberRecord {
                heartbeat,
                ..MemberRecord::default()
            },
            version: Version::from_number(2),
        },
    ));
}

/// Fails if a member that came back a few heartbeats ago (no longer young, still
/// returning) is handed back only what the band allows, as if `returning` were never set.
#[test]
fn a_member_back_a_few_heartbeats_ago_gets_back_what_it_held_whatever_the_band() {
    let back = plan_loaded(&homecoming(YOUNG_HEARTBEATS + 1), 0);
    assert_eq!(back.release, [PartitionId(4)], "{back:?}");
    assert_eq!(back.return_to[&PartitionId(4)], node("other"));
    assert_eq!(back.shed, 0, "a homecoming is not charged");
    // Long registered, the band rules: nothing moves.
    let settled = plan_loaded(&homecoming(10_000), 0);
    assert!(settled.release.is_empty(), "{settled:?}");
}

/// Fails if a partition taken exactly `churn_window` ago still counts as recently taken:
/// only those taken within the window go back to the member that held them before.
#[test]
fn a_partition_taken_a_whole_churn_window_ago_no_longer_goes_home() {
    // The fixture's leases were taken at its start, and `plan_loaded` plans a second later.
    let window = |churn_window: Duration| {
        let mut fixture = homecoming(YOUNG_HEARTBEATS + 1);
        fixture.config.churn_window = churn_window;
        plan_loaded(&fixture, 0)
    };
    let within = window(Duration::from_secs(1) + Duration::from_nanos(1));
    assert_eq!(within.release, [PartitionId(4)], "{within:?}");
    let ended = window(Duration::from_secs(1));
    assert!(ended.release.is_empty(), "{ended:?}");
}

/// Fails if giving back what a returning member held can leave this node with nothing.
#[test]
fn a_give_back_never_empties_the_giver() {
    let config = ParticipantConfig::new(node("me"), 64);
    let view = load_view(vec![
        member_load("me", 2.0, 2.0, false),
        member_load("back", 0.0, 2.0, true),
    ]);
    let keep = kept(0, 2, 1.0, Some("back"));
    let shed = load::shed(
        &view,
        &config,
        &keep,
        10,
        |_, _| false,
        &mut SeededRng::new(1),
    );
    assert_eq!(shed.moves.len(), 1, "{shed:?}");
}

/// Fails if a leaving node sends a partition back to its previous holder when that pushes
/// the holder past its band: it would shed it again at once.
#[test]
fn a_leaving_node_sends_a_partition_home_only_within_the_homes_band() {
    let config = ParticipantConfig::new(node("me"), 64);
    let view = leaving_view(
        2.0,
        vec![
            member_load("home", 7.5, 8.0, false),
            member_load("other", 4.0, 8.0, false),
        ],
    );
    // 7.5 + 2 is above 8 × 1.1.
    let leaving = kept(0, 1, 2.0, Some("home"));
    let moves = load::direct(&view, &config, &leaving, |_, _| false);
    assert_eq!(moves, [(PartitionId(0), node("other"))]);
    // Light enough, it goes home although "other" has more room.
    let light = kept(0, 1, 0.5, Some("home"));
    let moves = load::direct(&view, &config, &light, |_, _| false);
    assert_eq!(moves, [(PartitionId(0), node("home"))]);
}

/// Fails if rows beyond the group's partition count (left from a larger table) are counted
/// in the fleet's load: every share would be computed on load no one may serve.
#[test]
fn rows_beyond_the_table_count_for_no_ones_load() {
    let mut fixture = loaded(&[1.0, 1.0], &[1.0, 1.0]);
    let now = fixture.start;
    for p in 4..8u32 {
        let record = LeaseRecord {
            load: Some(10.0),
            ..held_by("other", 1)
        };
        fixture.set(p, record, 950 + u64::from(p), now);
    }
    let plan = plan_loaded(&fixture, 10);
    assert_eq!(plan.load, Some((2.0, 2.0)), "{plan:?}");
    assert!(plan.release.is_empty(), "{plan:?}");
}

/// The load view a node balances on: each member's load from the table's sums, with
/// partitions that report none estimated at the mean of those that do, and rows beyond the
/// group's partitions (left from a larger table) counted for no one, reported or not; this
/// node's own load from what it keeps, a load it could not have reported estimated too; and
/// each member's fair share of the total in proportion to its capacity.
#[test]
fn the_load_view_estimates_unreported_rows_and_counts_none_beyond_the_table() {
    let mut fixture = loaded(&[2.0, 2.0], &[2.0, 2.0]);
    fixture.config.partitions = 5;
    fixture.config.capacity = Some(3.0);
    let now = fixture.start;
    fixture.set(4, held_by("other", 1), 940, now);
    for p in 5..9u32 {
        let record = LeaseRecord {
            load: Some(10.0),
            ..held_by("other", 1)
        };
        fixture.set(p, record, 950 + u64::from(p), now);
    }
    fixture.set(9, held_by("other", 1), 960, now);
    fixture
        .holdings
        .get_mut(&PartitionId(1))
        .unwrap()
        .record
        .load = Some(-1.0);
    let view = view_of(&fixture, now).expect("loads are reported");
    assert_eq!(view.mean_partition, 2.0);
    assert_eq!(view.total, 10.0, "four reported and one estimated");
    let loads: Vec<(String, f64, f64)> = view
        .nodes
        .iter()
        .map(|n| (n.node.to_string(), n.load, n.fair))
        .collect();
    assert_eq!(
        loads,
        [("me".to_owned(), 4.0, 7.5), ("other".to_owned(), 6.0, 2.5)],
        "me: one kept as reported, one estimated; other: two reported, one estimated, none \
         beyond; fair shares three to one"
    );

    // Loads reported, all zero: nothing to balance on, and the fleet balances by count.
    let zero = loaded(&[0.0, 0.0], &[0.0, 0.0]);
    let view = view_of(&zero, now);
    assert!(view.is_none(), "{view:?}");
}

/// A member counts as returning (handed back what was taken from it while away, whatever
/// the band) while its heartbeat count is within a few heartbeats plus four scans: at the
/// default timings, where a scan takes a heartbeat, `YOUNG_HEARTBEATS` + 4.
#[test]
fn a_member_counts_as_returning_for_a_few_heartbeats_and_four_scans() {
    for (heartbeat, returning) in [
        (super::super::YOUNG_HEARTBEATS + 4, true),
        (super::super::YOUNG_HEARTBEATS + 5, false),
    ] {
        let mut fixture = loaded(&[1.0, 1.0], &[1.0, 1.0]);
        registered(&mut fixture, heartbeat);
        let view = view_of(&fixture, fixture.start).expect("loads are reported");
        let other = view.nodes.iter().find(|n| n.node == node("other")).unwrap();
        assert_eq!(other.returning, returning, "heartbeat {heartbeat}");
    }
}

/// A draining node hands off what the others lack by count; by load, everything at once
/// (the others hold what their loads call for, not their counts), while another member
/// stays to take it, and nothing while none does.
#[test]
fn by_load_a_draining_node_hands_everything_off_at_once_while_another_member_stays() {
    // Every member capped at 2: by count, the other (holding one) lacks only one of this
    // node's 4.
    let mut fixture = loaded(&[1.0; 4], &[1.0]);
    fixture.config.max_partitions_per_node = 2;
    let now = fixture.start + Duration::from_secs(1);
    assert_eq!(plan_loaded_as(&fixture, now, 0, true).release.len(), 4);
    let mut by_count = fixture.clone();
    for p in 0..4u32 {
        by_count.set(p, held_by("me", 1), 500 + u64::from(p), fixture.start);
        by_count
            .holdings
            .get_mut(&PartitionId(p))
            .unwrap()
            .record
            .load = None;
    }
    by_count.set(4, held_by("other", 1), 504, fixture.start);
    assert_eq!(plan_loaded_as(&by_count, now, 0, true).release.len(), 1);
    // The other draining too: nobody to take them.
    fixture.observed.members.insert(SeenMember::new(
        fixture.start,
        Stored {
            key: node("other"),
            value: MemberRecord {
                heartbeat: 10,
                draining: true,
                ..MemberRecord::default()
            },
            version: Version::from_number(2),
        },
    ));
    let plan = plan_loaded_as(&fixture, now, 0, true);
    assert!(plan.release.is_empty(), "{plan:?}");
}

/// Fails if a node drained in a group balanced by load releases its partitions naming no
/// receiver: they would go to whoever scans first, who would then shed the excess again.
#[test]
fn a_node_drained_by_load_names_a_receiver_for_each_partition_it_releases() {
    let fixture = loaded(&[2.0, 1.0, 1.0, 1.0], &[1.0, 1.0]);
    let plan = plan_loaded_as(&fixture, fixture.start + Duration::from_secs(1), 0, true);
    assert!(!plan.release.is_empty(), "{plan:?}");
    for partition in &plan.release {
        assert_eq!(
            plan.return_to.get(partition),
            Some(&node("other")),
            "{plan:?}"
        );
    }
}

/// Fails if a node that leaves a group balanced by load does not spread what it held: the
/// partitions would go to whoever scans first, who would then shed the excess again.
#[test]
fn a_leaving_node_directs_its_partitions_by_room_and_home() {
    let config = ParticipantConfig::new(node("me"), 64);
    // This node leaves (its share is 0); "small" has half the capacity of "big", and each
    // carries 4: after the hand-off, fair shares are 8 and 16 of a total 24.
    let view = leaving_view(
        16.0,
        vec![
            member_load("small", 4.0, 8.0, false),
            member_load("big", 4.0, 16.0, false),
        ],
    );
    // A hot partition whose home is "small" (it fits within small's band), then 12 of load 1.
    let mut leaving = kept(0, 1, 4.0, Some("small"));
    leaving.extend(kept(1, 12, 1.0, None));
    let moves: BTreeMap<PartitionId, NodeId> = load::direct(&view, &config, &leaving, |_, _| false)
        .into_iter()
        .collect();
    assert_eq!(moves.len(), 13, "every partition is directed");
    assert_eq!(moves[&PartitionId(0)], node("small"), "home first");
    let load_of = |name: &str| {
        4.0 + leaving
            .iter()
            .filter(|k| moves[&k.partition] == node(name))
            .map(|k| k.load)
            .sum::<f64>()
    };
    // Each ends at its share: the spread balance would leave, with no moves after.
    assert_eq!((load_of("small"), load_of("big")), (8.0, 16.0));
    // A partition nobody may take is directed nowhere (it goes to whoever may take it).
    let none = load::direct(&view, &config, &leaving[1..2], |_, _| true);
    assert!(none.is_empty());
}

/// Fails if a node a little below its fair share, within the band, never settles where
/// change notices reach it: it would wait on the leases of members that keep renewing them
/// and read the whole table every scan, which half the nodes of a fleet balanced by load
/// would do for ever.
#[test]
fn by_load_a_node_within_the_band_settles_but_waits_on_a_silent_members_leases() {
    // Total 4.2, fair 2.1 each: this node carries 2.0, below its share but within the band.
    let mut fixture = loaded(&[1.0, 1.0], &[1.2, 1.0]);
    let soon = fixture.start + Duration::from_secs(1);
    // Polling, it must read the table every scan to see a partition handed to it.
    assert!(!plan_loaded_with(&fixture, soon, 10).settled());
    fixture.observed.notified = true;
    let plan = plan_loaded_with(&fixture, soon, 10);
    assert!(
        plan.acquire.is_empty() && plan.release.is_empty(),
        "{plan:?}"
    );
    assert!(plan.settled(), "{plan:?}");
    // The other has not rewritten its member record for more than a heartbeat: it may have
    // crashed, and its leases expire `acquire_after` after they were first seen.
    let silent = fixture.start + fixture.config.heartbeat * 3 / 2;
    let plan = plan_loaded_with(&fixture, silent, 10);
    assert_eq!(
        plan.wake_at,
        Some(fixture.start + fixture.config.acquire_after),
        "{plan:?}"
    );
    assert!(!plan.settled());
}
