//! A lease this node holds, and the check of it against what a listing shows.

use tokio::time::Instant;

use crate::record::{LeaseRecord, LeaseState};
use crate::types::{Epoch, NodeId, Version};

/// A lease this node holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Holding {
    /// The fencing token of this tenure.
    pub epoch: Epoch,
    /// The version of this node's last successful write of the record.
    pub version: Version,
    /// The record as last written.
    pub record: LeaseRecord,
    /// When the lease ends unless renewed: the send time of the last successful write plus
    /// the lease validity, on this node's clock.
    pub valid_until: Instant,
    /// When this tenure began, on this node's clock.
    pub acquired_at: Instant,
    /// Whether this node is giving the lease up, waiting for the work in flight under it:
    /// it no longer counts towards what the node holds, and is not released again.
    pub handing_off: bool,
    /// Until when the lease is not handed off for balance: this tenure took back a record
    /// this node had released, which nobody took meanwhile. The others may be unable to
    /// take it (one whose configuration excludes it, which this node cannot know) or only
    /// slow; each time it comes back the wait doubles, so a partition nobody else can take
    /// moves ever more rarely instead of every scan. Draining ignores it.
    pub keep_until: Option<Instant>,
    /// When the reply to this node's last write of the record arrived; `None` while a write
    /// of it is in flight or its outcome is unknown. A listing sent after it must show the
    /// record exactly as this node wrote it ([`Holding::contradicted_by`]).
    pub settled_at: Option<Instant>,
}

impl Holding {
    /// Whether a lease listing sent at `sent` shows that this lease is no longer this
    /// node's: the record (`None`: missing, or unreadable) is gone, names another owner,
    /// epoch or session, is not held, or has a version this node did not write. Only a
    /// listing sent after the reply to this node's last write of the record can tell: an
    /// earlier one may not show that write yet, and one racing a write of it may show it
    /// without this node knowing its version.
    ///
    /// With session leases this is what bounds any change made behind a holder's back — an
    /// operator deleting or re-creating records, a writer that left the holder's session
    /// alone — to one listing: a holder never writes its lease records to renew them, so no
    /// renewal would notice. Renewing per partition, every renewal is that check.
    pub fn contradicted_by(
        &self,
        node: &NodeId,
        sent: Instant,
        stored: Option<(&LeaseRecord, &Version)>,
    ) -> bool {
        if self.settled_at.is_none_or(|settled| settled > sent) {
            return false;
        }
        let Some((record, version)) = stored else {
            return true;
        };
        record.owner.as_ref() != Some(node)
            || record.state != LeaseState::Held
            || record.epoch != self.epoch
            || record.session != self.record.session
            || *version != self.version
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// Fails if a listing sent before the reply to this node's last write may end the
    /// lease: it need not show that write yet, and would take from a node what it holds.
    #[test]
    fn only_a_listing_sent_once_the_last_write_settled_can_contradict_a_lease() {
        let me = NodeId::new("me").unwrap();
        let settled = Instant::now() + Duration::from_secs(10);
        let record = LeaseRecord {
            owner: Some(me.clone()),
            epoch: Epoch(3),
            state: LeaseState::Held,
            ..LeaseRecord::default()
        };
        let holding = Holding {
            epoch: Epoch(3),
            version: Version::from_number(7),
            record: record.clone(),
            valid_until: settled + Duration::from_secs(30),
            acquired_at: settled,
            handing_off: false,
            keep_until: None,
            settled_at: Some(settled),
        };
        let taken = LeaseRecord {
            owner: Some(NodeId::new("other").unwrap()),
            epoch: Epoch(4),
            ..record.clone()
        };
        let shows = Some((&taken, &Version::from_number(8)));
        let before = settled - Duration::from_millis(1);
        assert!(!holding.contradicted_by(&me, before, shows));
        assert!(!holding.contradicted_by(&me, before, None));
        assert!(holding.contradicted_by(&me, settled, shows));
        assert!(holding.contradicted_by(&me, settled, None));
        let as_written = Some((&record, &Version::from_number(7)));
        assert!(!holding.contradicted_by(&me, settled, as_written));
        // Any one difference from the record as written is enough.
        let differences = [
            LeaseRecord {
                owner: Some(NodeId::new("other").unwrap()),
                ..record.clone()
            },
            LeaseRecord {
                state: LeaseState::Released,
                ..record.clone()
            },
            LeaseRecord {
                epoch: Epoch(4),
                ..record.clone()
            },
            LeaseRecord {
                session: Some(2),
                ..record.clone()
            },
        ];
        for changed in &differences {
            let shows = Some((changed, &Version::from_number(7)));
            assert!(holding.contradicted_by(&me, settled, shows), "{changed:?}");
        }
        let rewritten = Some((&record, &Version::from_number(8)));
        assert!(holding.contradicted_by(&me, settled, rewritten));
        let in_flight = Holding {
            settled_at: None,
            ..holding
        };
        assert!(!in_flight.contradicted_by(&me, settled, shows));
    }
}
