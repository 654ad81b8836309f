//! The member records of a read: each member's liveness and settings, and the member
//! changes since the read before.

use std::collections::BTreeMap;

use leasehold::NodeId;

use super::{Member, PendingChange, Reading, Tracker, Update};

impl Tracker {
    /// Takes in the member records of `reading` (the operator's aside), recording joins,
    /// departures, drains and deaths since the read before unless this is the `first`.
    pub(super) fn apply_members(&mut self, reading: &Reading, update: &mut Update, first: bool) {
        let now = reading.at;
        let unix_ms = reading.unix_ms;
        // Members.
        let mut members = BTreeMap::new();
        for stored in reading
            .members
            .records
            .iter()
            .filter(|m| !m.key.is_operator())
        {
            let old = self.members.get(&stored.key);
            let renewal = (
                stored.value.heartbeat,
                stored.value.written_at_unix_ms,
                stored.value.session,
            );
            let changed_at = match old {
                Some(old) if old.version == stored.version => old.changed_at,
                Some(old) if self.session && old.renewal == renewal => old.changed_at,
                _ => now,
            };
            let live = now.saturating_duration_since(changed_at) < self.stale_after;
            let session_since = match old {
                Some(old) if old.session == stored.value.session => old.session_since,
                _ => now,
            };
            let member = Member {
                version: stored.version.clone(),
                changed_at,
                renewal,
                weight: stored.value.weight,
                draining: stored.value.draining,
                load: stored.value.load,
                heartbeat: stored.value.heartbeat,
                live,
                max_partitions: stored.value.max_partitions,
                max_load: stored.value.max_load,
                session: stored.value.session,
                session_since,
            };
            if !first {
                let name = || Some(stored.key.to_string());
                let kinds: Vec<&'static str> = match old {
                    None => vec!["joined"],
                    Some(old) => {
                        let mut kinds = Vec::new();
                        if old.draining != member.draining {
                            kinds.push(if member.draining {
                                "draining"
                            } else {
                                "undrained"
                            });
                        }
                        if old.live != member.live {
                            kinds.push(if member.live { "alive" } else { "dead" });
                        }
                        kinds
                    }
                };
                for kind in kinds {
                    self.emit(update, unix_ms, PendingChange::member(kind, name()));
                }
            }
            members.insert(stored.key.clone(), member);
        }
        if !first {
            let left: Vec<NodeId> = self
                .members
                .keys()
                .filter(|node| !members.contains_key(*node))
                .cloned()
                .collect();
            for node in left {
                self.emit(
                    update,
                    unix_ms,
                    PendingChange::member("left", Some(node.to_string())),
                );
            }
        }
        for node in members.keys() {
            self.name_index(node.as_str());
        }
        self.members = members;
    }
}
