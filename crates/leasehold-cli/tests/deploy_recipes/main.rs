//! The deployment recipes in `deploy/`, checked against the binary they run.
//!
//! - Kubernetes (`deploy/kubernetes`): every YAML document parses and names its kind; the
//!   agent's arguments are all options of `leasehold agent`; its name comes from the pod's;
//!   the probes ask the port it listens on; the preStop hook drains it; the grace period
//!   outlasts the longest hand-off its timings allow. The agent command line is then run for
//!   real, two pods' worth, and the hooks are run against those agents.
//! - systemd (`deploy/systemd`): the unit's ExecStart, with the example environment file,
//!   names only options the agent has and runs; its stop timeout outlasts the hand-off; it
//!   keeps its hardening; and `systemd-analyze verify` accepts it where systemd is installed.
//!
//! A recipe is only as good as its agreement with the binary: a flag renamed, a default
//! changed or a probe moved must fail here rather than in a cluster.

#[path = "../common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{http, NodeProcess, Site};
use leasehold::testing::require_tool;
use yaml_rust2::{Yaml, YamlLoader};

mod kubernetes;
mod systemd;

/// The limit on each wait for a running agent.
const WAIT: Duration = Duration::from_secs(60);

fn deploy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../deploy")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

// ---------------------------------------------------------------------------------------
// The agent's command line
// ---------------------------------------------------------------------------------------

/// The long options of `leasehold agent`, each with whether it takes a value, from the
/// binary's own help.
fn agent_options() -> BTreeMap<String, bool> {
    let run = common::leasehold(&["agent", "--help"]);
    assert_eq!(run.code, 0, "leasehold agent --help failed: {run:?}");
    let mut options = BTreeMap::new();
    for line in run.stdout.lines() {
        // Option lines are indented a little ("  -h, --help", "      --id <ID>"); their
        // descriptions, which may name options too, much further.
        let indent = line.len() - line.trim_start().len();
        let Some(at) = line.find("--") else { continue };
        if indent > 6 || !line.trim_start().starts_with('-') {
            continue;
        }
        let mut words = line[at..].split_whitespace();
        let name = words.next().expect("an option name");
        let takes_value = words.next().is_some_and(|word| word.starts_with('<'));
        options.insert(name.to_owned(), takes_value);
    }
    assert!(
        options.contains_key("--id") && options.contains_key("--listen"),
        "could not read the options from `leasehold agent --help`:\n{}",
        run.stdout
    );
    options
}

/// The flag each `LEASEHOLD_*` variable sets, as `leasehold agent --help` names them
/// (`[env: LEASEHOLD_ID=]` under `--id`).
fn agent_variables() -> BTreeMap<String, String> {
    let run = common::leasehold(&["agent", "--help"]);
    assert_eq!(run.code, 0, "leasehold agent --help failed: {run:?}");
    let mut variables = BTreeMap::new();
    let mut flag = None;
    for line in run.stdout.lines() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("--") || trimmed.starts_with("-h") {
            flag = trimmed
                .split([',', ' '])
                .find(|word| word.starts_with("--"))
                .map(str::to_owned);
        } else if let Some(rest) = trimmed.strip_prefix("[env: ") {
            let name = rest.split('=').next().expect("a variable name");
            if let Some(flag) = &flag {
                variables.insert(name.to_owned(), flag.clone());
            }
        }
    }
    assert_eq!(
        variables.get("LEASEHOLD_ID").map(String::as_str),
        Some("--id"),
        "could not read the variables from `leasehold agent --help`:\n{}",
        run.stdout
    );
    variables
}

/// The options the environment sets, as `(flag, value)` pairs, for the agent's variables
/// among `env`; the store and the group, which the test gives its own, are left out.
fn options_from_environment(env: &BTreeMap<String, String>) -> Vec<(String, Option<String>)> {
    let variables = agent_variables();
    env.iter()
        .filter(|(name, _)| !["LEASEHOLD_STORE", "LEASEHOLD_GROUP"].contains(&name.as_str()))
        .filter_map(|(name, value)| {
            let flag = variables.get(name)?;
            Some((flag.clone(), Some(value.clone())))
        })
        .collect()
}

/// The options of an agent command line (`agent --flag value ...`), in order, each checked to
/// be one `leasehold agent` accepts.
fn agent_command_line(
    words: &[String],
    accepted: &BTreeMap<String, bool>,
    recipe: &str,
) -> Vec<(String, Option<String>)> {
    let mut words = words.iter();
    assert_eq!(
        words.next().map(String::as_str),
        Some("agent"),
        "{recipe}: the command line should start with the `agent` subcommand"
    );
    let mut options = Vec::new();
    while let Some(word) = words.next() {
        let (name, inline) = match word.split_once('=') {
            Some((name, value)) => (name, Some(value.to_owned())),
            None => (word.as_str(), None),
        };
        assert!(
            name.starts_with("--"),
            "{recipe}: {word:?} is not an option (the agent takes no positional arguments)"
        );
        let takes_value = *accepted.get(name).unwrap_or_else(|| {
            panic!(
                "{recipe}: `leasehold agent` has no option {name} (see `leasehold agent --help`)"
            )
        });
        let value = match (takes_value, inline) {
            (true, Some(value)) => Some(value),
            (true, None) => Some(
                words
                    .next()
                    .unwrap_or_else(|| panic!("{recipe}: {name} lacks its value"))
                    .clone(),
            ),
            (false, None) => None,
            (false, Some(_)) => panic!("{recipe}: {name} takes no value"),
        };
        options.push((name.to_owned(), value));
    }
    options
}

fn option<'a>(options: &'a [(String, Option<String>)], name: &str) -> Option<&'a str> {
    options
        .iter()
        .rev()
        .find(|(n, _)| n == name)
        .and_then(|(_, value)| value.as_deref())
}

/// The command line without `name` and its value, if it is there.
fn without_option(line: &[String], name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut words = line.iter();
    while let Some(word) = words.next() {
        if word == name {
            words.next();
        } else if !word.starts_with(&format!("{name}=")) {
            out.push(word.clone());
        }
    }
    out
}

/// The command line with `name`'s value replaced (the option must be there).
fn with_option(line: &[String], name: &str, value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut replaced = false;
    let mut words = line.iter();
    while let Some(word) = words.next() {
        if word == name {
            words.next();
            out.extend([name.to_owned(), value.to_owned()]);
            replaced = true;
        } else if word.starts_with(&format!("{name}=")) {
            out.push(format!("{name}={value}"));
            replaced = true;
        } else {
            out.push(word.clone());
        }
    }
    assert!(replaced, "{name} is not in {line:?}");
    out
}

/// A sum of terms, each a number and a unit (`1m30s`), with `unit` giving each unit's length
/// in seconds.
fn sum_of_terms(text: &str, unit: fn(&str) -> Option<f64>) -> Duration {
    assert!(!text.is_empty(), "an empty duration");
    let mut seconds = 0.0;
    let mut rest = text;
    while !rest.is_empty() {
        let split = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let (number, tail) = rest.split_at(split);
        let split = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (name, tail) = tail.split_at(split);
        let number: f64 = number
            .parse()
            .unwrap_or_else(|_| panic!("{text:?} is not a duration"));
        let scale = unit(name).unwrap_or_else(|| panic!("{text:?}: no unit {name:?}"));
        seconds += number * scale;
        rest = tail;
    }
    Duration::from_secs_f64(seconds)
}

/// A duration as the agent's flags write it: `500ms`, `2s`, `1.5s`, `1m30s`, `2h`.
fn flag_duration(text: &str) -> Duration {
    sum_of_terms(text, |unit| match unit {
        "us" => Some(1e-6),
        "ms" => Some(1e-3),
        "s" => Some(1.0),
        "m" => Some(60.0),
        "h" => Some(3600.0),
        _ => None,
    })
}

/// The timings that bound a hand-off, as a recipe gives them to the agent.
#[derive(Debug)]
struct Timings {
    acquire_after: Duration,
    scan_interval: Duration,
    store_timeout: Duration,
    drain_timeout: Duration,
}

impl Timings {
    /// Every timing must be given: the stop timeout is derived from them, and a default that
    /// changed in the binary would otherwise change the bound behind the recipe's back.
    fn of(options: &[(String, Option<String>)], recipe: &str) -> Timings {
        let get = |name: &str| {
            flag_duration(option(options, name).unwrap_or_else(|| {
                panic!(
                    "{recipe}: give {name} explicitly: the time allowed for stopping is \
                     derived from the timings"
                )
            }))
        };
        // Not in the bound, but they must be pinned for the same reason: the group record
        // requires every node to fit the same timings.
        get("--heartbeat");
        get("--validity");
        Timings {
            acquire_after: get("--acquire-after"),
            scan_interval: get("--scan-interval"),
            store_timeout: get("--store-timeout"),
            drain_timeout: get("--drain-timeout"),
        }
    }

    /// The longest a hand-off can take, from the moment a node is told to leave (a drain, or
    /// SIGTERM) until another node may take each of its partitions and the agent has exited:
    ///
    /// ```text
    /// scan_interval + 4 × store_timeout + drain_timeout + acquire_after
    /// ```
    ///
    /// - `scan_interval`: a drain is noticed at the node's next scan (SIGTERM at once);
    /// - `4 × store_timeout`: the member record goes first, in up to two tries of a delete and
    ///   a read;
    /// - `drain_timeout`: each lease waits for the work in flight under its permits;
    /// - `acquire_after`: work that outlives the drain timeout makes the holder stop renewing
    ///   instead of releasing, and another node takes the lease this long after the last
    ///   renewal it saw. The agent exits once the lease has run out, `lease_validity` after
    ///   that renewal, which is sooner: the timings are refused unless
    ///   `acquire_after × (1 − ρ) > lease_validity × (1 + ρ)`.
    fn handoff_bound(&self) -> Duration {
        self.scan_interval + 4 * self.store_timeout + self.drain_timeout + self.acquire_after
    }
}

fn port_of(address: &str) -> u16 {
    address
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("{address:?} is not HOST:PORT"))
}

fn is_loopback(address: &str) -> bool {
    let host = address.rsplit_once(':').map_or(address, |(host, _)| host);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

// ---------------------------------------------------------------------------------------
// Running recipes' command lines
// ---------------------------------------------------------------------------------------

/// Partitions held by the agent at `at`, counting those being handed off.
fn leases_held(at: &str) -> u64 {
    let metrics = http::get(at, "/metrics");
    assert_eq!(metrics.status, 200, "{metrics:?}");
    metrics
        .body
        .lines()
        .find(|line| line.starts_with("leasehold_leases_held{"))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse::<f64>().ok())
        .map(|value| value as u64)
        .unwrap_or_else(|| panic!("no leasehold_leases_held in /metrics:\n{}", metrics.body))
}

/// Partitions open to new work at `at` (not being handed off).
fn leases_open(at: &str) -> usize {
    let leases = http::get(at, "/v1/leases");
    assert_eq!(leases.status, 200, "{leases:?}");
    leases.json()["leases"].as_array().expect("leases").len()
}

/// An agent a recipe started, over the test's store.
struct Agent {
    at: String,
    process: NodeProcess,
}

/// Starts `leasehold agent` with a recipe's words, changed only where the test must: the API
/// on a free loopback port, the test's token file, the site's store (the recipe's is a
/// server elsewhere, or a path on a host).
fn start_agent(site: &Site, name: &str, group: &str, words: &[String], token: &Path) -> Agent {
    start_agent_with(site, name, group, words, token, &BTreeMap::new())
}

/// [`start_agent`] with `env` set for it (a unit's environment: `LEASEHOLD_ID`…), but for
/// the store and the group, which are the test's.
fn start_agent_with(
    site: &Site,
    name: &str,
    group: &str,
    words: &[String],
    token: &Path,
    env: &BTreeMap<String, String>,
) -> Agent {
    let mut words = without_option(words, "--listen");
    words.extend(["--listen".to_owned(), "127.0.0.1:0".to_owned()]);
    let words = with_option(&words, "--token-file", token.to_str().unwrap());
    let mut args: Vec<&str> = vec!["--group", group];
    args.extend(words.iter().map(String::as_str));
    let env: Vec<(&str, &str)> = env
        .iter()
        .filter(|(key, _)| !["LEASEHOLD_STORE", "LEASEHOLD_GROUP"].contains(&key.as_str()))
        .map(|(key, value)| (key.as_str(), value.as_str()))
        .collect();
    let process = site.process_with_env(name, &args, &env);
    let at = http::authority(&site.printed_url(name)).to_owned();
    Agent { at, process }
}

/// Runs a lifecycle hook to completion within `limit`; its exit code and how long it took.
fn run_hook(
    command: &[String],
    env: &BTreeMap<String, String>,
    limit: Duration,
) -> (i32, Duration) {
    let started = Instant::now();
    let mut child = Command::new(&command[0])
        .args(&command[1..])
        .envs(env)
        .stdin(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run the hook {command:?}: {e}"));
    loop {
        if let Some(status) = child.try_wait().expect("wait for the hook") {
            return (status.code().unwrap_or(-1), started.elapsed());
        }
        if started.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the hook {command:?} ran longer than {limit:?}");
        }
        sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------
// Kubernetes
// ---------------------------------------------------------------------------------------
