//! `leasehold agent` driven over HTTP as a worker in another language would: leases, permits
//! that hold a hand-off open, NotOwner answers with the owner's address, the event stream,
//! tokens, and requests no worker should send.

mod common;

use std::time::Duration;

use common::http::{self, EventStream};
use common::{NodeProcess, Site};
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);
const AUTH: &str = "Authorization: Bearer agent-token";

struct Agent {
    at: String,
    process: NodeProcess,
}

fn agent(site: &Site, id: &str, token: &str) -> Agent {
    let advertise = format!("http://{id}.example:9000");
    let mut args = vec!["agent", "--id", id];
    args.extend(common::FAST);
    args.extend([
        "--advertise",
        &advertise,
        "--listen",
        "127.0.0.1:0",
        "--token-file",
        token,
    ]);
    let process = site.process(id, &args);
    let at = http::authority(&site.printed_url(id)).to_string();
    Agent { at, process }
}

/// Agent `a` with a token, on a new group of two partitions, once it holds both.
fn agent_holding_two(site: &Site) -> Agent {
    site.ok(&["init", "--partitions", "2"]);
    let token = site.path("token");
    std::fs::write(&token, "agent-token").unwrap();
    let a = agent(site, "a", token.to_str().unwrap());
    site.wait_for(WAIT, "a to hold both partitions", || held(&a).len() == 2);
    a
}

fn held(agent: &Agent) -> Vec<u64> {
    let leases = http::get(&agent.at, "/v1/leases").json();
    leases["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["partition"].as_u64().unwrap())
        .collect()
}

fn post(agent: &Agent, path: &str, auth: bool) -> http::Response {
    let headers: &[&str] = if auth { &[AUTH] } else { &[] };
    http::request(&agent.at, "POST", path, headers, "")
}

#[test]
fn a_worker_holds_a_hand_off_open_with_a_permit_and_is_told_who_owns_the_rest() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "8"]);
    let token = site.path("token");
    std::fs::write(&token, "agent-token\n").unwrap();
    let token = token.to_str().unwrap();
    let a = agent(&site, "a", token);
    let b = agent(&site, "b", token);
    site.wait_for(WAIT, "both agents to hold four partitions", || {
        held(&a).len() == 4 && held(&b).len() == 4
    });
    assert_eq!(http::get(&a.at, "/readyz").status, 200);
    let mut events = EventStream::open_with(&a.at, "/v1/events", &[AUTH]);

    // A partition b holds: a answers 409 naming b and where b serves.
    // The owner named comes from a's routing map, which follows the table: wait for it.
    let theirs = held(&b)[0];
    let mut body = Value::Null;
    site.wait_for(WAIT, "a's map to name b as the owner", || {
        let response = http::get(&a.at, &format!("/v1/leases/{theirs}"));
        assert_eq!(response.status, 409, "{response:?}");
        body = response.json();
        body["owner"] == "b"
    });
    assert_eq!(body["address"], "http://b.example:9000");
    let route: Value = http::get(&a.at, "/v1/route?key=order-42").json();
    assert!(route["partition"].as_u64().unwrap() < 8);
    assert_eq!(
        http::get(&a.at, "/v1/map").json()["partitions"]
            .as_array()
            .unwrap()
            .len(),
        8
    );

    // A permit on one of a's own, then a release: the hand-off waits for the permit.
    let mine = held(&a)[0];
    assert_eq!(
        post(&a, &format!("/v1/leases/{mine}/permits"), false).status,
        401
    );
    let permit = post(&a, &format!("/v1/leases/{mine}/permits"), true);
    assert_eq!(permit.status, 201, "{permit:?}");
    let permit = permit.json();
    assert_eq!(permit["partition"].as_u64(), Some(mine));
    // No longer than the lease validity of [`common::FAST`].
    assert!(permit["ms_left"].as_u64().unwrap() <= 1000, "{permit}");
    let released = post(&a, &format!("/v1/leases/{mine}/release"), true);
    assert_eq!(released.status, 200, "{released:?}");
    assert_eq!(
        http::get(&a.at, &format!("/v1/leases/{mine}")).status,
        409,
        "no new work"
    );
    let epoch_of = |partition: u64| {
        let status = site.status();
        status["partitions"][partition as usize]["epoch"]
            .as_u64()
            .unwrap()
    };
    let tenure = permit["epoch"].as_u64().unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let (epoch_then, b_took_it) = (epoch_of(mine), held(&b).contains(&mine));
    let id = permit["id"].as_u64().unwrap();
    let ended = http::request(&a.at, "DELETE", &format!("/v1/permits/{id}"), &[AUTH], "");
    if ended.status != 204 || epoch_then != tenure || b_took_it {
        // On a loaded machine a renewal can land past the 1 s validity: the lease runs out,
        // the permit with it (404), and the others may take the partition. That is the
        // safety rule at work, accepted only where a's log says it lost that very tenure
        // other than by handing it off.
        assert_eq!(ended.status, 404, "{ended:?}");
        let partition = u32::try_from(mine).unwrap();
        site.wait_for(
            WAIT,
            "a's log to say the lease ran out under the permit",
            || common::lost_under(&site.node_stderr("a"), partition, tenure),
        );
    }
    // Released once the permit is gone, and taken again (by a, below its share, or b).
    site.wait_for(WAIT, "a new tenure once the permit ended", || {
        epoch_of(mine) > tenure
    });
    let again = http::request(&a.at, "DELETE", &format!("/v1/permits/{id}"), &[AUTH], "");
    assert_eq!(again.status, 404);

    // The stream said so, in order, each event with its id.
    let mut kinds = Vec::new();
    let mut last_id = String::new();
    while !kinds.contains(&"released".to_string()) {
        let event = events.next();
        let data: Value = serde_json::from_str(&event.data).unwrap();
        if data["partition"].as_u64() == Some(mine) {
            kinds.push(data["kind"].as_str().unwrap().to_string());
        }
        last_id = event.id.unwrap();
    }
    assert_eq!(kinds, vec!["releasing", "released"]);
    assert!(last_id.parse::<u64>().unwrap() >= 2);
}

#[test]
fn bad_requests_get_clear_errors_and_a_public_address_needs_a_token() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    let token = site.path("token");
    std::fs::write(&token, "agent-token").unwrap();
    let a = agent(&site, "a", token.to_str().unwrap());
    for (method, path, headers, status) in [
        ("GET", "/v1/leases/x", &[][..], 400),
        ("GET", "/v1/leases/99", &[][..], 404),
        (
            "POST",
            "/v1/leases/1/permits",
            &["Authorization: Bearer nope"][..],
            401,
        ),
        ("POST", "/v1/drain", &[][..], 401),
        ("DELETE", "/v1/permits/abc", &[AUTH][..], 400),
        ("GET", "/v1/route", &[][..], 400),
        ("GET", "/v1/nowhere", &[][..], 404),
        ("PUT", "/v1/leases", &[][..], 405),
    ] {
        let response = http::request(&a.at, method, path, headers, "");
        assert_eq!(response.status, status, "{method} {path}: {response:?}");
        if status != 405 {
            assert!(response.json()["error"].is_string(), "{method} {path}");
        }
    }
    let resumed = http::request(&a.at, "GET", "/v1/events", &["Last-Event-ID: soon"], "");
    assert_eq!(resumed.status, 401, "streams are for holders of the token");
    let resumed = http::request(
        &a.at,
        "GET",
        "/v1/events",
        &[AUTH, "Last-Event-ID: soon"],
        "",
    );
    assert_eq!(resumed.status, 400);
    assert_eq!(post(&a, "/v1/drain", true).status, 200);
    site.wait_for(WAIT, "readyz to say draining", || {
        http::get(&a.at, "/readyz").status == 503
    });
    assert_eq!(http::get(&a.at, "/healthz").body, "ok\n");

    let run = site.run(&["agent", "--id", "z", "--listen", "0.0.0.0:0"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--token-file"), "{}", run.stderr);
}

/// Whatever arrives, the agent answers below 500 (or drops a request that is not HTTP) and
/// keeps serving.
#[test]
fn nothing_a_client_sends_crashes_the_agent_or_gets_a_server_error() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    let token = site.path("token");
    std::fs::write(&token, "fuzz-token").unwrap();
    let a = agent(&site, "a", token.to_str().unwrap());
    common::fuzz::nothing_crashes(
        &a.at,
        &[
            "leases", "permits", "release", "route", "map", "drain", "undrain", "1", "events",
        ],
        "/v1/events",
    );
}

/// The Python client in `clients/python`, installed with pip into a fresh virtual environment,
/// against a real agent: leases, a permit, the event stream, a refused token and a drain,
/// checked by `check_agent.py`.
#[test]
fn the_python_client_drives_the_agent() {
    // Installed before the agent starts: the check reads the agent's events from its first,
    // and a lease lost to the install's load on a busy machine would be among them.
    common::python::python_client_venv();
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    let token = site.path("token");
    std::fs::write(&token, "agent-token").unwrap();
    let a = agent(&site, "a", token.to_str().unwrap());
    let check = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../clients/python/check_agent.py"
    );
    let output = common::python::client_python()
        .arg(check)
        .arg(format!("http://{}", a.at))
        .arg("agent-token")
        .output()
        .expect("the environment's python runs");
    assert!(
        output.status.success(),
        "check_agent.py failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// SIGTERM: no new permit is granted, the agent waits for the outstanding one (the API still
/// answers meanwhile), and exits 0 once the worker ends it.
#[test]
fn on_sigterm_the_agent_waits_for_outstanding_permits_then_exits() {
    let site = Site::new();
    let mut a = agent_holding_two(&site);
    let permit = post(&a, "/v1/leases/0/permits", true);
    assert_eq!(permit.status, 201, "{permit:?}");
    let id = permit.json()["id"].as_u64().unwrap();

    a.process.signal("TERM");
    // Probed by readyz, not by asking for permits: one granted before the signal arrived
    // would hold its own hand-off open.
    site.wait_for(WAIT, "the agent to stop being ready", || {
        http::get(&a.at, "/readyz").status == 503
    });
    assert_eq!(post(&a, "/v1/leases/1/permits", true).status, 503);
    // The drain timeout is 30 s: a second later it is still waiting for the permit.
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        a.process.is_running(),
        "the agent exited with a permit outstanding"
    );
    let ended = http::request(&a.at, "DELETE", &format!("/v1/permits/{id}"), &[AUTH], "");
    assert_eq!(ended.status, 204, "{ended:?}");
    assert_eq!(a.process.terminate(WAIT), 0);
    let status = site.status();
    assert!(
        status["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["state"] == "released"),
        "{status}"
    );
}

/// A permit given a time-to-live ends by itself when its worker never ends it (a worker
/// that crashed holding it), and the release waiting for it then goes on; a worker restarted
/// meanwhile finds it listed.
#[test]
fn a_permit_left_by_a_crashed_worker_ends_at_its_time_to_live() {
    let site = Site::new();
    let a = agent_holding_two(&site);
    let left = post(&a, "/v1/leases/0/permits?ttl_ms=1500", true);
    assert_eq!(left.status, 201, "{left:?}");
    let id = left.json()["id"].as_u64().unwrap();
    let listed = http::get(&a.at, "/v1/permits").json();
    assert_eq!(listed["permits"][0]["id"].as_u64(), Some(id), "{listed}");
    assert!(listed["permits"][0]["ttl_ms_left"].as_u64().unwrap() <= 1500);
    for bad in ["0", "x", "-1", "86400001"] {
        let refused = post(&a, &format!("/v1/leases/1/permits?ttl_ms={bad}"), true);
        assert_eq!(refused.status, 400, "{bad}: {refused:?}");
    }
    // The release of partition 0 waits for the permit, which nobody ends.
    assert_eq!(post(&a, "/v1/leases/0/release", true).status, 200);
    site.wait_for(WAIT, "the permit to reach its time-to-live", || {
        http::get(&a.at, "/v1/permits").json()["permits"]
            .as_array()
            .is_some_and(Vec::is_empty)
    });
    // Released once the permit is gone, and taken again by the only node: a new tenure.
    let epoch = left.json()["epoch"].as_u64().unwrap();
    site.wait_for(WAIT, "partition 0 released and taken again", || {
        site.status()["partitions"][0]["epoch"]
            .as_u64()
            .is_some_and(|now| now > epoch)
    });
}

/// A worker resuming its event stream with an id from before the agent restarted is told
/// that the events after it are gone (410), rather than silently missing the new process's
/// first ones, whose ids it would otherwise have seen already; `Last-Event-ID: 0` replays
/// the running process's events.
#[test]
fn an_event_id_from_before_a_restart_is_refused_not_resumed_from() {
    let site = Site::new();
    site.ok(&["init", "--partitions", "2"]);
    let token = site.path("token");
    std::fs::write(&token, "agent-token").unwrap();
    let token = token.to_str().unwrap();
    let mut first = agent(&site, "a", token);
    site.wait_for(WAIT, "a to hold both partitions", || {
        held(&first).len() == 2
    });
    let mut stream = EventStream::open_with(&first.at, "/v1/events", &[AUTH]);
    let _ = post(&first, "/v1/leases/0/release", true);
    let old_id = stream.next().id.expect("an id");
    assert_eq!(first.process.terminate(WAIT), 0);

    let second = agent(&site, "a", token);
    site.wait_for(WAIT, "a to hold both partitions again", || {
        held(&second).len() == 2
    });
    let resume = |id: &str| {
        http::request(
            &second.at,
            "GET",
            "/v1/events",
            &[AUTH, &format!("Last-Event-ID: {id}")],
            "",
        )
    };
    let refused = resume(&old_id);
    assert_eq!(refused.status, 410, "{refused:?}");
    assert!(refused.json()["error"]
        .as_str()
        .unwrap()
        .contains("/v1/leases"));
    let mut replay = EventStream::open_with(&second.at, "/v1/events", &[AUTH, "Last-Event-ID: 0"]);
    let event: Value = serde_json::from_str(&replay.next().data).unwrap();
    assert_eq!(event["kind"], "acquired", "{event}");
    assert!(event["id"].as_u64().unwrap() > old_id.parse::<u64>().unwrap());
}

/// The agent serves its metrics on its API's address: a separate metrics address, which
/// `node` takes, is refused at start rather than left configured and never answering.
#[test]
fn a_metrics_address_of_its_own_is_refused() {
    let site = Site::new();
    let run = site.run(&["agent", "--id", "a", "--metrics-listen", "127.0.0.1:0"]);
    common::assert_clean_error(&run, &["--metrics-listen", "/metrics on --listen"]);
}

/// A worker reports a partition's load; the agent publishes it with the next renewal, where
/// every node's balancing (and `status`) reads it. Bad reports are refused with a reason.
#[test]
fn a_worker_reports_load_and_the_table_shows_it() {
    let site = Site::new();
    let a = agent_holding_two(&site);
    let put = |path: &str, auth: bool, body: &str| {
        let headers: &[&str] = if auth { &[AUTH] } else { &[] };
        http::request(&a.at, "PUT", path, headers, body)
    };
    let reported = put("/v1/leases/1/load", true, r#"{"load": 7.5}"#);
    assert_eq!(reported.status, 200, "{reported:?}");
    assert_eq!(reported.json()["load"].as_f64(), Some(7.5));
    site.wait_for(WAIT, "the load in the table", || {
        site.status()["partitions"][1]["load"].as_f64() == Some(7.5)
    });
    assert_eq!(
        put("/v1/leases/1/load", false, r#"{"load": 1}"#).status,
        401
    );
    for bad in [
        r#"{"load": -1}"#,
        r#"{"load": "x"}"#,
        r#"{"load": 1e13}"#,
        r#"{"load": 1.7e308}"#,
        "{}",
        "not json",
        "",
    ] {
        let refused = put("/v1/leases/1/load", true, bad);
        assert_eq!(refused.status, 400, "{bad}: {refused:?}");
        assert!(refused.json()["error"].as_str().unwrap().contains("load"));
    }
    assert_eq!(put("/v1/leases/9/load", true, r#"{"load": 1}"#).status, 404);
    let huge = format!(r#"{{"load": 1, "pad": "{}"}}"#, "x".repeat(20_000));
    let refused = put("/v1/leases/1/load", true, &huge);
    assert_eq!(refused.status, 413, "{refused:?}");
}
