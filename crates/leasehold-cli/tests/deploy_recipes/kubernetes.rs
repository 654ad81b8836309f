//! The Kubernetes recipe (`deploy/kubernetes`): its manifests read, checked against the
//! agent, and run.

use super::*;

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
