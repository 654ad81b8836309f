//! The systemd recipe (`deploy/systemd`): its unit read, checked against the agent, and run.

use super::*;

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
