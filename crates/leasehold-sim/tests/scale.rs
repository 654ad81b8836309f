//! Scale measurement, run by hand (see BENCHMARKS.md at the repository root):
//! `NODES=100 PARTITIONS=4096 DURATION=10m cargo test -p leasehold-sim --release --test scale -- --ignored --nocapture`,
//! with `POLL_ONLY=1` to turn change notices off, `RELIST_AFTER=30m` to override the
//! participants' default for the table's size, and `LOAD=zipf` for a skewed load the nodes
//! balance on.
//!
//! A steady fleet with no faults and no fenced-work tasks, so the time measured is the
//! participants' own work: scans, renewals and planning.

use std::time::{Duration, Instant};

use leasehold::duration::parse_duration;
use leasehold::planner::{plan, Observed, PlanInput};
use leasehold::{
    LeaseRecord, LeaseState, NodeId, ParticipantConfig, PartitionId, SeededRng, Stored, Version,
};
use leasehold_sim::{run_seed, FaultProfile, Figures, SimConfig};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// CPU time this process has used (user + system), which a busy machine inflates less than
/// wall time.
fn cpu_seconds() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name, which is parenthesised and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    let ticks: f64 = fields.get(11)?.parse::<f64>().ok()? + fields.get(12)?.parse::<f64>().ok()?;
    // sysconf(_SC_CLK_TCK) is 100 on every Linux this runs on.
    Some(ticks / 100.0)
}

/// Time one scan's worth of the runner's own work at `partitions` rows: merging a listing
/// into the observed view, and one planning pass.
fn runner_work_per_scan(partitions: u32) -> (Duration, Duration) {
    let owner = NodeId::new("n0").unwrap();
    let records: Vec<Stored<PartitionId, LeaseRecord>> = (0..partitions)
        .map(|p| Stored {
            key: PartitionId(p),
            value: LeaseRecord {
                owner: Some(owner.clone()),
                epoch: leasehold::Epoch(1),
                state: LeaseState::Held,
                ..LeaseRecord::default()
            },
            version: Version::from_number(u64::from(p)),
        })
        .collect();
    let mut observed = Observed::default();
    let now = tokio::time::Instant::now();
    let rounds = 20;
    let started = Instant::now();
    for _ in 0..rounds {
        observed.observe_leases(now, records.clone());
    }
    let merge = started.elapsed() / rounds;
    let config = ParticipantConfig::new(NodeId::new("n1").unwrap(), partitions);
    let holdings = Default::default();
    let mut rng = SeededRng::new(1);
    let started = Instant::now();
    for _ in 0..rounds {
        let input = PlanInput {
            now,
            config: &config,
            observed: &observed,
            holdings: &holdings,
            draining: false,
            load_moves_left: 0,
        };
        std::hint::black_box(plan(&input, &mut rng));
    }
    (merge, started.elapsed() / rounds)
}

#[test]
#[ignore = "a measurement, run by hand"]
fn scale() {
    let nodes: usize = env("NODES", 100);
    let partitions: u32 = env("PARTITIONS", 4096);
    let duration =
        parse_duration(&std::env::var("DURATION").unwrap_or_else(|_| "10m".into())).unwrap();
    let mut config = SimConfig::new(nodes, partitions, duration, FaultProfile::None);
    config.work_every = Duration::ZERO;
    config.sample_every = Duration::from_secs(60);
    config.faults.max_latency = Duration::ZERO;
    config.change_notices = std::env::var_os("POLL_ONLY").is_none();
    // `LOAD=zipf`: the skewed load `leasehold sim --load zipf` puts on the partitions.
    if std::env::var("LOAD").is_ok_and(|load| load == "zipf") {
        config.load = Some(leasehold_sim::LoadShape::default());
    }
    // `LEASE_MODE=session`: one session write per node per heartbeat renews all it holds.
    if let Ok(mode) = std::env::var("LEASE_MODE") {
        config.lease_mode = mode
            .parse()
            .unwrap_or_else(|e| panic!("LEASE_MODE={mode:?}: {e}"));
    }
    if let Ok(relist_after) = std::env::var("RELIST_AFTER") {
        config.timings.relist_after = Some(parse_duration(&relist_after).unwrap());
    }
    let relist_after = config
        .effective_timings()
        .relist_after
        .expect("resolved for the table's size");
    let report = run_seed(&config, 1).unwrap_or_else(|v| panic!("{v}"));
    let figures = Figures::new(
        &report.samples,
        &config.timings,
        report.simulated,
        report.wall,
    );
    let traffic = &report.samples.traffic;
    println!(
        "{nodes} nodes × {partitions} partitions (lease mode {}, change notices {}, relist_after \
         {relist_after:?}) for {:.0}s simulated: {:.1}s wall ({:.1}s CPU), peak resident {:.0} MiB, {} events",
        config.lease_mode,
        if config.change_notices { "on" } else { "off" },
        report.simulated.as_secs_f64(),
        report.wall.as_secs_f64(),
        cpu_seconds().unwrap_or(f64::NAN),
        peak_resident_bytes().unwrap_or(0) as f64 / (1024.0 * 1024.0),
        report.events
    );
    println!(
        "inside the in-memory store: {:.1}s ({:.0}% of wall); rows read {}, rows written {}",
        traffic.store_wall_seconds,
        100.0 * traffic.store_wall_seconds / report.wall.as_secs_f64(),
        traffic.rows_read,
        traffic.rows_written
    );
    let (merge, planning) = runner_work_per_scan(partitions);
    let listings = traffic.lease_listings as f64;
    println!(
        "lease-table listings {} ({:.1} per node); per listing at {partitions} rows: merge {:.3} ms, \
         plan {:.3} ms → ≈{:.1}s merging, ≈{:.1}s planning",
        traffic.lease_listings,
        listings / nodes as f64,
        merge.as_secs_f64() * 1e3,
        planning.as_secs_f64() * 1e3,
        listings * merge.as_secs_f64(),
        listings * planning.as_secs_f64()
    );
    print!("{figures}");
}
