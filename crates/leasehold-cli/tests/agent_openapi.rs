//! `docs/agent-openapi.yaml` describes the agent as it runs: the same (method, path) pairs as
//! the router in `src/agent/api.rs` builds, each served by a real agent and no other method
//! served, and live answers whose JSON has the fields the document declares, no more and
//! none missing.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::http::{self, EventStream};
use common::{NodeProcess, Site};
use serde_json::{Map, Value};
use yaml_rust2::{Yaml, YamlLoader};

const WAIT: Duration = Duration::from_secs(60);
const TOKEN: &str = "openapi-token";
const AUTH: &str = "Authorization: Bearer openapi-token";
/// Methods probed on every documented path; axum answers HEAD wherever GET is served.
const METHODS: [&str; 5] = ["GET", "POST", "PUT", "PATCH", "DELETE"];

/// A (method, path) pair: `("POST", "/v1/drain")`, paths with `{parameter}` as written.
type Route = (String, String);

/// The document, as JSON.
fn document() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/agent-openapi.yaml");
    let text = std::fs::read_to_string(path).expect("read docs/agent-openapi.yaml");
    let mut documents = YamlLoader::load_from_str(&text).expect("the document is YAML");
    assert_eq!(documents.len(), 1, "one YAML document");
    to_json(documents.remove(0))
}

fn to_json(yaml: Yaml) -> Value {
    match yaml {
        Yaml::Null => Value::Null,
        Yaml::Boolean(value) => Value::Bool(value),
        Yaml::Integer(value) => Value::from(value),
        Yaml::Real(text) => Value::from(text.parse::<f64>().expect("a YAML real")),
        Yaml::String(text) => Value::String(text),
        Yaml::Array(items) => Value::Array(items.into_iter().map(to_json).collect()),
        Yaml::Hash(entries) => Value::Object(
            entries
                .into_iter()
                .map(|(key, value)| {
                    let key = match to_json(key) {
                        Value::String(text) => text,
                        other => other.to_string(),
                    };
                    (key, to_json(value))
                })
                .collect(),
        ),
        other => panic!("the document uses YAML this test does not read: {other:?}"),
    }
}

fn documented(doc: &Value) -> BTreeSet<Route> {
    let mut routes = BTreeSet::new();
    for (path, operations) in doc["paths"].as_object().expect("paths") {
        for method in operations.as_object().expect("a path item").keys() {
            if METHODS.contains(&method.to_uppercase().as_str()) {
                routes.insert((method.to_uppercase(), path.clone()));
            }
        }
    }
    routes
}

/// The routes `src/agent/api.rs` gives its router in `fn routes`, where it is assembled: each
/// `.route("PATH", get(..).post(..))`, read for the method calls at the top level of its
/// second argument.
fn served_by_the_source() -> BTreeSet<Route> {
    let file = include_str!("../src/agent/api.rs");
    let start = file
        .find("\npub(super) fn routes(")
        .expect("fn routes in src/agent/api.rs");
    let length = file[start..].find("\n}\n").expect("the end of fn routes");
    let source = &file[start..start + length];
    for unread in [".nest(", ".merge(", ".route_service(", ".nest_service("] {
        assert!(
            !source.contains(unread),
            "src/agent/api.rs uses {unread}, which this test cannot read for routes"
        );
    }
    let mut routes = BTreeSet::new();
    let mut rest = source;
    while let Some(at) = rest.find(".route(") {
        rest = rest[at + ".route(".len()..].trim_start();
        let literal = rest
            .strip_prefix('"')
            .unwrap_or_else(|| panic!("a route whose path is not a literal: {:.60}", rest));
        let end = literal.find('"').expect("a closing quote");
        let path = literal[..end].to_owned();
        rest = &literal[end + 1..];
        let methods = top_level_calls(rest);
        assert!(!methods.is_empty(), "no method read for route {path}");
        for method in methods {
            let known = ["get", "post", "put", "patch", "delete"];
            assert!(
                known.contains(&method.as_str()),
                "route {path} uses {method}(), which this test does not read"
            );
            routes.insert((method.to_uppercase(), path.clone()));
        }
    }
    routes
}

/// The names of the calls at the top level of the rest of a `.route(` call's arguments, up
/// to its closing parenthesis: `get(x).post(|a| f(a))` gives `get` and `post`.
fn top_level_calls(text: &str) -> Vec<String> {
    let mut depth = 1;
    let mut calls = Vec::new();
    let mut word = String::new();
    for character in text.chars() {
        match character {
            '(' => {
                if depth == 1 && !word.is_empty() {
                    calls.push(std::mem::take(&mut word));
                }
                depth += 1;
            }
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return calls;
                }
            }
            c if c.is_alphanumeric() || c == '_' => word.push(c),
            _ => word.clear(),
        }
        if depth != 1 {
            word.clear();
        }
    }
    panic!("a .route( call without its closing parenthesis");
}

/// The document's operation for `method` on `path`.
fn operation<'a>(doc: &'a Value, method: &str, path: &str) -> &'a Value {
    let operation = &doc["paths"][path][method.to_lowercase()];
    assert!(operation.is_object(), "{method} {path} is not documented");
    operation
}

/// Follows a local `$ref` (`#/components/...`), or returns `value` as it is.
fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str() {
        Some(reference) => {
            let pointer = reference.strip_prefix('#').expect("a local reference");
            let target = doc.pointer(pointer);
            resolve(
                doc,
                target.unwrap_or_else(|| panic!("{reference} is missing")),
            )
        }
        None => value,
    }
}

/// Checks a live response to `method path` (`path` as documented, with its `{parameters}`)
/// against the document: its status is documented for the operation, and a JSON body fits
/// the schema documented for that status.
fn check_response(doc: &Value, method: &str, path: &str, response: &http::Response) {
    let operation = operation(doc, method, path);
    let status = response.status.to_string();
    let documented = &operation["responses"][&status];
    assert!(
        documented.is_object(),
        "{method} {path} answered {status}, which the document does not list: {response:?}"
    );
    let documented = resolve(doc, documented);
    let content_type = response.header("content-type").unwrap_or_default();
    let Some(content) = documented["content"].as_object() else {
        assert!(
            response.body.is_empty(),
            "{method} {path} {status}: a body where none is documented: {response:?}"
        );
        return;
    };
    let media = content
        .iter()
        .find(|(name, _)| {
            let base = |t: &str| t.split(';').next().unwrap_or_default().trim().to_owned();
            base(name) == base(content_type)
        })
        .map(|(_, media)| media)
        .unwrap_or_else(|| {
            panic!("{method} {path} {status}: content type {content_type:?} not documented")
        });
    if content_type.starts_with("application/json") {
        let context = format!("{method} {path} {status}");
        if let Err(problem) = fits(doc, &media["schema"], &response.json(), &context) {
            panic!("{problem}\nbody: {}", response.body);
        }
    }
}

/// Whether `value` fits `schema`: types, `const` and `enum`, objects' `required` fields
/// and, where `additionalProperties` is false, no field the schema does not declare;
/// arrays' items; `oneOf` as any of its schemas. Enough for the document's schemas, and
/// each part of it fails loudly rather than passing what it cannot read.
fn fits(doc: &Value, schema: &Value, value: &Value, at: &str) -> Result<(), String> {
    let schema = resolve(doc, schema);
    if let Some(choices) = schema["oneOf"].as_array() {
        let problems: Vec<String> = choices
            .iter()
            .filter_map(|choice| fits(doc, choice, value, at).err())
            .collect();
        if problems.len() < choices.len() {
            return Ok(());
        }
        return Err(format!("{at}: fits none of oneOf: {}", problems.join("; ")));
    }
    if let Some(constant) = schema.get("const") {
        if value != constant {
            return Err(format!("{at}: {value} is not the constant {constant}"));
        }
    }
    if let Some(allowed) = schema["enum"].as_array() {
        if !allowed.contains(value) {
            return Err(format!("{at}: {value} is not one of {allowed:?}"));
        }
    }
    let types: Vec<&str> = match &schema["type"] {
        Value::String(one) => vec![one.as_str()],
        Value::Array(several) => several.iter().filter_map(Value::as_str).collect(),
        Value::Null => return Err(format!("{at}: a schema without a type: {schema}")),
        other => return Err(format!("{at}: unreadable type {other}")),
    };
    let kind = match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(number) if number.is_u64() || number.is_i64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    // An integer is a number too.
    let fitting = types.contains(&kind) || (kind == "integer" && types.contains(&"number"));
    if !fitting {
        return Err(format!("{at}: {value} is {kind}, not {types:?}"));
    }
    match value {
        Value::Object(fields) => fits_object(doc, schema, fields, at),
        Value::Array(items) => items.iter().enumerate().try_for_each(|(index, item)| {
            fits(doc, &schema["items"], item, &format!("{at}[{index}]"))
        }),
        _ => Ok(()),
    }
}

fn fits_object(
    doc: &Value,
    schema: &Value,
    fields: &Map<String, Value>,
    at: &str,
) -> Result<(), String> {
    let empty = Map::new();
    let declared = schema["properties"].as_object().unwrap_or(&empty);
    for required in schema["required"].as_array().into_iter().flatten() {
        let name = required.as_str().expect("required names are strings");
        if !fields.contains_key(name) {
            return Err(format!("{at}: required field {name:?} is missing"));
        }
    }
    for (name, value) in fields {
        match declared.get(name) {
            Some(property) => fits(doc, property, value, &format!("{at}.{name}"))?,
            None if schema["additionalProperties"] == false => {
                return Err(format!("{at}: field {name:?} is not declared"));
            }
            None => {}
        }
    }
    Ok(())
}

/// An agent with the token, fast timings and an advertised address, and where it listens.
fn agent(site: &Site, id: &str) -> (NodeProcess, String) {
    let advertise = format!("http://{id}.example:9000");
    let token = site.path("token");
    let token = token.to_str().unwrap();
    let mut args = vec!["agent", "--id", id, "--listen", "127.0.0.1:0"];
    args.extend(common::FAST);
    args.extend(["--advertise", &advertise, "--token-file", token]);
    let process = site.process(id, &args);
    let at = http::authority(&site.printed_url(id)).to_string();
    (process, at)
}

fn partitions_held(at: &str) -> Vec<u64> {
    http::get(at, "/v1/leases").json()["leases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|lease| lease["partition"].as_u64().unwrap())
        .collect()
}

#[test]
fn the_document_names_exactly_the_routes_the_source_builds() {
    let doc = document();
    assert!(
        doc["openapi"]
            .as_str()
            .unwrap_or_default()
            .starts_with("3."),
        "an OpenAPI 3 document"
    );
    let documented = documented(&doc);
    let served = served_by_the_source();
    let undocumented: Vec<_> = served.difference(&documented).collect();
    let not_served: Vec<_> = documented.difference(&served).collect();
    assert!(
        undocumented.is_empty() && not_served.is_empty(),
        "served but not documented: {undocumented:?}; documented but not in the router: \
         {not_served:?}"
    );
    // The source read is not vacuous: it found the routes every agent has had.
    for route in [
        ("GET", "/healthz"),
        ("POST", "/v1/leases/{partition}/permits"),
    ] {
        assert!(
            served.contains(&(route.0.to_owned(), route.1.to_owned())),
            "{route:?} not read from src/agent/api.rs: {served:?}"
        );
    }
}

#[test]
fn a_running_agent_serves_every_documented_route_and_method_and_no_other() {
    let doc = document();
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    std::fs::write(site.path("token"), TOKEN).unwrap();
    let (_process, at) = agent(&site, "a");
    site.wait_for(WAIT, "the agent to be ready", || {
        http::get(&at, "/readyz").status == 200
    });
    for (path, _) in doc["paths"].as_object().unwrap() {
        let concrete = path.replace("{partition}", "0").replace("{id}", "1");
        for method in METHODS {
            let is_documented = doc["paths"][path][method.to_lowercase()].is_object();
            // The stream never ends: an unreadable Last-Event-ID makes it answer at once.
            let headers: &[&str] = if path == "/v1/events" {
                &[AUTH, "Last-Event-ID: none"]
            } else {
                &[AUTH]
            };
            let response = http::request(&at, method, &concrete, headers, "");
            if is_documented {
                assert!(
                    response.status != 405 && !response.body.contains("no such endpoint"),
                    "{method} {path} is documented but not served: {response:?}"
                );
                check_response(&doc, method, path, &response);
            } else {
                assert_eq!(
                    response.status, 405,
                    "{method} {path} is served but not documented: {response:?}"
                );
            }
        }
    }
    let nowhere = http::get(&at, "/v1/nowhere");
    assert_eq!(nowhere.status, 404);
    assert!(fits(
        &doc,
        &doc["components"]["schemas"]["Error"],
        &nowhere.json(),
        "404"
    )
    .is_ok());
}

#[test]
fn live_answers_have_the_fields_the_document_declares() {
    let doc = document();
    let site = Site::new();
    site.ok(&["init", "--partitions", "4"]);
    std::fs::write(site.path("token"), TOKEN).unwrap();
    let (_a, a) = agent(&site, "a");
    let (_b, b) = agent(&site, "b");
    site.wait_for(WAIT, "each agent to hold two partitions", || {
        partitions_held(&a).len() == 2 && partitions_held(&b).len() == 2
    });
    let check = |method: &str, path: &str, concrete: &str, headers: &[&str]| {
        let response = http::request(&a, method, concrete, headers, "");
        check_response(&doc, method, path, &response);
        response
    };

    assert_eq!(check("GET", "/healthz", "/healthz", &[]).status, 200);
    assert_eq!(check("GET", "/readyz", "/readyz", &[]).status, 200);
    assert_eq!(check("GET", "/metrics", "/metrics", &[]).status, 200);
    let leases = check("GET", "/v1/leases", "/v1/leases", &[]);
    assert_eq!(leases.json()["leases"].as_array().unwrap().len(), 2);
    let mine = partitions_held(&a)[0];
    let theirs = partitions_held(&b)[0];
    let lease = check(
        "GET",
        "/v1/leases/{partition}",
        &format!("/v1/leases/{mine}"),
        &[],
    );
    assert_eq!(lease.status, 200);
    // The owner named comes from the routing map, which follows the table: wait for it.
    site.wait_for(WAIT, "a's map to name b as an owner", || {
        let path = format!("/v1/leases/{theirs}");
        let response = check("GET", "/v1/leases/{partition}", &path, &[]);
        assert_eq!(response.status, 409, "{response:?}");
        response.json()["owner"] == "b"
    });
    let grant = format!("/v1/leases/{mine}/permits");
    let permit = check("POST", "/v1/leases/{partition}/permits", &grant, &[AUTH]);
    assert_eq!(permit.status, 201, "{permit:?}");
    let ended = format!("/v1/permits/{}", permit.json()["id"]);
    let timed = format!("/v1/leases/{mine}/permits?ttl_ms=600000");
    let timed = check("POST", "/v1/leases/{partition}/permits", &timed, &[AUTH]);
    assert_eq!(timed.status, 201, "{timed:?}");
    assert!(timed.json()["ttl_ms_left"].as_u64().is_some(), "{timed:?}");
    let listed = check("GET", "/v1/permits", "/v1/permits", &[]);
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json()["permits"].as_array().map(Vec::len), Some(2));
    let untimed = format!("/v1/permits/{}", timed.json()["id"]);
    assert_eq!(
        check("DELETE", "/v1/permits/{id}", &untimed, &[AUTH]).status,
        204
    );
    assert_eq!(
        check("DELETE", "/v1/permits/{id}", &ended, &[AUTH]).status,
        204
    );
    assert_eq!(
        check("DELETE", "/v1/permits/{id}", &ended, &[AUTH]).status,
        404
    );
    let route = check("GET", "/v1/route", "/v1/route?key=order-42", &[]);
    assert_eq!(route.status, 200);
    let map = check("GET", "/v1/map", "/v1/map", &[]);
    assert_eq!(map.json()["partitions"].as_array().unwrap().len(), 4);
    let listed = map.json()["partitions"].as_array().unwrap().clone();
    assert!(
        listed.iter().any(|entry| entry["address"].is_string()),
        "{listed:?}"
    );

    // Refusals: each with the JSON error the document declares for its status.
    for (method, path, concrete, headers, status) in [
        (
            "GET",
            "/v1/leases/{partition}",
            "/v1/leases/x",
            &[][..],
            400,
        ),
        ("GET", "/v1/leases/{partition}", "/v1/leases/%FF", &[], 400),
        ("GET", "/v1/leases/{partition}", "/v1/leases/99", &[], 404),
        (
            "POST",
            "/v1/leases/{partition}/permits",
            "/v1/leases/0/permits",
            &[],
            401,
        ),
        (
            "POST",
            "/v1/leases/{partition}/release",
            "/v1/leases/9/release",
            &[AUTH],
            404,
        ),
        ("DELETE", "/v1/permits/{id}", "/v1/permits/x", &[AUTH], 400),
        ("GET", "/v1/route", "/v1/route", &[], 400),
        ("GET", "/v1/route", "/v1/route?key=a&key=b", &[], 400),
        (
            "POST",
            "/v1/drain",
            "/v1/drain",
            &["Authorization: Bearer nope"],
            401,
        ),
        (
            "GET",
            "/v1/events",
            "/v1/events",
            &[AUTH, "Last-Event-ID: soon"],
            400,
        ),
        (
            "GET",
            "/v1/events",
            "/v1/events",
            &["Last-Event-ID: soon"],
            401,
        ),
    ] {
        let response = check(method, path, concrete, headers);
        assert_eq!(response.status, status, "{method} {concrete}: {response:?}");
    }

    // The event stream: each event named `lease`, its id that of its data.
    let mut stream = EventStream::open_with(&a, "/v1/events", &[AUTH]);
    let release = format!("/v1/leases/{mine}/release");
    let releasing = check("POST", "/v1/leases/{partition}/release", &release, &[AUTH]);
    assert_eq!(releasing.status, 200, "{releasing:?}");
    let event = stream.next();
    assert_eq!(event.name, "lease", "{event:?}");
    let data: Value = serde_json::from_str(&event.data).expect("event data is JSON");
    assert_eq!(event.id.as_deref(), Some(data["id"].to_string().as_str()));
    let media = &operation(&doc, "GET", "/v1/events")["responses"]["200"]["content"];
    let schema = &media["text/event-stream"]["x-events"]["lease"];
    if let Err(problem) = fits(&doc, schema, &data, "event") {
        panic!("{problem}");
    }

    let drained = check("POST", "/v1/drain", "/v1/drain", &[AUTH]);
    assert_eq!(drained.json()["draining"], true, "{drained:?}");
    site.wait_for(WAIT, "readyz to say draining", || {
        check("GET", "/readyz", "/readyz", &[]).status == 503
    });
    let undrained = check("POST", "/v1/undrain", "/v1/undrain", &[AUTH]);
    assert_eq!(undrained.json()["draining"], false, "{undrained:?}");
}

/// Before its store is reached, the agent's 503 answers have the `Waiting` fields.
#[test]
fn answers_while_waiting_for_the_store_have_the_fields_the_document_declares() {
    let doc = document();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .unwrap()
        .port();
    let site = Site::new();
    let store = format!("postgres://leasehold@127.0.0.1:{port}/leases");
    let process = std::process::Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args(["--store", &store, "agent", "--id", "w", "--partitions", "4"])
        .args(["--listen", "127.0.0.1:0"])
        .stdout(std::fs::File::create(site.path("w.out")).unwrap())
        .stderr(std::fs::File::create(site.path("w.err")).unwrap())
        .spawn()
        .expect("start the agent");
    let _running = KillOnDrop(process);
    let at = http::authority(&site.printed_url("w")).to_string();
    site.wait_for(WAIT, "a failed attempt to be reported", || {
        http::get(&at, "/readyz").json()["last_store_error"].is_string()
    });
    for (method, path) in [
        ("GET", "/readyz"),
        ("GET", "/v1/leases"),
        ("GET", "/v1/map"),
        ("POST", "/v1/drain"),
    ] {
        let response = http::request(&at, method, path, &[], "");
        assert_eq!(response.status, 503, "{method} {path}: {response:?}");
        assert_eq!(response.header("retry-after"), Some("1"), "{response:?}");
        check_response(&doc, method, path, &response);
        let waiting = &doc["components"]["schemas"]["Waiting"];
        if let Err(problem) = fits(&doc, waiting, &response.json(), path) {
            panic!("{problem}");
        }
    }
    assert_eq!(http::get(&at, "/healthz").status, 200);
}

/// A child process, ended when the test ends, whether or not it passed.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
