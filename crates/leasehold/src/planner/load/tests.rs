//! Unit tests of the load view and of the decisions made on it.

use super::*;

fn member(name: &str, load: f64, fair: f64) -> NodeLoad {
    NodeLoad {
        node: NodeId::new(name).unwrap(),
        load,
        fair,
        max_load: None,
        draining: false,
        young: false,
        returning: false,
    }
}

fn view(nodes: Vec<NodeLoad>) -> LoadView {
    LoadView {
        nodes,
        total: 0.0,
        mean_partition: 2.0,
    }
}

/// A partition's load is what it reports when that is a finite number not below zero,
/// and the mean of those that do otherwise.
#[test]
fn a_load_that_cannot_be_right_is_estimated_at_the_mean() {
    let view = view(Vec::new());
    assert_eq!(view.estimate(Some(3.0)), 3.0);
    assert_eq!(view.estimate(Some(0.0)), 0.0);
    for wrong in [None, Some(-1.0), Some(f64::INFINITY), Some(f64::NAN)] {
        assert_eq!(view.estimate(wrong), 2.0, "{wrong:?}");
    }
}

/// A member starves below its fair share over the band, not at it; one draining or just
/// back does not count.
#[test]
fn a_member_starves_only_below_its_share_over_the_band() {
    let band = 1.25;
    let fair = 10.0;
    let at_floor = fair / band;
    assert!(!view(vec![member("a", at_floor, fair)]).starving(band));
    assert!(!view(vec![member("a", 9.0, fair), member("b", 11.0, fair)]).starving(band));
    assert!(view(vec![member("a", 7.0, fair), member("b", 13.0, fair)]).starving(band));
    let draining = NodeLoad {
        draining: true,
        ..member("a", 7.0, fair)
    };
    assert!(!view(vec![draining]).starving(band));
    let young = NodeLoad {
        young: true,
        ..member("a", 7.0, fair)
    };
    assert!(!view(vec![young]).starving(band));
}

/// A member's excess: above its fair share once out of the band, or at all while a
/// member starves; above its ceiling whatever the band.
#[test]
fn excess_is_above_the_share_out_of_the_band_or_while_one_starves_and_above_a_ceiling() {
    let view = view(Vec::new());
    let band = 1.25;
    let excess = |load: f64, max_load: Option<f64>, starving: bool| {
        let node = NodeLoad {
            max_load,
            ..member("a", load, 10.0)
        };
        view.excess(&node, band, starving)
    };
    assert_eq!(excess(12.0, None, false), 0.0, "within the band");
    assert_eq!(excess(12.5, None, false), 0.0, "at its edge");
    assert_eq!(
        excess(13.0, None, false),
        3.0,
        "out of it: down to the share"
    );
    assert_eq!(
        excess(11.0, None, true),
        1.0,
        "within it, while one starves"
    );
    assert_eq!(excess(9.0, None, true), 0.0, "below the share");
    assert_eq!(excess(12.0, Some(11.0), false), 1.0, "above the ceiling");
    assert_eq!(
        excess(13.0, Some(12.0), false),
        3.0,
        "the larger of the two"
    );
}

/// A node takes a partition while it stays within the band and under its ceiling,
/// while it is below its share whatever the partition weighs, and when the partition
/// was handed to it by name; never past its ceiling unless it carries nothing yet.
#[test]
fn a_partition_fits_within_the_band_below_the_share_or_handed_by_name() {
    let config = ParticipantConfig {
        max_load: Some(7.0),
        load_band: 1.25,
        ..ParticipantConfig::new(NodeId::new("me").unwrap(), 4)
    };
    let at = |fair: f64| view(vec![member("me", 0.0, fair)]);
    let fits = |fair: f64, load: f64, add: f64, directed: bool| {
        fits(&at(fair), &config, load, add, directed)
    };
    // The ceiling, even for a partition handed by name.
    assert!(!fits(100.0, 5.0, 3.0, true), "past the ceiling");
    assert!(fits(100.0, 4.0, 3.0, true), "up to it");
    assert!(fits(100.0, 1.0, 4.5, true), "1 + 4.5 is under it");
    assert!(
        fits(100.0, 0.0, 8.0, true),
        "carrying nothing, a hot one all the same"
    );
    // The band, with no ceiling in the way.
    let roomy = ParticipantConfig {
        max_load: None,
        ..config.clone()
    };
    let fits =
        |load: f64, add: f64, directed: bool| super::fits(&at(10.0), &roomy, load, add, directed);
    assert!(fits(9.0, 3.0, false), "below the share, whatever it weighs");
    assert!(!fits(10.0, 3.0, false), "at the share, out of the band");
    assert!(
        fits(10.0, 2.5, false),
        "at the share, up to the band's edge"
    );
    assert!(fits(10.0, 3.0, true), "handed by name");
    let nobody = view(Vec::new());
    assert!(
        !super::fits(&nobody, &roomy, 0.0, 1.0, true),
        "not in the view"
    );
}

/// A leaving node sends each partition, hottest first, home if it stays within the band
/// there and under its ceiling, else to the member it leaves least loaded for its
/// capacity and under its ceiling, counting what each has been sent so far; a draining
/// member gets nothing.
#[test]
fn a_leaving_node_directs_each_partition_home_or_where_it_weighs_least() {
    let config = ParticipantConfig {
        load_band: 1.5,
        ..ParticipantConfig::new(NodeId::new("me").unwrap(), 8)
    };
    let draining = |name: &str| NodeLoad {
        draining: true,
        ..member(name, 0.0, 0.0)
    };
    let capped = NodeLoad {
        max_load: Some(8.5),
        ..member("c", 4.0, 10.0)
    };
    let fleet = view(vec![
        member("a", 0.0, 2.0),
        member("b", 10.0, 10.0),
        capped,
        draining("d"),
        draining("me"),
    ]);
    let kept = |p: u32, load: f64, home: Option<&str>| Kept {
        partition: PartitionId(p),
        load,
        home: home.map(|h| NodeId::new(h).unwrap()),
        recent: false,
    };
    let leaving = [
        kept(3, 2.0, None),
        kept(1, 4.0, Some("b")),
        kept(2, 3.0, Some("b")),
        kept(4, 1.0, Some("d")),
    ];
    let to = |p: u32, n: &str| (PartitionId(p), NodeId::new(n).unwrap());
    // 1 home to b (10 + 4 within 15); 2 not home (17), to c (0.7, against a's 1.5 and
    // b's 1.7); 3 to a (1.0), c being past its ceiling with it (9 over 8.5); 4 to c
    // (0.8, under its ceiling), never home to d, draining.
    assert_eq!(
        direct(&fleet, &config, &leaving, |_, _| false),
        vec![to(1, "b"), to(2, "c"), to(3, "a"), to(4, "c")]
    );
    // Alone, 2 goes home to b; prohibited from b and c, to a.
    assert_eq!(
        direct(&fleet, &config, &leaving[2..3], |_, _| false),
        vec![to(2, "b")]
    );
    let moves = direct(&fleet, &config, &leaving[2..3], |p, n| {
        p == PartitionId(2) && n.as_str() != "a"
    });
    assert_eq!(moves, vec![to(2, "a")]);
    // Prohibited from every member that stays, it is named to no one: d, draining, is
    // never a receiver.
    let moves = direct(&fleet, &config, &leaving[2..3], |_, n| n.as_str() != "d");
    assert!(moves.is_empty(), "{moves:?}");
    // Weighed as it would leave each: x (1 + 2 over 10) before y (0 + 2 over 1).
    let pair = view(vec![member("x", 1.0, 10.0), member("y", 0.0, 1.0)]);
    let moves = direct(&pair, &config, &[kept(5, 2.0, None)], |_, _| false);
    assert_eq!(moves, vec![to(5, "x")]);
}
