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

#[cfg(test)]
mod tests {
    use super::*;

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
