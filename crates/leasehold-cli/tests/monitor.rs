//! `leasehold monitor` and `node --metrics-listen` as an operator uses them: real processes on
//! one SQLite file, scraped and called over HTTP through a crash and a drain, and fed bad
//! requests.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::http::{self, EventStream};
use common::{NodeProcess, Site};
use serde_json::Value;

const PARTITIONS: &str = "12";
const WAIT: Duration = Duration::from_secs(60);

/// Every sample of an exposition, `name{labels}` → value, checking each line's shape.
fn samples(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    for line in text.lines() {
        if let Some(comment) = line.strip_prefix("# ") {
            let word = comment.split(' ').next().unwrap_or("");
            assert!(
                ["HELP", "TYPE", "UNIT", "EOF"].contains(&word),
                "unknown comment line {line:?}"
            );
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample: {line:?}"));
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            other => other
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let name = series.split('{').next().unwrap();
        assert!(
            name.starts_with("leasehold_")
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
            "bad name in {line:?}"
        );
        if series.contains('{') {
            assert!(series.ends_with('}'), "unclosed labels in {line:?}");
            let labels = &series[name.len() + 1..series.len() - 1];
            for pair in labels.split("\",") {
                let (key, value) = pair
                    .split_once("=\"")
                    .unwrap_or_else(|| panic!("bad label in {line:?}"));
                assert!(
                    !key.is_empty() && !value.contains('\n'),
                    "bad label in {line:?}"
                );
            }
        }
        assert!(
            samples.insert(series.to_string(), value).is_none(),
            "series twice: {line:?}"
        );
    }
    samples
}

/// The names declared by `# TYPE` lines, with a counter's `_total` put back.
fn declared(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| {
            let (name, kind) = rest.split_once(' ').unwrap();
            if kind == "counter" {
                format!("{name}_total")
            } else {
                name.to_string()
            }
        })
        .collect()
}

/// The metric names the guide's tables list.
fn documented() -> BTreeSet<String> {
    let page = include_str!("../../../docs/metrics.md");
    page.lines()
        .filter_map(|line| line.strip_prefix("| `leasehold_"))
        .map(|rest| format!("leasehold_{}", rest.split('`').next().unwrap()))
        .collect()
}

/// Checks the exposition with `promtool check metrics` (the test suite's script installs
/// promtool).
fn promtool_accepts(text: &str) {
    if !leasehold::testing::require_tool("promtool", "prometheus") {
        return;
    }
    let mut child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running promtool");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "promtool check metrics refused the exposition:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

struct Fleet {
    site: Site,
    monitor_at: String,
    nodes: BTreeMap<String, (NodeProcess, String)>,
    _monitor: NodeProcess,
}

impl Fleet {
    fn start(nodes: &[&str], monitor_flags: &[&str]) -> Fleet {
        let site = Site::new();
        site.ok(&["init", "--partitions", PARTITIONS]);
        let mut args = vec![
            "monitor",
            "--listen",
            "127.0.0.1:0",
            "--interval",
            "100ms",
            "--stale-after",
            "1s",
        ];
        args.extend_from_slice(monitor_flags);
        let monitor = site.process("monitor", &args);
        let monitor_at = http::authority(&site.printed_url("monitor")).to_string();
        let nodes = nodes
            .iter()
            .map(|id| {
                let process = site.node(id, &["--metrics-listen", "127.0.0.1:0"]);
                let at = http::authority(&site.printed_url(id)).to_string();
                (id.to_string(), (process, at))
            })
            .collect();
        Fleet {
            site,
            monitor_at,
            nodes,
            _monitor: monitor,
        }
    }

    fn map(&self) -> Value {
        let response = http::get(&self.monitor_at, "/api/map");
        assert_eq!(response.status, 200, "{response:?}");
        assert_eq!(response.header("content-type"), Some("application/json"));
        response.json()
    }

    /// Partitions held per node, by the monitor's map.
    fn held(&self) -> BTreeMap<String, usize> {
        let map = self.map();
        let names: Vec<String> = serde_json::from_value(map["nodes"].clone()).unwrap();
        let states = map["states"].as_str().unwrap().to_string();
        let mut held = BTreeMap::new();
        for (owner, state) in map["owners"].as_array().unwrap().iter().zip(states.chars()) {
            let owner = owner.as_i64().unwrap();
            if state == 'H' && owner >= 0 {
                *held.entry(names[owner as usize].clone()).or_default() += 1;
            }
        }
        held
    }

    fn wait_held(&self, what: &str, expected: &[(&str, usize)]) {
        let expected: BTreeMap<String, usize> =
            expected.iter().map(|(n, c)| (n.to_string(), *c)).collect();
        self.site.wait_for(WAIT, what, || self.held() == expected);
    }

    /// Scrapes as Prometheus does, asking for OpenMetrics.
    fn scrape(address: &str) -> (String, BTreeMap<String, f64>) {
        let accept =
            "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
        let response = http::request(address, "GET", "/metrics", &[accept], "");
        assert_eq!(response.status, 200);
        assert!(response
            .header("content-type")
            .is_some_and(|t| t.starts_with("application/openmetrics-text")));
        assert!(response.body.ends_with("# EOF\n"), "no # EOF at the end");
        let samples = samples(&response.body);
        (response.body, samples)
    }

    /// Scrapes as a client that knows only the older text format: the same samples.
    fn scrape_text(address: &str) -> String {
        let response = http::get(address, "/metrics");
        assert_eq!(response.status, 200);
        assert_eq!(
            response.header("content-type"),
            Some("text/plain; version=0.0.4; charset=utf-8")
        );
        assert!(!response.body.contains("# EOF"));
        response.body
    }

    fn node_metrics(&self, id: &str) -> BTreeMap<String, f64> {
        Fleet::scrape(&self.nodes[id].1).1
    }

    fn monitor_metrics(&self) -> BTreeMap<String, f64> {
        Fleet::scrape(&self.monitor_at).1
    }
}

fn node_series(name: &str, node: &str) -> String {
    format!(r#"{name}{{group="default",node="{node}"}}"#)
}

#[test]
fn metrics_of_nodes_and_monitor_follow_a_crash_and_a_drain() {
    let mut fleet = Fleet::start(&["node-0", "node-1", "node-2"], &[]);
    fleet.wait_held(
        "three nodes to hold four partitions each",
        &[("node-0", 4), ("node-1", 4), ("node-2", 4)],
    );
    // A heartbeat after its last take, node-0 has renewed what it holds.
    let renewals = node_series("leasehold_renewal_batch_size_count", "node-0");
    fleet.site.wait_for(
        Duration::from_secs(10),
        "node-0 to renew its leases",
        || {
            Fleet::scrape(&fleet.nodes["node-0"].1)
                .1
                .get(&renewals)
                .is_some_and(|count| *count > 0.0)
        },
    );

    // Every documented name is declared by a node or the monitor, and nothing undocumented.
    let (node_text, node) = Fleet::scrape(&fleet.nodes["node-0"].1);
    let (monitor_text, _) = Fleet::scrape(&fleet.monitor_at);
    let mut names = declared(&node_text);
    names.extend(declared(&monitor_text));
    assert_eq!(
        names,
        documented(),
        "the metric tables of docs/metrics.md and the scrapes differ"
    );
    for address in [&fleet.nodes["node-0"].1, &fleet.monitor_at] {
        let text = Fleet::scrape_text(address);
        let plain = samples(&text);
        let open = Fleet::scrape(address).1;
        assert_eq!(
            plain.keys().collect::<Vec<_>>(),
            open.keys().collect::<Vec<_>>(),
            "both formats carry the same series"
        );
        promtool_accepts(&text);
    }
    assert!(node[&node_series("leasehold_renewal_batch_size_count", "node-0")] > 0.0);
    assert_eq!(http::get(&fleet.nodes["node-0"].1, "/healthz").body, "ok\n");
    // The gauges follow the fleet, which a loaded machine can unbalance for a moment (a
    // renewal held back past its lease, the partition taken by another node and handed
    // back): waited for, not read once.
    fleet
        .site
        .wait_for(WAIT, "node-0 to report its four of three members'", || {
            let node = fleet.node_metrics("node-0");
            [
                ("leasehold_leases_held", 4.0),
                ("leasehold_leases_target", 4.0),
                ("leasehold_live_members", 3.0),
            ]
            .iter()
            .all(|(name, value)| node[&node_series(name, "node-0")] == *value)
        });
    let gauge = |name: &str| format!(r#"{name}{{group="default"}}"#);
    let mut monitor = BTreeMap::new();
    fleet.site.wait_for(
        WAIT,
        "the monitor to count 3 live members, 12 partitions held, 4 by node-1",
        || {
            monitor = fleet.monitor_metrics();
            monitor[r#"leasehold_monitor_members{group="default",state="live"}"#] == 3.0
                && monitor[r#"leasehold_monitor_partitions{group="default",state="held"}"#] == 12.0
                && monitor[r#"leasehold_monitor_member_partitions{group="default",node="node-1"}"#]
                    == 4.0
        },
    );
    assert_eq!(monitor[&gauge("leasehold_monitor_up")], 1.0);
    assert_eq!(
        monitor[&gauge("leasehold_monitor_partitions_expected")],
        12.0
    );
    assert_eq!(monitor[&gauge("leasehold_monitor_partitions_unowned")], 0.0);
    // A crash: node-2's partitions are taken over; the monitor sees it die.
    fleet.nodes.get_mut("node-2").unwrap().0.kill();
    fleet.wait_held(
        "the survivors to take node-2's partitions",
        &[("node-0", 6), ("node-1", 6)],
    );
    // Each survivor counts an acquisition for every lease it holds, the ones it took over
    // included. A node counts the take before it sets its gauge of leases held, so once the
    // gauge shows 6 the count is complete. (Comparing counts from before the crash would
    // not do: on a loaded machine some of node-2's leases may lapse to the others first.)
    for n in ["node-0", "node-1"] {
        let held = node_series("leasehold_leases_held", n);
        fleet.site.wait_for(WAIT, "a survivor to count 6 held", || {
            fleet.node_metrics(n)[&held] == 6.0
        });
        let taken = fleet.node_metrics(n)[&node_series("leasehold_lease_acquisitions_total", n)];
        assert!(
            taken >= 6.0,
            "{n} holds 6 leases and counts {taken} acquisitions"
        );
    }
    fleet
        .site
        .wait_for(WAIT, "the monitor to count node-2 dead", || {
            fleet.monitor_metrics()[r#"leasehold_monitor_members{group="default",state="dead"}"#]
                == 1.0
        });
    let monitor = fleet.monitor_metrics();
    let changes = |kind: &str| {
        monitor[&format!(
            r#"leasehold_monitor_ownership_changes_total{{group="default",kind="{kind}"}}"#
        )]
    };
    assert!(changes("lost") >= 4.0, "{monitor:?}");
    assert!(changes("acquired") >= 4.0);
    // node-2 died once; a member a loaded machine kept from renewing within --stale-after
    // may have been seen dead and alive again meanwhile, each counted.
    let members = |kind: &str| {
        monitor
            [&format!(r#"leasehold_monitor_member_changes_total{{group="default",kind="{kind}"}}"#)]
    };
    assert!(members("dead") >= 1.0, "{monitor:?}");
    assert_eq!(
        members("dead") - members("alive"),
        monitor[r#"leasehold_monitor_members{group="default",state="dead"}"#],
        "every death seen but the last was followed by a return: {monitor:?}"
    );

    let changes_before = |kinds: &[&str]| {
        let monitor = fleet.monitor_metrics();
        kinds
            .iter()
            .map(|kind| {
                monitor[&format!(
                    r#"leasehold_monitor_ownership_changes_total{{group="default",kind="{kind}"}}"#
                )]
            })
            .sum::<f64>()
    };
    let (given_up, acquired) = (
        changes_before(&["released", "lost"]),
        changes_before(&["acquired"]),
    );

    // A drain: node-1 hands everything to node-0 and says so.
    fleet.site.ok(&["drain", "node-1"]);
    fleet.wait_held("node-1 to hand everything off", &[("node-0", 12)]);
    // Every tenure it took has ended, each loss counted under its reason: released by the
    // drain, or expired first where a loaded machine held a renewal back past its lease.
    let losses = |node: &BTreeMap<String, f64>| -> f64 {
        node.iter()
            .filter(|(series, _)| {
                series.starts_with("leasehold_lease_losses_total{")
                    && series.contains(r#"node="node-1""#)
            })
            .map(|(_, count)| count)
            .sum()
    };
    fleet.site.wait_for(WAIT, "node-1 to report the drain", || {
        let node = fleet.node_metrics("node-1");
        node[&node_series("leasehold_draining", "node-1")] == 1.0
            && node[&node_series("leasehold_leases_held", "node-1")] == 0.0
            && losses(&node) == node[&node_series("leasehold_lease_acquisitions_total", "node-1")]
    });
    let node = fleet.node_metrics("node-1");
    assert!(losses(&node) >= 6.0, "it held six: {node:?}");
    assert!(
        node[&node_series("leasehold_lease_releases_total", "node-1")] >= 1.0,
        "the drain released nothing: {node:?}"
    );
    assert_eq!(node[&node_series("leasehold_leases_target", "node-1")], 0.0);
    assert_eq!(
        node[&node_series("leasehold_lease_deadline_seconds", "node-1")],
        f64::INFINITY
    );
    let monitor = fleet.monitor_metrics();
    assert_eq!(
        monitor[r#"leasehold_monitor_members{group="default",state="draining"}"#],
        1.0
    );
    // Between two reads a release and the take that follows it can both happen: the monitor
    // then sees the partition change hands without the release.
    assert!(changes_before(&["released", "lost"]) - given_up >= 6.0);
    assert!(changes_before(&["acquired"]) - acquired >= 6.0);
}

#[test]
fn the_event_stream_sends_the_map_then_what_changes() {
    let fleet = Fleet::start(&[], &[]);
    let mut stream = EventStream::open(&fleet.monitor_at, "/api/events");
    let first = stream.next();
    assert_eq!(first.name, "map");
    // Opened before the monitor's first reading of the store (a loaded machine starts it
    // slowly), the stream's first map is empty; the reading sends the whole map again.
    let mut map: Value = serde_json::from_str(&first.data).unwrap();
    // Events keep coming (one per reading), so the wait needs its own deadline.
    let deadline = std::time::Instant::now() + WAIT;
    while map["partitions_expected"] == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no map with the partitions within {WAIT:?}"
        );
        let event = stream.next();
        if event.name == "map" {
            map = serde_json::from_str(&event.data).unwrap();
        }
    }
    assert_eq!(map["partitions_expected"], 12);

    fleet.site.ok(&["offline", "3"]);
    let (mut delta, mut change) = (None, None);
    while delta.is_none() || change.is_none() {
        let event = stream.next();
        let data: Value = serde_json::from_str(&event.data).unwrap();
        match event.name.as_str() {
            "delta" if data["partitions"] == serde_json::json!([[3, -1, "O", 0]]) => {
                delta = Some(data)
            }
            "change" => {
                assert_eq!(data["kind"], "offline");
                assert_eq!(data["partition"], 3);
                assert_eq!(event.id.as_deref(), Some(data["id"].to_string().as_str()));
                change = Some(data);
            }
            _ => {}
        }
    }
    assert_eq!(delta.unwrap()["summary"]["offline"], 1);
}

#[test]
fn actions_need_the_token_and_bad_requests_get_clear_errors() {
    let site_token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(site_token.path(), "s3cret-token\n").unwrap();
    let token_flag = site_token.path().to_str().unwrap().to_string();
    let fleet = Fleet::start(&["node-0"], &["--token-file", &token_flag]);
    fleet.wait_held("node-0 to hold everything", &[("node-0", 12)]);
    let at = fleet.monitor_at.as_str();
    let auth = "Authorization: Bearer s3cret-token";
    let json = "Content-Type: application/json";
    let post =
        |path: &str, headers: &[&str], body: &str| http::request(at, "POST", path, headers, body);
    let refused = |response: http::Response, status: u16, needle: &str| {
        assert_eq!(response.status, status, "{response:?}");
        let error = response.json()["error"].as_str().unwrap().to_string();
        assert!(error.contains(needle), "{error:?} does not say {needle:?}");
    };

    refused(http::get(at, "/nowhere"), 404, "no such endpoint");
    refused(
        post("/api/actions/drain", &[json], r#"{"node":"node-0"}"#),
        401,
        "token",
    );
    refused(
        post(
            "/api/actions/drain",
            &[json, "Authorization: Bearer wrong-token!"],
            r#"{"node":"node-0"}"#,
        ),
        401,
        "token",
    );
    refused(
        post("/api/actions/drain", &[json, auth], "{not json"),
        400,
        "",
    );
    refused(
        post("/api/actions/drain", &[json, auth], r#"{"nod":"x"}"#),
        422,
        "",
    );
    refused(
        post("/api/actions/drain", &[json, auth], "{}"),
        422,
        "needs \"node\"",
    );
    refused(
        post("/api/actions/kick", &[json, auth], "{}"),
        422,
        "needs \"partition\"",
    );
    refused(
        post("/api/actions/explode", &[json, auth], "{}"),
        404,
        "no such action",
    );
    refused(
        post("/api/actions/kick", &[json, auth], r#"{"partition":99}"#),
        404,
        "partition 99",
    );
    refused(
        post("/api/actions/drain", &[json, auth], r#"{"node":"ghost"}"#),
        404,
        "ghost",
    );
    refused(
        post(
            "/api/actions/drain",
            &[json, auth],
            r#"{"node":"bad name!"}"#,
        ),
        422,
        "",
    );
    let huge = format!(r#"{{"node":"{}"}}"#, "x".repeat(1 << 20));
    let response = post("/api/actions/drain", &[json, auth], &huge);
    assert_eq!(response.status, 413, "{response:?}");
    let response = http::request(at, "DELETE", "/api/map", &[], "");
    assert_eq!(response.status, 405, "{response:?}");
    // Not HTTP at all: the connection is dropped or refused with a 400, nothing more.
    if let Some(response) = http::raw(at, b"\x00\x01garbage\r\n\r\n") {
        assert_eq!(response.status, 400);
    }

    // With the token, an action is done.
    let response = post("/api/actions/kick", &[json, auth], r#"{"partition":5}"#);
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.json()["ok"], true);
    let response = post("/api/actions/drain", &[json, auth], r#"{"node":"node-0"}"#);
    assert_eq!(response.status, 200, "{response:?}");
    // A lone node keeps its partitions while draining (nobody could take them), but its
    // record says it drains.
    fleet
        .site
        .wait_for(WAIT, "the monitor to show node-0 draining", || {
            fleet.map()["members"][0]["draining"] == true
        });
    assert!(fleet.map()["actions"].as_bool().unwrap());

    assert_eq!(http::get(at, "/healthz").body, "ok\n");
}

#[test]
fn a_monitor_without_a_token_file_is_read_only() {
    let fleet = Fleet::start(&[], &[]);
    let response = http::request(
        &fleet.monitor_at,
        "POST",
        "/api/actions/kick",
        &[
            "Content-Type: application/json",
            "Authorization: Bearer anything",
        ],
        r#"{"partition":1}"#,
    );
    assert_eq!(response.status, 403, "{response:?}");
    assert!(response.json()["error"]
        .as_str()
        .unwrap()
        .contains("read-only"));
    assert_eq!(fleet.map()["actions"], false);
    let page = http::get(&fleet.monitor_at, "/");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<canvas"), "the page draws on a canvas");
    assert_eq!(
        http::get(&fleet.monitor_at, "/assets/style.css").status,
        200
    );
    // The page's script is ES modules: every module the page imports, and every one those
    // import, is served.
    let mut pending = vec!["/assets/main.js".to_string()];
    let mut served = BTreeSet::new();
    while let Some(path) = pending.pop() {
        if !served.insert(path.clone()) {
            continue;
        }
        let module = http::get(&fleet.monitor_at, &path);
        assert_eq!(module.status, 200, "{path}");
        for line in module.body.lines() {
            if let Some(name) = line
                .split(" from './")
                .nth(1)
                .and_then(|rest| rest.split('\'').next())
            {
                pending.push(format!("/assets/{name}"));
            }
        }
    }
    assert!(served.len() > 1, "main.js imports nothing: {served:?}");
}

#[test]
fn bad_monitor_flags_are_refused_at_start() {
    let site = Site::new();
    let run = site.run(&["monitor", "--interval", "10ms"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--interval"), "{run:?}");
    let run = site.run(&["monitor", "--interval", "2s", "--stale-after", "1s"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("--stale-after"), "{run:?}");
    let empty = site.path("empty-token");
    std::fs::write(&empty, "\n").unwrap();
    let run = site.run(&["monitor", "--token-file", empty.to_str().unwrap()]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("empty-token"), "{run:?}");
    let run = site.run(&["monitor", "--listen", "256.0.0.1:80"]);
    assert_eq!(run.code, 2);
    assert!(run.stderr.contains("256.0.0.1:80"), "{run:?}");
}

/// Whatever arrives, the monitor answers below 500 (or drops a request that is not HTTP)
/// and keeps serving.
#[test]
fn nothing_a_client_sends_crashes_the_monitor_or_gets_a_server_error() {
    let token = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(token.path(), "fuzz-token").unwrap();
    let fleet = Fleet::start(&[], &["--token-file", token.path().to_str().unwrap()]);
    common::fuzz::nothing_crashes(
        &fleet.monitor_at,
        &["api", "actions", "map", "events", "kick", "drain"],
        "/api/events",
    );
}
