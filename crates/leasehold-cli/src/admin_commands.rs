//! The operator commands that change the table: init, destroy, kick, prohibit/allow,
//! offline/online, drain/undrain.

use leasehold::admin::{self, AdminError};
use leasehold::{GroupName, GroupRecord, LeaseRecord, LeaseStore, NodeId, PartitionId};

use crate::cli::{Cli, Command};
use crate::group_table::GroupTable;
use crate::output::Progress;
use crate::reply::Reply;
use crate::Outcome;

/// Runs one of the table-changing commands.
pub async fn run(cli: &Cli, command: &Command) -> anyhow::Result<Outcome> {
    if let Command::Destroy { yes: false, .. } = command {
        anyhow::bail!(
            "destroy deletes every record of group {}; add --yes to confirm",
            cli.group
        );
    }
    let table = GroupTable::open(cli).await?;
    let group = &table.group;
    let mut reply = Reply::new(wants_json(command));
    reply.set("group", group)?;
    match command {
        Command::Init {
            partitions,
            timings,
            lease_mode,
            ..
        } => {
            let timings = timings.timings();
            if let Some(timings) = timings.filter(|t| !t.is_safe()) {
                return Err(AdminError::UnsafeTimings(timings).into());
            }
            // A new group gets its timings and mode with its first write, so no node can
            // join it under others in between; an existing one changes them safely.
            let template = GroupRecord {
                timings,
                lease_mode: lease_mode.unwrap_or_default(),
                ..GroupRecord::default()
            };
            let mut group_record = init(&table, *partitions, &template, &mut reply).await?;
            match timings {
                Some(timings) if group_record.timings != Some(timings) => {
                    group_record =
                        crate::group_commands::set(&table, timings, false, &mut reply).await?;
                }
                Some(timings) => reply.say(&format!(
                    "group {group}: every node must fit {}",
                    crate::group_commands::describe(&timings)
                ))?,
                None => {}
            }
            if let Some(mode) = lease_mode.filter(|m| group_record.lease_mode != *m) {
                group_record =
                    crate::group_commands::set_lease_mode(&table, mode, &mut reply).await?;
            }
            reply.set("timings", group_record.timings)?;
            reply.set("lease_mode", group_record.lease_mode)?;
        }
        Command::LeaseMode { mode, .. } => match mode {
            Some(mode) => {
                let record =
                    crate::group_commands::set_lease_mode(&table, *mode, &mut reply).await?;
                reply.set("lease_mode", record.lease_mode)?;
                reply.set("changed", true)?;
            }
            None => {
                let mode = admin::group_mode(&*table.store, group).await?;
                reply.set("lease_mode", mode)?;
                reply.say(&format!("group {group}: lease mode {mode}"))?;
                let pending = table.store.get_group(group).await?;
                let pending = pending.and_then(|g| g.value.pending_lease_mode);
                reply.set("pending_lease_mode", pending)?;
                if let Some(to) = pending {
                    reply.say(&format!(
                        "group {group}: a change to {to} is under way, or was cut short: no \
                         node joins until `leasehold lease-mode {to}` finishes it or \
                         `leasehold lease-mode {mode}` withdraws it"
                    ))?;
                }
            }
        },
        Command::Destroy { force, .. } => {
            let mode = if *force {
                admin::Destroy::Force
            } else {
                admin::Destroy::IfNoMembers
            };
            let mut progress = Progress::on_terminal();
            let removed =
                admin::destroy_with_progress(&*table.store, group, mode, &mut |done, total| {
                    progress.show(done as u64, total as u64, "lease records deleted");
                })
                .await;
            progress.finish();
            let removed = removed?;
            reply.set("removed", removed)?;
            reply.say(&format!(
                "group {group}: removed {removed} records; the group record keeps its epoch \
                 floor, and nodes still running stop"
            ))?;
        }
        Command::Kick { partition, .. } => {
            let record = change(&table, *partition, admin::kick).await?;
            changed(&mut reply, *partition, &record)?;
            reply.say(&format!(
                "partition {partition}: kicked; {}",
                holder(&record)
            ))?;
        }
        Command::Prohibit {
            partition, node, ..
        } => {
            let record =
                change(&table, *partition, |s, g, p| admin::prohibit(s, g, p, node)).await?;
            changed(&mut reply, *partition, &record)?;
            reply.say(&format!("partition {partition}: node {node} prohibited"))?;
        }
        Command::Allow {
            partition, node, ..
        } => {
            let record = change(&table, *partition, |s, g, p| admin::allow(s, g, p, node)).await?;
            changed(&mut reply, *partition, &record)?;
            reply.say(&format!("partition {partition}: node {node} allowed"))?;
        }
        Command::Offline { partition, .. } => {
            let record = change(&table, *partition, admin::offline).await?;
            changed(&mut reply, *partition, &record)?;
            reply.say(&format!(
                "partition {partition}: offline (was epoch {}); no node takes it until online",
                record.epoch
            ))?;
        }
        Command::Online { partition, .. } => {
            let record = change(&table, *partition, admin::online).await?;
            changed(&mut reply, *partition, &record)?;
            reply.say(&format!(
                "partition {partition}: online; taken after acquire_after"
            ))?;
        }
        Command::Drain { node, .. } => {
            drain(&table, node, true).await?;
            reply.set("node", node)?;
            reply.set("draining", true)?;
            reply.say(&format!(
                "node {node}: draining; it hands its partitions off at its next scan"
            ))?;
        }
        Command::Undrain { node, .. } => {
            drain(&table, node, false).await?;
            reply.set("node", node)?;
            reply.set("draining", false)?;
            reply.say(&format!("node {node}: no longer draining"))?;
        }
        Command::Status(_)
        | Command::Timings(_)
        | Command::Stale(_)
        | Command::Node(_)
        | Command::Demo(_)
        | Command::Bench(_)
        | Command::Fleet(_)
        | Command::Monitor(_)
        | Command::Agent(_)
        | Command::Exec(_)
        | Command::ExecWatchdog(_)
        | Command::ExecGuarded(_)
        | Command::Sim(_)
        | Command::Completions { .. }
        | Command::ManPages { .. } => {
            unreachable!("dispatched in main")
        }
    }
    reply.finish()?;
    Ok(Outcome::Success)
}

/// Whether the command was given `--json`.
fn wants_json(command: &Command) -> bool {
    match command {
        Command::Init { json, .. }
        | Command::LeaseMode { json, .. }
        | Command::Destroy { json, .. }
        | Command::Kick { json, .. }
        | Command::Prohibit { json, .. }
        | Command::Allow { json, .. }
        | Command::Offline { json, .. }
        | Command::Online { json, .. }
        | Command::Drain { json, .. }
        | Command::Undrain { json, .. } => *json,
        _ => false,
    }
}

/// The JSON of a change to one partition: the partition and its record as written.
fn changed(reply: &mut Reply, partition: u32, record: &LeaseRecord) -> anyhow::Result<()> {
    reply.set("partition", partition)?;
    reply.set("record", record)
}

/// Creates the group, refusing to change the count of one that exists: growing it would
/// silently remap every key that applications hash to a partition.
async fn init(
    table: &GroupTable,
    partitions: u32,
    template: &GroupRecord,
    reply: &mut Reply,
) -> anyhow::Result<GroupRecord> {
    let group = &table.group;
    let listing = table.leases().await?;
    let existing = listing.partition_count();
    if existing != 0 && existing != partitions {
        return Err(AdminError::PartitionCountMismatch {
            group: group.clone(),
            existing,
            requested: partitions,
        }
        .into());
    }
    anyhow::ensure!(partitions > 0, "--partitions must be at least 1");
    let group_record = admin::ensure_group_as(&*table.store, group, template).await?;
    let outcome = admin::init_listed(&*table.store, group, partitions, &listing).await?;
    reply.set("partitions", partitions)?;
    reply.set("created", outcome.created)?;
    reply.set("existing", outcome.existing)?;
    reply.set("held_by_nobody", outcome.held_by_nobody)?;
    reply.say(&format!(
        "group {group}: {} partitions created, {} already there ({partitions} in all)",
        outcome.created, outcome.existing
    ))?;
    if outcome.created > 0 && outcome.held_by_nobody {
        reply.say(&format!(
            "group {group} was used before: the partitions created are held by nobody, and \
             taken after acquire_after"
        ))?;
    }
    Ok(group_record.value)
}

/// Applies one admin change to `partition`, explaining a missing partition or group.
async fn change<'a, F, Fut>(
    table: &'a GroupTable,
    partition: u32,
    action: F,
) -> anyhow::Result<LeaseRecord>
where
    F: FnOnce(&'a dyn LeaseStore, &'a GroupName, PartitionId) -> Fut,
    Fut: std::future::Future<Output = Result<LeaseRecord, AdminError>>,
{
    match action(&*table.store, &table.group, PartitionId(partition)).await {
        Ok(record) => Ok(record),
        Err(error) => Err(table.explain(error).await),
    }
}

async fn drain(table: &GroupTable, node: &NodeId, draining: bool) -> anyhow::Result<()> {
    match admin::set_draining(&*table.store, &table.group, node, draining).await {
        Ok(_) => Ok(()),
        Err(error) => Err(table.explain(error).await),
    }
}

fn holder(record: &LeaseRecord) -> String {
    match (&record.owner, record.state) {
        (Some(owner), leasehold::LeaseState::Held) => {
            format!("{owner} drops it at its next renewal")
        }
        _ => "no node held it".to_owned(),
    }
}
