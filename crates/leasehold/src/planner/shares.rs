//! Who should hold how many partitions, and which: every node computes the same fair
//! shares and stripes from the same view, so a fleet agrees without a leader.

use std::collections::BTreeMap;

use crate::types::{NodeId, PartitionId};

use super::SeenMember;

/// A live member's claim on the partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberShare {
    /// The member.
    pub node: NodeId,
    /// Its relative capacity.
    pub weight: u32,
    /// Whether it is handing its partitions off.
    pub draining: bool,
}

impl MemberShare {
    pub(super) fn of(seen: &SeenMember) -> MemberShare {
        MemberShare {
            node: seen.node.clone(),
            weight: seen.weight,
            draining: seen.draining,
        }
    }
}

/// Divides `partitions` among `members` in proportion to weight, none above `cap`, draining
/// members getting zero. The result sums to `partitions` unless caps make that impossible.
///
/// Every node computes the same answer from the same view: shares are exact integer
/// apportionments (largest remainder, ties to the smaller node name), so 64 partitions over
/// three equal nodes give 22/21/21, never 22/22/20.
pub fn fair_targets(partitions: u32, members: &[MemberShare], cap: u32) -> BTreeMap<NodeId, u32> {
    let mut targets: BTreeMap<NodeId, u32> = members.iter().map(|m| (m.node.clone(), 0)).collect();
    let mut open: Vec<&MemberShare> = members
        .iter()
        .filter(|m| !m.draining && m.weight > 0)
        .collect();
    let mut remaining = u64::from(partitions);
    loop {
        let total_weight: u64 = open.iter().map(|m| u64::from(m.weight)).sum();
        if open.is_empty() || total_weight == 0 || remaining == 0 {
            break;
        }
        // Members whose proportional share exceeds the cap get the cap; the rest is shared
        // again among the others (water-filling).
        let capped: Vec<usize> = (0..open.len())
            .filter(|&i| remaining * u64::from(open[i].weight) > u64::from(cap) * total_weight)
            .collect();
        if capped.is_empty() {
            let mut shares: Vec<(u64, u64, &NodeId)> = open
                .iter()
                .map(|m| {
                    let numerator = remaining * u64::from(m.weight);
                    (numerator / total_weight, numerator % total_weight, &m.node)
                })
                .collect();
            let mut leftover = remaining - shares.iter().map(|s| s.0).sum::<u64>();
            shares.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.2.cmp(b.2)));
            for (base, _, node) in shares {
                let extra = u64::from(leftover > 0);
                leftover -= extra;
                targets.insert(node.clone(), (base + extra) as u32);
            }
            break;
        }
        for &i in capped.iter().rev() {
            targets.insert(open[i].node.clone(), cap);
            remaining = remaining.saturating_sub(u64::from(cap));
            open.remove(i);
        }
    }
    targets
}

/// The partitions this node takes first among equally good candidates: a share of the
/// table, disjoint from every other member's as long as their views of the membership agree.
///
/// Partitions are laid out in a fixed scattered order (`p × stride mod P`, a permutation of
/// `0..P`), and each member, in name order, owns the next `target` positions. A fleet that
/// starts together then takes its shares without racing for the same rows, so a node can
/// keep taking from the listing it already has instead of reading the table before every
/// batch; scattering keeps neighbouring partitions, often hot together, on different nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stripe {
    start: u64,
    end: u64,
    stride: u64,
    partitions: u64,
}

impl Stripe {
    /// This node's stripe under `targets` (every live member's share) on a table of
    /// `partitions`.
    pub fn of(node: &NodeId, targets: &BTreeMap<NodeId, u32>, partitions: u32) -> Stripe {
        let start: u64 = targets
            .range(..node)
            .map(|(_, target)| u64::from(*target))
            .sum();
        let own = targets.get(node).copied().unwrap_or(0);
        let partitions = u64::from(partitions.max(1));
        Stripe {
            start,
            end: start + u64::from(own),
            stride: scatter_stride(partitions),
            partitions,
        }
    }

    /// Whether `partition` is in this stripe.
    pub fn contains(&self, partition: PartitionId) -> bool {
        let position = u64::from(partition.0) * self.stride % self.partitions;
        (self.start..self.end).contains(&position)
    }

    /// The partitions of this stripe, in partition order: what a node reads to take its
    /// share without reading the whole table.
    pub fn partitions(&self) -> Vec<PartitionId> {
        let inverse = modular_inverse(self.stride, self.partitions);
        let mut partitions: Vec<PartitionId> = (self.start..self.end.min(self.partitions))
            .map(|position| {
                let partition =
                    u128::from(position) * u128::from(inverse) % u128::from(self.partitions);
                PartitionId(partition as u32)
            })
            .collect();
        partitions.sort_unstable();
        partitions
    }
}

/// The `x` in `0..modulus` with `value × x ≡ 1 (mod modulus)`, for `value` coprime with
/// `modulus` (as [`scatter_stride`] chooses it): the position a partition lands on, undone.
fn modular_inverse(value: u64, modulus: u64) -> u64 {
    if modulus == 1 {
        return 0;
    }
    let (mut r0, mut r1) = (i128::from(modulus), i128::from(value % modulus));
    let (mut t0, mut t1) = (0i128, 1i128);
    while r1 != 0 {
        let q = r0 / r1;
        (r0, r1) = (r1, r0 - q * r1);
        (t0, t1) = (t1, t0 - q * t1);
    }
    t0.rem_euclid(i128::from(modulus)) as u64
}

/// A multiplier coprime with `partitions` near its golden section, so that `p × stride mod
/// partitions` visits every position once and consecutive partitions land far apart.
fn scatter_stride(partitions: u64) -> u64 {
    fn gcd(a: u64, b: u64) -> u64 {
        if b == 0 {
            a
        } else {
            gcd(b, a % b)
        }
    }
    let mut stride = (partitions as f64 * 0.618_034) as u64;
    while stride > 1 && gcd(stride, partitions) != 1 {
        stride -= 1;
    }
    stride.max(1)
}
