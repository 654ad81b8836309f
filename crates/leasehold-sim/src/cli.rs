//! The `leasehold sim` command.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::config::{FaultProfile, SimConfig};
use crate::report::{Figures, SeedReport, Violation};
use crate::run::{run_many_on, run_seed, run_seed_traced};

/// Arguments of `leasehold sim`: run the real participants in a seeded simulation with
/// injected faults and check the invariants. Exits 1 when any invariant is broken.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Run this many seeds, from --first-seed on.
    #[arg(long, default_value_t = 100)]
    pub seeds: u64,
    /// The first seed of the batch.
    #[arg(long, default_value_t = 0)]
    pub first_seed: u64,
    /// Replay this one seed and print its figures, or its violation with the events leading
    /// to it.
    #[arg(long, conflicts_with_all = ["seeds", "first_seed"])]
    pub seed: Option<u64>,
    /// Nodes at the start.
    #[arg(long, default_value_t = 5)]
    pub nodes: usize,
    /// Partitions in the group.
    #[arg(long, default_value_t = 64)]
    pub partitions: u32,
    /// Simulated time per seed, e.g. 900s, 15m, 1h.
    #[arg(long, default_value = "15m", value_parser = parse_duration)]
    pub duration: Duration,
    /// Faults to inject: all, membership (crashes and churn only) or none.
    #[arg(long, default_value = "all")]
    pub faults: FaultProfile,
    /// How long a settled node goes without reading the lease table (0s: every scan).
    /// Default: the participant's, which depends on the number of partitions.
    #[arg(long, value_parser = parse_duration)]
    pub relist_after: Option<Duration>,
    /// Negative control: run with acquire_after shorter than the lease validity, which the
    /// single-owner check must catch.
    #[arg(long = "unsafe")]
    pub unsafe_timings: bool,
    /// OS threads to run seeds on (at most 2).
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// With --seed: print every event of the run as it happens (acquisitions, losses,
    /// releases, every injected fault), not only those leading to a violation.
    #[arg(long, requires = "seed", conflicts_with_all = ["seeds", "first_seed", "json"])]
    pub trace: bool,
}

impl SimArgs {
    /// The simulation these arguments describe.
    pub fn config(&self) -> SimConfig {
        let mut config = SimConfig::new(self.nodes, self.partitions, self.duration, self.faults);
        config.timings.relist_after = self.relist_after;
        config.unsafe_timings = self.unsafe_timings;
        config
    }
}

/// Parses `90s`, `15m`, `1h`, `250ms` or a bare number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 90s, 15m or 1h"))?;
    let seconds = match unit.trim() {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" | "min" => value * 60.0,
        "h" => value * 3600.0,
        other => {
            return Err(format!(
                "unknown unit {other:?} in {text:?}: use ms, s, m or h"
            ))
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// Runs `leasehold sim` with `args`, printing to standard output; progress goes to
/// standard error.
pub fn run_cli(args: SimArgs) -> ExitCode {
    let config = args.config();
    if config.nodes == 0 || config.partitions == 0 {
        eprintln!("error: --nodes and --partitions must be at least 1");
        return ExitCode::from(2);
    }
    match args.seed {
        Some(seed) => replay(&config, seed, args.json, args.trace),
        None => batch(&config, &args),
    }
}

fn replay(config: &SimConfig, seed: u64, json: bool, trace: bool) -> ExitCode {
    let outcome = if trace {
        run_seed_traced(config, seed, echo())
    } else {
        run_seed(config, seed)
    };
    let text = if json {
        let value = match &outcome {
            Ok(report) => serde_json::json!({
                "report": report,
                "figures": figures_of(config, report),
            }),
            Err(violation) => serde_json::json!({ "violation": violation }),
        };
        format!("{value:#}\n")
    } else {
        match &outcome {
            Ok(report) => format!(
                "seed {seed}: every invariant held over {:.0}s simulated in {:.3}s \
                 ({} events, trace hash {:016x})\n{}",
                report.simulated.as_secs_f64(),
                report.wall.as_secs_f64(),
                report.events,
                report.trace_hash,
                figures_of(config, report)
            ),
            Err(violation) => describe_violation(violation),
        }
    };
    finish(&text, outcome.is_err())
}

/// Prints each event of a traced run as it happens.
fn echo() -> impl FnMut(&str) + Send + 'static {
    let mut printing = true;
    move |line| {
        if printing {
            if let Err(error) = crate::output::print(&format!("{line}\n")) {
                // The run goes on: its result matters more than the echo.
                eprintln!("trace echo stopped: {error}");
                printing = false;
            }
        }
    }
}

fn figures_of(config: &SimConfig, report: &SeedReport) -> Figures {
    let timings = config.effective_timings();
    Figures::new(&report.samples, &timings, report.simulated, report.wall)
}

fn describe_violation(violation: &Violation) -> String {
    let mut text = format!("{violation}\n  events leading to it:\n");
    for line in &violation.recent_events {
        text.push_str(&format!("    {line}\n"));
    }
    text
}

fn batch(config: &SimConfig, args: &SimArgs) -> ExitCode {
    let seeds = args.first_seed..args.first_seed.saturating_add(args.seeds);
    let done = AtomicU64::new(0);
    let total = args.seeds;
    let summary = run_many_on(config, seeds, args.threads, |outcome| {
        let finished = done.fetch_add(1, Ordering::Relaxed) + 1;
        if let Err(violation) = outcome {
            eprintln!("{violation}");
        }
        if finished % 100 == 0 || finished == total {
            eprint!("\r{finished}/{total} seeds");
            let _ = std::io::stderr().flush();
        }
    });
    eprintln!();
    let text = if args.json {
        format!("{:#}\n", serde_json::json!(summary))
    } else {
        let mut text = format!(
            "{} seeds of {} nodes × {} partitions for {:.0}s each, faults: {}{}: {} passed, {} violated\n\
             {:.0}s simulated in {:.1}s wall\n{}",
            summary.seeds,
            config.nodes,
            config.partitions,
            config.duration.as_secs_f64(),
            config.profile,
            if config.unsafe_timings { " (unsafe timings)" } else { "" },
            summary.passed,
            summary.violations.len(),
            summary.simulated.as_secs_f64(),
            summary.wall.as_secs_f64(),
            summary.figures
        );
        for violation in summary.violations.iter().take(5) {
            text.push_str(&format!("{violation}\n"));
        }
        text
    };
    finish(&text, !summary.is_clean())
}

/// Prints the result and picks the exit code: 1 if an invariant was violated, 2 if the
/// result could not be written.
fn finish(text: &str, violated: bool) -> ExitCode {
    if let Err(error) = crate::output::print(text) {
        eprintln!("error: cannot write the result: {error}");
        return ExitCode::from(2);
    }
    if violated {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("42"), Ok(Duration::from_secs(42)));
        assert!(parse_duration("ten").is_err());
        assert!(parse_duration("5d").is_err());
    }
}
