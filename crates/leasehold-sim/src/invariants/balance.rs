//! **Balance.** Whenever the fleet has settled, and at the end of every run, with no caps and
//! equal weights, the numbers of partitions held by any two live, non-draining nodes differ
//! by at most one, and draining nodes hold none.
//!
//! *Settled* is decided from what the run records, never from the nodes' own idea of their
//! shares (a node that computes a wrong share believes itself settled): at a sampling point,
//! the fleet has settled when
//!
//! - the recorder has no failover or hand-off waiting for its taker, and has seen nothing
//!   change for [`crate::Timings::settle_delay`]: no lease taken, lost or released, no node
//!   started, joined (its first scan), stopped, paused or resumed, no membership change or
//!   operator command, no store call failed, throttled, lost or held back, no outage;
//! - every partition the operator has not taken offline is held;
//! - every running node has joined, is neither paused nor leaving nor mis-set, and hands no
//!   lease off.
//!
//! A joiner still short of its share does not keep the fleet unsettled: that is the very
//! imbalance to catch. Once faults stop, the fleet settles within the run's settling window;
//! during the faults it settles only in calm stretches, which store faults make rare.
//!
//! **With load reported** (a run with a load model), the property takes its load form, on
//! the true loads: draining nodes hold nothing, and the serving node most loaded for its
//! capacity is within the band of its fair share, unless it has used up its churn budget or
//! no move could help — no other serving node has room below its share for the lightest
//! partition it could give without falling below its share over the band. A shift of the
//! load counts as a change, so the fleet settles only after the nodes have seen it.

/// One node's holdings at the moment of the check.
#[derive(Debug, Clone)]
pub struct Holdings {
    /// The node's name.
    pub node: String,
    /// Partitions it holds.
    pub owned: usize,
    /// Whether it is draining.
    pub draining: bool,
}

/// Checks the property over every live node.
///
/// Fails if a draining node keeps partitions, or if two serving nodes' counts differ by more
/// than one: a node whose share is computed wrong, such as one that never hands off its
/// surplus because it counts no other member (`SimConfig::unsafe_ignore_members`).
pub fn check(nodes: &[Holdings]) -> Result<(), String> {
    if let Some(draining) = nodes.iter().find(|n| n.draining && n.owned > 0) {
        return Err(format!(
            "{} is draining but still holds {} partitions",
            draining.node, draining.owned
        ));
    }
    let active: Vec<&Holdings> = nodes.iter().filter(|n| !n.draining).collect();
    let (Some(most), Some(least)) = (
        active.iter().max_by_key(|n| n.owned),
        active.iter().min_by_key(|n| n.owned),
    ) else {
        return Ok(());
    };
    if most.owned > least.owned + 1 {
        let counts: Vec<String> = active
            .iter()
            .map(|n| format!("{}={}", n.node, n.owned))
            .collect();
        return Err(format!(
            "{} holds {} partitions but {} holds {} (all: {})",
            most.node,
            most.owned,
            least.node,
            least.owned,
            counts.join(" ")
        ));
    }
    Ok(())
}

/// One node's true load at a settled instant.
#[derive(Debug, Clone)]
pub struct LoadHoldings {
    /// The node's name.
    pub node: String,
    /// The sum of its partitions' loads.
    pub load: f64,
    /// Its fair share of the total, by capacity among serving nodes (zero if not serving).
    pub fair: f64,
    /// Partitions it holds.
    pub partitions: usize,
    /// The load of the lightest partition it holds that others may take (not excluded or
    /// prohibited anywhere).
    pub lightest: Option<f64>,
    /// Whether it is serving (running, joined, not draining or paused).
    pub serving: bool,
    /// Whether it is draining.
    pub draining: bool,
    /// The moves its churn budget still allowed at its last decision.
    pub moves_left: u32,
}

impl LoadHoldings {
    /// Load over fair share.
    pub fn ratio(&self) -> f64 {
        if self.fair > 0.0 {
            self.load / self.fair
        } else {
            0.0
        }
    }
}

/// Checks the load form of the property (see the module's documentation) with `band`.
pub fn check_load(nodes: &[LoadHoldings], band: f64) -> Result<(), String> {
    if let Some(draining) = nodes.iter().find(|n| n.draining && n.partitions > 0) {
        return Err(format!(
            "{} is draining but still holds {} partitions",
            draining.node, draining.partitions
        ));
    }
    let serving: Vec<&LoadHoldings> = nodes.iter().filter(|n| n.serving).collect();
    let Some(worst) = serving
        .iter()
        .max_by(|a, b| a.ratio().total_cmp(&b.ratio()))
    else {
        return Ok(());
    };
    // Rounding of loads summed in another order must not count as out of the band.
    const SLACK: f64 = 1e-6;
    if worst.ratio() <= band + SLACK || worst.moves_left == 0 {
        return Ok(());
    }
    let Some(lightest) = worst.lightest else {
        return Ok(());
    };
    if worst.load - lightest < worst.fair / band - SLACK {
        return Ok(());
    }
    let receiver = serving
        .iter()
        .filter(|n| n.node != worst.node)
        .find(|n| n.load + lightest <= n.fair - SLACK);
    if let Some(receiver) = receiver {
        let all: Vec<String> = serving
            .iter()
            .map(|n| format!("{}={:.1}/{:.1}", n.node, n.load, n.fair))
            .collect();
        return Err(format!(
            "{} carries {:.2}× its fair share ({:.1} of {:.1}) with {} moves left, though {} \
             has room for its lightest movable partition ({:.2}) (load/fair: {})",
            worst.node,
            worst.ratio(),
            worst.load,
            worst.fair,
            worst.moves_left,
            receiver.node,
            lightest,
            all.join(" ")
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loaded(name: &str, load: f64, fair: f64, lightest: f64, moves_left: u32) -> LoadHoldings {
        LoadHoldings {
            node: name.to_owned(),
            load,
            fair,
            partitions: 4,
            lightest: Some(lightest),
            serving: true,
            draining: false,
            moves_left,
        }
    }

    #[test]
    fn load_within_the_band_or_beyond_help_passes() {
        check_load(
            &[
                loaded("a", 10.5, 10.0, 1.0, 5),
                loaded("b", 9.5, 10.0, 1.0, 5),
            ],
            1.1,
        )
        .unwrap();
        // 13 against 10, but its lightest partition (4) fits nowhere below a share.
        check_load(
            &[
                loaded("a", 13.0, 10.0, 4.0, 5),
                loaded("b", 7.0, 10.0, 1.0, 5),
            ],
            1.1,
        )
        .unwrap();
        // Out of budget: it may not move.
        check_load(
            &[
                loaded("a", 13.0, 10.0, 1.0, 0),
                loaded("b", 7.0, 10.0, 1.0, 5),
            ],
            1.1,
        )
        .unwrap();
    }

    #[test]
    fn an_overloaded_node_that_could_give_is_caught() {
        let error = check_load(
            &[
                loaded("a", 13.0, 10.0, 1.0, 5),
                loaded("b", 7.0, 10.0, 1.0, 5),
            ],
            1.1,
        )
        .unwrap_err();
        assert!(
            error.starts_with("a carries 1.30× its fair share"),
            "{error}"
        );
        assert!(error.contains("b has room"), "{error}");
    }

    fn node(name: &str, owned: usize, draining: bool) -> Holdings {
        Holdings {
            node: name.to_owned(),
            owned,
            draining,
        }
    }

    #[test]
    fn shares_within_one_pass_with_drained_nodes_empty() {
        check(&[]).unwrap();
        check(&[node("n0", 13, false)]).unwrap();
        check(&[
            node("n0", 13, false),
            node("n1", 12, false),
            node("n2", 0, true),
            node("n3", 13, false),
        ])
        .unwrap();
    }

    #[test]
    fn shares_two_apart_are_caught() {
        let error = check(&[
            node("n0", 14, false),
            node("n1", 12, false),
            node("n2", 13, false),
        ])
        .unwrap_err();
        assert!(
            error.starts_with("n0 holds 14 partitions but n1 holds 12"),
            "{error}"
        );
        assert!(error.ends_with("(all: n0=14 n1=12 n2=13)"), "{error}");
    }

    #[test]
    fn a_draining_node_that_keeps_partitions_is_caught() {
        let error = check(&[node("n0", 8, false), node("n1", 1, true)]).unwrap_err();
        assert!(
            error.contains("n1 is draining but still holds 1"),
            "{error}"
        );
    }
}
