//! `stale`: a health probe for cron jobs and alerting, with the exit codes of a Nagios
//! plugin: 0 OK, 1 WARNING (problems that heal as nodes take partitions over, or too few
//! nodes), 2 CRITICAL (records missing, unreadable or with epochs gone back), 3 UNKNOWN (the
//! check could not be made).

use leasehold::admin::{self, StaleReport};
use serde::Serialize;

use crate::cli::{Cli, StaleArgs};
use crate::group_table::GroupTable;
use crate::Outcome;

/// A partition whose epoch went back, and the epoch it should be at least.
#[derive(Debug, Serialize)]
struct EpochBack {
    partition: u32,
    epoch: u64,
    at_least: u64,
}

/// A lease its holder did not renew between the samples.
#[derive(Debug, Serialize)]
struct Unrenewed {
    partition: u32,
    owner: Option<String>,
}

/// The JSON form of a [`StaleReport`]. The field names are what scripts read: keep them.
#[derive(Debug, Serialize)]
struct StaleDocument {
    group: String,
    watch_ms: u128,
    /// False when any of the problems below is present; the exit code is 1 or 2 then.
    healthy: bool,
    /// `ok`, `warning` or `critical`, as the exit code says (0, 1, 2).
    status: &'static str,
    /// Problem: held leases whose version stayed the same across the watch.
    unrenewed: Vec<Unrenewed>,
    /// Problem: released partitions, and partitions held by nobody.
    unowned: Vec<u32>,
    /// Problem: the first [`StaleReport::MISSING_LISTED`] partitions with no record.
    missing: Vec<u32>,
    /// Problem when above zero: every partition with no record, listed or not.
    missing_count: u64,
    /// Not a problem: partitions an operator took out of service.
    offline: Vec<u32>,
    /// Not a problem: partitions reserved for a node restarting in place, within the
    /// group's restart window.
    reserved: Vec<Reserved>,
    /// Problem: partitions still reserved for a restarting node twice the window after it
    /// wrote them (it did not come back, and no other node took them).
    reservations_run_out: Vec<Reserved>,
    /// Problem: lease and member records that cannot be read, each naming its record.
    corrupt: Vec<String>,
    /// Problem: partitions whose epoch went back.
    epochs_back: Vec<EpochBack>,
    /// Members that renewed their record across the watch; a problem when fewer than
    /// `min_nodes`.
    live_nodes: Vec<String>,
    /// Not a problem: members marked draining, live or not.
    draining_nodes: Vec<String>,
    min_nodes: usize,
}

/// The exit code for a check that could not be made: UNKNOWN.
const UNKNOWN: u8 = 3;

/// The exit code for damage an operator must repair: CRITICAL.
const CRITICAL: u8 = 2;

/// Runs `stale`. A check that cannot be made is reported as every error is, with exit code
/// 3, so that a probe tells it from a verdict.
pub async fn run(cli: &Cli, args: &StaleArgs) -> anyhow::Result<Outcome> {
    match check(cli, args).await {
        Ok(outcome) => Ok(outcome),
        Err(error) => {
            eprintln!("leasehold: error: {error:#}");
            Ok(Outcome::Exit(UNKNOWN))
        }
    }
}

async fn check(cli: &Cli, args: &StaleArgs) -> anyhow::Result<Outcome> {
    let table = GroupTable::open(cli).await?;
    let report = admin::stale_check(
        &*table.store,
        &table.group,
        args.watch,
        args.min_nodes,
        args.partitions,
    )
    .await?;
    let document = document(&table, args, &report);
    if args.json {
        crate::say(&serde_json::to_string_pretty(&document)?)?;
    } else {
        crate::write_out(&render(&document))?;
    }
    Ok(if report.is_critical() {
        Outcome::Exit(CRITICAL)
    } else if report.has_problems() {
        Outcome::ProblemsFound
    } else {
        Outcome::Success
    })
}

fn document(table: &GroupTable, args: &StaleArgs, report: &StaleReport) -> StaleDocument {
    let numbers = |partitions: &[leasehold::PartitionId]| partitions.iter().map(|p| p.0).collect();
    StaleDocument {
        group: table.group.to_string(),
        watch_ms: args.watch.as_millis(),
        healthy: !report.has_problems(),
        status: if report.is_critical() {
            "critical"
        } else if report.has_problems() {
            "warning"
        } else {
            "ok"
        },
        unrenewed: report
            .unrenewed
            .iter()
            .map(|(partition, owner)| Unrenewed {
                partition: partition.0,
                owner: owner.as_ref().map(|o| o.to_string()),
            })
            .collect(),
        unowned: numbers(&report.unowned),
        missing: numbers(&report.missing),
        missing_count: report.missing_count,
        offline: numbers(&report.offline),
        reserved: reserved(&report.reserved),
        reservations_run_out: reserved(&report.reservations_run_out),
        corrupt: report.corrupt.clone(),
        epochs_back: report
            .epochs_back
            .iter()
            .map(|(partition, epoch, at_least)| EpochBack {
                partition: partition.0,
                epoch: epoch.0,
                at_least: at_least.0,
            })
            .collect(),
        live_nodes: report.live_nodes.iter().map(|n| n.to_string()).collect(),
        draining_nodes: report.draining.iter().map(|n| n.to_string()).collect(),
        min_nodes: report.min_nodes,
    }
}

/// A partition reserved for a restarting node.
#[derive(Debug, Serialize)]
struct Reserved {
    partition: u32,
    node: String,
}

fn reserved(entries: &[(leasehold::PartitionId, leasehold::NodeId)]) -> Vec<Reserved> {
    entries
        .iter()
        .map(|(partition, node)| Reserved {
            partition: partition.0,
            node: node.to_string(),
        })
        .collect()
}

fn reserved_list(entries: &[Reserved]) -> String {
    let words: Vec<String> = entries
        .iter()
        .map(|r| format!("{} ({})", r.partition, r.node))
        .collect();
    words.join(", ")
}

fn list(numbers: &[u32]) -> String {
    let words: Vec<String> = numbers.iter().map(u32::to_string).collect();
    words.join(" ")
}

fn render(document: &StaleDocument) -> String {
    let mut lines = vec![format!(
        "group {}: {}",
        document.group,
        match document.status {
            "ok" => "healthy",
            "warning" => "PROBLEMS FOUND (warning)",
            _ => "PROBLEMS FOUND (critical)",
        }
    )];
    if !document.unrenewed.is_empty() {
        let entries: Vec<String> = document
            .unrenewed
            .iter()
            .map(|u| format!("{} ({})", u.partition, u.owner.as_deref().unwrap_or("-")))
            .collect();
        lines.push(format!("unrenewed leases: {}", entries.join(", ")));
    }
    for (label, numbers) in [
        ("unowned partitions", &document.unowned),
        ("missing partitions", &document.missing),
        ("offline partitions (not a problem)", &document.offline),
    ] {
        if !numbers.is_empty() {
            lines.push(format!("{label}: {}", list(numbers)));
        }
    }
    if !document.reservations_run_out.is_empty() {
        lines.push(format!(
            "reserved for a restart that did not come back in time: {}",
            reserved_list(&document.reservations_run_out)
        ));
    }
    if !document.reserved.is_empty() {
        lines.push(format!(
            "reserved for restarting nodes (not a problem): {}",
            reserved_list(&document.reserved)
        ));
    }
    let unlisted = document.missing_count - document.missing.len() as u64;
    if unlisted > 0 {
        lines.push(format!("… and {unlisted} more missing partitions"));
    }
    for corrupt in &document.corrupt {
        lines.push(corrupt.clone());
    }
    if !document.epochs_back.is_empty() {
        let entries: Vec<String> = document
            .epochs_back
            .iter()
            .map(|e| {
                format!(
                    "{} (epoch {}, expected at least {})",
                    e.partition, e.epoch, e.at_least
                )
            })
            .collect();
        lines.push(format!(
            "epochs gone back (records re-created outside leasehold; nodes issue higher tokens): {}",
            entries.join(", ")
        ));
    }
    let below = document.live_nodes.len() < document.min_nodes;
    lines.push(format!(
        "live nodes: {} ({}), minimum {}{}",
        document.live_nodes.len(),
        document.live_nodes.join(" "),
        document.min_nodes,
        if below { " — TOO FEW" } else { "" }
    ));
    if !document.draining_nodes.is_empty() {
        lines.push(format!(
            "draining nodes (not a problem): {}",
            document.draining_nodes.join(" ")
        ));
    }
    lines.join("\n") + "\n"
}
