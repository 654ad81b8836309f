//! **Balance.** Once the fleet has settled with no caps and equal weights, the numbers of
//! partitions held by any two live, non-draining nodes differ by at most one, and draining
//! nodes hold none.

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
