//! `status`: the lease table as an aligned table or one JSON document.
//!
//! The JSON document always has the fields `group`, `partitions`, `members` and `corrupt`;
//! `--by-node` adds `nodes`. Filters (`--partition`, `--node`) narrow the lists, never the
//! shape.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use leasehold::admin::AdminError;
use leasehold::{unix_ms_now, LeaseState, Listing, NodeId, PartitionId, StoredLease, StoredMember};
use serde::Serialize;

use crate::cli::{Cli, StatusArgs};
use crate::group_table::GroupTable;
use crate::table::{or_dash, Table};
use crate::Outcome;
use leasehold::duration::format_duration;

/// One partition's record.
#[derive(Debug, Serialize)]
struct PartitionRow {
    partition: u32,
    owner: Option<String>,
    epoch: u64,
    state: &'static str,
    prohibited: Vec<String>,
    note: Option<String>,
    load: Option<f64>,
    version: String,
    written_at_unix_ms: Option<u64>,
    /// Milliseconds since `written_at_unix_ms` by this machine's clock: a diagnostic only.
    age_ms: Option<u64>,
    /// The holder before the current tenure, or the node that released the partition.
    previous_owner: Option<String>,
    /// In a released record, the node it is handed to.
    handed_to: Option<String>,
    /// In a record released by a node restarting in place, that node: the others leave the
    /// partition to it for the group's restart window.
    #[serde(skip_serializing_if = "Option::is_none")]
    reserved_for: Option<String>,
    /// When that reservation runs out, by the writer's clock (its write time plus the
    /// group's restart window): a diagnostic, as the others count the window from when they
    /// first see the record.
    #[serde(skip_serializing_if = "Option::is_none")]
    reserved_until_unix_ms: Option<u64>,
    /// With session leases, the session of the owner the lease is held in: the lease is its
    /// owner's while the owner's member record shows the same session. Sixteen hex digits
    /// ([`session_text`]).
    session: Option<String>,
}

/// One member record.
#[derive(Debug, Serialize)]
struct MemberRow {
    node: String,
    weight: u32,
    draining: bool,
    heartbeat: u64,
    load: Option<f64>,
    version: String,
    written_at_unix_ms: Option<u64>,
    age_ms: Option<u64>,
    capacity: Option<f64>,
    max_load: Option<f64>,
    max_partitions: Option<u32>,
    /// The URL the node serves clients on.
    address: Option<String>,
    metadata: BTreeMap<String, String>,
    /// With session leases, the node's current session, as in [`PartitionRow::session`].
    session: Option<String>,
}

/// The partitions a node holds, with its member record if it has one.
#[derive(Debug, Serialize)]
struct NodeRow {
    node: String,
    count: usize,
    partitions: Vec<u32>,
    member: Option<MemberRow>,
}

#[derive(Debug, Serialize)]
struct StatusDocument {
    group: String,
    partitions: Vec<PartitionRow>,
    members: Vec<MemberRow>,
    #[serde(skip_serializing_if = "Option::is_none")]
    nodes: Option<Vec<NodeRow>>,
    corrupt: Vec<String>,
}

/// Runs `status`.
pub async fn run(cli: &Cli, args: &StatusArgs) -> anyhow::Result<Outcome> {
    let table = GroupTable::open(cli).await?;
    let group = &table.group;
    let leases = table.leases().await?;
    let mut members = table
        .store
        .list_members(group)
        .await
        .with_context(|| format!("cannot list the members of group {group}"))?;
    // Operator commands' nudge record is not a node.
    members.records.retain(|m| !m.key.is_operator());
    if leases.is_empty() {
        return Err(AdminError::NoSuchGroup(group.clone()).into());
    }
    let window = table
        .store
        .get_group(group)
        .await
        .with_context(|| format!("cannot read the group record of group {group}"))?
        .and_then(|stored| stored.value.known_restart_window());
    let mut document = StatusDocument {
        group: group.to_string(),
        partitions: leases
            .records
            .iter()
            .map(|lease| partition_row(lease, window))
            .collect(),
        members: members.records.iter().map(member_row).collect(),
        nodes: None,
        corrupt: leases.corrupt.iter().map(|e| e.to_string()).collect(),
    };
    if let Some(partition) = args.partition {
        select_partition(&table, &mut document, &leases, partition)?;
    }
    if let Some(node) = &args.node {
        select_node(&table, &mut document, node)?;
    }
    if args.by_node {
        document.nodes = Some(by_node(&leases.records, &members.records));
    }
    if args.json {
        crate::say(&serde_json::to_string_pretty(&document)?)?;
    } else {
        crate::write_out(&render(&document))?;
    }
    Ok(Outcome::Success)
}

fn select_partition(
    table: &GroupTable,
    document: &mut StatusDocument,
    leases: &Listing<StoredLease>,
    partition: u32,
) -> anyhow::Result<()> {
    let Some(lease) = leases.records.iter().find(|l| l.key.0 == partition) else {
        anyhow::bail!(
            "{}; it has partitions 0 to {}",
            AdminError::NoSuchPartition {
                group: table.group.clone(),
                partition: PartitionId(partition),
            },
            leases.partition_count().saturating_sub(1)
        );
    };
    let owner = lease.value.owner.as_ref().map(|o| o.to_string());
    document.partitions.retain(|row| row.partition == partition);
    document.members.retain(|m| Some(&m.node) == owner.as_ref());
    Ok(())
}

fn select_node(
    table: &GroupTable,
    document: &mut StatusDocument,
    node: &NodeId,
) -> anyhow::Result<()> {
    let name = node.as_str();
    document
        .partitions
        .retain(|row| row.owner.as_deref() == Some(name) && row.state == "held");
    document.members.retain(|m| m.node == name);
    if document.partitions.is_empty() && document.members.is_empty() {
        return Err(AdminError::NoSuchNode {
            group: table.group.clone(),
            node: node.clone(),
        }
        .into());
    }
    Ok(())
}

fn holder(lease: &StoredLease) -> Option<&NodeId> {
    match lease.value.state {
        LeaseState::Held => lease.value.owner.as_ref(),
        LeaseState::Released | LeaseState::Offline => None,
    }
}

fn by_node(leases: &[StoredLease], members: &[StoredMember]) -> Vec<NodeRow> {
    let mut held: BTreeMap<&NodeId, Vec<u32>> = members.iter().map(|m| (&m.key, vec![])).collect();
    for lease in leases {
        if let Some(owner) = holder(lease) {
            held.entry(owner).or_default().push(lease.key.0);
        }
    }
    held.into_iter()
        .map(|(node, partitions)| NodeRow {
            node: node.to_string(),
            count: partitions.len(),
            partitions,
            member: members.iter().find(|m| &m.key == node).map(member_row),
        })
        .collect()
}

fn age_ms(written_at_unix_ms: Option<u64>) -> Option<u64> {
    written_at_unix_ms.map(|at| unix_ms_now().saturating_sub(at))
}

/// A lease record as a row; `window` is the group's restart window, if it has timings.
fn partition_row(lease: &StoredLease, window: Option<Duration>) -> PartitionRow {
    let record = &lease.value;
    let reserved_for = record.reserved_for();
    PartitionRow {
        partition: lease.key.0,
        owner: record.owner.as_ref().map(|o| o.to_string()),
        epoch: record.epoch.0,
        state: record.state.as_str(),
        prohibited: record.prohibited.iter().map(|n| n.to_string()).collect(),
        note: record.note.clone(),
        load: record.load,
        version: lease.version.to_string(),
        written_at_unix_ms: record.written_at_unix_ms,
        age_ms: age_ms(record.written_at_unix_ms),
        previous_owner: record.previous_owner.as_ref().map(|o| o.to_string()),
        handed_to: record.handed_to.as_ref().map(|o| o.to_string()),
        reserved_for: reserved_for.map(|o| o.to_string()),
        reserved_until_unix_ms: record
            .written_at_unix_ms
            .zip(window)
            .filter(|_| reserved_for.is_some())
            .map(|(at, window)| at.saturating_add(window.as_millis() as u64)),
        session: session_text(record.session),
    }
}

/// What a row's STATE column says: `reserved` for a record left to a node restarting in
/// place, with the time left by this machine's clock.
fn state_text(row: &PartitionRow) -> String {
    match (&row.reserved_for, row.reserved_until_unix_ms) {
        (Some(node), Some(until)) => match until.checked_sub(unix_ms_now()) {
            Some(left) => format!(
                "reserved for {node} ({} left)",
                format_duration(Duration::from_millis(left))
            ),
            None => format!("reserved for {node} (window passed)"),
        },
        (Some(node), None) => format!("reserved for {node}"),
        _ => row.state.to_owned(),
    }
}

/// A session id as text: all 64 bits survive readers whose JSON numbers are doubles
/// (JavaScript's stop at 53).
fn session_text(session: Option<u64>) -> Option<String> {
    session.map(|session| format!("{session:016x}"))
}

fn member_row(member: &StoredMember) -> MemberRow {
    let record = &member.value;
    MemberRow {
        node: member.key.to_string(),
        weight: record.weight,
        draining: record.draining,
        heartbeat: record.heartbeat,
        load: record.load,
        version: member.version.to_string(),
        written_at_unix_ms: record.written_at_unix_ms,
        age_ms: age_ms(record.written_at_unix_ms),
        capacity: record.capacity,
        max_load: record.max_load,
        max_partitions: record.max_partitions,
        address: record.address.clone(),
        metadata: record.metadata.clone(),
        session: session_text(record.session),
    }
}

fn age(age_ms: Option<u64>) -> String {
    or_dash(age_ms.map(|ms| format_duration(std::time::Duration::from_millis(ms))))
}

fn render(document: &StatusDocument) -> String {
    let mut out = String::new();
    if let Some(nodes) = &document.nodes {
        let mut table = Table::new(vec![
            "NODE",
            "COUNT",
            "WEIGHT",
            "LOAD",
            "DRAINING",
            "HEARTBEAT",
            "AGE",
            "ADDRESS",
            "PARTITIONS",
        ]);
        for row in nodes {
            let member = row.member.as_ref();
            let partitions: Vec<String> = row.partitions.iter().map(u32::to_string).collect();
            table.push(vec![
                row.node.clone(),
                row.count.to_string(),
                or_dash(member.map(|m| m.weight)),
                load(member.and_then(|m| m.load)),
                or_dash(member.map(|m| if m.draining { "yes" } else { "no" })),
                or_dash(member.map(|m| m.heartbeat)),
                age(member.and_then(|m| m.age_ms)),
                or_dash(member.and_then(|m| m.address.as_ref())),
                partitions.join(" "),
            ]);
        }
        out.push_str(&table.render());
        let unheld: Vec<String> = document
            .partitions
            .iter()
            .filter(|p| p.state != "held" || p.owner.is_none())
            .map(|p| format!("{} ({})", p.partition, state_text(p)))
            .collect();
        if !unheld.is_empty() {
            out.push_str(&format!("not held: {}\n", unheld.join(", ")));
        }
    } else {
        out.push_str(&partition_table(document));
    }
    for corrupt in &document.corrupt {
        out.push_str(&format!("{corrupt}\n"));
    }
    out
}

/// A reported load, short: `-` when none was reported.
fn load(load: Option<f64>) -> String {
    match load {
        Some(load) if load.is_finite() => {
            let text = format!("{load:.3}");
            text.trim_end_matches('0').trim_end_matches('.').to_owned()
        }
        Some(load) => load.to_string(),
        None => "-".to_owned(),
    }
}

fn partition_table(document: &StatusDocument) -> String {
    let mut table = Table::new(vec![
        "PARTITION",
        "OWNER",
        "EPOCH",
        "STATE",
        "LOAD",
        "PROHIBITED",
        "NOTE",
        "VERSION",
        "AGE",
    ]);
    for row in &document.partitions {
        table.push(vec![
            row.partition.to_string(),
            or_dash(row.owner.as_ref()),
            row.epoch.to_string(),
            state_text(row),
            load(row.load),
            if row.prohibited.is_empty() {
                "-".to_owned()
            } else {
                row.prohibited.join(",")
            },
            or_dash(row.note.as_ref()),
            row.version.clone(),
            age(row.age_ms),
        ]);
    }
    let mut out = table.render();
    let count = |state: &str| {
        document
            .partitions
            .iter()
            .filter(|p| p.state == state)
            .count()
    };
    let reserved = document
        .partitions
        .iter()
        .filter(|p| p.reserved_for.is_some())
        .count();
    let reserved = match reserved {
        0 => String::new(),
        n => format!(" ({n} reserved for restarting nodes)"),
    };
    out.push_str(&format!(
        "{} partitions: {} held, {} released{reserved}, {} offline; {} members\n",
        document.partitions.len(),
        count("held"),
        count("released"),
        count("offline"),
        document.members.len()
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold::{Epoch, LeaseRecord, MemberRecord, Stored, Version};
    use serde_json::json;

    fn node(name: &str) -> NodeId {
        NodeId::new(name).unwrap()
    }

    #[test]
    fn rows_show_previous_owners_and_what_members_publish() {
        let lease = Stored {
            key: PartitionId(3),
            value: LeaseRecord {
                owner: Some(node("n1")),
                epoch: Epoch(2),
                state: LeaseState::Held,
                previous_owner: Some(node("n0")),
                session: Some(u64::MAX - 6),
                ..LeaseRecord::default()
            },
            version: Version::from_number(7),
        };
        let described = Stored {
            key: node("n1"),
            value: MemberRecord {
                capacity: Some(2.0),
                max_load: Some(0.75),
                max_partitions: Some(12),
                address: Some("http://10.0.0.7:8080".to_owned()),
                metadata: [("zone".to_owned(), "eu-1".to_owned())].into(),
                session: Some(0x2a),
                ..MemberRecord::default()
            },
            version: Version::from_number(8),
        };
        let bare = Stored {
            key: node("n2"),
            value: MemberRecord::default(),
            version: Version::from_number(9),
        };
        let partition = serde_json::to_value(partition_row(&lease, None)).unwrap();
        assert_eq!(
            (
                &partition["previous_owner"],
                &partition["handed_to"],
                &partition["session"]
            ),
            (&json!("n0"), &json!(null), &json!("fffffffffffffff9"))
        );
        let handed = Stored {
            key: PartitionId(4),
            value: LeaseRecord {
                previous_owner: Some(node("n0")),
                handed_to: Some(node("n1")),
                ..LeaseRecord::released()
            },
            version: Version::from_number(10),
        };
        let released = serde_json::to_value(partition_row(&handed, None)).unwrap();
        assert_eq!(
            (
                &released["previous_owner"],
                &released["handed_to"],
                &released["session"]
            ),
            (&json!("n0"), &json!("n1"), &json!(null))
        );
        let member = serde_json::to_value(member_row(&described)).unwrap();
        assert_eq!(
            (
                &member["capacity"],
                &member["max_load"],
                &member["max_partitions"],
                &member["address"],
                &member["metadata"],
                &member["session"]
            ),
            (
                &json!(2.0),
                &json!(0.75),
                &json!(12),
                &json!("http://10.0.0.7:8080"),
                &json!({"zone": "eu-1"}),
                &json!("000000000000002a")
            )
        );
        // Unset fields are still there, so that every member row has the same shape.
        let member = serde_json::to_value(member_row(&bare)).unwrap();
        assert_eq!(
            (&member["address"], &member["metadata"], &member["session"]),
            (&json!(null), &json!({}), &json!(null))
        );

        let members = [described, bare];
        let document = StatusDocument {
            group: "orders".to_owned(),
            partitions: vec![partition_row(&lease, None)],
            members: members.iter().map(member_row).collect(),
            nodes: Some(by_node(std::slice::from_ref(&lease), &members)),
            corrupt: Vec::new(),
        };
        let text = render(&document);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].contains("ADDRESS"), "{text}");
        assert!(
            lines[1].starts_with("n1") && lines[1].contains("http://10.0.0.7:8080"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("n2") && lines[2].contains(" - "),
            "{text}"
        );
    }

    #[test]
    fn a_record_reserved_for_a_restarting_node_says_for_whom_and_until_when() {
        let written = unix_ms_now() - 1_000;
        let lease = |handed_to: &str| {
            let mut value = LeaseRecord {
                written_at_unix_ms: Some(written),
                ..LeaseRecord::released()
            };
            value.reserve_for(&node("n0"));
            value.handed_to = Some(node(handed_to));
            Stored {
                key: PartitionId(2),
                value,
                version: Version::from_number(3),
            }
        };
        let window = Some(Duration::from_secs(60));
        let reserved = partition_row(&lease("n0"), window);
        assert_eq!(reserved.reserved_for.as_deref(), Some("n0"));
        assert_eq!(reserved.reserved_until_unix_ms, Some(written + 60_000));
        assert!(
            state_text(&reserved).starts_with("reserved for n0 (5"),
            "{}",
            state_text(&reserved)
        );
        let json = serde_json::to_value(&reserved).unwrap();
        assert_eq!(json["state"], json!("released"));
        assert_eq!(json["reserved_for"], json!("n0"));
        // Handed to another node: a hand-off, not a reservation.
        let handed = partition_row(&lease("n1"), window);
        assert_eq!(handed.reserved_for, None);
        assert_eq!(state_text(&handed), "released");
        let passed = PartitionRow {
            reserved_until_unix_ms: Some(written),
            ..partition_row(&lease("n0"), window)
        };
        assert_eq!(state_text(&passed), "reserved for n0 (window passed)");
    }

    #[test]
    fn loads_print_short_and_dash_when_unreported() {
        assert_eq!(super::load(Some(12.5)), "12.5");
        assert_eq!(super::load(Some(3.0)), "3");
        assert_eq!(super::load(Some(0.12345)), "0.123");
        assert_eq!(super::load(Some(0.0)), "0");
        assert_eq!(super::load(None), "-");
    }
}
