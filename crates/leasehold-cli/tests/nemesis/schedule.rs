//! The fleet under test and the seeded schedule of faults it goes through. Every wait is
//! bounded: a fault lasts seconds, the recovery after the last one is given a bound, and a
//! node that does not stop within its limit fails the run.

use std::fmt;
use std::thread::sleep;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::checker::{self, Findings};
use crate::common::{read_log_so_far, NodeProcess, Site};
use crate::handovers::{handovers, summary, Handovers};
use crate::netns::Cluster;
use crate::proxy::{LinkState, Proxy};

/// Partitions in the group.
pub const PARTITIONS: u32 = 8;

/// How soon after the faults heal every partition must be worked again: a store connection
/// re-established, a lease abandoned meanwhile taken over, on a loaded machine.
const RECOVERY_BOUND: Duration = Duration::from_secs(30);

/// The same after the etcd leader was cut from its peers, which takes the nodes longer to
/// recover from: 0.3 to 19.7 s after the heal in a dozen runs on a loaded 2-core machine,
/// and one run that most likely passed 30 s (see BENCHMARKS.md).
const LEADER_CUT_RECOVERY_BOUND: Duration = Duration::from_secs(60);

/// The nodes' timings, as their flags take them.
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    pub heartbeat: &'static str,
    pub validity: &'static str,
    pub acquire_after: &'static str,
    pub store_timeout: &'static str,
}

/// One node: its proxies (one per store endpoint), its flags and its process.
struct Node {
    id: String,
    proxies: Vec<Proxy>,
    args: Vec<String>,
    process: Option<NodeProcess>,
}

impl Node {
    fn set_link(&self, state: LinkState) {
        for proxy in &self.proxies {
            proxy.set(state);
        }
    }
}

/// Three nodes working on one group.
pub struct Fleet<'a> {
    site: &'a Site,
    nodes: Vec<Node>,
    url: String,
    events: Vec<String>,
    started: Instant,
    /// Each node's cuts from the store: its name and when, in Unix nanoseconds.
    cuts: Vec<(String, u128)>,
}

/// What a run showed.
pub struct Report {
    pub findings: Findings,
    /// The faults injected, in order, with when.
    pub events: Vec<String>,
    /// Partitions not worked within the recovery bound of the faults healing.
    pub idle_after_heal: Vec<u32>,
    /// From the heal to every partition worked again.
    pub recovery: Option<Duration>,
    /// Processes that exited although nothing stopped them, with their exit status.
    pub unexpected_exits: Vec<String>,
    /// Processes that did not exit with 0 on SIGTERM at the end.
    pub bad_stops: Vec<String>,
    /// Takeovers after expiries, from the fence log.
    pub handovers: Handovers,
}

impl Report {
    /// Asserts that every check held, printing the nodes' logs if not.
    pub fn assert_all_held(&self, site: &Site) {
        let held = self.findings.safe()
            && self.idle_after_heal.is_empty()
            && self.unexpected_exits.is_empty()
            && self.bad_stops.is_empty()
            && self.findings.units > 0;
        if !held {
            panic!("{self}\n{}", site.node_logs());
        }
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "faults:")?;
        for event in &self.events {
            writeln!(f, "  {event}")?;
        }
        writeln!(
            f,
            "units of work checked: {}; overlaps: {}; stale epochs: {}; tenures checked: {}; \
             overlapping tenures: {}; recovery after heal: {}",
            self.findings.units,
            self.findings.overlaps.len(),
            self.findings.stale_epochs.len(),
            self.findings.tenures,
            self.findings.tenure_overlaps.len(),
            self.recovery
                .map_or("not within the bound".to_owned(), |d| format!(
                    "{:.2}s",
                    d.as_secs_f64()
                ))
        )?;
        for problem in self
            .findings
            .overlaps
            .iter()
            .chain(&self.findings.stale_epochs)
            .chain(&self.findings.tenure_overlaps)
            .take(10)
        {
            writeln!(f, "  {problem}")?;
        }
        if !self.idle_after_heal.is_empty() {
            writeln!(f, "idle after the heal: {:?}", self.idle_after_heal)?;
        }
        for (what, values) in [
            ("takeover after a cut", &self.handovers.after_cut),
            (
                "an expired lease's deadline to the takeover",
                &self.handovers.stopped_early_by,
            ),
        ] {
            if let Some((count, median, largest)) = summary(values) {
                writeln!(
                    f,
                    "{what}: {count} partitions, median {:.2}s, longest {:.2}s",
                    median.as_secs_f64(),
                    largest.as_secs_f64()
                )?;
            }
        }
        for exit in self.unexpected_exits.iter().chain(&self.bad_stops) {
            writeln!(f, "  {exit}")?;
        }
        Ok(())
    }
}

/// A small seeded generator: the schedule must replay from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// A duration uniformly in `[low, high]` milliseconds.
    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(low + self.below(high - low + 1))
    }
}

fn unix_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

impl<'a> Fleet<'a> {
    /// Starts three nodes on `site`'s group, node `i` with its lease clock at `rates[i]`
    /// and through proxies of its own to `endpoints`; the last node also gets `last_extra`
    /// (flags given there replace the timings'). Returns once every partition is worked.
    pub fn start(
        site: &'a Site,
        endpoints: &[String],
        url: &str,
        timings: Timings,
        rates: &[&str; 3],
        last_extra: &[&str],
    ) -> Fleet<'a> {
        let work_log = site.path("work.log").display().to_string();
        let fence_log = site.path("fence.log").display().to_string();
        let mut nodes = Vec::new();
        for (i, rate) in rates.iter().enumerate() {
            let proxies: Vec<Proxy> = endpoints.iter().map(|e| Proxy::start(e)).collect();
            let extra: &[&str] = if i + 1 == rates.len() {
                last_extra
            } else {
                &[]
            };
            let overridden = |flag: &str| extra.contains(&flag);
            let mut args: Vec<String> = ["node", "--id", &format!("n{i}")]
                .iter()
                .map(|s| s.to_string())
                .collect();
            let partitions = PARTITIONS.to_string();
            for (flag, value) in [
                ("--partitions", partitions.as_str()),
                ("--heartbeat", timings.heartbeat),
                ("--validity", timings.validity),
                ("--acquire-after", timings.acquire_after),
                ("--scan-interval", "300ms"),
                ("--store-timeout", timings.store_timeout),
                ("--work-log", work_log.as_str()),
                ("--fence-log", fence_log.as_str()),
                ("--work-interval", "100ms"),
                ("--work-duration", "300ms"),
                ("--drain-timeout", "2s"),
                ("--clock-rate", rate),
            ] {
                if !overridden(flag) {
                    args.extend([flag.to_owned(), value.to_owned()]);
                }
            }
            args.extend(extra.iter().map(|s| s.to_string()));
            nodes.push(Node {
                id: format!("n{i}"),
                proxies,
                args,
                process: None,
            });
        }
        let mut fleet = Fleet {
            site,
            nodes,
            url: url.to_owned(),
            events: Vec::new(),
            started: Instant::now(),
            cuts: Vec::new(),
        };
        for index in 0..fleet.nodes.len() {
            fleet.spawn(index);
        }
        let since = unix_ns();
        let worked = fleet.wait_until_all_worked(since, Duration::from_secs(60));
        for node in &mut fleet.nodes {
            let running = node.process.as_mut().is_some_and(NodeProcess::is_running);
            assert!(running, "{} exited at start\n{}", node.id, site.node_logs());
        }
        assert!(
            worked.is_some(),
            "the fleet never worked every partition\n{}",
            site.node_logs()
        );
        fleet
    }

    fn note(&mut self, text: String) {
        let at = self.started.elapsed().as_secs_f64();
        self.events.push(format!("{at:7.2}s  {text}"));
    }

    /// Starts node `index`'s process, through its proxies.
    fn spawn(&mut self, index: usize) {
        let node = &mut self.nodes[index];
        let addresses: Vec<String> = node.proxies.iter().map(|p| p.address.clone()).collect();
        let arguments: Vec<&str> = node.args.iter().map(String::as_str).collect();
        let url = rebuild_url(&self.url, &addresses);
        node.process = Some(self.site.process_on(&node.id, &url, &arguments));
    }

    /// Nodes that exited although nothing stopped them.
    fn exited_by_themselves(&mut self) -> Vec<String> {
        let mut exits = Vec::new();
        for node in &mut self.nodes {
            if let Some(process) = &mut node.process {
                if !process.is_running() {
                    exits.push(format!("{} exited by itself", node.id));
                    node.process = None;
                }
            }
        }
        exits
    }

    /// Runs a schedule of `length` drawn from `seed`, heals, and checks.
    pub fn run_schedule(&mut self, seed: u64, length: Duration) -> Report {
        let mut rng = Rng(seed | 1);
        let end = Instant::now() + length;
        let mut unexpected = Vec::new();
        while Instant::now() < end {
            unexpected.extend(self.exited_by_themselves());
            let index = rng.below(self.nodes.len() as u64) as usize;
            let id = self.nodes[index].id.clone();
            match rng.below(8) {
                0 => self.cut(index, true, rng.millis(1000, 7000)),
                1 => self.cut(index, false, rng.millis(1000, 7000)),
                2 => {
                    // Up to beyond the lease validity each way.
                    let latency = rng.millis(50, 7000);
                    let lasting = rng.millis(2000, 8000);
                    self.note(format!("{id}: latency {latency:?} for {lasting:?}"));
                    let state = LinkState {
                        latency,
                        ..LinkState::default()
                    };
                    self.hold(index, state, lasting);
                }
                3 => {
                    let loss = 0.1 + rng.below(40) as f64 / 100.0;
                    let lasting = rng.millis(1500, 5000);
                    self.note(format!("{id}: {:.0}% loss for {lasting:?}", loss * 100.0));
                    let state = LinkState {
                        loss,
                        ..LinkState::default()
                    };
                    self.hold(index, state, lasting);
                }
                4 => {
                    let lasting = rng.millis(500, 5000);
                    self.note(format!("store cut from every node for {lasting:?}"));
                    let now = unix_ns();
                    let ids: Vec<String> = self.nodes.iter().map(|n| n.id.clone()).collect();
                    self.cuts.extend(ids.into_iter().map(|id| (id, now)));
                    self.nodes
                        .iter()
                        .for_each(|node| node.set_link(LinkState::CUT));
                    sleep(lasting);
                    self.nodes
                        .iter()
                        .for_each(|node| node.set_link(LinkState::default()));
                }
                5 => {
                    let lasting = rng.millis(500, 5000);
                    if self.nodes[index].process.is_some() {
                        self.note(format!("{id}: paused for {lasting:?}"));
                        let process = self.nodes[index].process.as_ref().expect("checked");
                        process.signal("STOP");
                        sleep(lasting);
                        process.signal("CONT");
                    }
                }
                6 => {
                    let latency = rng.millis(150, 950);
                    let slow = rng.millis(1500, 3000);
                    let cut = rng.millis(4000, 7000);
                    self.degrade(index, latency, slow, cut);
                }
                _ => {
                    let down = rng.millis(200, 2000);
                    if let Some(mut process) = self.nodes[index].process.take() {
                        self.note(format!("{id}: killed, restarted after {down:?}"));
                        process.kill();
                        sleep(down);
                        self.spawn(index);
                    }
                }
            }
            sleep(rng.millis(300, 1500));
        }
        unexpected.extend(self.exited_by_themselves());
        self.finish(unexpected)
    }

    /// Puts `index`'s link in `state` for `lasting`, then heals it.
    fn hold(&self, index: usize, state: LinkState, lasting: Duration) {
        self.nodes[index].set_link(state);
        sleep(lasting);
        self.nodes[index].set_link(LinkState::default());
    }

    /// A path that slows down before it fails: `index`'s round trips lengthened by
    /// `latency` for `slow`, renewals answered late but within the store time-out, then cut
    /// both ways for `cut`, then healed. A holder that counted its lease from the late reply
    /// would serve past the takeover.
    fn degrade(&mut self, index: usize, latency: Duration, slow: Duration, cut: Duration) {
        let id = self.nodes[index].id.clone();
        self.note(format!(
            "{id}: latency {latency:?} for {slow:?}, then cut both ways for {cut:?}"
        ));
        self.nodes[index].set_link(LinkState {
            latency,
            ..LinkState::default()
        });
        sleep(slow);
        self.cuts.push((id, unix_ns()));
        self.hold(index, LinkState::CUT, cut);
    }

    /// Degrades each node's path in turn, `rounds` times, with latency just under the store
    /// time-out of a one-round-trip store call; then checks.
    pub fn slow_then_cut_each(&mut self, rounds: usize) -> Report {
        for round in 0..rounds {
            let index = round % self.nodes.len();
            let latency = Duration::from_millis(850 + 25 * (round as u64 % 4));
            self.degrade(
                index,
                latency,
                Duration::from_millis(2500),
                Duration::from_millis(5000),
            );
            sleep(Duration::from_millis(1500));
        }
        let unexpected = self.exited_by_themselves();
        self.finish(unexpected)
    }

    /// Cuts `index` from the store, both ways or replies only, for `lasting`, then heals.
    fn cut(&mut self, index: usize, both_ways: bool, lasting: Duration) {
        let id = self.nodes[index].id.clone();
        let how = if both_ways {
            "both ways"
        } else {
            "replies only"
        };
        self.note(format!("{id}: cut from the store {how} for {lasting:?}"));
        let state = LinkState {
            requests_cut: both_ways,
            ..LinkState::CUT
        };
        self.cuts.push((id, unix_ns()));
        self.hold(index, state, lasting);
    }

    /// Cuts the etcd leader from the other members of `cluster`, `rounds` times, each for
    /// longer than `acquire_after`; its clients still reach it, but it has lost its quorum
    /// and the others elect a new leader. Then checks.
    pub fn cut_each_leader(&mut self, cluster: &Cluster, rounds: usize) -> Report {
        for _ in 0..rounds {
            let elected = Instant::now() + Duration::from_secs(20);
            let leader = loop {
                if let Some(leader) = cluster.leader() {
                    break leader;
                }
                assert!(Instant::now() < elected, "no etcd leader within 20 s");
                sleep(Duration::from_millis(100));
            };
            self.note(format!(
                "etcd member {leader} (the leader) cut from the others for 6s"
            ));
            cluster.isolate(leader);
            let cut = Instant::now();
            // The cut is real only if the other two elect a leader of their own: it lasts
            // 6 s and until they have, which a loaded machine may slow, up to 30 s.
            let mut successor = None;
            while cut.elapsed() < Duration::from_secs(6)
                || (successor.is_none() && cut.elapsed() < Duration::from_secs(30))
            {
                if successor.is_none() {
                    successor = cluster.leader_other_than(leader);
                }
                sleep(Duration::from_millis(100));
            }
            cluster.heal(leader);
            let successor = successor.unwrap_or_else(|| {
                panic!("no other etcd member led within 30 s of member {leader}'s cut")
            });
            let lasted = cut.elapsed().as_secs_f64();
            self.note(format!(
                "etcd member {successor} led meanwhile; healed after {lasted:.1}s"
            ));
            sleep(Duration::from_secs(3));
        }
        let unexpected = self.exited_by_themselves();
        self.finish_within(unexpected, LEADER_CUT_RECOVERY_BOUND)
    }

    /// Cuts every node but `keep` from the store in turn, each for longer than
    /// `acquire_after`, until the work log shows two nodes' units overlapping or `rounds`
    /// rounds have passed; then checks. A control asks for one overlap, and on a loaded
    /// machine a round may show none (the early taker's own calls time out): ending at the
    /// first one keeps the control both quick and sure to see it.
    pub fn cut_the_others_until_an_overlap(&mut self, keep: usize, rounds: usize) -> Report {
        for round in 0..rounds {
            let others: Vec<usize> = (0..self.nodes.len()).filter(|i| *i != keep).collect();
            let index = others[round % others.len()];
            self.cut(index, true, Duration::from_millis(5000));
            sleep(Duration::from_millis(1500));
            let spans = checker::spans(&read_log_so_far(&self.site.path("work.log")));
            if !checker::check(&spans).overlaps.is_empty() {
                self.note(format!("an overlap after {} rounds", round + 1));
                break;
            }
        }
        let unexpected = self.exited_by_themselves();
        self.finish(unexpected)
    }

    /// Waits up to `limit` for every partition to have a unit started at `since` or later;
    /// returns how long it took.
    fn wait_until_all_worked(&self, since: u128, limit: Duration) -> Option<Duration> {
        let log = self.site.path("work.log");
        let start = Instant::now();
        while start.elapsed() < limit {
            let spans = checker::spans(&read_log_so_far(&log));
            if checker::idle(&spans, PARTITIONS, since, u128::MAX).is_empty() {
                return Some(start.elapsed());
            }
            sleep(Duration::from_millis(100));
        }
        None
    }

    /// Heals every link, waits for the recovery, stops the nodes and checks the logs.
    fn finish(&mut self, unexpected_exits: Vec<String>) -> Report {
        self.finish_within(unexpected_exits, RECOVERY_BOUND)
    }

    /// [`Fleet::finish`], allowing `bound` for every partition to be worked again.
    fn finish_within(&mut self, unexpected_exits: Vec<String>, bound: Duration) -> Report {
        for node in &self.nodes {
            node.set_link(LinkState::default());
        }
        self.note("every link healed".to_owned());
        let healed = unix_ns();
        let recovery = self.wait_until_all_worked(healed, bound);
        let mut bad_stops = Vec::new();
        for node in &mut self.nodes {
            if let Some(mut process) = node.process.take() {
                let code = process.terminate(Duration::from_secs(20));
                if code != 0 {
                    bad_stops.push(format!("{} exited {code} on SIGTERM", node.id));
                }
            }
        }
        let lines = read_log_so_far(&self.site.path("work.log"));
        let spans = checker::spans(&lines);
        let bound = healed + bound.as_nanos();
        let mut findings = checker::check(&spans);
        let fence = read_log_so_far(&self.site.path("fence.log"));
        checker::check_tenures(&checker::tenures(&fence), &mut findings);
        let handovers = handovers(&fence, &self.cuts);
        Report {
            findings,
            events: std::mem::take(&mut self.events),
            idle_after_heal: checker::idle(&spans, PARTITIONS, healed, bound),
            recovery,
            unexpected_exits,
            bad_stops,
            handovers,
        }
    }
}

/// `url` (over the store's own endpoints) with its endpoints replaced by `addresses`.
fn rebuild_url(url: &str, addresses: &[String]) -> String {
    let (scheme, rest) = url.split_once("://").expect("a store URL has a scheme");
    let authority_start = rest.find('@').map_or(0, |at| at + 1);
    let authority_end = authority_start + rest[authority_start..].find('/').unwrap_or(rest.len());
    format!(
        "{scheme}://{}{}{}",
        &rest[..authority_start],
        addresses.join(","),
        &rest[authority_end..]
    )
}
