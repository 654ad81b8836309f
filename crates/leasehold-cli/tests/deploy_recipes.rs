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

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{http, NodeProcess, Site};
use leasehold::testing::require_tool;
use yaml_rust2::{Yaml, YamlLoader};

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

/// Every YAML document in deploy/kubernetes, with the file it came from.
fn kubernetes_documents() -> Vec<(String, Yaml)> {
    let dir = deploy().join("kubernetes");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("cannot list {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    let mut documents = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let parsed = YamlLoader::load_from_str(&read(&path))
            .unwrap_or_else(|e| panic!("{name} is not valid YAML: {e}"));
        for document in parsed {
            // Comments alone before the first `---` make no document worth checking.
            if document.is_null() {
                continue;
            }
            for field in ["apiVersion", "kind"] {
                assert!(
                    document[field].as_str().is_some(),
                    "{name}: a document without {field}: {document:?}"
                );
            }
            assert!(
                document["metadata"]["name"].as_str().is_some(),
                "{name}: a {} without metadata.name",
                document["kind"].as_str().unwrap()
            );
            documents.push((name.clone(), document));
        }
    }
    documents
}

/// The one document of `kind` (named `name`, if given).
fn the<'a>(documents: &'a [(String, Yaml)], kind: &str, name: Option<&str>) -> &'a Yaml {
    let found: Vec<&Yaml> = documents
        .iter()
        .map(|(_, document)| document)
        .filter(|d| d["kind"].as_str() == Some(kind))
        .filter(|d| name.is_none_or(|name| d["metadata"]["name"].as_str() == Some(name)))
        .collect();
    assert_eq!(
        found.len(),
        1,
        "expected one {kind}{} in deploy/kubernetes, found {}",
        name.map(|n| format!(" named {n}")).unwrap_or_default(),
        found.len()
    );
    found[0]
}

fn text<'a>(value: &'a Yaml, what: &str) -> &'a str {
    value
        .as_str()
        .unwrap_or_else(|| panic!("{what} should be a string, found {value:?}"))
}

fn strings(value: &Yaml, what: &str) -> Vec<String> {
    value
        .as_vec()
        .unwrap_or_else(|| panic!("{what} should be a list, found {value:?}"))
        .iter()
        .map(|word| match word {
            Yaml::String(text) => text.clone(),
            // Kubernetes wants strings; a bare number here would be refused by the API server.
            other => panic!("{what}: {other:?} should be a string (quote it)"),
        })
        .collect()
}

fn list(value: &Yaml) -> &[Yaml] {
    value.as_vec().map(Vec::as_slice).unwrap_or(&[])
}

/// The pod a container's environment is worked out for: what the downward API gives it.
struct Pod {
    name: &'static str,
    namespace: &'static str,
    node: &'static str,
}

/// `$(NAME)` references replaced from `env`, as the kubelet does in `args` and `env`.
fn expand(text: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = text.replace("$$", "\u{0}");
    for (name, value) in env {
        out = out.replace(&format!("$({name})"), value);
    }
    out.replace('\u{0}', "$")
}

/// A container's environment as the kubelet would set it in `pod`, secrets read from the
/// manifests.
fn container_env(
    container: &Yaml,
    documents: &[(String, Yaml)],
    pod: &Pod,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    for variable in list(&container["env"]) {
        let name = text(&variable["name"], "env name").to_owned();
        let value = if let Some(value) = variable["value"].as_str() {
            expand(value, &env)
        } else if let Some(path) = variable["valueFrom"]["fieldRef"]["fieldPath"].as_str() {
            match path {
                "metadata.name" => pod.name.to_owned(),
                "metadata.namespace" => pod.namespace.to_owned(),
                "spec.nodeName" => pod.node.to_owned(),
                other => panic!("env {name}: no stand-in for fieldRef {other}"),
            }
        } else if !variable["valueFrom"]["secretKeyRef"].is_badvalue() {
            secret_value(documents, &variable["valueFrom"]["secretKeyRef"])
        } else {
            panic!("env {name}: neither a value nor a valueFrom this test knows")
        };
        env.insert(name, value);
    }
    env
}

/// The value a `secretKeyRef` names, from a Secret in the manifests.
fn secret_value(documents: &[(String, Yaml)], reference: &Yaml) -> String {
    let name = text(&reference["name"], "secretKeyRef.name");
    let key = text(&reference["key"], "secretKeyRef.key");
    let secret = the(documents, "Secret", Some(name));
    text(
        &secret["stringData"][key],
        &format!("Secret {name}: stringData.{key} (placeholders are kept readable there)"),
    )
    .to_owned()
}

fn env_spec<'a>(container: &'a Yaml, name: &str) -> Option<&'a Yaml> {
    list(&container["env"])
        .iter()
        .find(|variable| variable["name"].as_str() == Some(name))
}

/// The container running `leasehold agent`.
fn agent_container(pod_spec: &Yaml) -> &Yaml {
    let agents: Vec<&Yaml> = list(&pod_spec["containers"])
        .iter()
        .filter(|c| c["args"][0].as_str() == Some("agent"))
        .collect();
    assert_eq!(
        agents.len(),
        1,
        "expected one container whose args start with `agent`"
    );
    agents[0]
}

/// The port number a probe's `port` names, directly or by the container's port name.
fn probe_port(container: &Yaml, port: &Yaml) -> u16 {
    match port {
        Yaml::Integer(number) => u16::try_from(*number).expect("a port number"),
        Yaml::String(name) => list(&container["ports"])
            .iter()
            .find(|p| p["name"].as_str() == Some(name))
            .and_then(|p| p["containerPort"].as_i64())
            .map(|n| u16::try_from(n).expect("a port number"))
            .unwrap_or_else(|| panic!("the probe names port {name:?}, which the container lacks")),
        other => panic!("a probe port should be a number or a port name, found {other:?}"),
    }
}

/// Where a volume is mounted in a container, and the volume's definition in the pod, for
/// the mount holding `path`.
fn volume_for<'a>(pod_spec: &'a Yaml, container: &Yaml, path: &str) -> (String, &'a Yaml) {
    let mount = list(&container["volumeMounts"])
        .iter()
        .filter(|m| {
            let at = m["mountPath"].as_str().unwrap_or("");
            path.starts_with(&format!("{}/", at.trim_end_matches('/')))
        })
        .max_by_key(|m| m["mountPath"].as_str().unwrap_or("").len())
        .unwrap_or_else(|| panic!("{path} is on no volume mounted in the container"));
    let name = mount["name"].as_str().expect("volumeMount name");
    let volume = list(&pod_spec["volumes"])
        .iter()
        .find(|v| v["name"].as_str() == Some(name))
        .unwrap_or_else(|| panic!("the pod has no volume {name}"));
    let at = mount["mountPath"].as_str().unwrap().trim_end_matches('/');
    (at.to_owned(), volume)
}

/// The script a lifecycle hook runs, from the ConfigMap mounted where the hook's command
/// points: the hook's command, and the file name and text of every script of that
/// ConfigMap (the hooks may call each other).
struct Hook {
    command: Vec<String>,
    mount: String,
    script: String,
    scripts: BTreeMap<String, String>,
}

fn hook(
    documents: &[(String, Yaml)],
    pod_spec: &Yaml,
    container: &Yaml,
    which: &str,
) -> Option<Hook> {
    let handler = &container["lifecycle"][which];
    if handler.is_badvalue() {
        return None;
    }
    let command = strings(
        &handler["exec"]["command"],
        &format!("{which}.exec.command"),
    );
    let path = command
        .iter()
        .find(|word| word.ends_with(".sh"))
        .unwrap_or_else(|| panic!("{which} runs no script: {command:?}"));
    let (mount, volume) = volume_for(pod_spec, container, path);
    let map = text(
        &volume["configMap"]["name"],
        "the hook volume's configMap.name",
    );
    let data = the(documents, "ConfigMap", Some(map))["data"]
        .as_hash()
        .unwrap_or_else(|| panic!("ConfigMap {map} has no data"));
    let scripts: BTreeMap<String, String> = data
        .iter()
        .map(|(k, v)| {
            (
                text(k, "a data key").to_owned(),
                text(v, "a script").to_owned(),
            )
        })
        .collect();
    let file = path[mount.len() + 1..].to_owned();
    let script = scripts
        .get(&file)
        .unwrap_or_else(|| panic!("{which} runs {path}, which ConfigMap {map} lacks"))
        .clone();
    Some(Hook {
        command,
        mount,
        script,
        scripts,
    })
}

impl Hook {
    /// The command with its scripts written to `dir` in place of the ConfigMap's mount.
    fn local_command(&self, dir: &Path) -> Vec<String> {
        for (file, script) in &self.scripts {
            std::fs::write(dir.join(file), script).expect("write a hook script");
        }
        let dir = dir.to_str().unwrap();
        self.command
            .iter()
            .map(|word| word.replacen(&self.mount, dir, 1))
            .collect()
    }
}

/// What the Kubernetes recipe's agent is told, worked out for one pod.
struct KubernetesAgent {
    /// The agent's arguments, `$(VAR)` resolved for the pod.
    words: Vec<String>,
    /// The agent container's environment for the pod.
    env: BTreeMap<String, String>,
}

fn kubernetes_agent(documents: &[(String, Yaml)], pod: &Pod) -> KubernetesAgent {
    let set = the(documents, "StatefulSet", None);
    let container = agent_container(&set["spec"]["template"]["spec"]);
    let env = container_env(container, documents, pod);
    let words = strings(&container["args"], "the agent's args")
        .iter()
        .map(|word| expand(word, &env))
        .collect();
    KubernetesAgent { words, env }
}

#[test]
fn the_kubernetes_manifests_parse_and_agree_with_the_agent() {
    let documents = kubernetes_documents();
    let accepted = agent_options();
    let set = the(&documents, "StatefulSet", None);
    let template = &set["spec"]["template"];
    let spec = &template["spec"];
    let agent = agent_container(spec);
    let raw_args = strings(&agent["args"], "the agent's args");
    let options = agent_command_line(&raw_args, &accepted, "statefulset.yaml");
    let command = strings(&agent["command"], "the agent's command");
    assert!(
        command.len() == 1 && Path::new(&command[0]).file_name() == Some("leasehold".as_ref()),
        "the agent container should run the leasehold binary, not {command:?}"
    );

    // The node's name is the pod's: stable across restarts, unique in the set.
    let id = option(&options, "--id").expect("--id");
    let variable = id
        .strip_prefix("$(")
        .and_then(|rest| rest.strip_suffix(')'))
        .unwrap_or_else(|| panic!("--id {id} should be one $(VAR) set from the pod's name"));
    let source = env_spec(agent, variable).unwrap_or_else(|| panic!("no env {variable}"));
    assert_eq!(
        source["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.name"),
        "--id comes from ${variable}, which should be the pod's metadata.name"
    );

    // The API, and the probes on it.
    let listen = option(&options, "--listen").expect("--listen");
    let port = port_of(listen);
    assert!(
        !is_loopback(listen),
        "--listen {listen}: the kubelet probes the pod's IP, not loopback"
    );
    let token_file = option(&options, "--token-file")
        .expect("--token-file: the agent listens beyond loopback only with a token");
    for (probe, paths) in [
        ("readinessProbe", &["/readyz"][..]),
        ("livenessProbe", &["/healthz"][..]),
        ("startupProbe", &["/healthz", "/readyz"][..]),
    ] {
        let get = &agent[probe]["httpGet"];
        if probe == "startupProbe" && agent[probe].is_badvalue() {
            continue;
        }
        let path = text(&get["path"], &format!("{probe}.httpGet.path"));
        assert!(
            paths.contains(&path),
            "{probe} asks {path}, it should ask {paths:?}"
        );
        assert_eq!(
            probe_port(agent, &get["port"]),
            port,
            "{probe} should ask the port the agent listens on (--listen {listen})"
        );
    }

    // The token comes from a Secret, mounted where --token-file points.
    let (mount, volume) = volume_for(spec, agent, token_file);
    let secret_name = text(
        &volume["secret"]["secretName"],
        "the token volume's secretName",
    );
    let file = &token_file[mount.len() + 1..];
    let items = list(&volume["secret"]["items"]);
    // With items, only the keys listed become files, each at its path.
    let key = match items
        .iter()
        .find(|item| item["path"].as_str() == Some(file))
    {
        Some(item) => text(&item["key"], "items.key"),
        None if items.is_empty() => file,
        None => panic!("--token-file {token_file}: the Secret volume puts no key at {file}"),
    };
    let secret = the(&documents, "Secret", Some(secret_name));
    assert!(
        secret["stringData"][key].as_str().is_some(),
        "Secret {secret_name} should hold the token under {key}"
    );

    // The store comes from a Secret and is one that pods on different hosts can share.
    let store = env_spec(agent, "LEASEHOLD_STORE").expect("LEASEHOLD_STORE in the agent's env");
    let reference = &store["valueFrom"]["secretKeyRef"];
    assert!(
        !reference.is_badvalue(),
        "LEASEHOLD_STORE should come from a Secret: the URL may hold a password"
    );
    let url = secret_value(&documents, reference);
    assert!(
        !(url.starts_with("sqlite:") || url.starts_with("memory:")),
        "{url}: the pods of a StatefulSet run on several hosts; an SQLite file serves one"
    );
    assert!(
        option(&options, "--store").is_none(),
        "the store URL belongs in the Secret"
    );

    // Clients reach each pod by its stable name under the headless Service.
    let service_name = text(&set["spec"]["serviceName"], "spec.serviceName");
    let service = the(&documents, "Service", Some(service_name));
    assert_eq!(
        service["spec"]["clusterIP"].as_str(),
        Some("None"),
        "Service {service_name} should be headless: it gives each pod its own name"
    );
    assert_eq!(
        service["spec"]["publishNotReadyAddresses"].as_bool(),
        Some(true),
        "a pod handing off is unready but still owns partitions: its name must resolve"
    );
    let labels = template["metadata"]["labels"]
        .as_hash()
        .expect("pod labels");
    for (key, value) in service["spec"]["selector"]
        .as_hash()
        .expect("Service selector")
    {
        assert_eq!(
            labels.get(key),
            Some(value),
            "the Service should select the pods"
        );
    }
    let advertise = option(&options, "--advertise").expect("--advertise");
    assert!(
        advertise.contains(&format!("$({variable}).{service_name}.")),
        "--advertise {advertise} should be the pod's name under Service {service_name}"
    );
    let advertised_port = advertise
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .and_then(|p| p.parse::<i64>().ok())
        .expect("--advertise names a port");
    assert!(
        list(&spec["containers"]).iter().any(|c| list(&c["ports"])
            .iter()
            .any(|p| p["containerPort"].as_i64() == Some(advertised_port))),
        "--advertise names port {advertised_port}, which no container of the pod exposes"
    );

    // The hooks: drain before SIGTERM, undrain on start, against this agent with its token.
    let pre_stop = hook(&documents, spec, agent, "preStop").expect("a preStop hook on the agent");
    assert!(
        pre_stop.script.contains("/v1/drain"),
        "the agent's preStop should drain it:\n{}",
        pre_stop.script
    );
    let post_start =
        hook(&documents, spec, agent, "postStart").expect("a postStart hook on the agent");
    assert!(
        post_start.script.contains("/v1/undrain"),
        "the agent's postStart should undrain it:\n{}",
        post_start.script
    );
    let pod = Pod {
        name: "orders-0",
        namespace: "default",
        node: "node-a",
    };
    for container in list(&spec["containers"]) {
        let Some(url) = env_spec(container, "LEASEHOLD_AGENT_URL") else {
            continue;
        };
        let env = container_env(container, &documents, &pod);
        let url = text(&url["value"], "LEASEHOLD_AGENT_URL");
        let address = url.trim_start_matches("http://").trim_end_matches('/');
        assert!(
            is_loopback(address) && port_of(address) == port,
            "LEASEHOLD_AGENT_URL {url} should reach the agent in the pod on port {port}"
        );
        assert_eq!(
            env.get("LEASEHOLD_TOKEN_FILE").map(String::as_str),
            Some(token_file),
            "the hooks should read the token the agent was given"
        );
        // Resolving a hook fails when its script is not in the ConfigMap.
        for which in ["preStop", "postStart"] {
            hook(&documents, spec, container, which);
        }
    }

    // The grace period outlasts the longest hand-off, and the hooks' waits with the agent's
    // exit after them.
    let timings = Timings::of(&options, "statefulset.yaml");
    let bound = timings.handoff_bound();
    let grace = Duration::from_secs(
        spec["terminationGracePeriodSeconds"]
            .as_i64()
            .expect("terminationGracePeriodSeconds")
            .try_into()
            .expect("a positive grace period"),
    );
    assert!(
        grace > bound,
        "terminationGracePeriodSeconds {grace:?} should exceed the longest hand-off, \
         {bound:?} ({timings:?})"
    );
    for container in list(&spec["containers"]) {
        let env = container_env(container, &documents, &pod);
        if let Some(wait) = env.get("LEASEHOLD_DRAIN_WAIT_SECONDS") {
            let wait = Duration::from_secs(wait.parse().expect("whole seconds"));
            let after = 4 * timings.store_timeout;
            assert!(
                grace > wait + after,
                "terminationGracePeriodSeconds {grace:?} should exceed the hooks' wait \
                 {wait:?} plus the {after:?} the agent may take to leave after it"
            );
        }
    }

    // One pod away at a time, whatever takes it away.
    let strategy = &set["spec"]["updateStrategy"];
    assert!(
        strategy.is_badvalue() || strategy["type"].as_str() == Some("RollingUpdate"),
        "updates should roll, one pod at a time"
    );
    assert!(
        matches!(
            strategy["rollingUpdate"]["maxUnavailable"],
            Yaml::BadValue | Yaml::Integer(1)
        ),
        "updates should take one pod at a time"
    );
    let budget = the(&documents, "PodDisruptionBudget", None);
    assert_eq!(budget["spec"]["maxUnavailable"].as_i64(), Some(1));
    for (key, value) in budget["spec"]["selector"]["matchLabels"]
        .as_hash()
        .expect("the budget's selector")
    {
        assert_eq!(
            labels.get(key),
            Some(value),
            "the budget should select the pods"
        );
    }
}

#[test]
fn the_kubernetes_agent_runs_and_its_hooks_drain_and_undrain_it() {
    if !require_tool("curl", "curl") {
        return;
    }
    let documents = kubernetes_documents();
    let set = the(&documents, "StatefulSet", None);
    let spec = &set["spec"]["template"]["spec"];
    let container = agent_container(spec);
    let grace = Duration::from_secs(spec["terminationGracePeriodSeconds"].as_i64().unwrap() as u64);
    let pods = [
        Pod {
            name: "orders-0",
            namespace: "default",
            node: "node-a",
        },
        Pod {
            name: "orders-1",
            namespace: "default",
            node: "node-b",
        },
    ];
    let agents: Vec<KubernetesAgent> = pods
        .iter()
        .map(|pod| kubernetes_agent(&documents, pod))
        .collect();
    let options = agent_command_line(&agents[0].words, &agent_options(), "statefulset.yaml");
    let partitions: usize = option(&options, "--partitions")
        .expect("--partitions")
        .parse()
        .expect("a partition count");
    let group = agents[0]
        .env
        .get("LEASEHOLD_GROUP")
        .cloned()
        .unwrap_or("default".into());

    let site = Site::new();
    let token = site.path("token");
    std::fs::write(&token, "deploy-recipe-token\n").unwrap();
    let hooks = site.path("hooks");
    std::fs::create_dir(&hooks).unwrap();
    let hook_env = |agent: &Agent, env: &BTreeMap<String, String>| {
        let mut env = env.clone();
        env.insert("LEASEHOLD_AGENT_URL".into(), format!("http://{}", agent.at));
        env.insert(
            "LEASEHOLD_TOKEN_FILE".into(),
            token.to_str().unwrap().into(),
        );
        env
    };
    let pre_stop = hook(&documents, spec, container, "preStop").unwrap();
    let post_start = hook(&documents, spec, container, "postStart").unwrap();

    let mut first = start_agent(&site, pods[0].name, &group, &agents[0].words, &token);
    let mut second = start_agent(&site, pods[1].name, &group, &agents[1].words, &token);
    site.wait_for(
        WAIT,
        "both pods to be ready and share the partitions",
        || {
            http::get(&first.at, "/readyz").status == 200
                && http::get(&second.at, "/readyz").status == 200
                && leases_open(&first.at) > 0
                && leases_open(&second.at) > 0
                && leases_open(&first.at) + leases_open(&second.at) == partitions
        },
    );

    // preStop: the pod turns unready and hands everything to the other before SIGTERM, well
    // within the hook's own limit.
    let limit: u64 = agents[1].env["LEASEHOLD_DRAIN_WAIT_SECONDS"]
        .parse()
        .unwrap();
    let (code, took) = run_hook(
        &pre_stop.local_command(&hooks),
        &hook_env(&second, &agents[1].env),
        grace,
    );
    assert_eq!(code, 0, "the preStop hook failed\n{}", site.node_logs());
    assert!(
        took < Duration::from_secs(limit),
        "the preStop hook waited out its limit ({took:?}): the hand-off did not complete\n{}",
        site.node_logs()
    );
    let ready = http::get(&second.at, "/readyz");
    assert_eq!(ready.status, 503, "a drained pod is not ready: {ready:?}");
    assert_eq!(leases_held(&second.at), 0);
    site.wait_for(WAIT, "the other pod to take every partition", || {
        leases_open(&first.at) == partitions
    });

    // The application's preStop waits for the same thing, which is done.
    let app = list(&spec["containers"])
        .iter()
        .find(|c| c["args"][0].as_str() != Some("agent"));
    if let Some(app) = app {
        if let Some(app_hook) = hook(&documents, spec, app, "preStop") {
            let app_env = container_env(app, &documents, &pods[1]);
            let (code, took) = run_hook(
                &app_hook.local_command(&hooks),
                &hook_env(&second, &app_env),
                grace,
            );
            assert_eq!(code, 0, "the application's preStop hook failed");
            assert!(
                took < Duration::from_secs(5),
                "it should return at once: {took:?}"
            );
        }
    }

    // The grace period ran out before the agent could delete its member record: the pod
    // that replaces it, under the same name, finds the drain there. postStart clears it.
    second.process.kill();
    let mut again = start_agent(&site, "orders-1-again", &group, &agents[1].words, &token);
    let (code, _) = run_hook(
        &post_start.local_command(&hooks),
        &hook_env(&again, &agents[1].env),
        grace,
    );
    assert_eq!(code, 0, "the postStart hook failed");
    let ready = http::get(&again.at, "/readyz");
    assert_eq!(
        ready.status, 200,
        "the replaced pod should be ready: {ready:?}"
    );
    site.wait_for(WAIT, "the replaced pod to get partitions back", || {
        leases_open(&again.at) > 0
    });

    // SIGTERM: each agent hands off what it holds and exits 0 within the grace period.
    assert_eq!(again.process.terminate(grace), 0);
    assert_eq!(first.process.terminate(grace), 0);
}

// ---------------------------------------------------------------------------------------
// systemd
// ---------------------------------------------------------------------------------------

const UNIT: &str = "leasehold-agent.service";
/// The host name `%H` stands for in these checks.
const HOST: &str = "host-1.example";

/// A unit file's settings in order, as (section, key, value), continuation lines joined.
fn unit_settings(text: &str) -> Vec<(String, String, String)> {
    let mut settings = Vec::new();
    let mut section = String::new();
    let mut pending = String::new();
    for line in text.lines() {
        let line = line.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with(';'))
        {
            continue;
        }
        if let Some(rest) = line.strip_suffix('\\') {
            pending.push_str(rest);
            pending.push(' ');
            continue;
        }
        pending.push_str(line);
        let setting = std::mem::take(&mut pending);
        if setting.starts_with('[') {
            section = setting.trim_matches(['[', ']']).to_owned();
            continue;
        }
        let (key, value) = setting
            .split_once('=')
            .unwrap_or_else(|| panic!("{UNIT}: {setting:?} is not KEY=VALUE"));
        settings.push((
            section.clone(),
            key.trim().to_owned(),
            value.trim().to_owned(),
        ));
    }
    settings
}

struct Unit {
    settings: Vec<(String, String, String)>,
}

impl Unit {
    fn load() -> Unit {
        Unit {
            settings: unit_settings(&read(&deploy().join("systemd").join(UNIT))),
        }
    }

    fn all(&self, key: &str) -> Vec<&str> {
        self.settings
            .iter()
            .filter(|(section, k, _)| section == "Service" && k == key)
            .map(|(_, _, value)| value.as_str())
            .collect()
    }

    /// A setting of [Service], the last one given.
    fn get(&self, key: &str) -> Option<&str> {
        self.all(key).last().copied()
    }

    /// The environment the service starts with: the unit's `Environment=` defaults, then the
    /// example environment file over them, as systemd applies them.
    fn environment(&self, env_file: Option<&str>) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for assignment in self.all("Environment") {
            let (key, value) = assignment
                .split_once('=')
                .unwrap_or_else(|| panic!("Environment={assignment} is not KEY=VALUE"));
            env.insert(key.to_owned(), value.replace("%H", HOST));
        }
        if let Some(text) = env_file {
            env.extend(env_file_settings(text));
        }
        env
    }

    /// ExecStart split into words as systemd does, `${VAR}` as one word and `$VAR` split at
    /// spaces, `%d` as `credentials`.
    fn exec_start(&self, env: &BTreeMap<String, String>, credentials: &str) -> Vec<String> {
        let line = self.get("ExecStart").expect("ExecStart");
        let mut words = Vec::new();
        for word in line.split_whitespace() {
            let word = word.replace("%d", credentials).replace("%H", HOST);
            if let Some(name) = word.strip_prefix('$').filter(|w| !w.starts_with('{')) {
                let value = env.get(name).map(String::as_str).unwrap_or("");
                words.extend(value.split_whitespace().map(str::to_owned));
                continue;
            }
            let mut expanded = word.clone();
            for (name, value) in env {
                expanded = expanded.replace(&format!("${{{name}}}"), value);
            }
            assert!(
                !expanded.contains("${"),
                "ExecStart: {word} names an unset variable"
            );
            words.push(expanded);
        }
        words
    }
}

/// KEY=VALUE lines of an environment file, comments skipped, quotes removed.
fn env_file_settings(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| {
            let (key, value) = line
                .split_once('=')
                .unwrap_or_else(|| panic!("environment file: {line:?} is not KEY=VALUE"));
            let value = value.trim();
            let value = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value);
            (key.trim().to_owned(), value.to_owned())
        })
        .collect()
}

/// A systemd time span: `90`, `90s`, `1min 30s`, `500ms`.
fn timespan(text: &str) -> Duration {
    let compact: String = text.split_whitespace().collect();
    if let Ok(seconds) = compact.parse::<u64>() {
        return Duration::from_secs(seconds);
    }
    sum_of_terms(&compact, |unit| match unit {
        "us" | "usec" => Some(1e-6),
        "ms" | "msec" => Some(1e-3),
        "s" | "sec" | "second" | "seconds" => Some(1.0),
        "m" | "min" | "minute" | "minutes" => Some(60.0),
        "h" | "hr" | "hour" | "hours" => Some(3600.0),
        _ => None,
    })
}

#[test]
fn the_systemd_unit_runs_the_agent_with_flags_it_accepts_and_waits_out_a_hand_off() {
    let unit = Unit::load();
    let example = read(&deploy().join("systemd").join("leasehold-agent.env"));
    let credentials = "/run/credentials/leasehold-agent.service";
    let defaults = unit.environment(None);
    let env = unit.environment(Some(&example));

    // The command line, with the unit's defaults and with the example file: both must run.
    let accepted = agent_options();
    let mut lines = Vec::new();
    for (what, env) in [
        ("the unit's defaults", &defaults),
        ("the example environment file", &env),
    ] {
        let words = unit.exec_start(env, credentials);
        let program = Path::new(&words[0]);
        assert!(
            program.is_absolute() && program.file_name() == Some("leasehold".as_ref()),
            "ExecStart should run the leasehold binary by its absolute path, not {program:?}"
        );
        let recipe = format!("{UNIT} with {what}");
        // The environment's settings first: a flag on the command line wins over them.
        let mut options = options_from_environment(env);
        options.extend(agent_command_line(&words[1..], &accepted, &recipe));
        lines.push((recipe, words[1..].to_vec(), options));
    }
    let (_, _, options) = &lines[0];

    // The node's name is the host's, unless the environment file names it.
    assert_eq!(
        option(options, "--id"),
        Some(HOST),
        "--id should default to the host name (%H)"
    );

    // The token is a credential systemd hands the service, where --token-file points.
    let token_file = option(options, "--token-file").expect("--token-file");
    let credential = token_file
        .strip_prefix(&format!("{credentials}/"))
        .unwrap_or_else(|| panic!("--token-file {token_file} should be in %d, the credentials"));
    assert!(
        unit.all("LoadCredential")
            .iter()
            .any(|c| c.starts_with(&format!("{credential}:"))),
        "LoadCredential= should provide the credential {credential}"
    );

    // SQLite by default, in the state directory: the one place ProtectSystem=strict leaves
    // writable.
    let state = unit.get("StateDirectory").expect("StateDirectory=");
    let store = defaults
        .get("LEASEHOLD_STORE")
        .expect("a default LEASEHOLD_STORE");
    assert!(
        store.starts_with(&format!("sqlite:///var/lib/{state}/")),
        "the default store {store} should be in the StateDirectory, /var/lib/{state}"
    );
    assert!(
        option(options, "--store").is_none(),
        "the store URL belongs in the environment"
    );
    assert!(
        unit.all("EnvironmentFile").iter().any(|f| !f.is_empty()),
        "an EnvironmentFile= should carry the store URL and the host's settings"
    );
    // Every setting of the example file is one the unit or the agent reads.
    let exec = unit.get("ExecStart").unwrap();
    let variables = agent_variables();
    for (key, _) in env_file_settings(&example) {
        let read_by_agent = variables.contains_key(&key) || key.starts_with("PG");
        let in_exec = exec.contains(&format!("${{{key}}}")) || exec.contains(&format!("${key}"));
        assert!(
            read_by_agent || in_exec,
            "the environment file sets {key}, which neither ExecStart nor the agent reads"
        );
    }

    // Stopping: SIGTERM, and time for the longest hand-off before systemd kills.
    let timings = Timings::of(options, UNIT);
    let bound = timings.handoff_bound();
    assert_eq!(
        unit.get("KillSignal"),
        Some("SIGTERM"),
        "SIGTERM is the agent's drain"
    );
    let stop = timespan(unit.get("TimeoutStopSec").expect("TimeoutStopSec="));
    assert!(
        stop > bound,
        "TimeoutStopSec {stop:?} should exceed the longest hand-off, {bound:?} ({timings:?})"
    );
    assert_eq!(unit.get("Restart"), Some("on-failure"));
    let restart = timespan(unit.get("RestartSec").expect("RestartSec="));
    assert!(
        restart >= Duration::from_secs(1),
        "RestartSec {restart:?}: not a tight loop"
    );

    // Hardening that must not be lost on the way.
    for (key, value) in [
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("CapabilityBoundingSet", ""),
    ] {
        assert_eq!(unit.get(key), Some(value), "{key}={value}");
    }
    assert!(
        unit.get("DynamicUser") == Some("yes") || unit.get("User").is_some_and(|u| u != "root"),
        "the agent should run as an unprivileged user"
    );

    // Both command lines run: the agent accepts every option and value, and leaves on
    // SIGTERM within the stop timeout.
    let site = Site::new();
    let token = site.path("token");
    std::fs::write(&token, "deploy-recipe-token\n").unwrap();
    for (index, (recipe, words, _)) in lines.iter().enumerate() {
        let settings = if index == 0 { &defaults } else { &env };
        let group = settings
            .get("LEASEHOLD_GROUP")
            .cloned()
            .unwrap_or("default".into());
        let name = format!("unit-{index}");
        let mut agent = start_agent_with(&site, &name, &group, words, &token, settings);
        site.wait_for(WAIT, &format!("{recipe}: the agent to be ready"), || {
            http::get(&agent.at, "/readyz").status == 200
        });
        assert_eq!(
            agent.process.terminate(stop),
            0,
            "{recipe}: exit after SIGTERM"
        );
    }
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    if !require_tool("systemd-analyze", "systemd") {
        return;
    }
    let path = deploy().join("systemd").join(UNIT);
    let text = read(&path);
    // verify insists that ExecStart's program exists: the copy runs the binary under test.
    // That path is the one change made to the unit.
    let installed = Unit::load()
        .get("ExecStart")
        .expect("ExecStart= in [Service]")
        .split_whitespace()
        .next()
        .expect("a program")
        .to_owned();
    let line = format!("ExecStart={installed} ");
    assert_eq!(
        text.matches(&line).count(),
        1,
        "{UNIT}: one ExecStart={installed}"
    );
    let copy = text.replacen(
        &line,
        &format!("ExecStart={} ", env!("CARGO_BIN_EXE_leasehold")),
        1,
    );
    let dir = tempfile::tempdir().unwrap();
    let checked = dir.path().join(UNIT);
    std::fs::write(&checked, copy).unwrap();
    let output = Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&checked)
        .stdin(Stdio::null())
        .output()
        .expect("run systemd-analyze");
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // verify exits 0 on settings it ignores (an unknown key, a value it cannot parse): what
    // it says about the unit counts as much as its exit code.
    assert!(
        output.status.success() && !said.contains(UNIT),
        "systemd-analyze verify {} ({}):\n{said}",
        path.display(),
        output.status
    );
}
