//! Where each record lives in the ZooKeeper tree.

use leasehold::{GroupName, NodeId, PartitionId};

/// Partition numbers are zero-padded so that znode names sort the way numbers do.
const PARTITION_DIGITS: usize = 10;

/// The name of the group record's znode, a sibling of the `lease` and `member` directories so
/// that neither child listing includes it.
pub(crate) const GROUP_RECORD: &str = "group";

/// The znode layout under one prefix:
/// `<prefix>/<group>/lease/<partition, 10 digits>`, `<prefix>/<group>/member/<node>` and the
/// group record at `<prefix>/<group>/group`.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    prefix: String,
}

impl Layout {
    /// `prefix` is already validated: empty (the root) or `/a/b` without a trailing slash.
    pub(crate) fn new(prefix: String) -> Layout {
        Layout { prefix }
    }

    pub(crate) fn group(&self, group: &GroupName) -> String {
        format!("{}/{group}", self.prefix)
    }

    pub(crate) fn leases(&self, group: &GroupName) -> String {
        format!("{}/{group}/lease", self.prefix)
    }

    pub(crate) fn members(&self, group: &GroupName) -> String {
        format!("{}/{group}/member", self.prefix)
    }

    pub(crate) fn lease(&self, group: &GroupName, partition: PartitionId) -> String {
        format!("{}/{}", self.leases(group), partition_name(partition))
    }

    pub(crate) fn member(&self, group: &GroupName, node: &NodeId) -> String {
        format!("{}/{node}", self.members(group))
    }

    pub(crate) fn group_record(&self, group: &GroupName) -> String {
        format!("{}/{group}/{GROUP_RECORD}", self.prefix)
    }
}

pub(crate) fn partition_name(partition: PartitionId) -> String {
    format!("{:0width$}", partition.0, width = PARTITION_DIGITS)
}

/// The partition a lease znode's name stands for, if it is one.
pub(crate) fn parse_partition(name: &str) -> Option<PartitionId> {
    if name.len() != PARTITION_DIGITS || !name.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    name.parse().ok().map(PartitionId)
}

/// Checks a prefix: `""` for the root, else `/` followed by non-empty segments and no trailing
/// slash. Returns the reason it is refused.
pub(crate) fn check_prefix(prefix: &str) -> Result<(), &'static str> {
    if prefix.is_empty() {
        return Ok(());
    }
    if !prefix.starts_with('/') {
        return Err("must start with '/'");
    }
    if prefix[1..].split('/').any(str::is_empty) {
        return Err("must not contain empty segments or end with '/'");
    }
    if prefix == "/zookeeper" || prefix.starts_with("/zookeeper/") {
        return Err("must not be inside /zookeeper, which the server reserves");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_padded_and_parsed_back() {
        assert_eq!(partition_name(PartitionId(7)), "0000000007");
        assert_eq!(partition_name(PartitionId(u32::MAX)), "4294967295");
        assert_eq!(parse_partition("0000000007"), Some(PartitionId(7)));
        assert_eq!(parse_partition("7"), None);
        assert_eq!(parse_partition("000000000x"), None);
        assert_eq!(parse_partition("9999999999"), None, "beyond u32");
    }

    #[test]
    fn layout_and_prefixes() {
        let layout = Layout::new("/apps/leasehold".to_owned());
        let group = GroupName::new("orders").unwrap();
        assert_eq!(
            layout.lease(&group, PartitionId(3)),
            "/apps/leasehold/orders/lease/0000000003"
        );
        let node = NodeId::new("n1:7000").unwrap();
        assert_eq!(
            layout.member(&group, &node),
            "/apps/leasehold/orders/member/n1:7000"
        );
        assert_eq!(layout.group_record(&group), "/apps/leasehold/orders/group");
        assert_eq!(Layout::new(String::new()).group(&group), "/orders");
        assert!(check_prefix("").is_ok());
        assert!(check_prefix("/leasehold").is_ok());
        assert!(check_prefix("leasehold").is_err());
        assert!(check_prefix("/a/").is_err());
        assert!(check_prefix("/a//b").is_err());
        assert!(check_prefix("/").is_err());
        assert!(check_prefix("/zookeeper/x").is_err());
    }
}
