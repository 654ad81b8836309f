//! The load generator: client tasks at a fixed total rate, each writing and reading keys of
//! its own, checking every read against what it last wrote.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::Duration;

use serde::Serialize;
use tokio::sync::watch;
use tokio::time::{Instant, MissedTickBehavior};

use crate::client::{Client, ClientError};

/// What to run.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Client tasks; each issues its requests one after another.
    pub clients: usize,
    /// Requests per second, all tasks together.
    pub rate: f64,
    /// Keys each task owns (no two tasks write the same key).
    pub keys_per_client: usize,
    /// A prefix for every key, so that runs against one data file do not share keys.
    pub key_prefix: String,
}

/// What a load run measured.
#[derive(Debug, Clone, Default, Serialize)]
pub struct LoadReport {
    /// How long the run lasted, in seconds.
    pub elapsed_seconds: f64,
    /// The rate asked for, requests per second.
    pub target_rate: f64,
    /// The rate achieved. Each task issues its requests one after another, so a task waiting
    /// on retries falls behind rather than piling requests up: failures count requests, and
    /// an outage shows here as well.
    pub achieved_rate: f64,
    /// Requests issued.
    pub requests: u64,
    /// Requests answered.
    pub successes: u64,
    /// Requests that failed after every retry.
    pub failures: u64,
    /// Attempts answered `not owner` or refused as stale, all requests together.
    pub misroutes: u64,
    /// `misroutes / requests`.
    pub misroutes_per_request: f64,
    /// Requests that needed more than one attempt.
    pub retried_requests: u64,
    /// Latency of successful requests, retries included: median, in milliseconds.
    pub p50_ms: f64,
    /// 99th percentile, in milliseconds.
    pub p99_ms: f64,
    /// 99.9th percentile, in milliseconds.
    pub p999_ms: f64,
    /// The slowest successful request, in milliseconds: after a crash, about how long its
    /// buckets went unserved.
    pub max_ms: f64,
    /// Reads that did not return the value the same task last wrote.
    pub wrong_reads: u64,
    /// Answers whose epoch was below an earlier answer's for the same key and task.
    pub epoch_regressions: u64,
    /// (bucket, epoch) pairs that more than one server answered under.
    pub epoch_conflicts: u64,
    /// When the requests that failed were issued, seconds from the run's origin: the first
    /// and the last.
    pub failure_window_seconds: Option<(f64, f64)>,
    /// The first few failure messages.
    pub failure_samples: Vec<String>,
}

impl fmt::Display for LoadReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "| requests | req/s (target) | ok | failed | misroutes/req | retried | p50 ms | p99 ms | p99.9 ms | max ms | wrong reads | epoch regressions | epoch conflicts |"
        )?;
        writeln!(
            f,
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
        )?;
        writeln!(
            f,
            "| {} | {:.0} ({:.0}) | {} | {} | {:.4} | {} | {:.1} | {:.1} | {:.1} | {:.0} | {} | {} | {} |",
            self.requests,
            self.achieved_rate,
            self.target_rate,
            self.successes,
            self.failures,
            self.misroutes_per_request,
            self.retried_requests,
            self.p50_ms,
            self.p99_ms,
            self.p999_ms,
            self.max_ms,
            self.wrong_reads,
            self.epoch_regressions,
            self.epoch_conflicts
        )?;
        if let Some((first, last)) = self.failure_window_seconds {
            writeln!(
                f,
                "failed requests issued between {first:.2} s and {last:.2} s"
            )?;
        }
        for sample in &self.failure_samples {
            writeln!(f, "  failure: {sample}")?;
        }
        Ok(())
    }
}

/// What one task saw.
#[derive(Default)]
struct TaskResult {
    requests: u64,
    successes: u64,
    failures: u64,
    misroutes: u64,
    retried: u64,
    latencies_us: Vec<u64>,
    wrong_reads: u64,
    epoch_regressions: u64,
    failure_times: Vec<f64>,
    failure_samples: Vec<String>,
    /// (bucket, epoch) → the servers that answered under it.
    served_under: HashMap<(u32, u64), String>,
    epoch_conflicts: u64,
}

/// What a task believes a key holds.
#[derive(Clone, PartialEq)]
enum Expected {
    /// Not yet written by this run, or a write failed: any value is possible.
    Unknown,
    Value(Option<String>),
}

/// Runs `config` against `client` until `stop` turns true. Times in the report are measured
/// from `origin`.
pub async fn run(
    client: &Client,
    config: &LoadConfig,
    origin: Instant,
    stop: watch::Receiver<bool>,
) -> LoadReport {
    let clients = config.clients.max(1);
    let period = Duration::from_secs_f64(clients as f64 / config.rate.max(0.1));
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for index in 0..clients {
        let task = Task {
            client: client.clone(),
            keys: (0..config.keys_per_client.max(1))
                .map(|key| format!("{}c{index}-k{key}", config.key_prefix))
                .collect(),
            rng: 0x9e37_79b9_7f4a_7c15 ^ (index as u64 + 1).wrapping_mul(0xbf58_476d_1ce4_e5b9),
            origin,
        };
        let stop = stop.clone();
        // Tasks start spread over one period, so that the total rate is even.
        let offset = period.mul_f64(index as f64 / clients as f64);
        tasks.spawn(task.run(period, offset, stop));
    }
    let mut results = Vec::with_capacity(clients);
    while let Some(result) = tasks.join_next().await {
        match result {
            Ok(result) => results.push(result),
            Err(error) => tracing::error!(%error, "a load task failed"),
        }
    }
    let mut report = merge(results, started.elapsed());
    report.target_rate = config.rate;
    report
}

struct Task {
    client: Client,
    keys: Vec<String>,
    rng: u64,
    origin: Instant,
}

impl Task {
    fn next_random(&mut self) -> u64 {
        // xorshift64*: enough to pick keys and operations.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        self.rng.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    async fn run(
        mut self,
        period: Duration,
        offset: Duration,
        mut stop: watch::Receiver<bool>,
    ) -> TaskResult {
        let mut result = TaskResult::default();
        let mut expected: Vec<Expected> = vec![Expected::Unknown; self.keys.len()];
        let mut last_epoch: Vec<u64> = vec![0; self.keys.len()];
        let mut ticks = tokio::time::interval_at(Instant::now() + offset, period);
        ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let mut sequence = 0u64;
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|stop| *stop) => break,
            }
            let index = (self.next_random() % self.keys.len() as u64) as usize;
            let choice = self.next_random() % 100;
            sequence += 1;
            let key = self.keys[index].clone();
            let started = Instant::now();
            result.requests += 1;
            let answer = if choice < 45 || expected[index] == Expected::Unknown {
                let value = format!("{key}-v{sequence}");
                let reply = self.client.put(&key, &value).await;
                expected[index] = match &reply {
                    Ok(_) => Expected::Value(Some(value)),
                    Err(_) => Expected::Unknown,
                };
                reply.map(|outcome| {
                    (
                        outcome.attempts,
                        outcome.misroutes,
                        outcome.reply.bucket,
                        outcome.reply.epoch,
                        outcome.reply.server,
                    )
                })
            } else if choice < 50 {
                let reply = self.client.delete(&key).await;
                expected[index] = match &reply {
                    Ok(_) => Expected::Value(None),
                    Err(_) => Expected::Unknown,
                };
                reply.map(|outcome| {
                    (
                        outcome.attempts,
                        outcome.misroutes,
                        outcome.reply.bucket,
                        outcome.reply.epoch,
                        outcome.reply.server,
                    )
                })
            } else {
                let reply = self.client.get(&key).await;
                if let (Ok(outcome), Expected::Value(value)) = (&reply, &expected[index]) {
                    if outcome.reply.value != *value {
                        result.wrong_reads += 1;
                    }
                }
                reply.map(|outcome| {
                    (
                        outcome.attempts,
                        outcome.misroutes,
                        outcome.reply.bucket,
                        outcome.reply.epoch,
                        outcome.reply.server,
                    )
                })
            };
            match answer {
                Ok((attempts, misroutes, bucket, epoch, server)) => {
                    result.successes += 1;
                    result.misroutes += u64::from(misroutes);
                    result.retried += u64::from(attempts > 1);
                    result
                        .latencies_us
                        .push(started.elapsed().as_micros() as u64);
                    if epoch < last_epoch[index] {
                        result.epoch_regressions += 1;
                    }
                    last_epoch[index] = last_epoch[index].max(epoch);
                    record_server(&mut result, bucket, epoch, server);
                }
                Err(error) => self.failed(&mut result, started, error),
            }
        }
        result
    }

    fn failed(&self, result: &mut TaskResult, started: Instant, error: ClientError) {
        result.failures += 1;
        result
            .failure_times
            .push(started.saturating_duration_since(self.origin).as_secs_f64());
        if result.failure_samples.len() < 3 {
            result.failure_samples.push(error.to_string());
        }
    }
}

/// One server per (bucket, epoch): two servers answering under one epoch would mean two
/// owners at once.
fn record_server(result: &mut TaskResult, bucket: u32, epoch: u64, server: String) {
    match result.served_under.get(&(bucket, epoch)) {
        Some(known) if *known != server => result.epoch_conflicts += 1,
        Some(_) => {}
        None => {
            result.served_under.insert((bucket, epoch), server);
        }
    }
}

fn merge(results: Vec<TaskResult>, elapsed: Duration) -> LoadReport {
    let mut report = LoadReport {
        elapsed_seconds: elapsed.as_secs_f64(),
        ..LoadReport::default()
    };
    let mut latencies = Vec::new();
    let mut failure_times = Vec::new();
    let mut served_under: BTreeMap<(u32, u64), String> = BTreeMap::new();
    for result in results {
        report.requests += result.requests;
        report.successes += result.successes;
        report.failures += result.failures;
        report.misroutes += result.misroutes;
        report.retried_requests += result.retried;
        report.wrong_reads += result.wrong_reads;
        report.epoch_regressions += result.epoch_regressions;
        report.epoch_conflicts += result.epoch_conflicts;
        latencies.extend(result.latencies_us);
        failure_times.extend(result.failure_times);
        for ((bucket, epoch), server) in result.served_under {
            match served_under.get(&(bucket, epoch)) {
                Some(known) if *known != server => report.epoch_conflicts += 1,
                Some(_) => {}
                None => {
                    served_under.insert((bucket, epoch), server);
                }
            }
        }
        for sample in result.failure_samples {
            if report.failure_samples.len() < 5 {
                report.failure_samples.push(sample);
            }
        }
    }
    report.achieved_rate = report.requests as f64 / report.elapsed_seconds.max(f64::EPSILON);
    latencies.sort_unstable();
    report.p50_ms = percentile_ms(&latencies, 0.50);
    report.p99_ms = percentile_ms(&latencies, 0.99);
    report.p999_ms = percentile_ms(&latencies, 0.999);
    report.max_ms = percentile_ms(&latencies, 1.0);
    report.misroutes_per_request = if report.requests == 0 {
        0.0
    } else {
        report.misroutes as f64 / report.requests as f64
    };
    failure_times.sort_by(f64::total_cmp);
    report.failure_window_seconds = failure_times
        .first()
        .zip(failure_times.last())
        .map(|(a, b)| (*a, *b));
    report
}

fn percentile_ms(sorted_us: &[u64], quantile: f64) -> f64 {
    if sorted_us.is_empty() {
        return 0.0;
    }
    let rank = ((sorted_us.len() as f64 * quantile).ceil() as usize).clamp(1, sorted_us.len());
    sorted_us[rank - 1] as f64 / 1000.0
}
