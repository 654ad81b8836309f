//! `sim`: the deterministic simulation of [`leasehold_sim`], with its results printed as
//! text or JSON. Exit 0 when every invariant held, 1 when one was broken, 2 on bad input.

use std::sync::atomic::{AtomicU64, Ordering};

use anyhow::{anyhow, ensure};
use leasehold_sim::{
    run_many_on, run_seed, run_seed_traced, Figures, SeedReport, SimConfig, SimConfigError,
    Violation,
};

use crate::cli::SimArgs;
use crate::output::{self, Progress};
use crate::{write_out, Outcome};

/// The simulation `args` describe.
pub fn config(args: &SimArgs) -> SimConfig {
    let mut config = SimConfig::new(args.nodes, args.partitions, args.duration, args.faults);
    config.timings.relist_after = args.relist_after;
    config.unsafe_timings = args.unsafe_timings;
    config.unsafe_release = args.unsafe_release;
    config.unsafe_mixed_timings = args.unsafe_mixed_timings;
    config.unsafe_epoch_reuse = args.unsafe_epoch_reuse;
    config.unsafe_stale_fencing = args.unsafe_stale_fencing;
    config.unsafe_stop_acquiring = args.unsafe_stop_acquiring;
    config.unsafe_ignore_members = args.unsafe_ignore_members;
    config.unsafe_destroy = args.unsafe_destroy;
    config.unsafe_ignore_exclusions = args.unsafe_ignore_exclusions;
    config.unsafe_ignore_reservations = args.unsafe_ignore_reservations;
    config.load = (args.load == "zipf").then(leasehold_sim::LoadShape::default);
    config.rolling_restart = args.rolling_restart;
    config.lease_mode = args.lease_mode;
    config.unsafe_session_take = args.unsafe_session_take;
    config.unsafe_session_operator = args.unsafe_session_operator;
    config.unsafe_unchecked_holdings = args.unsafe_unchecked_holdings;
    config.twins = args.twins;
    config.unsafe_session_identity = args.unsafe_session_identity;
    config.explore &= !args.no_explore;
    config
}

/// Runs `sim`, printing the result to standard output and progress to standard error.
pub fn run(args: &SimArgs) -> anyhow::Result<Outcome> {
    let config = config(args);
    ensure!(
        config.nodes > 0 && config.partitions > 0,
        "--nodes and --partitions must be at least 1"
    );
    config.validate().map_err(|error| match error {
        SimConfigError::TooShort { .. } => anyhow!("--duration: {error}"),
        other => anyhow!(other),
    })?;
    let violated = match args.seed {
        Some(seed) => replay(&config, seed, args)?,
        None => batch(&config, args)?,
    };
    Ok(if violated {
        Outcome::ProblemsFound
    } else {
        Outcome::Success
    })
}

/// Runs one seed and prints its figures or its violation. Returns whether it was violated.
fn replay(config: &SimConfig, seed: u64, args: &SimArgs) -> anyhow::Result<bool> {
    let outcome = if args.trace {
        run_seed_traced(config, seed, echo())
    } else {
        run_seed(config, seed)
    };
    let text = if args.json {
        let value = match &outcome {
            Ok(report) => serde_json::json!({
                "report": report,
                "figures": figures_of(config, report),
            }),
            Err(violation) => serde_json::json!({ "violation": violation }),
        };
        format!("{value:#}\n")
    } else {
        let timings = describe_timings(config, seed);
        match &outcome {
            Ok(report) => format!(
                "seed {seed}: every invariant held over {:.0}s simulated in {:.3}s \
                 ({} events, trace hash {:016x})\n  {timings}\n{}",
                report.simulated.as_secs_f64(),
                report.wall.as_secs_f64(),
                report.events,
                report.trace_hash,
                figures_of(config, report)
            ),
            Err(violation) => format!("{}  {timings}\n", describe_violation(violation)),
        }
    };
    write_out(&text)?;
    Ok(outcome.is_err())
}

/// The timings `seed` ran with, which a run exploring the dangerous region draws per seed.
fn describe_timings(config: &SimConfig, seed: u64) -> String {
    let timings = config.for_seed(seed).effective_timings();
    format!(
        "{:<22} heartbeat {:?}, lease_validity {:?}, acquire_after {:?}, max_clock_drift {:.4}, store_timeout {:?}",
        "timings",
        timings.heartbeat,
        timings.lease_validity,
        timings.acquire_after,
        timings.max_clock_drift,
        timings.store_timeout
    )
}

/// Prints each event of a traced run as it happens.
fn echo() -> impl FnMut(&str) + Send + 'static {
    let mut printing = true;
    move |line| {
        if printing {
            if let Err(error) = output::print(&format!("{line}\n")) {
                // The run goes on: its result matters more than the echo.
                eprintln!("trace echo stopped: {error}");
                printing = false;
            }
        }
    }
}

fn figures_of(config: &SimConfig, report: &SeedReport) -> Figures {
    let timings = config.for_seed(report.seed).effective_timings();
    Figures::new(&report.samples, &timings, report.simulated, report.wall)
}

fn describe_violation(violation: &Violation) -> String {
    let mut text = format!("{violation}\n  events leading to it:\n");
    for line in &violation.recent_events {
        text.push_str(&format!("    {line}\n"));
    }
    text
}

/// Runs a batch of seeds and prints its summary. Returns whether any was violated.
fn batch(config: &SimConfig, args: &SimArgs) -> anyhow::Result<bool> {
    let seeds = args.first_seed..args.first_seed.saturating_add(args.seeds);
    let done = AtomicU64::new(0);
    let total = args.seeds;
    let threads = args.threads.unwrap_or_else(leasehold_sim::cores);
    let progress = std::sync::Mutex::new(Progress::on_terminal());
    let summary = run_many_on(config, seeds, threads, |outcome| {
        let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
        if let Err(violation) = outcome {
            eprintln!("{violation}");
        }
        if finished.is_multiple_of(100) || finished == total {
            let mut progress = progress.lock().unwrap_or_else(|e| e.into_inner());
            progress.show(finished, total, "seeds");
        }
    });
    progress
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .finish();
    let text = if args.json {
        format!("{:#}\n", serde_json::json!(summary))
    } else {
        let mut text = format!(
            "{} seeds of {} nodes × {} partitions for {:.0}s each, faults: {}{}: {} passed, {} violated\n\
             {:.0}s simulated in {:.1}s wall\n{}{}",
            summary.seeds,
            config.nodes,
            config.partitions,
            config.duration.as_secs_f64(),
            config.profile,
            unsafe_note(config),
            summary.passed,
            summary.violations.len(),
            summary.simulated.as_secs_f64(),
            summary.wall.as_secs_f64(),
            // A violated seed stops where it failed and adds nothing to the figures.
            if summary.is_clean() {
                String::new()
            } else {
                format!("figures over the {} seeds that passed:\n", summary.passed)
            },
            summary.figures
        );
        for violation in summary.violations.iter().take(5) {
            text.push_str(&format!("{violation}\n"));
        }
        text
    };
    write_out(&text)?;
    Ok(!summary.is_clean())
}

/// What a negative control changed, for the summary line.
fn unsafe_note(config: &SimConfig) -> String {
    let parts: Vec<&str> = [
        (config.unsafe_timings, "unsafe timings"),
        (config.unsafe_release, "unsafe releases"),
        (config.unsafe_mixed_timings, "unchecked mixed timings"),
        (config.unsafe_epoch_reuse, "reused epochs"),
        (
            config.unsafe_stale_fencing,
            "resources accepting stale epochs",
        ),
        (
            config.unsafe_stop_acquiring,
            "nodes that stop taking partitions",
        ),
        (
            config.unsafe_ignore_members,
            "a node ignoring the other members",
        ),
        (
            config.unsafe_destroy,
            "a destroy that leaves running nodes serving, and records created released",
        ),
        (
            config.unsafe_session_take,
            "takes that leave the holder's session alone",
        ),
        (
            config.unsafe_session_operator,
            "operator commands that leave the holder's session alone",
        ),
        (
            config.unsafe_unchecked_holdings,
            "holders that ignore changes in the listings they read",
        ),
        (
            config.unsafe_session_identity,
            "leases of an ended session taken at once",
        ),
        (
            config.unsafe_ignore_exclusions,
            "nodes ignoring their exclusion lists",
        ),
        (
            config.unsafe_ignore_reservations,
            "nodes taking partitions reserved for a restarting node",
        ),
    ]
    .into_iter()
    .filter_map(|(on, name)| on.then_some(name))
    .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" ({})", parts.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;
    use leasehold_sim::FaultProfile;

    use super::*;
    use crate::cli::{Cli, Command};

    fn try_parse(args: &[&str]) -> Result<SimArgs, clap::Error> {
        let mut argv = vec!["leasehold", "sim"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)?.command {
            Command::Sim(args) => Ok(*args),
            other => panic!("parsed as {other:?}"),
        }
    }

    fn parse(args: &[&str]) -> SimArgs {
        try_parse(args).expect("valid arguments")
    }

    #[test]
    fn arguments_build_the_configuration() {
        let args = parse(&["--seeds", "10000", "--nodes", "7", "--partitions", "128"]);
        assert_eq!(args.seeds, 10_000);
        let config = super::config(&args);
        assert_eq!((config.nodes, config.partitions), (7, 128));
        assert_eq!(config.duration.as_secs(), 900);
        assert_eq!(config.profile, FaultProfile::All);
        let args = parse(&[
            "--seed",
            "5",
            "--duration",
            "2m",
            "--faults",
            "none",
            "--unsafe",
        ]);
        let config = super::config(&args);
        assert_eq!((args.seed, config.duration.as_secs()), (Some(5), 120));
        assert!(config.unsafe_timings);
        assert_eq!(
            config.replay_command(5),
            "leasehold sim --seed 5 --nodes 5 --partitions 64 --duration 120s --faults none --unsafe"
        );
        assert!(try_parse(&["--faults", "some"]).is_err());
        assert!(parse(&["--seed", "3", "--trace"]).trace);
        assert!(!parse(&["--seed", "3"]).trace);
        // A trace follows one seed, and is text.
        assert!(try_parse(&["--seeds", "9", "--trace"]).is_err());
        assert!(try_parse(&["--seed", "3", "--trace", "--json"]).is_err());
    }

    #[test]
    fn every_negative_control_has_its_flag_in_the_replay_command() {
        let args = parse(&[
            "--seed",
            "4",
            "--unsafe-epoch-reuse",
            "--unsafe-stale-fencing",
            "--unsafe-stop-acquiring",
            "--unsafe-ignore-members",
            "--unsafe-ignore-exclusions",
        ]);
        let config = super::config(&args);
        assert!(config.unsafe_epoch_reuse && config.unsafe_stale_fencing);
        assert!(config.unsafe_stop_acquiring && config.unsafe_ignore_members);
        assert!(config.unsafe_ignore_exclusions);
        let replay = config.replay_command(4);
        assert!(
            replay.ends_with(
                " --unsafe-epoch-reuse --unsafe-stale-fencing --unsafe-stop-acquiring \
                 --unsafe-ignore-members --unsafe-ignore-exclusions"
            ),
            "{replay}"
        );
        let argv: Vec<&str> = replay.split(' ').skip(2).collect();
        assert_eq!(super::config(&parse(&argv)), config, "{replay}");
    }

    #[test]
    fn a_replay_command_parses_back_to_its_configuration() {
        let args = parse(&[
            "--seed",
            "2",
            "--duration",
            "1m30s",
            "--relist-after",
            "0.5s",
        ]);
        let config = super::config(&args);
        let replay = config.replay_command(2);
        let argv: Vec<&str> = replay.split(' ').skip(2).collect();
        assert_eq!(super::config(&parse(&argv)), config, "{replay}");
    }
}
