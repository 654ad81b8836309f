//! Where records live in the etcd key space.
//!
//! `<prefix>/<group>/lease/<partition, zero-padded to 10 digits>`,
//! `<prefix>/<group>/member/<node>` and the group record at `<prefix>/<group>/group`: padding
//! makes etcd's byte order the numeric order, and group names cannot hold `/`, so one group's
//! range never reaches into another's. The group record's key has no trailing `/`, so neither
//! the lease nor the member prefix scan reaches it.

use leasehold::{GroupName, NodeId, PartitionId};

/// The key layout under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Keys {
        Keys {
            prefix: prefix.trim_end_matches('/').to_owned(),
        }
    }

    pub(crate) fn group(&self, group: &GroupName) -> String {
        format!("{}/{group}/", self.prefix)
    }

    pub(crate) fn leases(&self, group: &GroupName) -> String {
        format!("{}/{group}/lease/", self.prefix)
    }

    pub(crate) fn members(&self, group: &GroupName) -> String {
        format!("{}/{group}/member/", self.prefix)
    }

    pub(crate) fn lease(&self, group: &GroupName, partition: PartitionId) -> String {
        format!("{}{:010}", self.leases(group), partition.0)
    }

    pub(crate) fn member(&self, group: &GroupName, node: &NodeId) -> String {
        format!("{}{node}", self.members(group))
    }

    pub(crate) fn group_record(&self, group: &GroupName) -> String {
        format!("{}/{group}/{GROUP_RECORD}", self.prefix)
    }
}

/// The name of the group record's key below the group's prefix.
const GROUP_RECORD: &str = "group";

/// What a key below a group's prefix names, for change hints and listings.
#[derive(Debug, PartialEq)]
pub(crate) enum KeyName {
    Lease(PartitionId),
    Member(NodeId),
    Group,
    Other,
}

/// Parses the part of a key after `<prefix>/<group>/`.
pub(crate) fn parse_in_group(rest: &[u8]) -> KeyName {
    let Ok(rest) = std::str::from_utf8(rest) else {
        return KeyName::Other;
    };
    if rest == GROUP_RECORD {
        return KeyName::Group;
    }
    if let Some(number) = rest.strip_prefix("lease/") {
        if let Some(partition) = parse_partition(number) {
            return KeyName::Lease(partition);
        }
    } else if let Some(node) = rest.strip_prefix("member/") {
        if let Ok(node) = NodeId::new(node) {
            return KeyName::Member(node);
        }
    }
    KeyName::Other
}

/// Parses a zero-padded partition number as written by [`Keys::lease`].
pub(crate) fn parse_partition(text: &str) -> Option<PartitionId> {
    if text.len() != 10 || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok().map(PartitionId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_keys_sort_numerically_and_parse_back() {
        let keys = Keys::new("/apps/leases/");
        let group = GroupName::new("orders").unwrap();
        let nine = keys.lease(&group, PartitionId(9));
        let ten = keys.lease(&group, PartitionId(10));
        assert_eq!(nine, "/apps/leases/orders/lease/0000000009");
        assert!(nine < ten);
        let rest = &ten.as_bytes()[keys.group(&group).len()..];
        assert_eq!(parse_in_group(rest), KeyName::Lease(PartitionId(10)));
        let max = keys.lease(&group, PartitionId(u32::MAX));
        assert_eq!(
            parse_in_group(&max.as_bytes()[keys.group(&group).len()..]),
            KeyName::Lease(PartitionId(u32::MAX))
        );
        assert_eq!(parse_in_group(b"lease/12"), KeyName::Other);
        assert_eq!(
            parse_in_group(b"member/node-1"),
            KeyName::Member(NodeId::new("node-1").unwrap())
        );
        assert_eq!(parse_in_group(b"member/a b"), KeyName::Other);
    }

    #[test]
    fn the_group_record_is_outside_the_lease_and_member_ranges() {
        let keys = Keys::new("/apps/leases");
        let group = GroupName::new("orders").unwrap();
        let record = keys.group_record(&group);
        assert_eq!(record, "/apps/leases/orders/group");
        assert!(record.starts_with(&keys.group(&group)));
        assert!(!record.starts_with(&keys.leases(&group)));
        assert!(!record.starts_with(&keys.members(&group)));
        let rest = &record.as_bytes()[keys.group(&group).len()..];
        assert_eq!(parse_in_group(rest), KeyName::Group);
        assert_eq!(parse_in_group(b"group/x"), KeyName::Other);
    }
}
