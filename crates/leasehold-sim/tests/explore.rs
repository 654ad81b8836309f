//! Ad-hoc exploration: `SEEDS=n FAULTS=all|membership|none NODES= PARTITIONS= DURATION= cargo test --release --test explore -- --ignored --nocapture`.

use std::time::Duration;

use leasehold::duration::parse_duration;
use leasehold_sim::{run_many, FaultProfile, SimConfig};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
#[ignore = "exploration; run by hand"]
fn explore() {
    let duration = std::env::var("DURATION")
        .ok()
        .map(|d| parse_duration(&d).unwrap())
        .unwrap_or(Duration::from_secs(600));
    let mut config = SimConfig::new(
        env("NODES", 5),
        env("PARTITIONS", 32),
        duration,
        env("FAULTS", FaultProfile::All),
    );
    config.unsafe_timings = std::env::var("UNSAFE").is_ok();
    let first: u64 = env("FIRST", 0);
    let summary = run_many(&config, first..first + env("SEEDS", 4u64));
    println!(
        "{} passed of {} in {:?}",
        summary.passed, summary.seeds, summary.wall
    );
    print!("{}", summary.figures);
    for violation in summary.violations.iter().take(3) {
        println!("{violation}");
        for line in &violation.recent_events {
            println!("   {line}");
        }
    }
}
