//! What a node balancing by load hands off when its share of the transport plan fits none of
//! its partitions, and which partitions go back to the member that held them before.

use super::balance::{kept, load_view, member_load};
use super::*;

/// This node's partitions, one for each load given, none taken from a member that came back.
fn loads(loads: &[f64]) -> Vec<load::Kept> {
    loads
        .iter()
        .enumerate()
        .map(|(p, &load)| load::Kept {
            partition: PartitionId(p as u32),
            load,
            home: None,
            recent: true,
        })
        .collect()
}

/// What "me" hands off in `view`, keeping `keep`, within `budget` moves.
fn shed(view: &load::LoadView, keep: &[load::Kept], budget: u32) -> load::Shedding {
    let config = ParticipantConfig::new(node("me"), 64);
    shed_by(&config, view, keep, budget)
}

/// The same, with `config`.
fn shed_by(
    config: &ParticipantConfig,
    view: &load::LoadView,
    keep: &[load::Kept],
    budget: u32,
) -> load::Shedding {
    let mut rng = SeededRng::new(7);
    load::shed(view, config, keep, budget, |_, _| false, &mut rng)
}

/// A member of the view with a ceiling (`max_load`).
fn capped(name: &str, load: f64, fair: f64, max: f64) -> load::NodeLoad {
    load::NodeLoad {
        max_load: Some(max),
        ..member_load(name, load, fair, false)
    }
}

/// Fails if a node above its ceiling with one partition left reports no spillover: the
/// load above its ceiling that stays with it, which the operator is told of.
#[test]
fn a_node_above_its_ceiling_with_one_partition_keeps_it_and_reports_the_spillover() {
    let view = load_view(vec![
        capped("me", 8.0, 5.0, 6.0),
        member_load("r", 0.0, 5.0, false),
    ]);
    let shedding = shed(&view, &loads(&[8.0]), 10);
    assert!(shedding.moves.is_empty(), "{shedding:?}");
    assert_eq!(shedding.spillover, 2.0);
}

/// Fails if a node exactly at its ceiling counts as above it (it would give below its share
/// over the band), or if the floor it keeps is anything but its share over the band.
#[test]
fn a_node_at_its_ceiling_keeps_its_share_over_the_band() {
    // At 8 of a fair 5 it is out of the band, and exactly at its ceiling of 8. Its claim of
    // 3 on r fits neither partition of 4; r's whole room of 5 does, but giving one would
    // leave it at 4, below 5 / 1.1.
    let view = load_view(vec![
        capped("me", 8.0, 5.0, 8.0),
        member_load("r", 0.0, 5.0, false),
    ]);
    let shedding = shed(&view, &loads(&[4.0, 4.0]), 10);
    assert!(shedding.moves.is_empty(), "{shedding:?}");
    assert_eq!(shedding.spillover, 0.0);
}

/// Fails if a node out of the band whose claims fit none of its partitions (here it has
/// none: a donor ahead of it claimed every room) does not fall back on the whole room of
/// any receiver, trying the next when the first has too little.
#[test]
fn out_of_the_band_a_node_falls_back_on_the_room_of_any_receiver_in_turn() {
    // The donor d takes both rooms in the plan. This node, second of the donors, starts
    // with the second emptiest receiver, whose room of 0.4 fits nothing, then d (no room),
    // then ra.
    let view = load_view(vec![
        member_load("d", 3.0, 1.0, false),
        member_load("me", 1.6, 1.0, false),
        member_load("ra", 0.0, 1.0, false),
        member_load("rb", 0.6, 1.0, false),
    ]);
    let shedding = shed(&view, &loads(&[0.5, 0.5, 0.6]), 10);
    assert_eq!(shedding.moves, [(PartitionId(2), node("ra"))]);
}

/// A node exactly at the edge of the band is within it: giving only because members starve,
/// it falls back only on the room of a receiver it claims a part of.
///
/// Fails if the edge counts as out of the band: that node would also pour into a room the
/// plan gave another donor.
#[test]
fn at_the_edge_of_the_band_a_node_falls_back_only_on_rooms_it_claims() {
    // A band of 1.25 and shares of 4 keep the sums exact: d and this node are at 5, the
    // edge; s1 (3) and s2 (3.1) starve below 3.2. d, first by name, claims all of s1's room
    // of 1; this node claims s2's 0.9, which its partition of 0.95 does not fit; s1's room
    // would.
    let mut config = ParticipantConfig::new(node("me"), 64);
    config.load_band = 1.25;
    let view = load_view(vec![
        member_load("d", 5.0, 4.0, false),
        member_load("me", 5.0, 4.0, false),
        member_load("s1", 3.0, 4.0, false),
        member_load("s2", 3.1, 4.0, false),
    ]);
    let shedding = shed_by(&config, &view, &loads(&[0.95, 4.05]), 10);
    assert!(shedding.moves.is_empty(), "{shedding:?}");
    // With s2 at 3.05, its room of 0.95 fits the partition, and it goes there.
    let view = load_view(vec![
        member_load("d", 5.0, 4.0, false),
        member_load("me", 5.0, 4.0, false),
        member_load("s1", 3.0, 4.0, false),
        member_load("s2", 3.05, 4.0, false),
    ]);
    let shedding = shed_by(&config, &view, &loads(&[0.95, 4.05]), 10);
    assert_eq!(shedding.moves, [(PartitionId(0), node("s2"))]);
}

/// Fails if donors falling back on whole rooms all start with the same receiver: each
/// starts at its own place among the donors.
#[test]
fn donors_falling_back_start_with_different_receivers() {
    // d, first of the donors, claims both rooms and starts with r1; this node, second,
    // claims nothing and starts with r2.
    let view = load_view(vec![
        member_load("d", 3.0, 1.0, false),
        member_load("me", 2.5, 1.0, false),
        member_load("r1", 0.0, 1.0, false),
        member_load("r2", 0.2, 1.0, false),
    ]);
    let shedding = shed(&view, &loads(&[0.5; 5]), 10);
    assert_eq!(shedding.moves, [(PartitionId(0), node("r2"))]);
}

/// Fails if a node falls back on the room of a member that has only just joined (young):
/// the plan never counts it as a receiver, and its share is not settled yet.
#[test]
fn no_partition_falls_back_on_a_member_just_joined() {
    let view = load_view(vec![
        member_load("me", 2.0, 1.0, false),
        member_load("new", 0.0, 1.0, true),
    ]);
    let shedding = shed(&view, &loads(&[1.0, 1.0]), 10);
    assert!(shedding.moves.is_empty(), "{shedding:?}");
}

/// Fails if two give-backs to one member are each judged by its load before either: the
/// second must count the first.
#[test]
fn give_backs_to_one_member_count_what_it_received_before() {
    // h, at 0 of a fair 4, starves, so each give-back is outside the budget (here 0) while
    // it stays below 4 / 1.1: two of load 2 do that, a third would not.
    let view = load_view(vec![
        member_load("me", 20.0, 4.0, false),
        member_load("h", 0.0, 4.0, false),
    ]);
    let mut keep = kept(0, 3, 2.0, Some("h"));
    keep.extend(kept(3, 7, 2.0, None));
    let shedding = shed(&view, &keep, 0);
    let to_h = [(PartitionId(0), node("h")), (PartitionId(1), node("h"))];
    assert_eq!(shedding.moves, to_h);
    assert_eq!(shedding.budgeted, 0);
}

/// Fails if a give-back may put its member above its ceiling.
#[test]
fn a_give_back_never_puts_its_member_above_its_ceiling() {
    // h would go from 9.5 to 9.9, above its ceiling of 9.8; this node, within the band,
    // has nothing to shed otherwise.
    let view = load_view(vec![
        member_load("me", 10.5, 10.0, false),
        capped("h", 9.5, 10.0, 9.8),
    ]);
    let mut keep = kept(0, 1, 0.4, Some("h"));
    keep.extend(kept(1, 1, 10.1, None));
    let shedding = shed(&view, &keep, 5);
    assert!(shedding.moves.is_empty(), "{shedding:?}");
}

/// Fails if a member exactly at its share over the band counts as starving: a give-back to
/// it would then be made outside the budget.
#[test]
fn a_member_at_its_share_over_the_band_is_not_starving_for_a_give_back() {
    let band = ParticipantConfig::new(node("me"), 64).load_band;
    let view = load_view(vec![
        member_load("me", 10.5, 10.0, false),
        member_load("h", 10.0 / band, 10.0, false),
    ]);
    let mut keep = kept(0, 1, 0.5, Some("h"));
    keep.extend(kept(1, 1, 10.0, None));
    let shedding = shed(&view, &keep, 0);
    assert!(shedding.moves.is_empty(), "{shedding:?}");
}

/// A give-back within the budget is made when it leaves its member at or below its share and
/// less loaded for its share than this node was; not when it would push the member past its
/// share, however loaded this node is.
///
/// Fails if the comparison is dropped or weakened either way.
#[test]
fn a_give_back_for_balance_must_leave_its_member_within_its_share() {
    // Both within the band, so nothing but the give-back can move. h at 9.2 of 10 takes
    // back 0.5: 9.7, and 0.97 of its share against this node's 1.05.
    let view = load_view(vec![
        member_load("me", 10.5, 10.0, false),
        member_load("h", 9.2, 10.0, false),
    ]);
    let mut keep = kept(0, 1, 0.5, Some("h"));
    keep.extend(kept(1, 1, 10.0, None));
    let shedding = shed(&view, &keep, 1);
    assert_eq!(shedding.moves, [(PartitionId(0), node("h"))]);
    assert_eq!(shedding.budgeted, 1);
    // h at 9.5 taking back 0.9 would reach 10.4, past its share, although 1.04 of it is
    // still less than this node's 1.05.
    let view = load_view(vec![
        member_load("me", 10.5, 10.0, false),
        member_load("h", 9.5, 10.0, false),
    ]);
    let mut keep = kept(0, 1, 0.9, Some("h"));
    keep.extend(kept(1, 1, 9.6, None));
    let shedding = shed(&view, &keep, 5);
    assert!(shedding.moves.is_empty(), "{shedding:?}");
    // Nor when it would leave h exactly as loaded for its share as this node is: 9.5 and
    // 0.5 make 10 of 10, and this node holds 10 of 10.
    let view = load_view(vec![
        member_load("me", 10.0, 10.0, false),
        member_load("h", 9.5, 10.0, false),
    ]);
    let mut keep = kept(0, 1, 0.5, Some("h"));
    keep.extend(kept(1, 1, 9.5, None));
    let shedding = shed(&view, &keep, 5);
    assert!(shedding.moves.is_empty(), "{shedding:?}");
}

/// Fails if a starving member gets back what it held only when that also balances: it is
/// below its share over the band, and gets a partition back even past its share.
#[test]
fn a_starving_member_gets_a_partition_back_even_past_its_share() {
    // h at 3 of 4 is below 4 / 1.1; taking back 1.5 puts it at 4.5. The budget is spent.
    let view = load_view(vec![
        member_load("me", 10.0, 4.0, false),
        member_load("h", 3.0, 4.0, false),
    ]);
    let mut keep = kept(0, 1, 1.5, Some("h"));
    keep.extend(kept(1, 1, 8.5, None));
    let shedding = shed(&view, &keep, 0);
    assert_eq!(shedding.moves, [(PartitionId(0), node("h"))]);
    assert_eq!(shedding.budgeted, 0);
}

/// Fails if give-backs for balance are not counted against the budget, or one more is made
/// than it allows.
#[test]
fn give_backs_for_balance_stop_at_the_budget() {
    // Two of 0.3 back to h at 9.2 of 10 would each balance; the budget allows one.
    let view = load_view(vec![
        member_load("me", 10.5, 10.0, false),
        member_load("h", 9.2, 10.0, false),
    ]);
    let mut keep = kept(0, 2, 0.3, Some("h"));
    keep.extend(kept(2, 1, 9.9, None));
    let shedding = shed(&view, &keep, 1);
    assert_eq!(shedding.moves, [(PartitionId(0), node("h"))]);
    assert_eq!(shedding.budgeted, 1);
}

/// A give-back to a starving member leaves this node at or above its share over the band,
/// counting the give-backs before it.
///
/// Fails if the floor is computed otherwise, or if what was given back before is not taken
/// off this node's load.
#[test]
fn give_backs_leave_the_giver_at_its_share_over_the_band() {
    // This node holds exactly its share, so nothing but give-backs moves; h starves.
    let at_share = || {
        load_view(vec![
            member_load("me", 10.0, 10.0, false),
            member_load("h", 0.0, 10.0, false),
        ])
    };
    // 1 back would leave 9, below 10 / 1.1.
    let mut keep = kept(0, 1, 1.0, Some("h"));
    keep.extend(kept(1, 1, 9.0, None));
    assert!(shed(&at_share(), &keep, 0).moves.is_empty());
    // 0.5 leaves 9.5: given. A second 0.5 would leave 9.
    let mut keep = kept(0, 2, 0.5, Some("h"));
    keep.extend(kept(2, 1, 9.0, None));
    let shedding = shed(&at_share(), &keep, 0);
    assert_eq!(shedding.moves, [(PartitionId(0), node("h"))]);
}

/// Fails if one scan gives back more partitions than a receiver takes in one scan.
#[test]
fn give_backs_are_no_more_than_one_scan_of_takes() {
    let mut config = ParticipantConfig::new(node("me"), 64);
    config.max_acquires_per_scan = 1;
    let view = load_view(vec![
        member_load("me", 20.0, 10.0, false),
        member_load("h", 0.0, 10.0, false),
    ]);
    let mut keep = kept(0, 2, 1.0, Some("h"));
    keep.extend(kept(2, 1, 18.0, None));
    let shedding = shed_by(&config, &view, &keep, 0);
    assert_eq!(shedding.moves, [(PartitionId(0), node("h"))]);
}

/// While no donor is out of the band (moves are called for only because a member starves),
/// only starving members receive; once one is out of it, every member below its share does.
///
/// Fails if the plan's receivers or its pressing are judged otherwise.
#[test]
fn only_starving_members_receive_unless_a_donor_is_out_of_the_band() {
    let band = ParticipantConfig::new(node("me"), 64).load_band;
    // d at 11 of 10 is within the band and first among donors: it claims all of s's room.
    // n below its share and e exactly at its share over the band do not starve: this
    // node, at 10.5, has nowhere to put its partition of 0.4.
    let view = load_view(vec![
        member_load("d", 11.0, 10.0, false),
        member_load("me", 10.5, 10.0, false),
        member_load("s", 9.05, 10.0, false),
        member_load("n", 9.5, 10.0, false),
        member_load("e", 10.0 / band, 10.0, false),
    ]);
    let shedding = shed(&view, &loads(&[0.4, 10.1]), 10);
    assert!(shedding.moves.is_empty(), "{shedding:?}");
    // At 11.05 this node is out of the band: n receives.
    let view = load_view(vec![
        member_load("me", 11.05, 10.0, false),
        member_load("n", 9.5, 10.0, false),
    ]);
    let shedding = shed(&view, &loads(&[0.4, 10.65]), 10);
    assert_eq!(shedding.moves, [(PartitionId(0), node("n"))]);
}

/// Donors out of the band or above their ceilings do not count among the claimants of a
/// room: a donor within the band that shares a receiver only with them falls back on its
/// whole room every time, not by lot.
///
/// Fails if such a donor is counted, either way it is out (band or ceiling).
#[test]
fn only_donors_within_the_band_draw_lots_for_a_room() {
    // s at 8 of 10 starves, with a room of 2. d takes 1.05 or 0.5 of it first, this node
    // (10.5, within the band) claims 0.5 of what is left, which its partition of 0.8 does not
    // fit; the whole room does.
    let out_of_band = member_load("d", 11.05, 10.0, false);
    let above_ceiling = capped("d", 10.5, 10.0, 10.0);
    for d in [out_of_band, above_ceiling] {
        let view = load_view(vec![
            d.clone(),
            member_load("me", 10.5, 10.0, false),
            member_load("s", 8.0, 10.0, false),
        ]);
        let config = ParticipantConfig::new(node("me"), 64);
        let keep = loads(&[0.8, 9.7]);
        for seed in 0..16 {
            let mut rng = SeededRng::new(seed);
            let shedding = load::shed(&view, &config, &keep, 10, |_, _| false, &mut rng);
            assert_eq!(
                shedding.moves,
                [(PartitionId(0), node("s"))],
                "{d:?}, seed {seed}"
            );
        }
    }
}

/// Fails if a donor's claim on a room ignores what the donors before it claimed of it.
#[test]
fn each_donor_claims_what_the_donors_before_it_left_of_a_room() {
    // r has room for 3; d, first, claims 2 of it; this node's claim is the 1 left, which
    // takes one of its partitions of 0.7, not two.
    let view = load_view(vec![
        member_load("d", 12.0, 10.0, false),
        member_load("me", 11.5, 10.0, false),
        member_load("r", 7.0, 10.0, false),
    ]);
    let shedding = shed(&view, &loads(&[0.7, 0.7, 10.1]), 10);
    assert_eq!(shedding.moves, [(PartitionId(0), node("r"))]);
}

/// Moves to a member below half its share are outside the churn budget; at half, they count.
///
/// Fails if the bound is moved by a hair either way.
#[test]
fn moves_to_a_member_below_half_its_share_are_outside_the_budget() {
    let moves = |receiver_load: f64| {
        let view = load_view(vec![
            member_load("me", 12.0, 10.0, false),
            member_load("r", receiver_load, 10.0, false),
        ]);
        shed(&view, &loads(&[1.0, 11.0]), 0).moves
    };
    assert_eq!(moves(4.9), [(PartitionId(0), node("r"))]);
    assert!(
        moves(5.0).is_empty(),
        "at half its share, the budget of 0 holds"
    );
}

/// Fails if a node may hand off its last partition: even with no share and above its
/// ceiling (no floor), it keeps one, and reports what stays above the ceiling.
#[test]
fn a_node_never_hands_off_its_last_partition() {
    // All 4 of its load is excess, and r's room takes it all: one of the two partitions goes.
    let view = load_view(vec![
        capped("me", 4.0, 0.0, 1.0),
        member_load("r", 0.0, 20.0, false),
    ]);
    let shedding = shed(&view, &loads(&[2.0, 2.0]), 10);
    assert_eq!(shedding.moves, [(PartitionId(0), node("r"))]);
    assert_eq!(shedding.spillover, 1.0);
}

/// A donor exactly at the edge of the band, or exactly at its ceiling, is neither out of the
/// band nor above its ceiling: it does not make the plan pressing, so members below their
/// shares that do not starve receive nothing.
///
/// Fails if either edge counts as out.
#[test]
fn a_donor_at_an_edge_does_not_make_the_plan_pressing() {
    // A band of 1.25 and shares of 4: s starves below 3.2, n (3.5) does not. d, first, takes
    // all of s's room; this node's partition of 0.3 would fit n's.
    let mut config = ParticipantConfig::new(node("me"), 64);
    config.load_band = 1.25;
    let at_band_edge = member_load("me", 5.0, 4.0, false);
    let at_ceiling = capped("me", 4.5, 4.0, 4.5);
    for me in [at_band_edge, at_ceiling] {
        let keep = loads(&[0.3, me.load - 0.3]);
        let view = load_view(vec![
            member_load("d", 5.0, 4.0, false),
            me.clone(),
            member_load("s", 3.15, 4.0, false),
            member_load("n", 3.5, 4.0, false),
        ]);
        let shedding = shed_by(&config, &view, &keep, 10);
        assert!(shedding.moves.is_empty(), "{me:?}: {shedding:?}");
    }
}

/// Donors exactly at the edge of the band, or exactly at their ceilings, are within: two of
/// them sharing a room each fall back on it by lot, one chance in two.
///
/// Fails if either edge counts as out (each would then fall back every time).
#[test]
fn donors_at_an_edge_draw_lots_for_a_room() {
    // A band of 1.25, shares of 4: s at 2 starves, with a room of 2; d and this node each
    // claim 1 of it, which this node's partition of 1.2 does not fit; the whole room does.
    let mut config = ParticipantConfig::new(node("me"), 64);
    config.load_band = 1.25;
    let at_band_edge = |name: &str| member_load(name, 5.0, 4.0, false);
    let at_ceiling = |name: &str| capped(name, 4.5, 4.0, 4.5);
    for edge in [at_band_edge, at_ceiling] {
        let view = load_view(vec![
            edge("d"),
            edge("me"),
            member_load("s", 2.0, 4.0, false),
        ]);
        let keep = loads(&[1.2, edge("me").load - 1.2]);
        let gave = (0..32)
            .filter(|&seed| {
                let mut rng = SeededRng::new(seed);
                let shedding = load::shed(&view, &config, &keep, 10, |_, _| false, &mut rng);
                !shedding.moves.is_empty()
            })
            .count();
        assert!(
            0 < gave && gave < 32,
            "{:?}: gave in {gave} of 32",
            edge("me")
        );
    }
}

/// Fails if one scan hands a receiver more partitions than it takes in one scan.
#[test]
fn a_claim_is_filled_with_no_more_than_one_scan_of_takes() {
    let mut config = ParticipantConfig::new(node("me"), 64);
    config.max_acquires_per_scan = 1;
    // r's claim of 2 would fit both partitions of 0.5.
    let view = load_view(vec![
        member_load("me", 12.0, 10.0, false),
        member_load("r", 8.0, 10.0, false),
    ]);
    let shedding = shed_by(&config, &view, &loads(&[0.5, 0.5, 11.0]), 10);
    assert_eq!(shedding.moves.len(), 1, "{shedding:?}");
}

/// Fails if the spillover of a node above its ceiling does not count what it hands off.
#[test]
fn the_spillover_is_what_stays_above_the_ceiling_after_the_moves() {
    // 8 against a ceiling of 6: 1.5 goes to r, 0.5 stays above.
    let view = load_view(vec![
        capped("me", 8.0, 10.0, 6.0),
        member_load("r", 0.0, 10.0, false),
    ]);
    let shedding = shed(&view, &loads(&[1.5, 6.5]), 10);
    assert_eq!(shedding.moves, [(PartitionId(0), node("r"))]);
    assert_eq!(shedding.spillover, 0.5);
}
