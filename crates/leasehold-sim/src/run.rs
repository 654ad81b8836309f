//! Running seeds: one on its own single-threaded runtime in virtual time, or many on up to
//! two OS threads.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::config::SimConfig;
use crate::driver::simulate;
use crate::report::{Figures, SeedReport, Summary, Violation};
use crate::trace::Trace;
use crate::world::World;

/// Runs one seed: the real participants of `config.nodes` nodes against the in-memory store
/// through the fault injector, on a single-threaded Tokio runtime whose clock is paused, so
/// simulated time passes only as fast as the work requires and the run is fully determined
/// by `seed`. Returns the first violated invariant, or the run's report.
///
/// # Panics
///
/// If `config` fails [`SimConfig::validate`]: a run too short for its faults would pass
/// having tested nothing.
///
/// ```
/// use std::time::Duration;
/// use leasehold_sim::{run_seed, FaultProfile, SimConfig};
///
/// let config = SimConfig::new(3, 16, Duration::from_secs(300), FaultProfile::All);
/// let report = run_seed(&config, 7).expect("no invariant is broken");
/// assert_eq!(report.simulated, Duration::from_secs(300));
/// assert_eq!(report.trace_hash, run_seed(&config, 7).unwrap().trace_hash);
/// ```
pub fn run_seed(config: &SimConfig, seed: u64) -> Result<SeedReport, Violation> {
    run(config, seed, Trace::default())
}

/// Runs one seed as [`run_seed`] does, handing each event to `each_event` as it happens: the
/// simulated time and what happened, one line per event, as in
/// [`Violation::recent_events`]. Following a seed this way does not change its run.
///
/// # Panics
///
/// As [`run_seed`], if `config` fails [`SimConfig::validate`].
///
/// ```
/// use std::time::Duration;
/// use leasehold_sim::{run_seed, run_seed_traced, FaultProfile, SimConfig};
///
/// let config = SimConfig::new(3, 8, Duration::from_secs(300), FaultProfile::All);
/// let (sender, events) = std::sync::mpsc::channel();
/// let report = run_seed_traced(&config, 7, move |line| {
///     let _ = sender.send(line.to_owned());
/// })
/// .expect("no invariant is broken");
/// let events: Vec<String> = events.try_iter().collect();
/// assert_eq!(events.len() as u64, report.events);
/// assert!(events[0].contains("n0#1 started"), "{}", events[0]);
/// assert_eq!(report.trace_hash, run_seed(&config, 7).unwrap().trace_hash);
/// ```
pub fn run_seed_traced(
    config: &SimConfig,
    seed: u64,
    each_event: impl FnMut(&str) + Send + 'static,
) -> Result<SeedReport, Violation> {
    run(config, seed, Trace::echoing(each_event))
}

fn run(config: &SimConfig, seed: u64, trace: Trace) -> Result<SeedReport, Violation> {
    valid(config);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime can always be built");
    let wall = std::time::Instant::now();
    let (world, simulated) = runtime.block_on(async {
        let world = World::new(&config.for_seed(seed), seed, trace);
        simulate(Arc::clone(&world)).await;
        let simulated = Instant::now() - world.origin;
        (world, simulated)
    });
    drop(runtime);
    let wall = wall.elapsed();
    let mut state = world.lock();
    if let Some(violation) = state.violation.take() {
        return Err(violation);
    }
    let mut samples = state.recorder.samples.clone();
    samples.traffic = state.traffic.clone();
    samples.fenced = (state.fencing.accepted, state.fencing.refused);
    samples.work_units = (state.work.units, state.work.cut_short);
    samples.faults = state.counts.clone();
    if world.load.is_some() {
        let mut record = state.load.clone();
        record.finish();
        let node = leasehold::NodeId::new("n").expect("valid");
        let config = world
            .timings
            .participant_config(node, world.config.partitions);
        let windows = record.observed.as_secs_f64() / config.churn_window.as_secs_f64();
        samples.load = crate::figures::LoadSamples {
            max_over_mean: record.ratios.clone(),
            back_in_band: record.recoveries.clone(),
            unrecovered: u64::from(record.unrecovered),
            moves: record.moves,
            observed: record.observed,
            budget: config.churn_budget * f64::from(world.config.partitions) * windows,
            ..Default::default()
        };
    }
    if let Some((returned, compared, moves)) = state.rolling {
        samples.load.returned = returned;
        samples.load.compared = compared;
        samples.load.rolling_moves = moves;
    }
    Ok(SeedReport {
        seed,
        simulated,
        wall,
        trace_hash: state.trace.hash(),
        events: state.trace.count(),
        samples,
    })
}

/// Runs `seeds` on one OS thread per core ([`cores`]), each seed on its own runtime.
///
/// # Panics
///
/// As [`run_seed`], if `config` fails [`SimConfig::validate`].
pub fn run_many(config: &SimConfig, seeds: Range<u64>) -> Summary {
    run_many_on(config, seeds, cores(), |_| {})
}

/// The cores this process may run on: how many seeds run at once by default.
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
}

/// Runs `seeds` on up to `threads` OS threads, calling `progress` after each seed with its
/// outcome (from whichever thread ran it).
///
/// # Panics
///
/// As [`run_seed`], if `config` fails [`SimConfig::validate`].
pub fn run_many_on(
    config: &SimConfig,
    seeds: Range<u64>,
    threads: usize,
    progress: impl Fn(&Result<SeedReport, Violation>) + Sync,
) -> Summary {
    valid(config);
    let wall = std::time::Instant::now();
    let next = AtomicU64::new(seeds.start);
    let outcomes = Mutex::new(Vec::new());
    let threads = threads.max(1).min(seeds.clone().count().max(1));
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::Relaxed);
                if seed >= seeds.end {
                    return;
                }
                let outcome = run_seed(config, seed);
                progress(&outcome);
                outcomes
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((seed, outcome));
            });
        }
    });
    let mut outcomes = outcomes.into_inner().unwrap_or_else(|e| e.into_inner());
    outcomes.sort_by_key(|(seed, _)| *seed);
    summarize(config, outcomes, wall.elapsed())
}

fn valid(config: &SimConfig) {
    if let Err(error) = config.validate() {
        panic!("invalid simulation: {error}");
    }
}

fn summarize(
    config: &SimConfig,
    outcomes: Vec<(u64, Result<SeedReport, Violation>)>,
    wall: Duration,
) -> Summary {
    let mut samples = crate::figures::Samples::default();
    let mut simulated = Duration::ZERO;
    let mut violations = Vec::new();
    let seeds = outcomes.len() as u64;
    for (_, outcome) in outcomes {
        match outcome {
            Ok(report) => {
                samples.add(&report.samples);
                simulated += report.simulated;
            }
            Err(violation) => {
                simulated += violation.at;
                violations.push(violation);
            }
        }
    }
    let timings = config.effective_timings();
    Summary {
        seeds,
        passed: seeds - violations.len() as u64,
        violations,
        simulated,
        wall,
        figures: Figures::new(&samples, &timings, simulated, wall),
    }
}
