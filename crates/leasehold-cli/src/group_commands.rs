//! `timings` and `lease-mode`: the group record, and changing the timings every node must fit,
//! the restart window, or how the group renews its leases.

use leasehold::admin;
use leasehold::{GroupRecord, GroupTimings, LeaseMode};

use crate::cli::{Cli, TimingsArgs, Window};
use crate::group_table::GroupTable;
use crate::reply::Reply;
use crate::Outcome;
use leasehold::duration::format_duration;

/// Shows the group record, or changes its timings or its restart window.
pub async fn run(cli: &Cli, args: &TimingsArgs) -> anyhow::Result<Outcome> {
    let table = GroupTable::open(cli).await?;
    let mut reply = Reply::new(args.json);
    if let Some(window) = args.restart_window {
        let window = match window {
            Window::Default => None,
            Window::Set(window) => Some(window),
        };
        let record = admin::set_restart_window(&*table.store, &table.group, window).await?;
        let window = match record.known_restart_window() {
            Some(window) => format_duration(window),
            // No timings yet: each node caps the window by its own acquire_after.
            None => window.map_or("acquire_after".to_owned(), format_duration),
        };
        reply.say(&format!(
            "group {}: partitions of a node restarting in place stay reserved for {window} \
             (nodes read it when they join)",
            table.group,
        ))?;
        if args.timings.timings().is_none() {
            return finish(&table, &record, args.json);
        }
    }
    let record = match args.timings.timings() {
        Some(timings) => set(&table, timings, args.force, &mut reply).await?,
        None => {
            let stored = table.store.get_group(&table.group).await?.ok_or_else(|| {
                anyhow::anyhow!(
                    "group {} has no group record (create the group with init)",
                    table.group
                )
            })?;
            stored.value
        }
    };
    finish(&table, &record, args.json)
}

/// Shows the group record as it now stands.
fn finish(table: &GroupTable, record: &GroupRecord, json: bool) -> anyhow::Result<Outcome> {
    if json {
        crate::say(&serde_json::to_string_pretty(record)?)?;
    } else {
        show(table, record)?;
    }
    Ok(Outcome::Success)
}

/// Changes the group's timings, saying what changed.
pub async fn set(
    table: &GroupTable,
    timings: GroupTimings,
    force: bool,
    reply: &mut Reply,
) -> anyhow::Result<GroupRecord> {
    let record = admin::set_timings(&*table.store, &table.group, timings, force).await?;
    reply.say(&format!(
        "group {}: every node must now fit {}",
        table.group,
        describe(&timings)
    ))?;
    Ok(record)
}

/// Sets how the group renews its leases, saying what changed.
pub async fn set_lease_mode(
    table: &GroupTable,
    mode: LeaseMode,
    reply: &mut Reply,
) -> anyhow::Result<GroupRecord> {
    let record = admin::set_lease_mode(&*table.store, &table.group, mode).await?;
    reply.say(&format!(
        "group {}: lease mode {}; nodes read it when they join",
        table.group, record.lease_mode
    ))?;
    Ok(record)
}

/// The timings as the commands say them.
pub(crate) fn describe(timings: &GroupTimings) -> String {
    format!(
        "lease_validity at most {}, acquire_after at least {} (ρ = {})",
        format_duration(timings.lease_validity),
        format_duration(timings.acquire_after),
        timings.max_clock_drift
    )
}

fn show(table: &GroupTable, record: &GroupRecord) -> anyhow::Result<()> {
    let timings = record.timings.as_ref().map_or_else(
        || "not set yet (the first node to join sets them)".to_owned(),
        describe,
    );
    let mut lines = vec![
        format!("group {}", table.group),
        format!("  record format  {}", record.format),
        format!("  timings        {timings}"),
        format!("  lease mode     {}", record.lease_mode),
    ];
    if let Some(pending) = &record.pending_timings {
        lines.push(format!(
            "  changing to    {} (a change under way, or one cut short: run it again)",
            describe(pending)
        ));
    }
    if let Some(pending) = &record.pending_lease_mode {
        lines.push(format!(
            "  mode change    to {pending} under way, or cut short: no node joins until \
             `leasehold lease-mode` runs again"
        ));
    }
    if let Some(window) = record.known_restart_window() {
        lines.push(format!(
            "  restart window {}{}",
            format_duration(window),
            if record.restart_window.is_none() {
                " (the default: acquire_after)"
            } else {
                ""
            }
        ));
    }
    lines.push(format!("  epoch floor    {}", record.epoch_floor));
    lines.push(format!(
        "  generation     {} (raised by each destroy)",
        record.generation
    ));
    for line in lines {
        crate::say(&line)?;
    }
    Ok(())
}
